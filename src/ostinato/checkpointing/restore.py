"""Reading checkpoints back: mapping the data files, verifying their checksums and loading the
items into a server's empty tables (see :mod:`.format`; :mod:`.store` writes and prunes).

Nothing reaches a table before every checksum has matched.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import logging
import mmap
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ostinato.checkpointing import encode
from ostinato.checkpointing.format import (
    MANIFEST,
    ZSTD,
    CheckpointCorruptError,
    CheckpointError,
    CheckpointMismatchError,
    read_manifest,
    read_verified,
    unpack_arrays,
    zstd_module,
)
from ostinato.core.chunks import Chunk, little_endian

_log = logging.getLogger(__name__)

#: progress(phase, done, total): phase is "save" or "load", units are bytes.
Progress = Callable[[str, int, int], None]
#: A restore reports progress only once it has run this long (quick restores draw no bar).
PROGRESS_AFTER_S = 1.0


class DelayedProgress:
    """Forwards ``progress(phase, done, total)`` only once the operation has run ``after``
    seconds, so that quick restores draw no progress bar.

    Once an event has been forwarded, every later one is too (the last, ``done == total``,
    lets a bar close); an operation that finishes before ``after`` forwards nothing. An event
    is also forwarded early when the operation has run ``after / 4`` and, extrapolating its
    progress so far, will take at least twice ``after`` in all.
    """

    def __init__(
        self, progress: Progress, after: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._progress = progress
        self._after = float(after)
        self._clock = clock
        self._t0 = clock()
        self.started = False

    def __call__(self, phase: str, done: int, total: int) -> None:
        if not self.started:
            if done >= total:
                return
            ran = self._clock() - self._t0
            expected = ran * total / done if done > 0 else 0.0
            if ran < self._after and not (ran >= self._after / 4 and expected >= 2 * self._after):
                return
            self.started = True
        self._progress(phase, done, total)


def _map_file(path: str, name: str, entry: dict[str, Any]) -> tuple[Any, memoryview]:
    """A checkpoint file's bytes, mapped read-only (read where it cannot be mapped), after
    checking its size; the sha256 is checked by the caller. Returns (mapping or None, view)."""
    full = os.path.join(path, name)
    try:
        with open(full, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size != entry["bytes"]:
                raise CheckpointCorruptError(
                    f"checkpoint file {full} is truncated or padded: {size} bytes, "
                    f"expected {entry['bytes']}"
                )
            if size == 0:
                return None, memoryview(b"")
            try:
                if hasattr(mmap, "MAP_POPULATE"):  # Linux: map and fault in at once
                    mm = mmap.mmap(
                        f.fileno(),
                        0,
                        flags=mmap.MAP_SHARED | mmap.MAP_POPULATE,
                        prot=mmap.PROT_READ,
                    )
                else:  # pragma: no cover - other platforms
                    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError):  # pragma: no cover - a file system without mmap
                return None, memoryview(f.read())
    except OSError as e:
        raise CheckpointCorruptError(f"checkpoint file {full} cannot be read: {e}") from None
    return mm, memoryview(mm)


def _unmap(mm: Any, view: memoryview) -> None:
    try:
        view.release()
        if mm is not None:
            mm.close()
    except BufferError:  # pragma: no cover - a view still exported; the GC unmaps it later
        pass


def _sha256(view: memoryview) -> str:
    return hashlib.sha256(view).hexdigest()  # releases the GIL: runs beside the decoding


def _load_chunks(
    path: str,
    body: dict[str, Any],
    arrs: dict[str, np.ndarray],
    views: dict[int, memoryview],
    advance: Callable[[int], None],
) -> list[Chunk]:
    """Chunks with their rows copied out of the (mapped) data files."""
    specs = [
        (np.dtype(s["dtype"]), tuple(s["row_shape"]), s["object"]) for s in body["chunk_specs"]
    ]
    for dt, _, how in specs:
        if dt.hasobject:
            raise CheckpointCorruptError(f"{path}/manifest.json: chunk spec with an object dtype")
        if (
            how not in (False, True, encode.STRINGS_SUFFIXED)
            or how is True
            and dt.kind not in "SU"
            or how == encode.STRINGS_SUFFIXED
            and dt.kind != "S"
        ):
            raise CheckpointCorruptError(
                f"{path}/manifest.json: chunk spec with 'object' {how!r} for dtype {dt}"
            )
    # What the restored rows are: strings are stored as ``S`` rows but restored as objects,
    # and a chunk's spec must say so (sample replies and batch assembly go by it).
    spec_objs = [(np.dtype(object) if how else dt, shape) for dt, shape, how in specs]
    sizes = [int(np.prod(shape, dtype=np.int64)) for _, shape, _ in specs]
    dctx = None
    chunks: list[Chunk] = []
    pending = 0
    for key, ep, si, rows, fi, off, ln, codec in zip(
        arrs["key"].tolist(),
        arrs["episode_id"].tolist(),
        arrs["spec"].tolist(),
        arrs["rows"].tolist(),
        arrs["file"].tolist(),
        arrs["offset"].tolist(),
        arrs["stored_bytes"].tolist(),
        arrs["codec"].tolist(),
    ):
        view = views[fi]
        if si >= len(specs) or rows < 0 or off < 0 or ln < 0 or off + ln > len(view):
            raise CheckpointCorruptError(
                f"{path}/chunks.bin: chunk {key} does not fit data-{fi:05d}.bin or its spec"
            )
        dt, shape, is_object = specs[si]
        count = rows * sizes[si]
        if codec == ZSTD:
            dctx = dctx or zstd_module().ZstdDecompressor()
            try:
                raw: Any = dctx.decompress(view[off : off + ln])
            except Exception as e:  # noqa: BLE001 - zstandard.ZstdError
                raise CheckpointCorruptError(
                    f"{path}/data-{fi:05d}.bin: chunk {key} cannot be decompressed: {e}"
                ) from None
            stored = len(raw)
        else:
            raw, stored = view, ln
        if stored != count * dt.itemsize:
            raise CheckpointCorruptError(
                f"{path}/data-{fi:05d}.bin: chunk {key} has "
                f"{stored} bytes, expected {count * dt.itemsize}"
            )
        if codec != ZSTD and not is_object:
            raw = bytes(view[off : off + ln])  # mapped rows are copied out, once
        # Decompressed (and copied) bytes belong to this chunk alone.
        data = np.frombuffer(raw, dtype=dt, count=count, offset=0 if type(raw) is bytes else off)
        data = data.reshape((rows, *shape))
        if is_object:
            data = encode.restore_strings(data, is_object)
        data.flags.writeable = False
        chunk = Chunk(key, data, ep, spec=spec_objs[si])
        if not is_object and type(raw) is bytes and little_endian(dt):
            # The rows as one little-endian payload: sample replies slice it directly, as
            # they do the rows of chunks received over the network.
            chunk.raw = raw
        chunks.append(chunk)
        pending += ln
        if pending >= 8 << 20:
            advance(pending)
            pending = 0
    advance(pending)
    return chunks


def check_tables(body: dict[str, Any], tables: dict[str, Any], path: str) -> dict[str, Any]:
    """Raises CheckpointMismatchError unless every checkpointed table exists on the server
    with the same configuration and, where both have one, the same signature.

    Returns the checkpointed signatures of the tables that have one (checkpoints written
    before signatures were recorded have none)."""
    signatures: dict[str, Any] = {}
    for meta in body["tables"]:
        t = tables.get(meta["name"])
        if t is None:
            raise CheckpointMismatchError(
                f"checkpoint {path} holds table {meta['name']!r}, which the server does not "
                f"have (server tables: {', '.join(sorted(tables))})"
            )
        want, have = meta["config"], encode.table_config(t)
        diff = [
            f"{k}: checkpoint {want[k]!r}, server {have[k]!r}"
            for k in want
            if want[k] != have.get(k)
        ]
        sig = encode.signature_from_json(meta.get("signature"), f"{path}/{MANIFEST}")
        if sig is not None:
            signatures[meta["name"]] = sig
            # The decoded nest on the left: our TensorSpec also compares with tf.TensorSpec.
            if t.signature is not None and not sig == t.signature:
                diff.append(f"signature: checkpoint {sig!r}, server {t.signature!r}")
        if diff:
            raise CheckpointMismatchError(
                f"table {meta['name']!r} of checkpoint {path} was configured differently from "
                f"the server's table ({'; '.join(diff)}). Build the server with the "
                "checkpoint's settings, or use a different checkpoint directory."
            )
    return signatures


@contextlib.contextmanager
def _gc_paused() -> Any:
    """Pauses the cyclic garbage collector: a restore allocates ~2 container objects per item,
    which would otherwise set off repeated collections of everything the process holds. The
    items are not cyclic garbage; the collector resumes (if it ran before) at the end."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def load(
    path: str,
    tables: dict[str, Any],
    progress: Progress | None = None,
    *,
    progress_after: float = PROGRESS_AFTER_S,
) -> None:
    """Restores the checkpoint at ``path`` into the server's (empty) tables.

    Data files are mapped, and their sha256 computed in threads while the chunks are copied
    out and the items decoded; nothing reaches a table before every checksum has matched.
    ``progress("load", done, total)`` is called only once the restore has run
    ``progress_after`` seconds (see :class:`DelayedProgress`).
    """
    with _gc_paused():
        _load(path, tables, progress, progress_after)


def _load(
    path: str, tables: dict[str, Any], progress: Progress | None, progress_after: float
) -> None:
    t0 = time.perf_counter()
    body = read_manifest(path)
    signatures = check_tables(body, tables, path)
    for meta in body["tables"]:
        if tables[meta["name"]].size:
            raise CheckpointError(
                f"table {meta['name']!r} is not empty; a checkpoint is only "
                "restored into empty tables"
            )
    files = body["files"]
    metas = body["tables"]
    carr = unpack_arrays(
        read_verified(path, "chunks.bin", files["chunks.bin"]),
        body["chunk_arrays"],
        os.path.join(path, "chunks.bin"),
    )
    file_ids = sorted(set(carr["file"].tolist()))
    for fi in file_ids:
        if f"data-{fi:05d}.bin" not in files:
            raise CheckpointCorruptError(
                f"{path}: chunk table names a missing file data-{fi:05d}.bin"
            )
    # Progress in bytes: data files once, items files twice (decoded, then restored).
    total = (
        sum(files[f"data-{fi:05d}.bin"]["bytes"] for fi in file_ids)
        + 2 * sum(int(m["items_raw_bytes"]) for m in metas)
        or 1
    )
    report = DelayedProgress(progress, progress_after) if progress is not None else None
    done = 0

    def advance(nbytes: int) -> None:
        nonlocal done
        done += nbytes
        if report is not None:
            report("load", min(done, total - 1), total)

    dctx = zstd_module().ZstdDecompressor()
    decoded = []
    with contextlib.ExitStack() as stack:
        pool = stack.enter_context(
            ThreadPoolExecutor(
                max_workers=max(1, min(len(file_ids), os.cpu_count() or 1, 4)),
                thread_name_prefix="ostinato-ckpt-sha",
            )
        )
        views: dict[int, memoryview] = {}
        checks = []
        for fi in file_ids:
            fname = f"data-{fi:05d}.bin"
            mm, view = _map_file(path, fname, files[fname])
            stack.callback(_unmap, mm, view)  # after the pool has finished (exit order)
            views[fi] = view
            checks.append((fname, pool.submit(_sha256, view)))

        def verify() -> None:
            for fname, fut in checks:
                if fut.result() != files[fname]["sha256"]:
                    raise CheckpointCorruptError(
                        f"checkpoint file {os.path.join(path, fname)} fails its sha256 checksum"
                    )

        try:
            chunks = _load_chunks(path, body, carr, views, advance)
            for meta in metas:
                fname = meta["items_file"]
                where = os.path.join(path, fname)
                blob = read_verified(path, fname, files[fname])
                try:
                    blob = dctx.decompress(blob, max_output_size=meta["items_raw_bytes"])
                except Exception as e:  # noqa: BLE001 - zstandard.ZstdError
                    raise CheckpointCorruptError(f"{where} cannot be decompressed: {e}") from None
                arrs = unpack_arrays(blob, meta["arrays"], where)
                n_items = len(arrs["keys"])
                per_item = int(meta["items_raw_bytes"]) / max(n_items, 1)
                last = [0]

                def tick(items_done: int, per_item: float = per_item, last: list = last) -> None:
                    advance(int(items_done * per_item) - int(last[0] * per_item))
                    last[0] = items_done

                trajs, squeezes = encode.decode_items(arrs, chunks, where, tick)
                if len(trajs) != meta["num_items"] or n_items != len(trajs):
                    raise CheckpointCorruptError(f"{where}: expected {meta['num_items']} items")
                ho = arrs["heap_order"]
                if len(ho) and (
                    len(ho) != n_items
                    or int(ho.min()) < 0
                    or int(ho.max()) >= n_items
                    or np.bincount(ho).max() > 1
                ):
                    raise CheckpointCorruptError(f"{where}: heap_order is not a permutation")
                counts = np.bincount(arrs["slice_chunk"], minlength=len(chunks))
                used = np.flatnonzero(counts)
                decoded.append(
                    (
                        meta,
                        arrs,
                        trajs,
                        squeezes,
                        ho if len(ho) else None,
                        ([chunks[i] for i in used.tolist()], counts[used]),
                    )
                )
        except Exception:
            verify()  # a damaged data file explains a decoding error best
            raise
        verify()
    for meta, arrs, trajs, squeezes, ho, refs in decoded:  # type: ignore[assignment]
        table = tables[meta["name"]]
        sig = signatures.get(meta["name"])
        if sig is not None and table.signature is None:
            # A restore runs before the server serves, so no writer has cached the table's old,
            # empty signature.
            table.set_signature(sig)
            _log.info("table %r has no signature; using the checkpoint's: %r", meta["name"], sig)
        table.restore_items(
            arrs["keys"],
            arrs["priorities"],
            arrs["times_sampled"],
            trajs,
            squeezes,
            meta["counters"],
            ho,
            chunk_refs=refs,
        )
        advance(int(meta["items_raw_bytes"]))
    if report is not None:
        report("load", total, total)
    _log.info(
        "checkpoint %s restored (%s) in %.2f s",
        path,
        ", ".join(f"{m['name']}: {m['num_items']} items" for m in metas),
        time.perf_counter() - t0,
    )
