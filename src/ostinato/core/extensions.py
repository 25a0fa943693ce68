"""Table extensions: hooks that run under the table lock when items change."""

from __future__ import annotations

from typing import Any


class TableExtension:
    """Base class for table extensions. Override the hooks you need; all default to no-ops.

    Hooks run synchronously under the table's lock, so they must be quick and must not call
    back into the table.
    """

    def on_insert(self, table_name: str, key: int, priority: float) -> None:
        pass

    def on_update(self, table_name: str, key: int, priority: float) -> None:
        pass

    def on_sample(self, table_name: str, key: int, times_sampled: int) -> None:
        pass

    def on_delete(self, table_name: str, key: int) -> None:
        pass

    def on_reset(self, table_name: str) -> None:
        pass

    # Reverb's Python API builds C++ extensions through this method.
    def build_internal_extensions(self, table_name: str) -> list[Any]:
        return [self]


class Hooks:
    """A table's extensions, each called in order for every change (tables without extensions
    hold no ``Hooks`` at all, so their hot paths make no call)."""

    __slots__ = ("table", "extensions")

    def __init__(self, table: str, extensions: tuple[TableExtension, ...]) -> None:
        self.table = table
        self.extensions = extensions

    def inserted(self, keys: list[int], priorities: list[float]) -> None:
        for k, p in zip(keys, priorities):
            for h in self.extensions:
                h.on_insert(self.table, k, p)

    def updated(self, keys: list[int], priorities: list[float]) -> None:
        for k, p in zip(keys, priorities):
            for h in self.extensions:
                h.on_update(self.table, k, p)

    def sampled(self, keys: list[int], times_sampled: list[int]) -> None:
        for k, t in zip(keys, times_sampled):
            for h in self.extensions:
                h.on_sample(self.table, k, t)

    def deleted(self, key: int) -> None:
        for h in self.extensions:
            h.on_delete(self.table, key)

    def reset(self) -> None:
        for h in self.extensions:
            h.on_reset(self.table)
