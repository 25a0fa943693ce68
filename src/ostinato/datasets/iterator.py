"""``ostinato.datasets.numpy``: a plain iterator of numpy batches (no framework needed)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ostinato.client import Client
from ostinato.datasets.options import StreamOptions
from ostinato.datasets.stream import SampleStream
from ostinato.replay_sample import ReplaySample
from ostinato.validate import is_int


class NumpyIterator:
    """Iterator over sampled batches (or items) as numpy arrays; see :func:`numpy`.

    It owns a :class:`~ostinato.datasets.stream.SampleStream`; ``close()`` (or leaving a ``with``
    block, or exhausting the iterator) stops its worker threads.
    """

    def __init__(
        self, sampler: SampleStream, batch_size: int | None, drop_remainder: bool, flat: bool
    ):
        self.sampler = sampler
        self.batch_size = batch_size
        if batch_size is None:
            self._it: Iterator[ReplaySample] = sampler.items(flat=flat)
        else:
            self._it = sampler.batches(batch_size, drop_remainder=drop_remainder, flat=flat)

    def __iter__(self) -> NumpyIterator:
        return self

    def __next__(self) -> ReplaySample:
        return next(self._it)

    @property
    def timed_out(self) -> bool:
        """True once the stream ended because the rate limiter timed out."""
        return self.sampler.timed_out

    def close(self) -> None:
        """Stops prefetching; items fetched but not yet returned are discarded."""
        self.sampler.close()
        try:
            self._it.close()  # type: ignore[attr-defined]
        except ValueError:  # the generator is running in another thread; it ends by itself
            pass

    def __enter__(self) -> NumpyIterator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def numpy(
    server_address: Client | str,
    table: str,
    batch_size: int | None,
    *,
    max_in_flight_samples_per_worker: int | None = None,
    num_workers_per_iterator: int = -1,
    max_samples_per_stream: int = -1,
    rate_limiter_timeout_ms: int = -1,
    max_samples: int = -1,
    emit_timesteps: bool = False,
    drop_remainder: bool = False,
    flat: bool = False,
) -> NumpyIterator:
    """A prefetching iterator of batches sampled from ``table``, stacked into numpy arrays.

    Each element is ``ReplaySample(info, data)``: ``info`` is a
    :class:`~ostinato.SampleInfo` of arrays (``key`` uint64, ``probability`` float64,
    ``table_size`` int64, ``priority`` float64, ``times_sampled`` int32), ``data`` has one
    array per column with the batch dimension first, in the structure of the table's
    signature (a flat list when the table has none, or with ``flat=True``).

    Args:
      server_address: ``host:port`` or an :class:`~ostinato.Client` (a server in this
        process is used directly; ``Client(addr, in_process=False)`` forces gRPC).
      table: table name.
      batch_size: rows per batch; ``None`` yields items one at a time (info fields are
        numpy scalars), which also works for items of different shapes.
      max_in_flight_samples_per_worker: items per request; default ``2 * batch_size`` (100
        when ``batch_size`` is None): each request fills two batches, which are views of it,
        and halves the per-request overhead.
      num_workers_per_iterator, max_samples_per_stream, rate_limiter_timeout_ms, max_samples:
        as in Reverb's datasets; see :class:`~ostinato.datasets.options.StreamOptions`.
      emit_timesteps: rows are timesteps rather than whole items (``max_samples`` still
        counts items).
      drop_remainder: drop a last batch smaller than ``batch_size``. By default it is
        yielded, so no sampled item is lost when the stream ends.
      flat: ``data`` as a flat list of columns.

    Returns:
      A :class:`NumpyIterator`. When ``rate_limiter_timeout_ms`` expires while it waits
      for data, it yields what was already sampled and then stops (``timed_out`` is True).

    Raises:
      ValueError: an argument is invalid (the message quotes it).
      TableNotFoundError: the server has no such table.

    Example:
      >>> for batch in ostinato.datasets.numpy(client, "replay", batch_size=256,
      ...                                      max_samples=25_600):
      ...     loss = learn(batch.data["obs"], batch.info.probability)
    """
    if batch_size is not None and (not is_int(batch_size) or batch_size < 1):
        raise ValueError(f"batch_size ({batch_size!r}) must be a positive integer or None")
    if max_in_flight_samples_per_worker is None:
        max_in_flight_samples_per_worker = 2 * batch_size if batch_size else 100
    options = StreamOptions(
        max_in_flight_samples_per_worker=max_in_flight_samples_per_worker,
        num_workers_per_iterator=num_workers_per_iterator,
        max_samples_per_stream=max_samples_per_stream,
        rate_limiter_timeout_ms=rate_limiter_timeout_ms,
        max_samples=max_samples,
    )
    sampler = SampleStream(server_address, table, options, emit_timesteps=emit_timesteps)
    return NumpyIterator(sampler, batch_size, drop_remainder, flat)
