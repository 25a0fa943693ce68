"""Writers' items to a remote server, over Insert streams that writers of one client share.

A client process often runs many writers (one per environment of a vectorised environment, or
many actors in one process), each creating an item now and then. One gRPC call per writer costs
each item a request of its own and two thread hand-offs on each side; so the writers of one
connection share its Insert streams, up to ``writers_per_stream`` writers per stream and
table (``ClientOptions.writers_per_stream``, 16 by default), and the items they create
together go out in one request.

* :class:`~ostinato.wire.outbox.Share` -- one writer's part of a stream: its items pending (the
  count ``flush`` waits on and ``max_pending`` bounds) and the error that stopped them.
* :class:`InsertStream` -- one gRPC call at a time and its two threads (gRPC's, which pulls
  requests as the call can take them, and ours, which reads acknowledgements), reconnection
  with backoff and the resending of unconfirmed items; ends after :data:`IDLE_CLOSE_SECONDS`
  with nothing to do, and when its last writer closes.
* :class:`InsertStreams` -- a connection's streams, per table.
* :class:`GrpcWriterStream` -- the :class:`~ostinato.transport.streams.WriterStream` a writer
  holds: its share of one stream per table it writes to.

What sharing changes for a writer: its items wait behind those its stream-mates sent before
(a table whose rate limiter holds one writer's item holds the next writer's too, as it would
on the server), and a request the server refuses stops every writer with items in it.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import grpc

from ostinato import errors
from ostinato.core.client_stats import CLIENT
from ostinato.core.deadline import Deadline, wait_for
from ostinato.wire import protocol
from ostinato.wire.outbox import MAX_REQUEST_ITEMS, Entry, Outbox, Share  # noqa: F401
from ostinato.wire.request_encoder import MAX_REQUEST_BYTES, RequestEncoder, RingRefused  # noqa: F401
from ostinato.wire.status import TLSMismatchError, shm_refusal

_log = logging.getLogger(__name__)

#: A stream with nothing to send or confirm for this long is closed (reopened on demand).
IDLE_CLOSE_SECONDS = 2.0


class _Failed(errors.ReverbError):
    """Ends a call whose request could not be encoded; its writers were already told why."""


class InsertStream:
    """One Insert call at a time, carrying the items of up to ``writers_per_stream`` writers.

    Items are batched: everything created while ``max_in_flight_requests`` requests await their
    acknowledgement goes out together in the next one. If the server becomes unreachable the
    stream reconnects with backoff and resends unconfirmed items; after ``unavailable_timeout``
    every writer with items pending gets ``UnavailableError``. With nothing to send or confirm
    for :data:`IDLE_CLOSE_SECONDS` the call ends (and its threads); the next item opens a new
    one. Every method is called with the connection's lock (``cv``) held unless it says not.
    """

    def __init__(self, transport: Any, cv: threading.Condition, lock: Any):
        self._t = transport
        self._cv = cv  # writers wait on it: for acks (room, flush) and errors
        # The request generator waits on a condition of its own (over the same lock): an ack
        # then wakes only the writers waiting for it, not the generator too.
        self._send = threading.Condition(lock)
        self._max_requests = transport.options.max_in_flight_requests
        # Monitoring (ostinato.ops.metrics.client_metrics): items pending, read when asked,
        # and each request's confirmation latency.
        self._out = Outbox(CLIENT.register(transport.address, self))
        self._encoder = RequestEncoder(transport)
        self._writers: weakref.WeakSet[Share] = weakref.WeakSet()
        self.retired = False  # its last writer closed: no writer joins it again
        self._thread: threading.Thread | None = None  # reads acks; runs calls one by one
        self._call: Any = None
        self._call_error: BaseException | None = None  # what ended the current call
        self._idle_closed = False

    def pending(self) -> int:
        return self._out.pending()

    def live_writers(self) -> int:
        """Writers that may still send (a writer whose items failed sends nothing more)."""
        return sum(1 for w in self._writers if not w.closed and w.error is None)

    def join(self, share: Share) -> None:
        self._writers.add(share)

    def enqueue(self, share: Share, table: str, items: Sequence[tuple[Any, ...]]) -> None:
        out = self._out
        was_empty = not out.queue
        out.queue.extend((table, it, share) for it in items)
        share.pending += len(items)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ostinato-insert", daemon=True)
            self._thread.start()
        if was_empty:
            # Only the request generator waits for queued items, and only while the queue is
            # empty: waking it for every item would cost a thread switch per item.
            self._send.notify()

    def _wake(self) -> None:
        """Wakes every thread waiting on the stream: writers and the request generator."""
        self._cv.notify_all()
        self._send.notify_all()

    def leave(self, share: Share) -> tuple[int, bool]:
        """``share``'s writer closed: drops its unsent items. Returns (how many, whether that
        was the stream's last writer; then the call is cancelled and the stream retired)."""
        dropped = self._out.drop(share)
        self._writers.discard(share)
        last = self.live_writers() == 0
        if last:
            self.retired = True
        self._wake()
        return dropped, last

    def stop(self) -> None:
        """Cancels the call and waits for the stream's thread (lock NOT held)."""
        call = self._call
        if call is not None:
            call.cancel()
        th = self._thread
        if th is not None and th is not threading.current_thread():
            th.join(timeout=5)

    def _keep(self) -> set[int]:
        keys: set[int] = set()
        for w in list(self._writers):
            if not w.closed and w.error is None:
                keys |= w.keep()
        return keys

    def _fail(self, failure: BaseException, extra: Sequence[Entry] = ()) -> None:
        """The stream could not deliver: every writer with items in it gets ``failure`` (their
        items are dropped); the stream starts afresh for the others."""
        for e in [*extra, *self._out.clear()]:
            share = e[2]
            if share.error is None and not share.closed:
                share.error = failure
        self._encoder.sent_rows.clear()
        self._wake()

    # -- the call, and reconnecting (in the stream's thread, lock NOT held) ----------------------
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
                if self.retired or not (self._out.queue or self._out.in_flight):
                    self._thread = None
                    return
            stop = threading.Event()
            # a new call gets a new ring (the server unlinked the old one)
            self._encoder.drop_ring()
            try:
                err = self._one_call(stop)
                if err is None or isinstance(err, _Failed):
                    continue  # the call went idle, the stream was retired, or a request failed
                raise err
            except grpc.RpcError as e:
                failure: errors.ReverbError = self._t.rpc_error(e)
            except errors.ReverbError as e:
                failure = e
            except Exception as e:  # noqa: BLE001
                failure = errors.ReverbError(f"writer stream failed: {e}")
            stop.set()
            if isinstance(failure, RingRefused) and not self.retired:
                self._requeue()  # at once, with the rows inline this time
                continue
            if (
                isinstance(failure, errors.UnavailableError)
                and not self.retired
                and not isinstance(failure, TLSMismatchError)
            ):
                give_up = give_up or Deadline.after(self._t.options.unavailable_timeout)
                if not give_up.expired():
                    self._requeue()
                    time.sleep(backoff * (0.5 + random.random() / 2))
                    backoff = min(backoff * 2, 1.0)
                    continue
            with self._cv:
                self._fail(failure)
                self._thread = None
            return

    def _one_call(self, stop: threading.Event) -> BaseException | None:
        """Runs one Insert call until it ends; returns why it failed (None: it went idle, or
        the stream was retired)."""
        call = self._t.open_insert(self._requests(stop))
        self._call = call
        try:
            self._read(call, stop)  # until the server ends the call
        finally:
            self._quiesce(stop)
            # The call is over: let it go now, in this thread, not with the stream (perhaps
            # at the interpreter's exit: see ``_read``).
            self._call = None
            del call
        err, self._call_error = self._call_error, None
        if err is not None:
            return err
        if self._idle_closed:
            with self._cv:
                self._idle_closed = False
                self._encoder.sent_rows.clear()  # the server forgot this stream's chunks
            return None
        if self.retired:
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
                    and not self.retired
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
                            self._wake()
                            return
                    self._send.wait(0.2)
                idle_since = None
                if stop.is_set():
                    return
                if self.retired and not out.queue:
                    return  # ends the request stream; the server then ends the call
                batch = out.take()
                queued = out.queued_chunk_keys()
                keep = self._keep()
            try:
                msg, ring_cost, rest = self._encoder.encode(batch, out.retry_keys, keep | queued)
            except BaseException as e:  # noqa: BLE001 - reported by the thread reading acks
                with self._cv:
                    out.n_encoding = 0
                    failure = (
                        e
                        if isinstance(e, errors.ReverbError)
                        else errors.ReverbError(f"writer stream failed: {e!r}")
                    )
                    self._call_error = self._call_error or _Failed(str(failure))
                    self._fail(failure, batch)
                    stop.set()
                call = self._call
                if call is not None:
                    call.cancel()
                return
            with self._cv:
                if rest:
                    out.queue.extendleft(reversed(rest))
                if stop.is_set():  # the call ended meanwhile: the items go out on the next one
                    out.unsent(batch)
                    self._wake()
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
            self._wake()
            while self._out.n_encoding:
                self._cv.wait(0.05)

    def _read(self, call: Any, stop: threading.Event) -> None:
        """Reads the call's acknowledgements until it ends (in our thread)."""
        try:
            for raw in call:
                n = protocol.parse_insert_ack(raw)
                with self._cv:
                    out = self._out
                    self._encoder.release(out.acked(n))
                    self._cv.notify_all()  # writers waiting for room or for their flush
                    if out.queue:  # the generator may wait for a request slot
                        self._send.notify()
        except grpc.RpcError as e:
            # The exception is gRPC's call object itself, and its traceback's frames refer to
            # it: a cycle that only the garbage collector frees, perhaps at the interpreter's
            # exit, where the call's __del__ can wait forever for a lock that one of gRPC's
            # daemon threads, stopped by the exit, holds (a process that never ends, about
            # once in 300 exits under load). Cut it: the traceback is not needed.
            e.__traceback__ = None
            reason = shm_refusal(e)
            if reason is not None:
                self._t.use_shm = False
                self._t.shm_refused = reason
                _log.info(
                    "server %s refused a shared-memory ring (%s); sending rows inline",
                    self._t.address,
                    reason,
                )
                self._fail_call(RingRefused(reason))
            elif not stop.is_set() or self._out.in_flight:
                self._fail_call(self._t.rpc_error(e))
        except Exception as e:  # noqa: BLE001
            self._fail_call(errors.ReverbError(f"bad reply on insert stream: {e}"))
        finally:
            stop.set()
            with self._cv:
                self._wake()


class InsertStreams:
    """A connection's Insert streams, per table, and the one lock they and their writers share."""

    def __init__(self, transport: Any):
        self._t = transport
        self._lock = threading.RLock()
        self.cv = threading.Condition(self._lock)
        self._by_table: dict[str, list[InsertStream]] = {}

    def join(self, table: str, share: Share) -> InsertStream:
        """A stream to ``table`` with room for another writer (lock held)."""
        streams = self._by_table.setdefault(table, [])
        streams[:] = [s for s in streams if not s.retired]
        for s in streams:
            if s.live_writers() < self._t.options.writers_per_stream:
                s.join(share)
                return s
        s = InsertStream(self._t, self.cv, self._lock)
        streams.append(s)
        s.join(share)
        return s


class GrpcWriterStream:
    """One writer's :class:`~ostinato.transport.streams.WriterStream` to a remote server: its
    share of the connection's Insert stream for each table it writes to.

    At most ``max_pending`` of its items may be unconfirmed; beyond that ``insert`` blocks, so
    a writer that runs ahead of the server waits instead of growing without bound.
    """

    def __init__(
        self,
        transport: Any,
        keep_keys: Callable[[], set[int]] | None,
        max_pending: int | None = None,
    ):
        self._t = transport
        self._streams: InsertStreams = transport.insert_streams
        self._cv = self._streams.cv
        limit = transport.options.max_in_flight_items if max_pending is None else max_pending
        self._share = Share(keep_keys, limit)
        self._by_table: dict[str, InsertStream] = {}

    def pending(self) -> int:
        return self._share.pending

    def insert(self, table: str, items: Sequence[tuple[Any, ...]], deadline: Deadline) -> None:
        share = self._share
        with self._cv:
            if share.error is not None or (
                share.pending and share.pending + len(items) > share.max_pending
            ):
                self._wait_for_room(len(items), deadline)
            stream = self._by_table.get(table)
            if stream is None or stream.retired:
                stream = self._by_table[table] = self._streams.join(table, share)
            stream.enqueue(share, table, items)

    def _wait_for_room(self, n: int, deadline: Deadline) -> None:
        """Blocks (lock held) until ``n`` more items fit under ``max_pending``; raises the
        stream's error."""
        share = self._share
        wait_for(
            self._cv,
            lambda: share.pending + n <= share.max_pending or not share.pending,
            deadline,
            lambda: errors.RateLimiterTimeout(
                f"{share.pending} items are waiting for the server at {self._t.address} "
                "to accept them (its rate limiter or the network is slower than the "
                "writer)."
            ),
            self._raise_error,
        )

    def wait(self, n: int, deadline: Deadline, what: str = "flush") -> None:
        share = self._share
        with self._cv:
            wait_for(
                self._cv,
                lambda: share.pending <= n,
                deadline,
                lambda: errors.DeadlineExceededError(
                    f"{what}: {share.pending} items not yet confirmed by the server at "
                    f"{self._t.address}."
                ),
                self._raise_error,
            )

    def close(self) -> int:
        """Drops the writer's items not sent yet (those in flight may be stored); returns how
        many. A stream whose last writer this was is ended at once."""
        dropped = 0
        ended = []
        with self._cv:
            self._share.closed = True
            for stream in self._by_table.values():
                n, last = stream.leave(self._share)
                dropped += n
                if last:
                    ended.append(stream)
        for stream in ended:
            stream.stop()
        return dropped

    def _raise_error(self) -> None:
        if self._share.error is not None:
            raise self._share.error
