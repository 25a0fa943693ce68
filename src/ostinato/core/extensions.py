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
