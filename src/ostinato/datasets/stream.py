"""A framework-free, prefetching stream of sampled items: the engine under every dataset adapter.

Worker threads ask the table for ``max_in_flight_samples_per_worker`` items at a time (one
request returns many items), decode them into stacked numpy columns, and put them on a
bounded queue; the consumer takes them and cuts them into batches. See
:class:`~ostinato.datasets.options.StreamOptions` for what each option means.

Guarantees:

* **Bounded.** Before requesting, a worker reserves room for what it asks for; fetched plus
  requested items never exceed ``max_in_flight_samples_per_worker * num_workers`` beyond what
  the consumer holds, and never exceed what is left of ``max_samples``. A stream limited to
  ``max_samples`` never takes more items than that from the table. So items are drawn at most
  that many items before the consumer takes them: batches are as fresh as Reverb's.
* **Ordered** for tables whose sampler is deterministic (Fifo, Lifo, heaps) or that delete
  items after ``max_times_sampled`` samples: one worker, and items come out in table order.
* **Clean timeouts.** When a request waits ``rate_limiter_timeout_ms`` for the rate limiter
  while the consumer is waiting for data, the stream ends: what was already sampled is
  delivered first (a last batch may be smaller than ``batch_size``), then iteration stops and
  :attr:`SampleStream.timed_out` is True. A request that times out while the consumer is busy is
  retried once the consumer waits (as in Reverb), so a consumer waits between one and two
  timeouts before the stream ends.
* **Errors** (server gone, data that does not fit the requested specs) are raised to the
  consumer after the items fetched before them have been delivered.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import optree

from ostinato import errors
from ostinato.client import Client
from ostinato.core.assemble import ALIGNMENT, empty_aligned, gather, item_columns, stack_batch
from ostinato.core.deadline import Deadline
from ostinato.core.items import SampleBatch
from ostinato.core.signature import signature_structure
from ostinato.datasets.options import StreamOptions
from ostinato.replay_sample import ReplaySample, SampleInfo
from ostinato.validate import is_int, positive_int

#: Longest single wait on the rate limiter, so that ``close()`` is noticed promptly.
_LOCAL_SLICE_S = 0.2
_REMOTE_SLICE_S = 1.0
_TIMED_OUT = object()
#: What :meth:`SampleStream.next_piece` returns when its ``timeout`` passed with nothing to give.
NOT_READY: Any = object()


@dataclasses.dataclass
class Piece:
    """What one request returned, decoded: ``rows`` items (or timesteps).

    Attributes:
      info: :class:`SampleInfo` of arrays, one entry per row.
      columns: one stacked array per column (rows first), or None if the rows have
        different shapes, in which case ``row_data`` holds each row's list of columns.
      num_samples: items this piece took from the table (rows are timesteps when the
        stream emits timesteps).
      item_rows: rows of each item when the rows are timesteps (None: one row per item).
    """

    info: SampleInfo
    columns: list[np.ndarray] | None
    row_data: list[list[np.ndarray]] | None
    num_samples: int
    item_rows: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.info.key)

    def split(self, max_items: int) -> list[Piece]:
        """This piece cut into pieces of at most ``max_items`` items each (views, in order)."""
        n = self.num_samples
        if n <= max_items:
            return [self]
        if self.item_rows is None:
            ends = np.arange(max_items, n, max_items)
        else:
            ends = np.cumsum(self.item_rows)[max_items - 1:n - 1:max_items]
        bounds = [0, *(int(e) for e in ends), len(self)]
        counts = [min(max_items, n - i) for i in range(0, n, max_items)]
        parts = []
        for k, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
            rows = None if self.item_rows is None else \
                self.item_rows[k * max_items:k * max_items + counts[k]]
            parts.append(Piece(
                SampleInfo(*(a[lo:hi] for a in self.info)),
                None if self.columns is None else [c[lo:hi] for c in self.columns],
                None if self.row_data is None else self.row_data[lo:hi], counts[k], rows))
        return parts


def as_client(client_or_address: Client | str) -> Client:
    """Returns a :class:`Client` for a client or a ``host:port`` address."""
    if isinstance(client_or_address, Client):
        return client_or_address
    if isinstance(client_or_address, str):
        return Client(client_or_address)
    raise ValueError(
        f"server_address ({client_or_address!r}) must be 'host:port' or an ostinato.Client")


def _writable(a: np.ndarray) -> np.ndarray:
    # Columns decoded straight from a network buffer are read-only (and unaligned); hand out
    # arrays that behave the same whatever the transport.
    if a.flags.writeable and a.ctypes.data % ALIGNMENT == 0:
        return a
    out = empty_aligned(a.shape, a.dtype)
    out[...] = a
    return out


class SampleStream:
    """Streams items from one table with background workers and a bounded queue.

    Args:
      client: an :class:`~ostinato.Client` or a ``host:port`` address.
      table: table name.
      options: a :class:`StreamOptions`; or pass its fields as keyword arguments.
      emit_timesteps: emit one row per timestep of each item (Reverb's ``TimestepDataset``)
        instead of one row per item (``TrajectoryDataset``). All columns of an item must
        have the same length.
      validate: optional ``callable(piece)`` run on each decoded piece in the worker (the
        dataset adapters check dtypes and shapes with it); what it raises ends the stream.
      max_piece_items: hand the consumer pieces of at most this many items (a request's
        items are cut into several pieces, in order). The tf.data adapter uses it so that a
        request shared by many interleaved iterators reaches each of them in small pieces.
      **kwargs: fields of :class:`StreamOptions`.

    Raises:
      ValueError: an option is invalid (the message quotes it).
      TableNotFoundError: the server has no table ``table``.

    Example:
      >>> with SampleStream(client, "replay", max_in_flight_samples_per_worker=256) as s:
      ...     for batch in s.batches(256):
      ...         learn(batch.data, batch.info.key)
    """

    def __init__(self, client: Client | str, table: str, options: StreamOptions | None = None,
                 *, emit_timesteps: bool = False,
                 validate: Callable[[Piece], None] | None = None,
                 max_piece_items: int | None = None, **kwargs: Any):
        if options is not None and kwargs:
            raise ValueError(f"pass either options or keyword options, not both ({sorted(kwargs)})")
        self.options = options if options is not None else StreamOptions(**kwargs)
        if not isinstance(table, str) or not table:
            raise ValueError(f"table ({table!r}) must be a non-empty string")
        self.client = as_client(client)
        self.table = table
        self.emit_timesteps = bool(emit_timesteps)
        self._validate = validate
        self._piece_items = positive_int("max_piece_items", max_piece_items, none_ok=True)
        self._transport = self.client.transport
        meta = self._transport.table_meta(table)
        self.signature = meta.signature
        self.ordered = bool(meta.deterministic_sampler or meta.max_times_sampled > 0)
        remote = not self._transport.is_local
        self._slice = _REMOTE_SLICE_S if remote else _LOCAL_SLICE_S
        self.num_workers = self.options.num_workers(ordered=self.ordered, remote=remote)
        self._request = int(self.options.max_in_flight_samples_per_worker)
        self._capacity = self._request * self.num_workers
        self._limit = None if self.options.max_samples == -1 else int(self.options.max_samples)
        self._timeout = self.options.deadline_seconds()
        self._per_stream = self.options.samples_per_stream
        self._structure = None
        if meta.signature is not None:
            self._structure = signature_structure(meta.signature)

        self._cond = threading.Condition()
        self._queue: collections.deque[Piece] = collections.deque()
        self._used = 0          # items queued for the consumer or requested by a worker
        self._requested = 0     # items requested or delivered, counted against max_samples
        self._closed = False
        self._ending = False    # a rate-limiter timeout ended the stream
        self._error: BaseException | None = None
        self._wait_since: float | None = None
        self._room_waiters = 0  # workers waiting in _reserve for room, and the least they want
        self._room_want = 0
        self._live = self.num_workers
        self._threads = [threading.Thread(target=self._work, name=f"ostinato-sampler-{table}-{i}",
                                          daemon=True) for i in range(self.num_workers)]
        for th in self._threads:
            th.start()

    def set_in_flight(self, n: int, *, request_size: int | None = None) -> None:
        """Changes ``max_in_flight_samples_per_worker``: the items each worker may hold fetched
        (or requested) ahead of the consumer, and by default the size of a request.

        Args:
          n: items per worker; the stream holds at most ``n * num_workers``.
          request_size: items per request, at most ``n`` (default ``n``). A stream shared by
            several consumers asks for part of what it may hold, so that one request is
            answered while the items of the one before are consumed.

        Raises:
          ValueError: ``n`` or ``request_size`` is below 1, or ``request_size`` above ``n``.
        """
        if n < 1:
            raise ValueError(f"in-flight samples ({n}) must be >= 1")
        request = n if request_size is None else request_size
        if not 1 <= request <= n:
            raise ValueError(f"request_size ({request_size}) must be between 1 and {n}")
        with self._cond:
            self._request = int(request)
            self._capacity = int(n) * self.num_workers
            self._cond.notify_all()

    # -- lifecycle ----------------------------------------------------------------------------
    def close(self, timeout: float = 5.0) -> None:
        """Stops the workers. Items fetched but not yet taken are discarded."""
        with self._cond:
            self._closed = True
            self._queue.clear()
            self._cond.notify_all()
        end = Deadline.after(timeout)
        for th in self._threads:
            if th is not threading.current_thread():
                th.join(end.remaining())

    def __enter__(self) -> SampleStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def ended(self) -> bool:
        """True once :meth:`next_piece` has nothing more to give (it would return None or raise
        the error that stopped the workers)."""
        with self._cond:
            return self._closed or not self._queue and (
                self._live == 0 or self._ending or self._error is not None)

    @property
    def timed_out(self) -> bool:
        """True once the stream has ended because the rate limiter timed out."""
        return self._ending

    # -- workers ------------------------------------------------------------------------------
    def _reserve(self, per_request: int) -> int:
        with self._cond:
            while True:
                if self._closed or self._ending or self._error is not None:
                    return 0
                want = min(self._request, per_request)
                if self._limit is not None:
                    left = self._limit - self._requested
                    if left <= 0:
                        return 0
                    want = min(want, left)
                if self._capacity - self._used >= want:
                    self._used += want
                    self._requested += want
                    return want
                self._room_want = want if self._room_waiters == 0 else min(self._room_want, want)
                self._room_waiters += 1
                try:
                    self._cond.wait()
                finally:
                    self._room_waiters -= 1

    def _release(self, reserved: int, piece: Piece | None) -> None:
        got = 0 if piece is None else piece.num_samples
        with self._cond:
            self._used -= reserved - got
            self._requested -= reserved - got
            if piece is not None:
                if self._closed:
                    self._used -= got
                elif self._piece_items is not None:
                    self._queue.extend(piece.split(self._piece_items))
                else:
                    self._queue.append(piece)
            self._cond.notify_all()

    def _fetch(self, n: int) -> SampleBatch | object | None:
        """Samples up to ``n`` items; None if closed, _TIMED_OUT if the rate limiter timed out."""
        deadline = Deadline.after(self._timeout)
        while True:
            if self._closed:
                return None
            r = deadline.remaining()
            step = self._slice if r is None else min(r, self._slice)
            try:
                return self._transport.sample(self.table, n, Deadline.after(step))
            except errors.RateLimiterTimeout:
                if deadline.expired():
                    return _TIMED_OUT

    def _stream_ends(self, started: float) -> bool:
        """After a timed-out request: True to end the stream, False to retry."""
        with self._cond:
            while True:
                if self._closed or self._ending or self._error is not None:
                    return True
                ws = self._wait_since
                if ws is not None:
                    if ws <= started:  # the consumer waited through the whole timeout
                        self._ending = True
                        self._cond.notify_all()
                        return True
                    return False  # it began waiting during the request: try once more
                self._cond.wait(self._slice)

    def _work(self) -> None:
        # Ostinato has no sampling streams to re-open, so max_samples_per_stream only caps
        # the size of a request; requests stay whole (a stream-quota remainder would leave
        # every later batch straddling two requests).
        per_request = self._per_stream
        try:
            while True:
                n = self._reserve(per_request)
                if n == 0:
                    return
                started = time.monotonic()
                try:
                    batch = self._fetch(n)
                except BaseException:
                    self._release(n, None)
                    raise
                if batch is None or batch is _TIMED_OUT:
                    self._release(n, None)
                    if batch is None or self._stream_ends(started):
                        return
                    continue
                assert isinstance(batch, SampleBatch)
                try:
                    piece = self._decode(batch)
                    if self._validate is not None:
                        self._validate(piece)
                except BaseException:
                    self._release(n, None)
                    raise
                self._release(n, piece)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            with self._cond:
                if self._error is None:
                    self._error = e
                self._cond.notify_all()
        finally:
            with self._cond:
                self._live -= 1
                self._cond.notify_all()

    # -- decoding -----------------------------------------------------------------------------
    def _decode(self, batch: SampleBatch) -> Piece:
        n = len(batch)
        info = SampleInfo(batch.keys, batch.probabilities, batch.table_sizes, batch.priorities,
                          batch.times_sampled)
        if self.emit_timesteps:
            return _timestep_piece(batch, info)
        rows = None
        try:
            cols = stack_batch(batch)  # gathers alike items at once, stacks the others
        except ValueError:  # items of different shapes: keep them one by one
            cols = None
            rows = [item_columns(t, s) for t, s in zip(batch.trajectories, batch.squeeze)]
        if cols is not None:
            cols = [_writable(c) for c in cols]
        return Piece(info, cols, rows, n)

    # -- consumer -----------------------------------------------------------------------------
    def next_piece(self, timeout: float | None = None) -> Piece | None:
        """The next decoded piece, waiting for one; None when the stream has ended.

        Args:
          timeout: seconds to wait at most; then :data:`NOT_READY` is returned and the stream
            goes on (a consumer that must not block for long -- a tf.data generator that
            TensorFlow has to be able to cancel -- polls with it). ``None`` waits as long as
            it takes.

        Raises:
          The error that stopped a worker, once the pieces fetched before it are taken.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if self._queue:
                    p = self._queue.popleft()
                    self._used -= p.num_samples
                    self._wait_since = None
                    # Wake a worker only when it now has room for its request: a stream cut
                    # into many small pieces would otherwise wake it at every piece.
                    if self._room_waiters and self._capacity - self._used >= self._room_want:
                        self._cond.notify_all()
                    return p
                if self._error is not None:
                    raise self._error
                if self._closed or self._live == 0:
                    return None
                if self._wait_since is None:
                    self._wait_since = time.monotonic()
                    self._cond.notify_all()
                if deadline is None:
                    self._cond.wait()
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    return NOT_READY
                self._cond.wait(left)

    def unflatten(self, columns: list[Any]) -> Any:
        """Shapes flat columns like the table signature (flat list if it has none)."""
        if self._structure is None or self._structure.num_leaves != len(columns):
            return columns
        return optree.tree_unflatten(self._structure, columns)

    def items(self, *, flat: bool = False) -> Iterator[ReplaySample]:
        """Yields one ``ReplaySample`` per item (or timestep) with numpy scalars in ``info``.

        Args:
          flat: keep ``data`` a flat list of columns instead of the signature's structure.
        """
        try:
            while (p := self.next_piece()) is not None:
                keys, probs, sizes, prios, times = p.info
                for i in range(len(p)):
                    info = SampleInfo(keys[i], probs[i], sizes[i], prios[i], times[i])
                    row = [c[i] for c in p.columns] if p.columns is not None else p.row_data[i]  # type: ignore[index]
                    yield ReplaySample(info, row if flat else self.unflatten(row))
        finally:
            self.close()

    def batches(self, batch_size: int, *, drop_remainder: bool = False,
                flat: bool = False) -> Iterator[ReplaySample]:
        """Yields ``ReplaySample(info, data)`` batches of ``batch_size`` rows stacked in numpy.

        ``info`` fields are arrays of length ``batch_size``; ``data`` holds one array per
        column with the batch dimension first, shaped like the table's signature (a flat
        list without one, or with ``flat=True``). Batches are views of what the workers
        fetched whenever a request's items fill them; otherwise pieces are concatenated.

        The last batch is smaller than ``batch_size`` when the stream ends (``max_samples``
        reached or a rate-limiter timeout) with fewer rows left, unless
        ``drop_remainder=True``, which discards them.

        Raises:
          ValueError: ``batch_size`` is not a positive integer, or sampled items have
            different shapes and cannot be stacked (iterate :meth:`items` instead).
        """
        if not is_int(batch_size) \
                or batch_size < 1:
            raise ValueError(f"batch_size ({batch_size!r}) must be a positive integer")
        return self._batches(int(batch_size), drop_remainder, flat)

    def _batches(self, batch_size: int, drop_remainder: bool, flat: bool) -> Iterator[ReplaySample]:
        pending: collections.deque[list[Any]] = collections.deque()  # [piece, start]
        buffered = 0
        ended = False
        failure: BaseException | None = None
        try:
            while True:
                while buffered < batch_size and not ended:
                    try:
                        p = self.next_piece()
                    except Exception as e:  # deliver what came before it, then raise
                        failure = e
                        p = None
                    if p is None:
                        ended = True
                        break
                    if p.columns is None:
                        raise ValueError(
                            f"items sampled from table {self.table!r} have different shapes and "
                            "cannot be stacked into batches; iterate items one by one instead "
                            "(batch_size=None)")
                    if len(p):
                        pending.append([p, 0])
                        buffered += len(p)
                if buffered == 0 or (buffered < batch_size and drop_remainder):
                    if failure is not None:
                        raise failure
                    return
                take = min(batch_size, buffered)
                info, cols = _take(pending, take)
                buffered -= take
                yield ReplaySample(info, cols if flat else self.unflatten(cols))
        finally:
            self.close()


def _take(pending: collections.deque[list[Any]], take: int) -> tuple[SampleInfo, list[np.ndarray]]:
    """Removes ``take`` rows from the front of ``pending`` (views when one piece has them)."""
    piece, start = pending[0]
    if len(piece) - start >= take:
        end = start + take
        if start == 0 and end == len(piece):
            pending.popleft()
            return piece.info, piece.columns
        pending[0][1] = end
        if end == len(piece):
            pending.popleft()
        return (SampleInfo(*(a[start:end] for a in piece.info)),
                [c[start:end] for c in piece.columns])
    infos: list[Sequence[np.ndarray]] = []
    parts: list[list[np.ndarray]] = []
    need = take
    while need:
        piece, start = pending[0]
        k = min(need, len(piece) - start)
        infos.append([a[start:start + k] for a in piece.info])
        parts.append([c[start:start + k] for c in piece.columns])
        need -= k
        if start + k == len(piece):
            pending.popleft()
        else:
            pending[0][1] = start + k
    info = SampleInfo(*(np.concatenate(f) for f in zip(*infos)))
    try:
        cols = [_concatenate(c) for c in zip(*parts)]
    except ValueError as e:
        raise ValueError(f"sampled items cannot be stacked into one batch: {e}") from None
    return info, cols


def _concatenate(parts: Sequence[np.ndarray]) -> np.ndarray:
    first = parts[0]
    if any(p.dtype != first.dtype or p.shape[1:] != first.shape[1:] for p in parts):
        raise ValueError(f"rows of shapes {sorted({p.shape[1:] for p in parts})} and dtypes "
                         f"{sorted({str(p.dtype) for p in parts})}")
    out = empty_aligned((sum(len(p) for p in parts), *first.shape[1:]), first.dtype)
    return np.concatenate(parts, out=out)


def _decompose_error() -> errors.InvalidArgumentError:
    return errors.InvalidArgumentError("Sampled trajectory cannot be decomposed into timesteps.")


def _timestep_piece(batch: SampleBatch, info: SampleInfo) -> Piece:
    """One row per timestep: every column of an item must have the same number of steps."""
    n = len(batch)
    full = gather(batch, unsqueeze=True)
    if full is not None:
        lengths = {c.shape[1] for c in full}
        if len(lengths) > 1:
            raise _decompose_error()
        t = lengths.pop() if lengths else 1
        out = [_writable(c.reshape(n * t, *c.shape[2:])) for c in full]
        return Piece(SampleInfo(*(np.repeat(a, t) for a in info)), out, None, n,
                     np.full(n, t, np.int64))
    # Items of different lengths or shapes: decompose each item, then stack the steps.
    per_item = []
    steps = []
    for packed, sq in zip(batch.trajectories, batch.squeeze):
        cols = item_columns(packed, (False,) * len(sq))
        lengths = {len(c) for c in cols}
        if len(lengths) > 1:
            raise _decompose_error()
        per_item.append(cols)
        steps.append(lengths.pop() if lengths else 1)
    rep = np.asarray(steps, dtype=np.int64)
    new_info = SampleInfo(*(np.repeat(a, rep) for a in info))
    try:
        out = [_concatenate(c) for c in zip(*per_item)]
        return Piece(new_info, out, None, n, rep)
    except ValueError:
        rows = [[c[i] for c in cols] for cols, k in zip(per_item, steps) for i in range(k)]
        return Piece(new_info, None, rows, n, rep)
