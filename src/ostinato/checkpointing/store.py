"""Writing, finding and pruning checkpoint directories (see :mod:`.format`); reading them
back is :mod:`.restore`'s, whose ``load``, ``check_tables`` and ``DelayedProgress`` are
re-exported here.

A save writes everything into ``.tmp-<name>-<pid>``, fsyncs every file and the directory, then
renames it to ``<name>``: a crash at any point leaves earlier checkpoints whole and at worst a
temporary directory. A save holds an exclusive ``flock`` on its temporary directory until it
is renamed; :func:`sweep_temporary` (run when a checkpointer starts or restores, and after
each save) removes temporary directories that nobody holds and whose process is gone -- or
is this process, which after a container restart often has the dead server's PID. A save that
fails removes its own.
"""

from __future__ import annotations

import datetime
import fcntl
import itertools
import logging
import os
import shutil
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ostinato.checkpointing import encode
from ostinato.checkpointing.format import (
    ACTIVE_TEMP_DIRS,
    DIR_RE,
    MANIFEST,
    RAW,
    ZSTD,
    CheckpointCorruptError,  # noqa: F401 - re-exported (store.CheckpointCorruptError)
    CheckpointError,
    CheckpointMismatchError,  # noqa: F401 - re-exported
    HashingWriter,
    fsync_dir,
    pack_arrays,
    read_manifest,
    sweep_temporary,
    write_manifest,
    zstd_module,
)
from ostinato.checkpointing.restore import (  # re-exported: store kept them before the split
    PROGRESS_AFTER_S,  # noqa: F401
    DelayedProgress,
    Progress,
    check_tables,
    load,
)

_log = logging.getLogger(__name__)
_seq = itertools.count()
DATA_FILE_BYTES = 256 * 1024 * 1024


class Pacer:
    """Keeps a save's share of the interpreter at about ``share`` while tables keep serving.

    The Python parts of a save (walking item trajectories, encoding chunk rows) hold the GIL;
    without pacing they starve inserts and samples in the same process for the whole save.
    :meth:`tick` is called between small units of work: once the save has worked for
    ``SLICE_S`` since its last pause, it sleeps ``worked * (1 - share) / share``, releasing the
    GIL to the serving threads. ``share=1`` never pauses (the fastest save).
    """

    SLICE_S = 0.002

    def __init__(self, share: float = 1.0) -> None:
        if not 0.0 < share <= 1.0:
            raise ValueError(f"share ({share!r}) must be in (0, 1]")
        self.share = share
        self.paused_s = 0.0
        self._t = time.perf_counter()

    def tick(self) -> None:
        if self.share >= 1.0:
            return
        now = time.perf_counter()
        worked = now - self._t
        if worked >= self.SLICE_S:
            pause = worked * (1.0 - self.share) / self.share
            time.sleep(pause)
            self.paused_s += pause
            self._t = time.perf_counter()


def _new_name() -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    return f"ckpt-{now}-{next(_seq) % 1_000_000:06d}"


def list_checkpoints(root: str) -> list[str]:
    """Our finished checkpoint directories under ``root`` (named by us, holding a manifest,
    which is written before the rename that finishes a save), oldest first."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    return sorted(
        n for n in names if DIR_RE.match(n) and _looks_written_by_us(os.path.join(root, n))
    )


def _looks_written_by_us(path: str) -> bool:
    # A finished save always holds the manifest and chunks.bin; one of them alone means damage
    # (reported when loading), neither means the directory is not ours.
    return os.path.exists(os.path.join(path, MANIFEST)) or os.path.exists(
        os.path.join(path, "chunks.bin")
    )


def prune(root: str, keep: int) -> None:
    """Deletes our checkpoints beyond the newest ``keep`` and dead temporary directories.

    Only directories named by this code and (for finished ones) holding a readable manifest are
    removed; any other file under ``root`` is left alone.
    """
    names = list_checkpoints(root)
    for n in names[:-keep] if keep > 0 else []:
        path = os.path.join(root, n)
        try:
            read_manifest(path)
        except CheckpointError:
            _log.warning("not deleting %s: its manifest is not valid", path)
            continue
        shutil.rmtree(path, ignore_errors=True)
    sweep_temporary(root)


def save(
    root: str,
    tables: Sequence[Any],
    *,
    keep: int = 1,
    compression: str | None = None,
    progress: Progress | None = None,
    hook: Callable[[str], None] | None = None,
    share: float = 1.0,
) -> str:
    """Writes a checkpoint of ``tables`` under ``root``; returns its absolute path.

    Each table's lock is held only while :meth:`Table.snapshot` copies its metadata and chunk
    references; the data is written afterwards while the tables keep serving, pacing its Python
    work to about ``share`` of the interpreter (see :class:`Pacer`).
    """
    if compression not in (None, "zstd"):
        raise ValueError(f"compression ({compression!r}) must be None or 'zstd'")
    hook = hook or (lambda phase: None)
    pacer = Pacer(share)
    t0 = time.perf_counter()
    snaps = []
    for t in tables:
        snaps.append((t, t.snapshot()))
        pacer.tick()
    hook("snapshot")
    collector = encode.ChunkCollector(pacer.tick)
    table_arrays = [collector.encode_items(s) for _, s in snaps]
    signatures = [encode.signature_to_json(t) for t, _ in snaps]  # fails before any file
    root = os.path.abspath(root)
    os.makedirs(root, exist_ok=True)
    name = _new_name()
    tmp = os.path.join(root, f".tmp-{name}-{os.getpid()}")
    ACTIVE_TEMP_DIRS.add(tmp)
    lock = -1
    try:
        os.mkdir(tmp)
        lock = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(lock, fcntl.LOCK_EX)  # held until renamed: sweeps leave it alone
        return _write(
            tmp,
            root,
            name,
            snaps,
            collector,
            table_arrays,
            signatures,
            keep,
            compression,
            progress,
            hook,
            pacer,
            t0,
        )
    except BaseException:  # a failed save leaves nothing behind (renamed: nothing to remove)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if lock >= 0:
            os.close(lock)
        ACTIVE_TEMP_DIRS.discard(tmp)


def _write(
    tmp: str,
    root: str,
    name: str,
    snaps: list[Any],
    collector: Any,
    table_arrays: list[Any],
    signatures: list[Any],
    keep: int,
    compression: str | None,
    progress: Progress | None,
    hook: Callable[[str], None],
    pacer: Pacer,
    t0: float,
) -> str:
    """Writes the checkpoint's files into ``tmp``, renames it to ``root/name`` and prunes;
    returns the checkpoint's path (the body of :func:`save`)."""
    files: dict[str, Any] = {}
    specs: list[dict[str, Any]] = []
    spec_index: dict[tuple[str, tuple[int, ...], bool], int] = {}
    n = len(collector.chunks)
    c_key = np.empty(n, dtype="<u8")
    c_ep = np.empty(n, dtype="<u8")
    c_spec = np.empty(n, dtype="<u4")
    c_rows = np.empty(n, dtype="<i8")
    c_file = np.empty(n, dtype="<u4")
    c_off = np.empty(n, dtype="<i8")
    c_len = np.empty(n, dtype="<i8")
    c_codec = np.full(n, ZSTD if compression else RAW, dtype=np.uint8)
    total = sum(c.nbytes for c in collector.chunks) or 1
    cctx = zstd_module().ZstdCompressor(level=1) if compression else None
    fi, w, done = 0, None, 0
    for i, (c, end) in enumerate(zip(collector.chunks, collector.ends)):
        if w is None or w.size >= DATA_FILE_BYTES:
            if w is not None:
                files[os.path.basename(w.path)] = w.close()
                fi += 1
            w = HashingWriter(os.path.join(tmp, f"data-{fi:05d}.bin"))
            hook(f"data-file-{fi}")
        rows, is_object = encode.rows_to_store(c, end)
        sk = (rows.dtype.str, rows.shape[1:], is_object)
        si = spec_index.get(sk)
        if si is None:
            si = spec_index[sk] = len(specs)
            specs.append({"dtype": sk[0], "row_shape": list(sk[1]), "object": is_object})
        payload: Any = rows if cctx is None else cctx.compress(rows.tobytes())
        c_key[i], c_ep[i], c_spec[i], c_rows[i] = c.key, c.episode_id, si, end
        c_file[i], c_off[i] = fi, w.size
        w.write(payload)
        c_len[i] = w.size - c_off[i]
        done += c.nbytes
        pacer.tick()
        if progress is not None and (i & 1023) == 0:
            progress("save", done, total)
    if w is not None:
        files[os.path.basename(w.path)] = w.close()
    hook("data")
    chunk_arrays, chunk_desc = pack_arrays(
        {
            "key": c_key,
            "episode_id": c_ep,
            "spec": c_spec,
            "rows": c_rows,
            "file": c_file,
            "offset": c_off,
            "stored_bytes": c_len,
            "codec": c_codec,
        }
    )
    w = HashingWriter(os.path.join(tmp, "chunks.bin"))
    for a in chunk_arrays:
        w.write(a)
    files["chunks.bin"] = w.close()
    tables_meta = []
    for ti, ((table, snap), arrs) in enumerate(zip(snaps, table_arrays)):
        packed, desc = pack_arrays(arrs)
        blob = b"".join(a.tobytes() for a in packed)
        fname = f"items-{ti:04d}.bin"
        w = HashingWriter(os.path.join(tmp, fname))
        w.write(zstd_module().ZstdCompressor(level=3).compress(blob))
        files[fname] = w.close()
        tables_meta.append(
            {
                "name": table.name,
                "config": encode.table_config(table),
                "signature": signatures[ti],
                "counters": {
                    k: int(snap[k])
                    for k in (
                        "inserts",
                        "samples",
                        "deletes",
                        "num_deleted_episodes",
                        "num_unique_samples",
                    )
                },
                "num_items": len(arrs["keys"]),
                "items_file": fname,
                "items_codec": "zstd",
                "items_raw_bytes": len(blob),
                "arrays": desc,
            }
        )
    hook("items")
    write_manifest(
        tmp,
        {
            "created_unix": time.time(),
            "tables": tables_meta,
            "chunk_specs": specs,
            "chunk_arrays": chunk_desc,
            "num_chunks": n,
            "files": files,
        },
    )
    fsync_dir(tmp)
    hook("manifest")
    final = os.path.join(root, name)
    os.replace(tmp, final)
    fsync_dir(root)
    hook("renamed")
    if progress is not None:
        progress("save", total, total)
    prune(root, keep)
    _log.info(
        "checkpoint %s written (%d tables, %d chunks, %.1f MB) in %.2f s "
        "(%.2f s paused to let the tables serve)",
        final,
        len(tables_meta),
        n,
        sum(f["bytes"] for f in files.values()) / 1e6,
        time.perf_counter() - t0,
        pacer.paused_s,
    )
    return final


def latest(root: str) -> str | None:
    names = list_checkpoints(root)
    return os.path.join(os.path.abspath(root), names[-1]) if names else None


__all__ = [
    "save",
    "load",
    "prune",
    "latest",
    "list_checkpoints",
    "check_tables",
    "DelayedProgress",
    "sweep_temporary",
]
