"""A framework-free replay buffer over one table: TF-Agents' ``ReverbReplayBuffer`` API."""

from __future__ import annotations

from typing import Any

import numpy as np
import optree

from ostinato import errors
from ostinato.client import Client
from ostinato.core.specs import is_spec_like
from ostinato.core.table_info import TableInfo
from ostinato.observers._elements import ElementPlan, JaxDataset, NumpyDataset, torch_dataset
from ostinato.observers.base import flag
from ostinato.validate import is_int, positive_int

#: TF-Agents' default table name (``reverb_replay_buffer.DEFAULT_TABLE``).
DEFAULT_TABLE = "experience"

_FRAMEWORKS = ("numpy", "torch", "jax", "tf")


def _int_or_auto(value: Any, name: str) -> int:
    if not is_int(value) or (value < 1 and value != -1):
        raise ValueError(f"{name} ({value!r}) must be a positive integer or -1 (auto)")
    return int(value)


def _optional_positive(value: Any, name: str) -> int | None:
    return None if value is None else positive_int(name, value)


def _has_list(tree: Any) -> bool:
    if isinstance(tree, list):
        return True
    if isinstance(tree, dict):
        return any(_has_list(v) for v in tree.values())
    if isinstance(tree, tuple):
        return any(_has_list(v) for v in tree)
    return False


def _to_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # torch
        x = x.detach().cpu()
    if hasattr(x, "numpy") and not isinstance(x, np.ndarray):  # torch, tf
        x = x.numpy()
    return np.asarray(x)


class ReplayBuffer:
    """Sampling side of a table, with TF-Agents' ``ReverbReplayBuffer`` arguments and
    semantics and datasets for numpy, PyTorch, JAX or TensorFlow.

    Items are written by the observers (:mod:`ostinato.observers`); the buffer reads them.

    Args:
      data_spec: nest of specs of ONE step (no time dimension; ``ostinato.TensorSpec`` or
        ``tf.TensorSpec``), giving the structure of sampled data. ``None`` (Ostinato only):
        the table's signature gives it, or, without one, data is a flat list of columns.
        Python lists in it are refused (TF-Agents: convert them to tuples).
      table_name: the table sampled (default TF-Agents' ``"experience"``).
      sequence_length: the number of steps in every item, or ``None`` when it is unknown or
        varies; sampled items of another length raise at iteration.
      server_address: ``"host:port"`` or an :class:`ostinato.Client`.
      local_server: an :class:`ostinato.Server` in this process. Give exactly one of
        ``server_address`` and ``local_server``.
      dataset_buffer_size: items a dataset fetches per request (its prefetch buffer); the
        default is twice the items one batch needs.
      max_cycle_length: TF-Agents interleaved ``min(sample_batch_size, max_cycle_length)``
        Reverb datasets for parallelism; Ostinato reads one stream fetched by parallel
        workers instead. The value is checked, and sizes the ``tf.data`` shuffle buffer of
        ``num_steps`` chunks as TF-Agents sized it (the other frameworks shuffle the chunks
        of each fetched batch of items).
      num_workers_per_iterator: sampler worker threads; ``-1`` picks (one for deterministic
        tables, which keeps their order).
      max_samples_per_stream: caps a request's size (``-1``: Reverb's default).
      rate_limiter_timeout_ms: how long a dataset waits for the rate limiter before its
        stream ends; ``-1`` waits forever.

    Raises:
      ValueError: an argument is invalid (the message names it), or not exactly one of
        ``server_address`` and ``local_server`` is given.
      TableNotFoundError: the server has no table ``table_name``.

    Example:
      >>> rb = ReplayBuffer(table_name="replay", sequence_length=2, local_server=server)
      >>> for data, info in rb.as_dataset(sample_batch_size=64, framework="torch"):
      ...     loss = learn(data["observation"][:, 0], data["observation"][:, 1])
    """

    def __init__(
        self,
        data_spec: Any = None,
        table_name: str = DEFAULT_TABLE,
        sequence_length: int | None = None,
        server_address: str | Client | None = None,
        local_server: Any = None,
        dataset_buffer_size: int | None = None,
        max_cycle_length: int = 32,
        num_workers_per_iterator: int = -1,
        max_samples_per_stream: int = -1,
        rate_limiter_timeout_ms: int = -1,
    ):
        if (server_address is None) == (local_server is None):
            raise ValueError("Exactly one of the server_address or local_server must be provided.")
        if not isinstance(table_name, str) or not table_name:
            raise ValueError(f"table_name ({table_name!r}) must be a non-empty string")
        if data_spec is not None:
            if _has_list(data_spec):
                raise ValueError(
                    f"data_spec ({data_spec!r}) contains lists; convert any lists to tuples "
                    "(TF-Agents cannot gather from them either)"
                )
            leaves = optree.tree_leaves(data_spec, is_leaf=is_spec_like, none_is_leaf=True)
            if not leaves or not all(is_spec_like(x) for x in leaves):
                raise ValueError(
                    f"data_spec ({data_spec!r}) must be a non-empty nest of "
                    "TensorSpecs (one step, no time dimension)"
                )
        self._data_spec = data_spec
        self._table_name = table_name
        self._sequence_length = _optional_positive(sequence_length, "sequence_length")
        self._dataset_buffer_size = _optional_positive(dataset_buffer_size, "dataset_buffer_size")
        self._max_cycle_length = positive_int("max_cycle_length", max_cycle_length)
        self._num_workers_per_iterator = _int_or_auto(
            num_workers_per_iterator, "num_workers_per_iterator"
        )
        self._max_samples_per_stream = _int_or_auto(
            max_samples_per_stream, "max_samples_per_stream"
        )
        if not is_int(rate_limiter_timeout_ms) or rate_limiter_timeout_ms < -1:
            raise ValueError(
                f"rate_limiter_timeout_ms ({rate_limiter_timeout_ms!r}) must be an "
                "integer >= -1 (-1 waits forever)"
            )
        self._rate_limiter_timeout_ms = int(rate_limiter_timeout_ms)
        self._local_server = local_server
        if local_server is not None:
            if not callable(getattr(local_server, "localhost_client", None)):
                raise ValueError(f"local_server ({local_server!r}) must be an ostinato.Server")
            self._py_client = local_server.localhost_client()
        elif isinstance(server_address, Client):
            self._py_client = server_address
        elif isinstance(server_address, str):
            self._py_client = Client(server_address)
        else:
            raise ValueError(
                f"server_address ({server_address!r}) must be 'host:port' or an ostinato.Client"
            )
        self._tf_client: Any = None
        info = self.get_table_info()
        self._capacity = int(info.max_size)
        self._deterministic_table = bool(
            info.sampler_options.is_deterministic and info.remover_options.is_deterministic
        )

    # -- properties -----------------------------------------------------------------------------
    @property
    def py_client(self) -> Client:
        return self._py_client

    @property
    def local_server(self) -> Any:
        return self._local_server

    @property
    def tf_client(self) -> Any:
        """An :class:`ostinato.TFClient` for the server (imports TensorFlow)."""
        if self._tf_client is None:
            from ostinato.datasets.tf_client import TFClient

            self._tf_client = TFClient(self._py_client, "rb_tf_client")
        return self._tf_client

    @property
    def data_spec(self) -> Any:
        return self._data_spec

    @property
    def table_name(self) -> str:
        return self._table_name

    @property
    def sequence_length(self) -> int | None:
        return self._sequence_length

    @property
    def capacity(self) -> int:
        """The table's ``max_size``, read at construction."""
        return self._capacity

    @property
    def stateful_dataset(self) -> bool:
        return True

    # -- table ----------------------------------------------------------------------------------
    def get_table_info(self) -> TableInfo:
        """The table's current :class:`~ostinato.types.TableInfo` (asks the server each time)."""
        info = self._py_client.server_info()
        if self._table_name not in info:
            raise errors.TableNotFoundError(
                f"table_name ({self._table_name!r}) is not a table of the server at "
                f"{self._py_client.server_address}; it has {sorted(info)}"
            )
        return info[self._table_name]

    def num_frames(self) -> int:
        """The number of ITEMS in the table (TF-Agents' meaning), not of steps."""
        return int(self.get_table_info().current_size)

    def clear(self) -> None:
        """Removes every item of the table and resets its rate limiter."""
        self._py_client.reset(self._table_name)

    def update_priorities(self, keys: Any, priorities: Any) -> None:
        """Sets new priorities for sampled items (unknown keys are ignored).

        Args:
          keys: ``info.key`` of sampled elements: shape ``[B]``, or ``[B, T]`` as datasets
            give it (one key repeated along time), numpy, torch, JAX or TF.
          priorities: shape ``[B]``, or the shape of ``keys``.

        Raises:
          ValueError: the shapes do not fit together.
        """
        k = _to_numpy(keys).astype(np.uint64, copy=False)
        p = _to_numpy(priorities).astype(np.float64, copy=False)
        if k.ndim == 2 and p.ndim == 1 and k.shape[0] == p.shape[0]:
            k = k[:, 0]
        elif k.shape != p.shape:
            raise ValueError(
                f"keys of shape {k.shape} and priorities of shape {p.shape} do not "
                "fit together (give [B] and [B], [B, T] and [B], or equal shapes)"
            )
        self._py_client.update_priorities(self._table_name, k.reshape(-1), p.reshape(-1))

    # -- what TF-Agents refuses ------------------------------------------------------------------
    def add_batch(self, items: Any) -> None:
        raise NotImplementedError(
            "ReplayBuffer does not support `add_batch` (nor does TF-Agents' ReverbReplayBuffer): "
            "write with the observers in ostinato.observers"
        )

    def get_next(
        self, sample_batch_size: Any = None, num_steps: Any = None, time_stacked: bool = True
    ) -> None:
        raise NotImplementedError("ReplayBuffer does not support `get_next`: use as_dataset()")

    def gather_all(self) -> None:
        raise NotImplementedError("ReplayBuffer does not support `gather_all`.")

    # -- datasets -------------------------------------------------------------------------------
    def _verify_num_steps(self, num_steps: int | None) -> None:
        length = self._sequence_length
        if num_steps and length:
            if num_steps > length:
                raise ValueError(
                    "Can not guarantee sequential data for num_steps as sequence length of the "
                    f"data is smaller. This is not supported. num_steps > sequence_length "
                    f"({num_steps} vs. {length})"
                )
            if length % num_steps != 0:
                raise ValueError(
                    "Can not guarantee sequential data since sequence_length is not a multiple "
                    f"of num_steps ({num_steps} vs. {length})"
                )

    def as_dataset(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        num_parallel_calls: int | None = None,
        sequence_preprocess_fn: Any = None,
        single_deterministic_pass: bool = False,
        *,
        framework: str = "numpy",
        device: Any = None,
        seed: int | None = None,
    ) -> Any:
        """A dataset of ``(data, info)`` elements, as TF-Agents' buffer builds them.

        Each sampled item of ``T`` steps gives ``data`` shaped ``[T, ...]`` per leaf and
        ``info`` (a :class:`~ostinato.SampleInfo`) with every field repeated along time,
        ``[T]``. ``sequence_preprocess_fn(data) -> data`` runs on each whole item. With
        ``num_steps`` (other than ``sequence_length``) the item is cut into non-overlapping
        ``num_steps`` chunks (the tail that does not fill one is dropped) which are shuffled.
        With ``sample_batch_size`` elements are batches ``[B, ...]`` (an incomplete last
        batch is dropped); without it, single items or chunks.

        Args:
          sample_batch_size: ``B``, or None for single elements (needed for items of
            different lengths).
          num_steps: steps per element, or None for whole items.
          num_parallel_calls: TensorFlow's map parallelism (framework ``"tf"``); must not
            exceed ``sample_batch_size``. Other frameworks check it and need none.
          sequence_preprocess_fn: applied to each item's data before the cut.
          single_deterministic_pass: read the table in order, once: needs a deterministic
            table (Fifo/Lifo/heap sampler and remover), uses one worker and no shuffle, and
            ends when the rate limiter times out (``rate_limiter_timeout_ms``).
          framework: ``"numpy"`` (an iterable of numpy elements), ``"torch"`` (a
            ``torch.utils.data.IterableDataset``; give ``DataLoader`` ``batch_size=None``),
            ``"jax"`` (``data`` on a JAX device, ``info`` numpy) or ``"tf"`` (a
            ``tf.data.Dataset``). Each ``iter()`` starts a new sampling stream.
          device: (torch, jax) where to put the data; default CPU / the first JAX device.
          seed: seeds the chunk shuffle.

        Raises:
          ValueError: ``num_steps`` does not divide ``sequence_length`` (TF-Agents'
            messages), ``num_parallel_calls > sample_batch_size``, a single pass over a table
            that is not deterministic, or another invalid argument (the message names it).
        """
        if framework not in _FRAMEWORKS:
            raise ValueError(f"framework ({framework!r}) must be one of {', '.join(_FRAMEWORKS)}")
        sample_batch_size = _optional_positive(sample_batch_size, "sample_batch_size")
        num_steps = _optional_positive(num_steps, "num_steps")
        num_parallel_calls = _optional_positive(num_parallel_calls, "num_parallel_calls")
        single_deterministic_pass = flag(single_deterministic_pass, "single_deterministic_pass")
        if sequence_preprocess_fn is not None and not callable(sequence_preprocess_fn):
            raise ValueError(
                f"sequence_preprocess_fn ({sequence_preprocess_fn!r}) must be callable or None"
            )
        if single_deterministic_pass:
            if not self._deterministic_table:
                raise ValueError(
                    "Unable to perform a single deterministic pass over the dataset, since "
                    "either the sampler or the remover is not deterministic (FIFO or Heap). "
                    f"Table info:\n{self.get_table_info()}"
                )
            self._verify_num_steps(num_steps)
        else:
            self._verify_num_steps(num_steps)
            if num_parallel_calls and sample_batch_size and num_parallel_calls > sample_batch_size:
                raise ValueError(
                    "num_parallel_calls cannot be bigger than sample_batch_size "
                    f"{num_parallel_calls} > {sample_batch_size}"
                )
        split = num_steps if num_steps and num_steps != self._sequence_length else None
        plan = self._plan(
            sample_batch_size, split, sequence_preprocess_fn, single_deterministic_pass, seed
        )
        if framework == "numpy":
            return NumpyDataset(plan)
        if framework == "torch":
            return torch_dataset(plan, device)
        if framework == "jax":
            return JaxDataset(plan, device)
        from ostinato.observers._tf_elements import tf_dataset

        per_interleave = (sample_batch_size or 1) // min(
            sample_batch_size or 1, self._max_cycle_length
        )
        chunks = self._sequence_length // split if self._sequence_length and split else 100
        return tf_dataset(
            plan,
            None if single_deterministic_pass else num_parallel_calls,
            max(1, chunks * per_interleave),
        )

    def _plan(
        self,
        batch: int | None,
        split: int | None,
        preprocess: Any,
        single_pass: bool,
        seed: int | None,
    ) -> ElementPlan:
        if single_pass:
            kwargs: dict[str, Any] = dict(
                max_in_flight_samples_per_worker=1, num_workers_per_iterator=1
            )
        else:
            kwargs = dict(num_workers_per_iterator=self._num_workers_per_iterator)
        kwargs.update(
            max_samples_per_stream=self._max_samples_per_stream,
            rate_limiter_timeout_ms=self._rate_limiter_timeout_ms,
        )
        plan = ElementPlan(
            client=self._py_client,
            table=self._table_name,
            sequence_length=self._sequence_length,
            sample_batch_size=batch,
            num_steps=split,
            preprocess=preprocess,
            data_spec=self._data_spec,
            sampler_kwargs=kwargs,
            shuffle=not single_pass,
            seed=seed,
        )
        if not single_pass:
            k = plan.source_batch
            kwargs["max_in_flight_samples_per_worker"] = self._dataset_buffer_size or (
                2 * k if k else 100
            )
        return plan

    def __repr__(self) -> str:
        return (
            f"ReplayBuffer(table_name={self._table_name!r}, sequence_length="
            f"{self._sequence_length}, capacity={self._capacity})"
        )
