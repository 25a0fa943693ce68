"""A writer's side of the Insert stream: its items, and the rows they need, to a remote server.

Three parts, each with one job:

* :class:`Outbox` -- the writer's one queue: items waiting to be sent, requests in flight and
  how many of their items the server confirmed (the count ``flush`` waits on and the bound
  ``max_pending`` applies to); in :mod:`ostinato.wire.outbox`, re-exported here.
* :class:`RequestEncoder` -- turns a batch of items into one request, sending every row once per
  connection (inline, zstd where it pays, or through a shared-memory ring on this host).
* :class:`GrpcWriterStream` -- the :class:`~ostinato.transport.streams.WriterStream` itself: the
  gRPC call, its two threads (gRPC's, which pulls requests as the call can take them, and ours,
  which reads acknowledgements), reconnection with backoff and the resending of unconfirmed
  items.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import grpc

from ostinato import errors
from ostinato.core.chunks import Chunk
from ostinato.core.client_stats import CLIENT
from ostinato.core.deadline import Deadline, wait_for
from ostinato.core.items import chunk_refs, is_flat
from ostinato.errors import ShmError
from ostinato.wire import codec, protocol, shm
from ostinato.wire.outbox import MAX_REQUEST_ITEMS, Entry, Outbox  # noqa: F401 - re-exported
from ostinato.wire.status import TLSMismatchError, shm_refusal

_log = logging.getLogger(__name__)

#: A writer stream with nothing to send or confirm for this long is closed (reopened on demand).
IDLE_CLOSE_SECONDS = 2.0
#: A request is cut when the rows it carries reach this many bytes (without shared memory).
MAX_REQUEST_BYTES = 16 * 1024 * 1024


class _RingRefused(errors.ReverbError):
    """The server would not map a writer's ring; its items are resent with inline rows."""


class RequestEncoder:
    """Encodes batches of items into Insert requests for one connection, each row once.

    Args:
      transport: the :class:`~ostinato.wire.grpc_transport.GrpcTransport` (options, and whether
        this host may offer the server a shared-memory ring).
    """

    def __init__(self, transport: Any):
        self._t = transport
        self._compress = transport.options.compression == "zstd"
        self.sent_rows: dict[int, int] = {}  # chunk key -> rows sent on this connection
        self._ring: shm.Ring | None = None  # this connection's ring, made on demand
        self._ring_described = False

    def drop_ring(self) -> None:
        ring, self._ring = self._ring, None
        self._ring_described = False
        if ring is not None:
            ring.close()

    def release(self, ring_bytes: int) -> None:
        """Ring space of confirmed requests can be reused."""
        if ring_bytes and self._ring is not None:
            self._ring.release(ring_bytes)

    def _ring_for(self, nbytes: int) -> shm.Ring | None:
        """This call's ring if rows of ``nbytes`` should go through one (made on first use)."""
        if nbytes < shm.MIN_SEGMENT_BYTES or not self._t.use_shm:
            return None
        if self._ring is None:
            try:
                self._ring = shm.Ring(self._t.options.shared_memory_bytes)
            except ShmError as e:
                self._t.use_shm = False
                self._t.shm_refused = str(e)
                _log.info("writers to %s send rows inline: %s", self._t.address, e)
                return None
        return self._ring

    def _segment(self, chunk: Chunk, start: int, end: int) -> tuple[dict, int]:
        """The segment of ``chunk``'s rows [start, end): in the ring if it pays and there is
        room (returns the ring bytes it holds), else inline."""
        rows = chunk.data[start:end]
        ring = self._ring_for(rows.nbytes) if rows.dtype.kind != "O" else None
        put = ring.put(rows) if ring is not None and rows.flags.c_contiguous else None
        if put is not None:
            return codec.make_segment(
                chunk.key, chunk.episode_id, start, rows, False, ring_ref=[put[0], rows.nbytes]
            ), put[1]
        return codec.make_segment(chunk.key, chunk.episode_id, start, rows, self._compress), 0

    def encode(
        self, batch: list[Entry], retry: set[int], keep: set[int]
    ) -> tuple[bytes, int, list[Entry]]:
        """The request for a prefix of ``batch``: returns (message, ring bytes it holds until
        acknowledged, the items left for the next request).

        A request is cut once the rows it carries reach :data:`MAX_REQUEST_BYTES` (a third of
        the ring with shared memory, so that the requests in flight fit in it). ``retry`` holds
        keys of resent items (those sent are removed from it); ``keep`` the chunk keys the
        writer may still refer to besides the items of ``batch`` (the server forgets the
        others once this request's items are stored).
        """
        tables: dict[str, int] = {}
        items: list[list[Any]] = []
        need: dict[int, tuple[Chunk, int]] = {}
        sq_cache: dict[int, list[bool]] = {}
        retried: list[int] = []
        sent_rows = self.sent_rows
        new_bytes = 0
        limit = self._t.options.shared_memory_bytes // 3 if self._t.use_shm else MAX_REQUEST_BYTES
        rest: list[Entry] = []
        for pos, (table, (key, prio, packed, squeeze)) in enumerate(batch):
            if new_bytes >= limit:
                rest = batch[pos:]
                del batch[pos:]
                break
            ti = tables.get(table)
            if ti is None:
                ti = tables[table] = len(tables)
            cols = []
            if is_flat(packed):  # one slice per column: the common case
                for i in range(0, len(packed), 3):
                    chunk = packed[i]
                    ck = chunk.key
                    off = packed[i + 1]
                    end = off + packed[i + 2]
                    cols.append([ck, off, packed[i + 2]])
                    prev = need.get(ck)
                    if prev is None or prev[1] < end:
                        base = sent_rows.get(ck, 0) if prev is None else prev[1]
                        if end > base:
                            new_bytes += (end - base) * chunk.data.strides[0]
                        need[ck] = (chunk, end)
            else:
                for col in packed:
                    flat: list[int] = []
                    for chunk, off, ln in col:
                        flat += (chunk.key, off, ln)
                        end = off + ln
                        prev = need.get(chunk.key)
                        if prev is None or prev[1] < end:
                            base = sent_rows.get(chunk.key, 0) if prev is None else prev[1]
                            if end > base:
                                new_bytes += (end - base) * chunk.data.strides[0]
                            need[chunk.key] = (chunk, end)
                    cols.append(flat)
            sq = sq_cache.get(id(squeeze))
            if sq is None:
                sq = sq_cache[id(squeeze)] = [bool(x) for x in squeeze]
            if retry and key in retry:
                retried.append(len(items))
                retry.discard(key)
            items.append([ti, key, prio, cols, sq])
        if rest:  # the items left for the next request need their chunks kept
            keep = keep | {c.key for _, (_, _, packed, _) in rest for c in chunk_refs(packed)}
        segs = []
        ring_cost = 0
        for ck, (chunk, end) in need.items():
            sent = sent_rows.get(ck, 0)
            if end > sent:
                seg, cost = self._segment(chunk, sent, end)
                segs.append(seg)
                ring_cost += cost
                sent_rows[ck] = end
        for ck in [k for k in sent_rows if k not in keep]:
            del sent_rows[ck]
        ring = None
        if self._ring is not None and not self._ring_described:
            ring = self._ring.descriptor()
            self._ring_described = True
        msg = protocol.insert_request(
            segs, list(tables), items, [k for k in keep if k in sent_rows], retried, ring
        )
        if len(msg) > self._t.options.max_message_bytes:
            raise errors.InvalidArgumentError(
                f"an insert request of {len(msg)} bytes exceeds max_message_bytes "
                f"({self._t.options.max_message_bytes}); "
                "lower the writer's batch or raise the limit"
            )
        return msg, ring_cost, rest


class GrpcWriterStream:
    """Sends a writer's items (and the rows they need, each row once) over one Insert stream.

    Items are batched: everything created while ``max_in_flight_requests`` requests await their
    acknowledgement goes out together in the next one. At most ``max_pending`` items may be
    unconfirmed; beyond that ``insert`` blocks, so a writer that runs ahead of the server waits
    instead of growing without bound. If the server becomes unreachable the stream reconnects
    with backoff and resends unconfirmed items; after ``unavailable_timeout`` it fails with
    ``UnavailableError``. With nothing to send or confirm for :data:`IDLE_CLOSE_SECONDS` the
    call ends (and its threads); the next item opens a new one.
    """

    def __init__(
        self,
        transport: Any,
        keep_keys: Callable[[], set[int]] | None,
        max_pending: int | None = None,
    ):
        self._t = transport
        self._keep_keys = keep_keys or (lambda: set())
        self._max = transport.options.max_in_flight_items if max_pending is None else max_pending
        self._max_requests = transport.options.max_in_flight_requests
        self._cv = threading.Condition()
        # Monitoring (ostinato.ops.metrics.client_metrics): items pending, read when asked,
        # and each request's confirmation latency.
        self._out = Outbox(CLIENT.register(transport.address, self))
        self._encoder = RequestEncoder(transport)
        self._error: BaseException | None = None  # raised to the writer: the stream stopped
        self._closed = False
        self._thread: threading.Thread | None = None  # reads acks; runs calls one by one
        self._call: Any = None
        self._call_error: BaseException | None = None  # what ended the current call
        self._idle_closed = False

    # -- the WriterStream contract -------------------------------------------------------------
    def pending(self) -> int:
        return self._out.pending()

    def insert(self, table: str, items: Sequence[tuple[Any, ...]], deadline: Deadline) -> None:
        out = self._out
        with self._cv:
            wait_for(
                self._cv,
                lambda: out.pending() + len(items) <= self._max or not out.pending(),
                deadline,
                lambda: errors.RateLimiterTimeout(
                    f"{out.pending()} items are waiting for the server at {self._t.address} "
                    "to accept them (its rate limiter or the network is slower than the "
                    "writer)."
                ),
                self._raise_error,
            )
            was_empty = not out.queue
            out.queue.extend((table, it) for it in items)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="ostinato-insert", daemon=True
                )
                self._thread.start()
            if was_empty:
                # Only the request generator waits for queued items, and only while the queue
                # is empty: waking it for every item would cost a thread switch per item.
                self._cv.notify_all()

    def wait(self, n: int, deadline: Deadline, what: str = "flush") -> None:
        out = self._out
        with self._cv:
            wait_for(
                self._cv,
                lambda: out.pending() <= n,
                deadline,
                lambda: errors.DeadlineExceededError(
                    f"{what}: {out.pending()} items not yet confirmed by the server at "
                    f"{self._t.address}."
                ),
                self._raise_error,
            )

    def close(self) -> int:
        with self._cv:
            self._closed = True
            dropped = len(self._out.queue)  # never sent (what is in flight may have been stored)
            self._cv.notify_all()
            call = self._call
        if call is not None:
            call.cancel()
        th = self._thread
        if th is not None:
            th.join(timeout=5)
        return dropped

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    # -- the call, and reconnecting -------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._run_calls()
        finally:
            self._encoder.drop_ring()

    def _run_calls(self) -> None:
        give_up: Deadline | None = None
        backoff = 0.05
        while True:
            with self._cv:
                if self._closed:
                    self._thread = None
                    return
            stop = threading.Event()
            # a new call gets a new ring (the server unlinked the old one)
            self._encoder.drop_ring()
            try:
                err = self._one_call(stop)
                if err is None:  # the call went idle and ended, or the stream was closed
                    with self._cv:
                        if self._closed or not self._out.queue:
                            self._thread = None
                            return
                    continue
                raise err
            except grpc.RpcError as e:
                failure: errors.ReverbError = self._t.rpc_error(e)
            except errors.ReverbError as e:
                failure = e
            except Exception as e:  # noqa: BLE001
                failure = errors.ReverbError(f"writer stream failed: {e}")
            stop.set()
            if isinstance(failure, _RingRefused) and not self._closed:
                self._requeue()  # at once, with the rows inline this time
                continue
            if (
                isinstance(failure, errors.UnavailableError)
                and not self._closed
                and not isinstance(failure, TLSMismatchError)
            ):
                give_up = give_up or Deadline.after(self._t.options.unavailable_timeout)
                if not give_up.expired():
                    self._requeue()
                    time.sleep(backoff * (0.5 + random.random() / 2))
                    backoff = min(backoff * 2, 1.0)
                    continue
            with self._cv:
                self._error = failure
                self._thread = None
                self._cv.notify_all()
            return

    def _one_call(self, stop: threading.Event) -> BaseException | None:
        """Runs one Insert call until it ends; returns why it failed (None: it went idle, or
        the stream was closed)."""
        call = self._t.open_insert(self._requests(stop))
        self._call = call
        try:
            self._read(call, stop)  # until the server ends the call
        finally:
            self._quiesce(stop)
        err, self._call_error = self._call_error, None
        if err is not None:
            return err
        if self._idle_closed:
            with self._cv:
                self._idle_closed = False
                self._encoder.sent_rows.clear()  # the server forgot this stream's chunks
            return None
        if self._closed:
            return None
        # The server ended the stream: reconnect and resend what is unconfirmed.
        return errors.UnavailableError(f"insert stream to {self._t.address} ended", self._t.address)

    def _requeue(self) -> None:
        with self._cv:
            self._out.requeue_in_flight()
            self._encoder.sent_rows.clear()

    def _requests(self, stop: threading.Event) -> Iterator[bytes]:
        """The call's requests, made as gRPC asks for them (in gRPC's request thread).

        A request is made when there are items to send and fewer than
        ``max_in_flight_requests`` requests await their acks: items created meanwhile wait and
        go out together. Encoding here rather than in a thread of our own saves one thread
        hand-off per round trip (what limits writers that flush after every item)."""
        out = self._out
        idle_since: float | None = None
        while True:
            with self._cv:
                while (
                    (not out.queue or len(out.in_flight) >= self._max_requests)
                    and not self._closed
                    and not stop.is_set()
                ):
                    if out.n_in_flight == 0:
                        now = time.monotonic()
                        idle_since = idle_since or now
                        if now - idle_since > IDLE_CLOSE_SECONDS:
                            # Nothing to do for a while: end the stream (and its threads); the
                            # next item opens a new one and resends whatever rows it needs.
                            self._idle_closed = True
                            stop.set()
                            self._cv.notify_all()
                            return
                    self._cv.wait(0.2)
                idle_since = None
                if stop.is_set():
                    return
                if self._closed and not out.queue:
                    return  # ends the request stream; the server then ends the call
                batch = out.take()
                queued = out.queued_chunk_keys()
            try:
                msg, ring_cost, rest = self._encoder.encode(
                    batch, out.retry_keys, self._keep_keys() | queued
                )
            except BaseException as e:  # noqa: BLE001 - reported by the thread reading acks
                with self._cv:
                    out.n_encoding = 0
                    failure = (
                        e
                        if isinstance(e, errors.ReverbError)
                        else errors.ReverbError(f"writer stream failed: {e!r}")
                    )
                    self._call_error = self._call_error or failure
                    self._error = failure  # before a waiter can see nothing pending
                    stop.set()
                    self._cv.notify_all()
                call = self._call
                if call is not None:
                    call.cancel()
                return
            with self._cv:
                if rest:
                    out.queue.extendleft(reversed(rest))
                if stop.is_set():  # the call ended meanwhile: the items go out on the next one
                    out.unsent(batch)
                    self._cv.notify_all()
                    return
                out.sent(batch, ring_cost)
            yield msg

    def _fail_call(self, err: BaseException) -> None:
        """Records why the call ended; the first reason wins (a request that could not be
        encoded cancels the call, and the cancellation is not the cause)."""
        with self._cv:
            if self._call_error is None:
                self._call_error = err

    def _quiesce(self, stop: threading.Event) -> None:
        """Stops the call's request generator and waits until it is not encoding, so that the
        stream's state (rows sent, requests in flight) can be reset safely."""
        with self._cv:
            stop.set()
            self._cv.notify_all()
            while self._out.n_encoding:
                self._cv.wait(0.05)

    def _read(self, call: Any, stop: threading.Event) -> None:
        """Reads the call's acknowledgements until it ends (in our thread)."""
        try:
            for raw in call:
                n = protocol.parse_insert_ack(raw)
                with self._cv:
                    self._encoder.release(self._out.acked(n))
                    self._cv.notify_all()
        except grpc.RpcError as e:
            reason = shm_refusal(e)
            if reason is not None:
                self._t.use_shm = False
                self._t.shm_refused = reason
                _log.info(
                    "server %s refused a shared-memory ring (%s); sending rows inline",
                    self._t.address,
                    reason,
                )
                self._fail_call(_RingRefused(reason))
            elif not stop.is_set() or self._out.in_flight:
                self._fail_call(self._t.rpc_error(e))
        except Exception as e:  # noqa: BLE001
            self._fail_call(errors.ReverbError(f"bad reply on insert stream: {e}"))
        finally:
            stop.set()
            with self._cv:
                self._cv.notify_all()
