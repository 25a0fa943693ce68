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

Decoding a request's items into a :class:`~ostinato.datasets.pieces.Piece` and cutting pieces
into batches is :mod:`ostinato.datasets.pieces`'s.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import optree

from ostinato import errors
from ostinato.client import Client
from ostinato.core.deadline import Deadline
from ostinato.core.items import SampleBatch
from ostinato.core.signature import signature_structure
from ostinato.datasets.options import StreamOptions
from ostinato.datasets.pieces import Piece, decode, take_rows
from ostinato.replay_sample import ReplaySample, SampleInfo
from ostinato.validate import is_int, positive_int

#: Longest single wait on the rate limiter, so that ``close()`` is noticed promptly.
_LOCAL_SLICE_S = 0.2
_REMOTE_SLICE_S = 1.0
_TIMED_OUT = object()
#: What :meth:`SampleStream.next_piece` returns when its ``timeout`` passed with nothing to give.
NOT_READY: Any = object()


def as_client(client_or_address: Client | str) -> Client:
    """Returns a :class:`Client` for a client or a ``host:port`` address."""
    if isinstance(client_or_address, Client):
        return client_or_address
    if isinstance(client_or_address, str):
        return Client(client_or_address)
    raise ValueError(
        f"server_address ({client_or_address!r}) must be 'host:port' or an ostinato.Client"
    )


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

    def __init__(
        self,
        client: Client | str,
        table: str,
        options: StreamOptions | None = None,
        *,
        emit_timesteps: bool = False,
        validate: Callable[[Piece], None] | None = None,
        max_piece_items: int | None = None,
        **kwargs: Any,
    ):
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
        self._used = 0  # items queued for the consumer or requested by a worker
        self._requested = 0  # items requested or delivered, counted against max_samples
        self._closed = False
        self._ending = False  # a rate-limiter timeout ended the stream
        self._error: BaseException | None = None
        self._wait_since: float | None = None
        self._room_waiters = 0  # workers waiting in _reserve for room, and the least they want
        self._room_want = 0
        self._live = self.num_workers
        self._threads = [
            threading.Thread(target=self._work, name=f"ostinato-sampler-{table}-{i}", daemon=True)
            for i in range(self.num_workers)
        ]
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
            return (
                self._closed
                or not self._queue
                and (self._live == 0 or self._ending or self._error is not None)
            )

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
                    piece = decode(batch, self.emit_timesteps)
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

    def batches(
        self, batch_size: int, *, drop_remainder: bool = False, flat: bool = False
    ) -> Iterator[ReplaySample]:
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
        if not is_int(batch_size) or batch_size < 1:
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
                    except Exception as e:  # noqa: BLE001 - deliver what came before it, then raise
                        failure = e
                        p = None
                    if p is None:
                        ended = True
                        break
                    if p.columns is None:
                        raise ValueError(
                            f"items sampled from table {self.table!r} have different shapes and "
                            "cannot be stacked into batches; iterate items one by one instead "
                            "(batch_size=None)"
                        )
                    if len(p):
                        pending.append([p, 0])
                        buffered += len(p)
                if buffered == 0 or (buffered < batch_size and drop_remainder):
                    if failure is not None:
                        raise failure
                    return
                take = min(batch_size, buffered)
                info, cols = take_rows(pending, take)
                buffered -= take
                yield ReplaySample(info, cols if flat else self.unflatten(cols))
        finally:
            self.close()
