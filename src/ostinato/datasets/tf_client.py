"""``TFClient``: Reverb's TensorFlow-op client, usable in eager code and inside ``tf.function``.

This module imports TensorFlow. Eagerly, each method calls an
:class:`~ostinato.Client` directly; inside ``tf.function`` (or ``Dataset.map``) it becomes a
``tf.py_function`` call, so it runs wherever Python runs but cannot be exported in a
SavedModel.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import optree
import tensorflow as tf

from ostinato import errors
from ostinato.client import Client
from ostinato.core.assemble import gather, item_columns
from ostinato.core.deadline import Deadline
from ostinato.core.specs import dtype_name
from ostinato.replay_sample import ReplaySample, SampleInfo

_INFO_DTYPES = [tf.uint64, tf.float64, tf.int64, tf.float64, tf.int32]


def _op_error(e: BaseException) -> tf.errors.OpError:
    """Maps an Ostinato error to the TensorFlow error Reverb's ops raised."""
    msg = str(e)
    if isinstance(e, errors.TableNotFoundError):
        return tf.errors.NotFoundError(None, None, msg)
    if isinstance(e, (errors.InvalidArgumentError, ValueError)):
        return tf.errors.InvalidArgumentError(None, None, msg)
    if isinstance(e, errors.DeadlineExceededError):
        return tf.errors.DeadlineExceededError(None, None, msg)
    if isinstance(e, errors.UnavailableError):
        return tf.errors.UnavailableError(None, None, msg)
    if isinstance(e, errors.CancelledError):
        return tf.errors.CancelledError(None, None, msg)
    return tf.errors.InternalError(None, None, msg)


def _run_op(fn: Any, inputs: list[Any], tout: list[tf.DType]) -> Any:
    """Runs ``fn`` as an op: directly when eager (so errors keep their TF type), else as a
    ``tf.py_function`` (where TF maps ValueError to InvalidArgumentError and other errors to
    UnknownError, with the message kept)."""
    if tf.executing_eagerly():
        try:
            out = fn(*inputs)
        except tf.errors.OpError:
            raise
        except Exception as e:  # noqa: BLE001 - mapped to the TF error Reverb's op raised
            raise _op_error(e) from None
        if not tout:
            return None
        return [tf.convert_to_tensor(v, dtype=d) for v, d in zip(out, tout)]

    def graph_fn(*args: Any) -> Any:
        try:
            return fn(*args)
        except tf.errors.InvalidArgumentError as e:
            raise errors.InvalidArgumentError(e.message) from None

    return tf.py_function(graph_fn, inputs, tout)


class TFClient:
    """Reverb's ``reverb.TFClient``: sample, insert and update priorities as TF ops.

    Args:
      server_address: ``host:port`` of the server (or an :class:`~ostinato.Client`).
      shared_name: accepted for compatibility; the client is a Python object, so there is
        no TF resource to share.
      name: name scope of the ops.

    Example:
      >>> tf_client = ostinato.TFClient(f"localhost:{server.port}")
      >>> @tf.function
      ... def step():
      ...     sample = tf_client.sample("replay", [tf.float32])
      ...     tf_client.update_priorities("replay", [sample.info.key],
      ...                                 tf.constant([0.5], tf.float64))
      ...     return sample.data[0]
    """

    def __init__(
        self, server_address: str | Client, shared_name: str | None = None, name: str = "reverb"
    ):
        if isinstance(server_address, Client):
            self._client = server_address
        elif isinstance(server_address, str) and server_address:
            self._client = Client(server_address)
        else:
            raise ValueError(f"server_address ({server_address!r}) must be 'host:port'")
        self._name = name
        self.shared_name = shared_name

    @property
    def server_address(self) -> str:
        """The address of the server (Reverb's ``TFClient.server_address``)."""
        return self._client.server_address

    # -- sample --------------------------------------------------------------------------------
    def sample(self, table: str, data_dtypes: Any, name: str | None = None) -> ReplaySample:
        """Samples one item and returns its first timestep.

        Args:
          table: table name (a Python string).
          data_dtypes: nest of dtypes, one per column of the item.
          name: op name.

        Returns:
          ``ReplaySample(info, data)``: ``info`` has five scalars (key uint64, probability
          float64, table_size int64, priority float64, times_sampled int32); ``data`` has
          the structure of ``data_dtypes``.

        Errors (raised when the op runs): ``NotFoundError`` for an unknown table,
        ``InvalidArgumentError`` if the item has a different number of columns,
        ``InternalError`` if a column's dtype differs from ``data_dtypes``. Inside
        ``tf.function`` the op is a ``tf.py_function``, and TensorFlow reports
        everything but ``InvalidArgumentError`` as ``UnknownError`` (message kept).
        """
        flat, treedef = optree.tree_flatten(
            data_dtypes,
            is_leaf=lambda x: isinstance(x, (tf.DType, np.dtype, type)),
            none_is_leaf=True,
        )
        dtypes = [tf.as_dtype(d) for d in flat]
        table = _table_name(table)

        def run() -> list[np.ndarray]:
            return self._sample_first_step(table, dtypes)

        with tf.name_scope(name or f"{self._name}_sample"):
            out = _run_op(run, [], _INFO_DTYPES + dtypes)
        for t in out[:5]:
            t.set_shape([])
        data = optree.tree_unflatten(treedef, list(out[5:]))
        return ReplaySample(info=SampleInfo(*out[:5]), data=data)

    def _sample_first_step(self, table: str, dtypes: list[tf.DType]) -> list[np.ndarray]:
        transport = self._client.transport
        batch = transport.sample(table, 1, Deadline.never())
        cols = gather(batch, unsqueeze=True)
        if cols is not None:
            steps = [c[0, 0] for c in cols]
        else:
            item = item_columns(batch.trajectories[0], (False,) * len(batch.squeeze[0]))
            steps = [c[0] for c in item]
        if len(steps) != len(dtypes):
            raise tf.errors.InvalidArgumentError(
                None,
                None,
                f"Table '{table}' returned {len(steps)} columns but "
                f"{len(dtypes)} dtypes were requested.",
            )
        for i, (s, d) in enumerate(zip(steps, dtypes)):
            if s.dtype != d.as_numpy_dtype:
                raise tf.errors.InternalError(
                    None,
                    None,
                    f"Column {i} sampled from table '{table}' is a "
                    f"{dtype_name(s.dtype)} tensor but {d.name} was requested.",
                )
        info = [
            batch.keys[:1],
            batch.probabilities[:1],
            batch.table_sizes[:1],
            batch.priorities[:1],
            batch.times_sampled[:1],
        ]
        return [a[0] for a in info] + steps

    # -- insert --------------------------------------------------------------------------------
    def insert(self, data: list[Any], tables: Any, priorities: Any, name: str | None = None) -> Any:
        """Inserts one step of ``data`` as an item into each of ``tables``.

        Args:
          data: list of tensors, one per column (one step each).
          tables: rank-1 string tensor of table names.
          priorities: rank-1 float64 tensor, one priority per table.
          name: op name.

        Raises:
          ValueError: ``tables`` is not a rank-1 string tensor, ``priorities`` not a rank-1
            float64 tensor, or their shapes differ.
        """
        tables = tf.convert_to_tensor(tables)
        priorities = tf.convert_to_tensor(priorities)
        if tables.dtype != tf.string:
            raise ValueError(f"tables must be a tf.string tensor, got {tables.dtype!r}")
        if priorities.dtype != tf.float64:
            raise ValueError(f"priorities must be a tf.float64 tensor, got {priorities.dtype!r}")
        if tables.shape.rank != 1:
            raise ValueError(f"tables must be a rank 1 tensor, got shape {tables.shape}")
        if priorities.shape.rank != 1:
            raise ValueError(f"priorities must be a rank 1 tensor, got shape {priorities.shape}")
        if not tables.shape.is_compatible_with(priorities.shape):
            raise ValueError(
                f"tables and priorities must have the same shape, got "
                f"{tables.shape} and {priorities.shape}"
            )
        data = [tf.convert_to_tensor(d) for d in tf.nest.flatten(data)]

        def run(tabs: tf.Tensor, prios: tf.Tensor, *cols: tf.Tensor) -> None:
            names = [t.decode() for t in tabs.numpy().tolist()]
            ps = prios.numpy().tolist()
            if len(names) != len(ps):
                raise tf.errors.InvalidArgumentError(
                    None,
                    None,
                    f"tables ({len(names)}) and priorities ({len(ps)}) must have the same length",
                )
            step = [c.numpy() for c in cols]
            for table, p in zip(names, ps):
                self._client.insert(step, {table: p})

        with tf.name_scope(name or f"{self._name}_insert"):
            return _run_op(run, [tables, priorities, *data], [])

    # -- update_priorities ---------------------------------------------------------------------
    def update_priorities(
        self, table: str, keys: Any, priorities: Any, name: str | None = None
    ) -> Any:
        """Sets new priorities for items of ``table`` (unknown keys are ignored).

        Args:
          table: table name.
          keys: rank-1 uint64 tensor of item keys.
          priorities: float64 tensor with the same shape as ``keys``.
          name: op name.

        Raises ``InvalidArgumentError`` (when the op runs) if the shapes differ.
        """
        table = _table_name(table)
        keys = tf.convert_to_tensor(keys, dtype=tf.uint64)
        priorities = tf.convert_to_tensor(priorities, dtype=tf.float64)

        def run(k: tf.Tensor, p: tf.Tensor) -> None:
            kn = k.numpy()
            pn = p.numpy()
            if kn.shape != pn.shape or kn.ndim != 1:
                raise tf.errors.InvalidArgumentError(
                    None,
                    None,
                    f"keys (shape {list(kn.shape)}) and priorities (shape "
                    f"{list(pn.shape)}) must be rank 1 tensors of the same shape",
                )
            self._client.update_priorities(table, kn, pn)

        with tf.name_scope(name or f"{self._name}_update_priorities"):
            return _run_op(run, [keys, priorities], [])


def _table_name(table: Any) -> str:
    if isinstance(table, str):
        return table
    if isinstance(table, tf.Tensor) and hasattr(table, "numpy"):
        return table.numpy().decode()
    raise ValueError(f"table ({table!r}) must be a Python string")
