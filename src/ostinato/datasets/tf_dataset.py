"""``tf.data`` datasets with Reverb's API: :class:`TrajectoryDataset` and :class:`TimestepDataset`.

This module imports TensorFlow; ``ostinato`` and ``ostinato.datasets`` load it only when one
of these names is first used.

How it works: a :class:`~ostinato.datasets.stream.SampleStream` fetches items in requests of
``max_in_flight_samples_per_worker`` on background threads; each request's items reach
TensorFlow as one stacked chunk (``Dataset.from_generator``), which ``unbatch`` splits into
elements in C++. So a pipeline such as ``TrajectoryDataset(...).batch(256)`` pays Python
overhead per request, not per item.

Differences from Reverb (each a fix, not a new feature):

* ``rate_limiter_timeout_ms=0`` ends the sequence as soon as the table has nothing to give
  over the network too (Reverb waited forever there).
* Items already sampled when the timeout ends the sequence are delivered, then the
  sequence ends (Reverb 0.14 could drop a partial request).
"""

from __future__ import annotations

import atexit
import collections
import itertools
import threading
import weakref
from typing import Any

import numpy as np
import optree
import tensorflow as tf

from ostinato.client import Client
from ostinato.core.specs import TensorSpec, is_spec_like
from ostinato.datasets.options import StreamOptions
from ostinato.datasets.stream import NOT_READY, SampleStream, as_client
from ostinato.datasets.tf_specs import (
    _check_signature,
    _is_leaf,
    _shape_leaf,
    _text,
    _validator,
    lists_to_tuples,
)
from ostinato.replay_sample import ReplaySample, SampleInfo

_INFO_DTYPES = SampleInfo(tf.uint64, tf.float64, tf.int64, tf.float64, tf.int32)


def _stream_dataset(
    source: _Source, dtypes: list[tf.DType], shapes: list[tf.TensorShape], treedef: Any
) -> tf.data.Dataset:
    """Per iterator: open a stream once, then fetch chunks until the stream says it ended.

    The fetches are mapped with ``preserve_cardinality=False`` (``tf.compat.v1``'s map): the
    ``StopIteration`` that :meth:`_Source.fetch` raises at the end of the stream ends the
    sequence, with no per-chunk ``take_while`` and ``map`` to carry an end flag (two function
    calls per chunk, and TF-Agents' pipeline fetches 11 chunks per batch).
    """
    out_types = [*_INFO_DTYPES, *dtypes]
    chunk_shapes = [
        *([tf.TensorShape([None])] * len(_INFO_DTYPES)),
        *(tf.TensorShape([None]).concatenate(s) for s in shapes),
    ]

    def open_stream(_: Any) -> tf.Tensor:
        sid = tf.numpy_function(source.open, [], tf.int64, stateful=True, name="ostinato_open")
        sid.set_shape([])
        return sid

    def fetch(sid: tf.Tensor) -> ReplaySample:
        out = tf.numpy_function(
            source.fetch, [sid], out_types, stateful=True, name="ostinato_fetch"
        )
        for t, s in zip(out, chunk_shapes):
            t.set_shape(s)
        n = len(_INFO_DTYPES)
        return ReplaySample(SampleInfo(*out[:n]), optree.tree_unflatten(treedef, list(out[n:])))

    def chunks(sid: tf.Tensor) -> tf.data.Dataset:
        return tf.compat.v1.data.Dataset.map(tf.data.Dataset.from_tensors(sid).repeat(), fetch)

    ds = tf.data.Dataset.from_tensors(np.int64(0)).map(open_stream).flat_map(chunks)
    return ds.unbatch()


class WrappedDataset(tf.data.Dataset):
    """A ``tf.data.Dataset`` subclass that is an inner pipeline under its own element spec
    (Reverb's datasets are classes users construct; ours build a pipeline and present it)."""

    def _wrap(self, inner: tf.data.Dataset, element_spec: Any) -> None:
        self._inner = inner
        self._element_spec = element_spec
        super().__init__(inner._variant_tensor)

    def _inputs(self) -> list[tf.data.Dataset]:
        return [self._inner]

    @property
    def element_spec(self) -> Any:
        return self._element_spec


class _ReverbDataset(WrappedDataset):
    """Shared implementation; see :class:`TrajectoryDataset`."""

    _EMIT_TIMESTEPS = False

    def __init__(
        self,
        server_address: str | Client | tf.Tensor,
        table: str | tf.Tensor,
        dtypes: Any,
        shapes: Any,
        max_in_flight_samples_per_worker: int,
        num_workers_per_iterator: int = -1,
        max_samples_per_stream: int = -1,
        rate_limiter_timeout_ms: int = -1,
        max_samples: int = -1,
    ):
        dtype_tree = lists_to_tuples(dtypes)
        shape_tree = lists_to_tuples(shapes)
        flat_dtypes, dtype_def = optree.tree_flatten(
            dtype_tree, is_leaf=_is_leaf, none_is_leaf=True
        )
        # The dtypes give the structure (their leaves are unambiguous); each shape is what
        # stands at a dtype's place. So an empty nest such as ``policy_info=()`` is an empty
        # nest in both trees, while ``()`` at a dtype's place is a scalar shape.
        try:
            flat_shapes = dtype_def.flatten_up_to(shape_tree)
        except ValueError:
            flat_shapes = None
        if flat_shapes is None or not all(map(_shape_leaf, flat_shapes)):
            raise ValueError(
                f"dtypes and shapes must have the same structure; got dtypes {dtypes!r} and "
                f"shapes {shapes!r}"
            )
        self._options = StreamOptions(
            max_in_flight_samples_per_worker=max_in_flight_samples_per_worker,
            num_workers_per_iterator=num_workers_per_iterator,
            max_samples_per_stream=max_samples_per_stream,
            rate_limiter_timeout_ms=rate_limiter_timeout_ms,
            max_samples=max_samples,
        )
        if isinstance(server_address, Client):
            self._client = server_address
        else:
            self._client = as_client(_text(server_address, "server_address"))
        self._table = _text(table, "table")
        tf_dtypes = [tf.as_dtype(d) for d in flat_dtypes]
        tf_shapes = [tf.TensorShape(s) for s in flat_shapes]
        self._specs = [TensorSpec(s, d.as_numpy_dtype) for s, d in zip(tf_shapes, tf_dtypes)]
        self._treedef = dtype_def
        data_spec = optree.tree_unflatten(
            dtype_def, [tf.TensorSpec(s, d) for s, d in zip(tf_shapes, tf_dtypes)]
        )
        info_spec = SampleInfo(*(tf.TensorSpec([], d) for d in _INFO_DTYPES))
        self._source = _Source(
            self._client, self._table, self._options, self._specs, self._EMIT_TIMESTEPS
        )
        self._wrap(
            _stream_dataset(self._source, tf_dtypes, tf_shapes, dtype_def),
            ReplaySample(info=info_spec, data=data_spec),
        )

    @classmethod
    def from_table_signature(
        cls,
        server_address: str | Client,
        table: str,
        max_in_flight_samples_per_worker: int,
        num_workers_per_iterator: int = -1,
        max_samples_per_stream: int = -1,
        rate_limiter_timeout_ms: int = -1,
        get_signature_timeout_secs: int | None = None,
        max_samples: int = -1,
    ) -> Any:
        """A dataset whose dtypes and shapes are the table's signature.

        Bounded specs become plain ``tf.TensorSpec`` (their shape and dtype).

        Raises:
          ValueError: the server has no such table, or the table has no signature.
          DeadlineExceededError: the server did not answer within
            ``get_signature_timeout_secs``.
        """
        client = (
            server_address
            if isinstance(server_address, Client)
            else as_client(_text(server_address, "server_address"))
        )
        address = client.server_address
        info = client.server_info(get_signature_timeout_secs)
        if table not in info:
            raise ValueError(
                f"Server at {address} does not contain any table named {table}. Found: "
                f"{', '.join(sorted(info))}."
            )
        signature = info[table].signature
        if not signature:
            raise ValueError(f"Table {table} at {address} does not have a signature.")
        dtypes = optree.tree_map(
            lambda s: tf.as_dtype(TensorSpec.from_spec(s).dtype),
            signature,
            is_leaf=is_spec_like,
            none_is_leaf=True,
        )
        shapes = optree.tree_map(
            lambda s: tf.TensorShape(TensorSpec.from_spec(s).shape),
            signature,
            is_leaf=is_spec_like,
            none_is_leaf=True,
        )
        return cls(
            client,
            table,
            dtypes,
            shapes,
            max_in_flight_samples_per_worker,
            num_workers_per_iterator=num_workers_per_iterator,
            max_samples_per_stream=max_samples_per_stream,
            rate_limiter_timeout_ms=rate_limiter_timeout_ms,
            max_samples=max_samples,
        )


class TrajectoryDataset(_ReverbDataset):
    """A ``tf.data.Dataset`` of whole sampled items (Reverb's ``TrajectoryDataset``).

    Each element is ``ReplaySample(info, data)``: ``info`` holds five scalars (key uint64,
    probability float64, table_size int64, priority float64, times_sampled int32); ``data``
    has the structure of ``dtypes``/``shapes`` (lists become tuples), one tensor per column
    holding the item's whole column (a squeezed column has no time dimension).

    Args:
      server_address: ``host:port`` (or an :class:`~ostinato.Client`).
      table: table to sample from.
      dtypes: nest of ``tf.DType`` (or numpy dtypes), one per column.
      shapes: nest of ``tf.TensorShape`` (or lists), same structure as ``dtypes``.
      max_in_flight_samples_per_worker: items per request (>= 1).
      num_workers_per_iterator: worker threads per iterator; ``-1`` picks (see
        :class:`~ostinato.datasets.options.StreamOptions`).
      max_samples_per_stream: ``-1`` for Reverb's default (10,000).
      rate_limiter_timeout_ms: end the sequence after waiting this long for the rate
        limiter while the consumer waits; ``-1`` waits forever.
      max_samples: the sequence ends after this many items; ``-1`` for no limit. No item
        beyond it is taken from the table.

    The sampler checks the requested specs against the table's signature when an iterator
    starts, and every sampled item against the requested specs (Reverb's messages, raised as
    ``InvalidArgumentError``).

    Example:
      >>> ds = ostinato.TrajectoryDataset.from_table_signature(
      ...     "localhost:8000", "replay", max_in_flight_samples_per_worker=512).batch(256)
      >>> for sample in ds.take(10):
      ...     sample.data["obs"].shape   # (256, 10, 64)
    """


class TimestepDataset(_ReverbDataset):
    """A ``tf.data.Dataset`` of single timesteps (Reverb's ``TimestepDataset``).

    Same arguments as :class:`TrajectoryDataset`, but ``dtypes``/``shapes`` describe one
    timestep and every element is one timestep of a sampled item; ``info`` is repeated for
    each step of an item. All columns of an item must have the same length (else
    ``InvalidArgumentError`` "Sampled trajectory cannot be decomposed into timesteps.").
    ``max_samples`` counts items, not timesteps.
    """

    _EMIT_TIMESTEPS = True


#: Longest time a fetch waits for a piece before handing TensorFlow an empty chunk. A call
#: into Python that blocks holds the tf.data thread that runs it: TensorFlow could then neither
#: cancel the iterator (deleting it would wait for the table) nor, in a parallel ``interleave``,
#: hand out elements other streams already produced (items counted as sampled would sit in its
#: buffers while the consumer waits). Empty chunks vanish in ``unbatch``.
_POLL_S = 0.05


#: Consumers counted when a shared stream sizes what it holds (``max_in_flight`` times this at
#: most): iterators that were deleted never say so.
_MAX_SHARERS = 64


class _Stream:
    """One iterator's stream: the SampleStream it reads (made on its first fetch; its own, or the
    dataset's shared one) and rows not yet handed out (items of different shapes go to
    TensorFlow one at a time)."""

    __slots__ = ("sampler", "rows", "shared")

    def __init__(self) -> None:
        self.sampler: SampleStream | None = None
        self.rows: collections.deque[list[np.ndarray]] = collections.deque()
        self.shared = False


class _Source:
    """The Python side of a :class:`_ReverbDataset`: one stream per iterator, fetched from by
    ``tf.numpy_function`` calls that return one chunk of rows each (batch dimension first).

    No ``Dataset.from_generator``: TensorFlow finalizes a generator's iterator by calling back
    into Python, which at interpreter exit printed "Error occurred when finalizing
    GeneratorDataset iterator" once per open stream. Here a stream ends when its SampleStream ends
    (``max_samples``, a rate-limiter timeout, an error), when the dataset is garbage collected,
    or at interpreter exit (then its iterator sees the end of the sequence).

    Without ``max_samples`` (a per-iterator limit) every iterator of the dataset reads one
    shared SampleStream: TF-Agents interleaves up to 32 copies of one dataset, and one fetcher
    costs far less than 32. It holds what the readers' own streams would (``max_in_flight *
    num_workers`` per reader), asked for in two halves, and hands each fetch at most
    ``max_in_flight`` items. That last bound is what keeps batches fresh: ``interleave`` takes
    one element from each of its 32 streams in turn, so a chunk of ``c`` rows waits in
    ``unbatch`` for about ``32 * c`` elements; chunks as large as a whole shared request (issue
    22) made TF-Agents' batches dozens of training steps old. Items still in the shared queue
    when a reader goes are handed to the next (what TensorFlow already took into a deleted
    iterator's buffers is gone, as with Reverb).
    """

    def __init__(
        self,
        client: Client,
        table: str,
        options: StreamOptions,
        specs: list[TensorSpec],
        timesteps: bool,
    ):
        self._client = client
        self._table = table
        self._options = options
        self._specs = specs
        self._timesteps = timesteps
        self._lock = threading.Lock()
        self._streams: dict[int, _Stream] = {}
        self._ids = itertools.count(1)
        self._closed = False
        self._share = options.max_samples == -1
        self._shared: SampleStream | None = None
        self._sharers = 0
        info = [np.zeros(0, d.as_numpy_dtype) for d in _INFO_DTYPES]
        data = [np.zeros((0, *(0 if d is None else d for d in s.shape)), s.dtype) for s in specs]
        self._empty = [*info, *data]
        _SOURCES.add(self)
        weakref.finalize(self, _close_streams, self._streams, self._lock)

    def open(self) -> np.int64:
        with self._lock:
            sid = next(self._ids)
            if not self._closed:
                self._streams[sid] = _Stream()
        return np.int64(sid)

    def fetch(self, sid: Any) -> list[Any]:
        # Errors raised here reach the iterator through tf.numpy_function, which turns
        # ValueError (so InvalidArgumentError and TableNotFoundError) into
        # tf.errors.InvalidArgumentError.
        sid = int(sid)
        stream = self._streams.get(sid)
        if stream is None:
            raise StopIteration
        if stream.rows:
            return self._row(stream)
        sampler = stream.sampler
        if sampler is None:
            try:
                sampler = stream.sampler = self._sampler_for(stream)
            except BaseException:
                self._drop(sid)
                raise
        try:
            p = sampler.next_piece(timeout=_POLL_S)
        except BaseException:
            self._drop(sid)
            raise
        if p is NOT_READY:
            return self._empty
        if p is None:
            self._drop(sid)
            raise StopIteration
        if p.columns is not None:
            return [*p.info, *p.columns]
        for i, row in enumerate(p.row_data or ()):
            stream.rows.append([*(a[i : i + 1] for a in p.info), *(r[None] for r in row)])
        return self._row(stream)

    def _new_sampler(self) -> SampleStream:
        sampler = SampleStream(
            self._client,
            self._table,
            self._options,
            emit_timesteps=self._timesteps,
            validate=_validator(self._table, self._specs),
            max_piece_items=self._options.max_in_flight_samples_per_worker,
        )
        try:
            _check_signature(self._table, self._specs, sampler.signature, self._timesteps)
        except BaseException:
            sampler.close()
            raise
        return sampler

    def _sampler_for(self, stream: _Stream) -> SampleStream:
        if not self._share:
            return self._new_sampler()
        with self._lock:
            shared = self._shared
            if shared is None or shared.ended:
                shared = self._shared = self._new_sampler()
                self._sharers = 0
            self._sharers = min(self._sharers + 1, _MAX_SHARERS)
            # What the sharers' own streams could hold (Reverb: one sampler per iterator), asked
            # for in halves so that one request is answered while the other is consumed.
            in_flight = self._options.max_in_flight_samples_per_worker
            per_worker = in_flight * self._sharers
            shared.set_in_flight(per_worker, request_size=max(in_flight, per_worker // 2))
        stream.shared = True
        return shared

    @staticmethod
    def _row(stream: _Stream) -> list[Any]:
        return list(stream.rows.popleft())

    def _drop(self, sid: int) -> None:
        with self._lock:
            stream = self._streams.pop(sid, None)
        if stream is not None and stream.sampler is not None and not stream.shared:
            stream.sampler.close()

    def close(self) -> None:
        """Ends every stream (their iterators then see the end of the sequence)."""
        with self._lock:
            self._closed = True
        _close_streams(self._streams, self._lock)


def _close_streams(streams: dict[int, _Stream], lock: threading.Lock) -> None:
    with lock:
        samplers = {id(s.sampler): s.sampler for s in streams.values() if s.sampler is not None}
        streams.clear()
    for sampler in samplers.values():
        sampler.close(timeout=0)


_SOURCES: weakref.WeakSet[_Source] = weakref.WeakSet()


@atexit.register
def _close_all_sources() -> None:
    for source in list(_SOURCES):
        source.close()
