"""What a table is: its settings (Reverb's ``Table`` constructor arguments), validated once,
with the read-only properties, ``replace`` and the ``queue``/``stack`` shortcuts.

:class:`~ostinato.core.table.Table` adds the items and the operations on them.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, TypeVar

from ostinato.core.extensions import Hooks, TableExtension
from ostinato.core.rate_limiter import Queue, RateLimiter, Stack
from ostinato.core.selectors import Fifo, ItemSelector, Lifo, Prioritized, selector_from_options
from ostinato.core.signature import flatten_signature
from ostinato.validate import positive_int

_T = TypeVar("_T", bound="TableSettings")


class TableSettings:
    """The settings of a table; see :class:`~ostinato.core.table.Table` for the arguments."""

    def __init__(
        self,
        name: str,
        sampler: ItemSelector,
        remover: ItemSelector,
        max_size: int,
        rate_limiter: RateLimiter,
        max_times_sampled: int = 0,
        extensions: Sequence[Any] = (),
        signature: Any = None,
    ):
        if not name or not isinstance(name, str):
            raise ValueError("name must be nonempty")
        max_size = positive_int("max_size", max_size)
        if not isinstance(sampler, ItemSelector):
            raise TypeError(f"sampler ({sampler!r}) must be a selector from ostinato.selectors")
        if not isinstance(remover, ItemSelector):
            raise TypeError(f"remover ({remover!r}) must be a selector from ostinato.selectors")
        if sampler is remover:
            remover = remover.clone()
        if not isinstance(rate_limiter, RateLimiter):
            raise TypeError(
                f"rate_limiter ({rate_limiter!r}) must be an ostinato.rate_limiters object"
            )
        try:
            mts = operator.index(max_times_sampled)
        except TypeError:
            raise ValueError(
                f"max_times_sampled ({max_times_sampled!r}) must be an integer"
            ) from None
        exts: list[TableExtension] = []
        for e in extensions:
            built = (
                e.build_internal_extensions(name)
                if hasattr(e, "build_internal_extensions")
                else [e]
            )
            exts.extend(built)
        flat_signature = flatten_signature(signature if signature else None)
        self._name = name
        self._sampler = sampler
        self._remover = remover
        self._max_size = max_size
        self._max_times_sampled = mts if mts > 0 else 0
        self._limiter = rate_limiter
        self._extensions: tuple[Any, ...] = tuple(extensions)
        self._hooks = Hooks(name, tuple(exts)) if exts else None  # None: no calls to make
        self._signature = signature if signature else None
        self._flat_signature = flat_signature
        self._prioritized = tuple(s for s in (sampler, remover) if isinstance(s, Prioritized))
        rate_limiter.attach(name)  # last: a table that failed to build does not keep the limiter

    # -- construction helpers --------------------------------------------------------------------
    @classmethod
    def queue(
        cls: type[_T],
        name: str,
        max_size: int,
        extensions: Sequence[Any] = (),
        signature: Any = None,
    ) -> _T:
        """A FIFO queue: Fifo sampler and remover, ``max_times_sampled=1``, Queue limiter."""
        return cls(name, Fifo(), Fifo(), max_size, Queue(max_size), 1, extensions, signature)

    @classmethod
    def stack(
        cls: type[_T],
        name: str,
        max_size: int,
        extensions: Sequence[Any] = (),
        signature: Any = None,
    ) -> _T:
        """A LIFO stack: Lifo sampler and remover, ``max_times_sampled=1``, Stack limiter."""
        return cls(name, Lifo(), Lifo(), max_size, Stack(max_size), 1, extensions, signature)

    def replace(
        self: _T,
        name: str | None = None,
        sampler: ItemSelector | None = None,
        remover: ItemSelector | None = None,
        max_size: int | None = None,
        rate_limiter: RateLimiter | None = None,
        max_times_sampled: int | None = None,
        extensions: Sequence[Any] | None = None,
        signature: Any = None,
    ) -> _T:
        """A new, empty table with some settings changed and the rest taken from this one."""
        return type(self)(
            name=name if name is not None else self._name,
            sampler=sampler or selector_from_options(self._sampler.options()),
            remover=remover or selector_from_options(self._remover.options()),
            max_size=max_size if max_size is not None else self._max_size,
            rate_limiter=rate_limiter or self._limiter.clone(),
            max_times_sampled=(
                max_times_sampled if max_times_sampled is not None else self._max_times_sampled
            ),
            extensions=extensions if extensions is not None else self._extensions,
            signature=signature if signature is not None else self._signature,
        )

    # -- read-only properties ----------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def max_size(self) -> int:
        return self._max_size

    @property
    def max_times_sampled(self) -> int:
        return self._max_times_sampled

    @property
    def sampler(self) -> ItemSelector:
        return self._sampler

    @property
    def remover(self) -> ItemSelector:
        return self._remover

    @property
    def rate_limiter(self) -> RateLimiter:
        return self._limiter

    @property
    def signature(self) -> Any:
        return self._signature

    @property
    def flat_signature(self) -> list[Any] | None:
        return self._flat_signature

    @property
    def rejects_negative_priorities(self) -> bool:
        """True when a Prioritized sampler or remover makes negative priorities invalid."""
        return bool(self._prioritized)

    def __repr__(self) -> str:
        s = (
            f"Table(sampler={self._sampler!r}, remover={self._remover!r}, "
            f"max_size={self._max_size}, max_times_sampled={self._max_times_sampled}, "
            f"name={self._name}, rate_limiter={self._limiter!r}, "
            f"signature={'nullptr' if self._signature is None else self._signature!r}"
        )
        if self._extensions:
            s += f", extensions={list(self._extensions)!r}"
        return s + ")"
