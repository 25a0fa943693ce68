"""A PyTorch ``IterableDataset`` of sampled batches as torch tensors.

This module imports PyTorch; ``ostinato.datasets`` loads it only when ``TorchDataset`` is
first used.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import optree
import torch
from torch.utils.data import IterableDataset, get_worker_info

from ostinato.client import Client
from ostinato.datasets.iterator import numpy as numpy_iterator
from ostinato.datasets.options import StreamOptions
from ostinato.datasets.stream import as_client
from ostinato.replay_sample import ReplaySample, SampleInfo
from ostinato.validate import positive_int


def network_client(client: Client) -> Client:
    """The same server reached over gRPC (a DataLoader worker cannot use the parent's
    in-process server: a forked copy of it would be stale)."""
    return client.copy(in_process=False)


def _split(max_samples: int, worker: int, num_workers: int) -> int:
    if max_samples == -1:
        return -1
    share = max_samples // num_workers + (1 if worker < max_samples % num_workers else 0)
    return share


class TorchDataset(IterableDataset):
    """Sampled batches as ``ReplaySample`` of torch tensors, for ``DataLoader`` or direct use.

    Each element is a whole batch, so give ``DataLoader`` ``batch_size=None``. ``info``
    holds tensors of length ``batch_size`` (``key`` is ``torch.uint64``); ``data`` one
    tensor per column with the batch dimension first, in the table signature's structure.
    On CPU the tensors share memory with the sampled numpy arrays (no copy).

    Args:
      server_address: ``host:port`` or an :class:`~ostinato.Client`.
      table: table name.
      batch_size: items (or timesteps) per batch.
      max_in_flight_samples_per_worker: items per request; default ``2 * batch_size``.
      num_workers_per_iterator, max_samples_per_stream, rate_limiter_timeout_ms, max_samples:
        Reverb's sampler options (:class:`~ostinato.datasets.options.StreamOptions`).
        With ``DataLoader(num_workers=k)``, ``max_samples`` is split between the k workers.
      emit_timesteps: rows are timesteps rather than whole items.
      drop_remainder: drop a last batch smaller than ``batch_size``.
      device: move batches to this device (e.g. ``"cuda:0"``); None keeps them on CPU.
        Only in the main process: in ``DataLoader`` workers use ``pin_memory=True`` on the
        ``DataLoader`` and move batches in the training loop.
      pin_memory: pin batches in page-locked memory (needs CUDA), so that moves to
        ``device`` are asynchronous.
      flat: ``data`` as a flat list of columns.

    Raises:
      ValueError: an argument is invalid, or ``device``/``pin_memory`` needs CUDA and none
        is available (nothing falls back to CPU silently).

    DataLoader workers are separate processes: each opens its own gRPC connection to the
    server (an in-process server also listens on ``localhost``), so the server must be
    reachable at its address. With gRPC active in the parent, prefer
    ``multiprocessing_context="spawn"`` (or ``"forkserver"``).

    Example:
      >>> ds = ostinato.datasets.TorchDataset(address, "replay", batch_size=256,
      ...                                      max_samples=25_600)
      >>> loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
      ...                                      multiprocessing_context="spawn")
      >>> for batch in loader:
      ...     batch.data["obs"].shape   # torch.Size([256, 10, 64])
    """

    def __init__(
        self,
        server_address: Client | str,
        table: str,
        batch_size: int,
        *,
        max_in_flight_samples_per_worker: int | None = None,
        num_workers_per_iterator: int = -1,
        max_samples_per_stream: int = -1,
        rate_limiter_timeout_ms: int = -1,
        max_samples: int = -1,
        emit_timesteps: bool = False,
        drop_remainder: bool = False,
        device: str | torch.device | None = None,
        pin_memory: bool = False,
        flat: bool = False,
    ):
        super().__init__()
        positive_int("batch_size", batch_size)
        StreamOptions(  # validate now rather than in a worker process
            max_in_flight_samples_per_worker=max_in_flight_samples_per_worker or batch_size,
            num_workers_per_iterator=num_workers_per_iterator,
            max_samples_per_stream=max_samples_per_stream,
            rate_limiter_timeout_ms=rate_limiter_timeout_ms,
            max_samples=max_samples,
        )
        self.device = None if device is None else torch.device(device)
        if self.device is not None and self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(
                f"device ({device!r}) needs CUDA, but torch.cuda.is_available() is False"
            )
        if pin_memory and not torch.cuda.is_available():
            raise ValueError("pin_memory=True needs CUDA, but torch.cuda.is_available() is False")
        self.client = as_client(server_address)
        self.table = table
        self.batch_size = batch_size
        self.pin_memory = bool(pin_memory)
        self._kwargs: dict[str, Any] = dict(
            max_in_flight_samples_per_worker=max_in_flight_samples_per_worker,
            num_workers_per_iterator=num_workers_per_iterator,
            max_samples_per_stream=max_samples_per_stream,
            rate_limiter_timeout_ms=rate_limiter_timeout_ms,
            emit_timesteps=emit_timesteps,
            drop_remainder=drop_remainder,
            flat=flat,
        )
        self.max_samples = max_samples

    def _tensor(self, a: np.ndarray) -> torch.Tensor | np.ndarray:
        if a.dtype.kind == "O":  # strings: torch has no string tensor, they stay numpy bytes
            return a
        t = torch.from_numpy(a)
        if self.pin_memory:
            t = t.pin_memory()
        if self.device is not None and t.device != self.device:
            t = t.to(self.device, non_blocking=self.pin_memory)
        return t

    def __iter__(self) -> Iterator[ReplaySample]:
        client = self.client
        max_samples = self.max_samples
        worker = get_worker_info()
        if worker is not None:
            if self.device is not None and self.device.type != "cpu":
                raise ValueError(
                    f"device ({str(self.device)!r}) cannot be used in DataLoader worker "
                    "processes; leave device=None and use DataLoader(pin_memory=True)"
                )
            client = network_client(client)
            max_samples = _split(max_samples, worker.id, worker.num_workers)
            if max_samples == 0:
                return
        it = numpy_iterator(
            client, self.table, self.batch_size, max_samples=max_samples, **self._kwargs
        )
        convert = self._tensor
        try:
            for batch in it:
                info = SampleInfo(*map(convert, batch.info))
                data = optree.tree_map(convert, batch.data, none_is_leaf=False)
                yield ReplaySample(info, data)
        finally:
            it.close()
