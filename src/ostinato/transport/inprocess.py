"""The in-process transport: a client and its server share a process, so calls go straight to
the tables. Nothing is serialised and sampled data is not copied until it is assembled for the
caller."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ostinato import errors
from ostinato.core.deadline import Deadline
from ostinato.core.items import SampleBatch
from ostinato.core.table import Table
from ostinato.core.table_info import TableInfo
from ostinato.transport.base import TableMeta, Transport
from ostinato.transport.streams import DEFAULT_MAX_PENDING_ITEMS, Delivery


class InProcessTransport(Transport):
    """Talks to a :class:`~ostinato.server.Server` object living in this process."""

    is_local = True

    def __init__(self, server: Any, address: str):
        self._server = server
        self.address = address
        self._meta: dict[str, TableMeta] = {}

    def healthy(self) -> bool:
        return not self._server.stopped

    def _table(self, name: str) -> Table:
        if self._server.stopped:
            raise errors.UnavailableError(
                f"The server at {self.address} has been stopped.", self.address
            )
        t = self._server.tables_by_name.get(name)
        if t is None:
            raise errors.TableNotFoundError(name, list(self._server.tables_by_name))
        return t

    def server_info(self, deadline: Deadline) -> dict[str, TableInfo]:
        if self._server.stopped:
            raise errors.UnavailableError(
                f"The server at {self.address} has been stopped.", self.address
            )
        return {name: t.info for name, t in self._server.tables_by_name.items()}

    def table_meta(self, table: str, deadline: Deadline | None = None) -> TableMeta:
        del deadline  # the tables are in this process: nothing to wait for
        meta = self._meta.get(table)
        if meta is None:
            t = self._table(table)
            meta = TableMeta(
                t.name,
                t.flat_signature,
                t.signature,
                t.rejects_negative_priorities,
                t.max_times_sampled,
                t.sampler.deterministic,
            )
            self._meta[table] = meta
        return meta

    def inserter(self, table: str) -> Callable[..., int]:
        """``try_insert(items, located=None)`` for one table (a writer's stream looks the table
        up once): inserts the prefix of ``items`` that the rate limiter admits now, returns its
        length (``located``: see ``Table.try_insert_many``).
        Once the server stops, its tables are closed and it raises ``CancelledError``.
        :class:`Delivery` checks priorities first (:meth:`checker`), so this does not."""
        return functools.partial(self._table(table).try_insert_many, checked=True)

    def checks_only_nan(self, table: str) -> bool:
        """Whether :meth:`checker`'s check of ``table`` refuses NaN priorities only (a table
        without a Prioritized selector takes any other number)."""
        return not self._table(table).rejects_negative_priorities

    def checker(self, table: str) -> Callable[[Sequence[tuple[Any, ...]]], None]:
        """``check(items)`` for one table: raises ``InvalidArgumentError`` for a priority the
        table cannot take (``Table.check_item_priorities``), storing nothing."""
        return self._table(table).check_item_priorities

    def insert(self, table: str, items: Sequence[tuple[Any, ...]], deadline: Deadline) -> None:
        self._table(table).insert_many(items, deadline, assign=False)

    def sample(self, table: str, num_samples: int, deadline: Deadline) -> SampleBatch:
        return self._table(table).sample(num_samples, deadline.remaining())

    def update_priorities(
        self, table: str, keys: np.ndarray, priorities: np.ndarray, deadline: Deadline
    ) -> int:
        return self._table(table).update_priorities(keys, priorities)

    def delete(self, table: str, keys: np.ndarray, deadline: Deadline) -> int:
        return self._table(table).delete(keys)

    def mutate_priorities(
        self,
        table: str,
        updates: dict[int, float] | None,
        deletes: Sequence[int] | None,
        deadline: Deadline,
    ) -> None:
        self._table(table).mutate_priorities(updates, deletes)

    def reset(self, table: str, deadline: Deadline) -> None:
        self._table(table).reset()

    def checkpoint(self, deadline: Deadline) -> str:
        return self._server.checkpoint()

    def metrics(self, deadline: Deadline) -> dict[str, Any]:
        if self._server.stopped:
            raise errors.UnavailableError(
                f"The server at {self.address} has been stopped.", self.address
            )
        return self._server.metrics()

    def writer_stream(
        self, keep_keys: Callable[[], set[int]] | None = None, max_pending: int | None = None
    ) -> Delivery:
        """Items go straight into the tables; those the rate limiter holds back wait in one
        queue delivered by one thread (:class:`~ostinato.transport.streams.Delivery`)."""
        return Delivery(self, DEFAULT_MAX_PENDING_ITEMS if max_pending is None else max_pending)
