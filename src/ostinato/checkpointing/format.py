"""On-disk checkpoint format (version 1): constants, errors, checksummed files.

A checkpoint is a directory ``ckpt-<UTC time>-<seq>`` holding:

* ``manifest.json`` — format name and version, per-table configuration and counters, the
  description (dtype, shape, offset) of every array, and the size and sha256 of every other
  file. The manifest carries the sha256 of its own body.
* ``items-<i>.bin`` — table ``i``'s per-item arrays (keys, priorities, times sampled, column
  slices, squeeze flags), concatenated raw little-endian, the whole file optionally zstd.
* ``chunks.bin`` — the chunk table (key, episode, spec, rows, offset, stored bytes, codec).
* ``data-<n>.bin`` — chunk rows, raw little-endian, each chunk optionally zstd.

No pickle anywhere: everything is JSON or raw numeric bytes described by the manifest.

Each table's manifest entry may hold ``signature``: the table's signature in the wire codec's
nest encoding (``{"spec": [shape with -1 for unknown, dtype, name]}``, ``{"dict": [[key,
value], ...]}``, ``{"tuple": [...]}``, ``{"list": [...]}``, or null). It was added within
version 1 as an optional field: checkpoints written before it lack it and load as having no
signature, and readers that predate it ignore it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
from typing import Any

import numpy as np

from ostinato.errors import (  # noqa: F401 - re-exported for ostinato.checkpointing
    CheckpointCorruptError,
    CheckpointError,
    CheckpointMismatchError,
    CheckpointNotFoundError,
)

FORMAT_NAME = "ostinato-checkpoint"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
#: Names of finished checkpoints this code writes; nothing else under a root is ever deleted.
DIR_RE = re.compile(r"^ckpt-\d{8}T\d{6}\.\d{6}Z-\d{6}$")
#: Temporary directories of saves in progress (or crashed): ``.tmp-<final name>-<pid>``.
TMP_RE = re.compile(r"^\.tmp-(ckpt-\d{8}T\d{6}\.\d{6}Z-\d{6})-(\d+)$")
#: Codecs of chunk columns: stored as is, or zstd-compressed.
RAW, ZSTD = 0, 1


def zstd_module() -> Any:
    """The ``zstandard`` module, or ``CheckpointError`` if it is not installed."""
    try:
        import zstandard
    except ImportError:  # pragma: no cover - depends on the environment
        raise CheckpointError("compression='zstd' needs the 'zstandard' package") from None
    return zstandard


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class HashingWriter:
    """A file opened for writing that counts and hashes what goes through it."""

    def __init__(self, path: str):
        self.path = path
        self._f = open(path, "wb")
        self._h = hashlib.sha256()
        self.size = 0

    def write(self, b: Any) -> None:
        mv = memoryview(b).cast("B")
        self._h.update(mv)
        self._f.write(mv)
        self.size += len(mv)

    def close(self) -> dict[str, Any]:
        """Flushes, fsyncs and closes; returns the manifest entry of the file."""
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        return {"bytes": self.size, "sha256": self._h.hexdigest()}


def read_verified(ckpt_dir: str, name: str, entry: dict[str, Any]) -> bytes:
    """The bytes of a checkpoint file after checking its size and sha256."""
    path = os.path.join(ckpt_dir, name)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise CheckpointCorruptError(f"checkpoint file {path} cannot be read: {e}") from None
    if len(data) != entry["bytes"]:
        raise CheckpointCorruptError(
            f"checkpoint file {path} is truncated or padded: {len(data)} bytes, "
            f"expected {entry['bytes']}"
        )
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise CheckpointCorruptError(f"checkpoint file {path} fails its sha256 checksum")
    return data


def pack_arrays(arrays: dict[str, np.ndarray]) -> tuple[list[np.ndarray], list[dict[str, Any]]]:
    """Little-endian contiguous arrays and their descriptors (name, dtype, shape, offset)."""
    out, desc, off = [], [], 0
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        desc.append(
            {
                "name": name,
                "dtype": a.dtype.str,
                "shape": list(a.shape),
                "offset": off,
                "nbytes": a.nbytes,
            }
        )
        off += a.nbytes
        out.append(a)
    return out, desc


def unpack_arrays(buf: bytes, desc: list[dict[str, Any]], where: str) -> dict[str, np.ndarray]:
    out = {}
    for d in desc:
        dt = np.dtype(d["dtype"])
        if dt.hasobject:
            raise CheckpointCorruptError(f"{where}: array {d['name']!r} has an object dtype")
        end = d["offset"] + d["nbytes"]
        if end > len(buf) or d["nbytes"] != dt.itemsize * int(np.prod(d["shape"], dtype=np.int64)):
            raise CheckpointCorruptError(f"{where}: array {d['name']!r} does not fit the file")
        out[d["name"]] = np.frombuffer(
            buf, dtype=dt, count=d["nbytes"] // max(dt.itemsize, 1), offset=d["offset"]
        ).reshape(d["shape"])
    return out


def write_manifest(ckpt_dir: str, body: dict[str, Any]) -> None:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    doc = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "body_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "body": body,
    }
    w = HashingWriter(os.path.join(ckpt_dir, MANIFEST))
    w.write(json.dumps(doc, sort_keys=True, indent=1).encode())
    w.close()


def read_manifest(ckpt_dir: str) -> dict[str, Any]:
    """The manifest body; raises CheckpointCorruptError naming the file if it is not valid."""
    path = os.path.join(ckpt_dir, MANIFEST)
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except OSError as e:
        raise CheckpointCorruptError(f"checkpoint manifest {path} cannot be read: {e}") from None
    except ValueError as e:
        raise CheckpointCorruptError(
            f"checkpoint manifest {path} is not valid JSON (truncated or corrupted?): {e}"
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME:
        raise CheckpointCorruptError(f"{path} is not an Ostinato checkpoint manifest")
    if doc.get("version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format version {doc.get('version')!r} is not "
            f"supported (this Ostinato reads version {FORMAT_VERSION})"
        )
    body = doc.get("body")
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    if hashlib.sha256(text.encode()).hexdigest() != doc.get("body_sha256"):
        raise CheckpointCorruptError(f"checkpoint manifest {path} fails its sha256 checksum")
    return body


_log = logging.getLogger(__name__)
#: Temporary directories of saves in progress in this process (guards the moment between
#: ``mkdir`` and taking the lock).
ACTIVE_TEMP_DIRS: set[str] = set()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_temporary(root: str) -> list[str]:
    """Removes temporary directories of saves that will never finish; returns their paths.

    Removed are only directories under ``root`` named by :func:`save`
    (``.tmp-<checkpoint name>-<pid>``) whose lock no save holds, and whose process is gone or
    is this process (which has no save in them: a restarted server often has the PID of the
    one that was killed). Any other file, and a directory of a live process, is left alone.
    """
    try:
        names = os.listdir(root)
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed = []
    me = os.getpid()
    for n in names:
        m = TMP_RE.match(n)
        if not m:
            continue
        path = os.path.join(os.path.abspath(root), n)
        pid = int(m.group(2))
        if path in ACTIVE_TEMP_DIRS or (pid != me and _pid_alive(pid)):
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:  # gone meanwhile, a symlink, not a directory: not ours to remove
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # a save is writing it
                continue
            shutil.rmtree(path, ignore_errors=True)
            if not os.path.exists(path):
                removed.append(path)
                _log.info("removed %s, left by a checkpoint save that did not finish", path)
        finally:
            os.close(fd)
    return removed
