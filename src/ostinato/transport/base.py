"""The interface every transport implements: what a :class:`~ostinato.Client` asks of a server."""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ostinato import errors
from ostinato.core.deadline import Deadline
from ostinato.core.items import SampleBatch
from ostinato.core.table_info import TableInfo
from ostinato.transport.streams import WriterStream


@dataclasses.dataclass(frozen=True)
class TableMeta:
    """What a writer needs to validate items for a table without asking the server again."""

    name: str
    flat_signature: list[Any] | None
    signature: Any
    reject_negative: bool
    max_times_sampled: int
    deterministic_sampler: bool


class Transport(abc.ABC):
    """Operations a client performs on a server. All blocking calls take a deadline.

    Attributes:
      address: the server address(es) this transport reaches.
      is_local: True when the tables live in this process (calls touch them directly; nothing
        is serialised and blocking calls can wait in short slices cheaply).
    """

    address: str
    is_local: bool = False

    def healthy(self) -> bool:
        """False once this transport can no longer serve (its in-process server stopped); the
        client then connects afresh. Network transports reconnect by themselves."""
        return True

    @abc.abstractmethod
    def server_info(self, deadline: Deadline) -> dict[str, TableInfo]: ...

    @abc.abstractmethod
    def table_meta(self, table: str, deadline: Deadline | None = None) -> TableMeta:
        """What a writer or sampler needs to know about ``table`` (cached once known).

        ``deadline`` bounds the wait for a server that has not told it yet; ``None``: the
        transport's own bound."""

    @abc.abstractmethod
    def insert(self, table: str, items: Sequence[tuple[Any, ...]], deadline: Deadline) -> None:
        """Inserts all items in order, waiting for the rate limiter until the deadline."""

    @abc.abstractmethod
    def sample(self, table: str, num_samples: int, deadline: Deadline) -> SampleBatch: ...

    @abc.abstractmethod
    def update_priorities(
        self, table: str, keys: np.ndarray, priorities: np.ndarray, deadline: Deadline
    ) -> int: ...

    @abc.abstractmethod
    def delete(self, table: str, keys: np.ndarray, deadline: Deadline) -> int: ...

    @abc.abstractmethod
    def mutate_priorities(
        self,
        table: str,
        updates: dict[int, float] | None,
        deletes: Sequence[int] | None,
        deadline: Deadline,
    ) -> None: ...

    @abc.abstractmethod
    def reset(self, table: str, deadline: Deadline) -> None: ...

    @abc.abstractmethod
    def checkpoint(self, deadline: Deadline) -> str: ...

    def metrics(self, deadline: Deadline) -> dict[str, Any]:
        """The server's monitoring values (``Server.metrics()``, see :mod:`ostinato.ops.stats`).

        Raises:
          UnimplementedError: the server (an older one) does not report them.
        """
        raise errors.UnimplementedError(f"{type(self).__name__} does not report metrics")

    @abc.abstractmethod
    def writer_stream(
        self, keep_keys: Callable[[], set[int]] | None = None, max_pending: int | None = None
    ) -> WriterStream:
        """A :class:`~ostinato.transport.streams.WriterStream` for one writer.

        Args:
          keep_keys: names the chunks the writer may still refer to (a network stream keeps
            those on the server and lets it forget the rest).
          max_pending: most undelivered items before the stream blocks (``None``: the
            transport's default).
        """

    def close(self) -> None:  # noqa: B027 - optional hook
        """Releases connections; the in-process transport has none."""
