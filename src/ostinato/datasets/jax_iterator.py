"""Sampled batches put on a JAX device ahead of the consumer.

This module imports JAX; ``ostinato.datasets`` loads it only when ``JaxIterator`` is first
used.
"""

from __future__ import annotations

import collections
import threading
from typing import Any

import jax
import optree

from ostinato.client import Client
from ostinato.datasets.iterator import NumpyIterator
from ostinato.datasets.iterator import numpy as numpy_iterator
from ostinato.replay_sample import ReplaySample, SampleInfo
from ostinato.validate import non_negative_int


class JaxIterator:
    """Iterator of ``ReplaySample`` batches whose ``data`` are JAX arrays on ``device``.

    Sampling runs on background threads (see :class:`~ostinato.datasets.stream.SampleStream`);
    a transfer thread issues ``jax.device_put`` (asynchronous) for up to ``prefetch``
    batches ahead of the consumer, so transfers overlap its work. A batch that is ready is
    returned at once, without waiting for the ones behind it.

    Args:
      server_address: ``host:port`` or an :class:`~ostinato.Client`.
      table: table name.
      batch_size: items (or timesteps) per batch.
      device: a ``jax.Device`` or ``jax.sharding.Sharding``; default ``jax.devices()[0]``.
      prefetch: batches transferred ahead of the consumer (>= 0; 0 transfers each batch
        when it is asked for).
      info_on_device: also put ``info`` on the device. By default it stays as numpy arrays
        on the host, where keys are needed for priority updates; on the device it needs
        ``jax_enable_x64`` (keys are uint64, which JAX would otherwise truncate).
      max_in_flight_samples_per_worker, num_workers_per_iterator, max_samples_per_stream,
        rate_limiter_timeout_ms, max_samples, emit_timesteps, drop_remainder, flat: as for
        :func:`ostinato.datasets.numpy`.

    JAX converts 64-bit data to 32 bits unless ``jax_enable_x64`` is set, as
    ``jax.device_put`` always does.

    Raises:
      ValueError: an argument is invalid.

    Example:
      >>> with ostinato.datasets.JaxIterator(address, "replay", batch_size=256) as it:
      ...     for batch in it:
      ...         params = update(params, batch.data["obs"])   # already on the device
    """

    def __init__(
        self,
        server_address: Client | str,
        table: str,
        batch_size: int,
        *,
        device: Any = None,
        prefetch: int = 2,
        info_on_device: bool = False,
        max_in_flight_samples_per_worker: int | None = None,
        num_workers_per_iterator: int = -1,
        max_samples_per_stream: int = -1,
        rate_limiter_timeout_ms: int = -1,
        max_samples: int = -1,
        emit_timesteps: bool = False,
        drop_remainder: bool = False,
        flat: bool = False,
    ):
        non_negative_int("prefetch", prefetch)
        if info_on_device and not jax.config.read("jax_enable_x64"):
            raise ValueError(
                "info_on_device=True needs jax_enable_x64 (keys are uint64); "
                "enable it or keep info on the host"
            )
        self.device = device if device is not None else jax.devices()[0]
        self._target = (
            self.device
            if isinstance(self.device, jax.sharding.Sharding)
            else jax.sharding.SingleDeviceSharding(self.device)
        )
        self.prefetch = prefetch
        self.info_on_device = bool(info_on_device)
        self._numpy: NumpyIterator = numpy_iterator(
            server_address,
            table,
            batch_size,
            max_in_flight_samples_per_worker=max_in_flight_samples_per_worker,
            num_workers_per_iterator=num_workers_per_iterator,
            max_samples_per_stream=max_samples_per_stream,
            rate_limiter_timeout_ms=rate_limiter_timeout_ms,
            max_samples=max_samples,
            emit_timesteps=emit_timesteps,
            drop_remainder=drop_remainder,
            flat=flat,
        )
        self._ahead: collections.deque[Any] = collections.deque()
        self._cond = threading.Condition()
        self._done = False
        self._closed = False
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if prefetch > 0:
            self._thread = threading.Thread(
                target=self._transfer, daemon=True, name="ostinato-jax-prefetch"
            )
            self._thread.start()

    @property
    def timed_out(self) -> bool:
        """True once the stream ended because the rate limiter timed out."""
        return self._numpy.timed_out

    def _put(self, batch: ReplaySample) -> ReplaySample:
        # One device_put for all leaves (it is the per-batch fixed cost on this path).
        leaves, treedef = optree.tree_flatten(batch.data, none_is_leaf=False)
        if any(leaf.dtype.kind == "O" for leaf in leaves):
            # String columns (object arrays of bytes) have no JAX dtype: they stay on the host.
            numeric = [i for i, leaf in enumerate(leaves) if leaf.dtype.kind != "O"]
            moved = jax.device_put([leaves[i] for i in numeric], self._target)
            for i, m in zip(numeric, moved):
                leaves[i] = m
            batch = ReplaySample(batch.info, optree.tree_unflatten(treedef, leaves))
            if not self.info_on_device:
                return batch
            return ReplaySample(SampleInfo(*jax.device_put(batch.info, self._target)), batch.data)
        if self.info_on_device:
            both = jax.device_put((batch.info, batch.data), self._target)
            return ReplaySample(SampleInfo(*both[0]), both[1])
        return ReplaySample(batch.info, jax.device_put(batch.data, self._target))

    def _transfer(self) -> None:
        # Keeps up to `prefetch` batches on the device ahead of the consumer. device_put is
        # asynchronous, so this thread mostly waits for sampled batches.
        try:
            while True:
                with self._cond:
                    while len(self._ahead) >= self.prefetch and not self._closed:
                        self._cond.wait()
                    if self._closed:
                        return
                try:
                    batch = next(self._numpy)
                except StopIteration:
                    return
                put = self._put(batch)
                with self._cond:
                    self._ahead.append(put)
                    self._cond.notify_all()
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            self._error = e
        finally:
            with self._cond:
                self._done = True
                self._cond.notify_all()

    def __iter__(self) -> JaxIterator:
        return self

    def __next__(self) -> ReplaySample:
        if self._thread is None:  # prefetch=0: transfer on demand
            if self._closed:
                raise StopIteration
            return self._put(next(self._numpy))
        with self._cond:
            while not self._ahead and not self._done:
                self._cond.wait()
            if self._ahead:
                batch = self._ahead.popleft()
                self._cond.notify_all()
                return batch
        if self._error is not None:
            raise self._error
        raise StopIteration

    def close(self) -> None:
        """Stops sampling and drops prefetched batches."""
        with self._cond:
            self._closed = True
            self._ahead.clear()
            self._cond.notify_all()
        self._numpy.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def __enter__(self) -> JaxIterator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["JaxIterator"]
