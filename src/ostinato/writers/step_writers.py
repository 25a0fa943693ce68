"""Generated step writers: :meth:`TrajectoryWriter.append <ostinato.writers.trajectory_writer.
TrajectoryWriter.append>` for flat dict steps whose keys it has seen, with the columns unrolled.

Each is what ``append``'s general path does for such a step, as straight-line code (as
``collections.namedtuple`` generates its classes): no tuple of the values, no loop, no call per
column beyond the chunker's ``append``. A writer returns False, having changed nothing, when
the step is not one it was made for (a key missing, a value that is not an array or scalar, a
column's history not in the state it handles); ``append`` then takes the general path, which
also raises the errors. ``append`` runs one per step.

* :func:`whole_step_writer`: a step that names every column;
* :func:`part_step_writer`: the parts of a step written in several appends (Acme's adders):
  the opening one (``partial_step=True``) reserves the columns it leaves out, each later one
  fills the reserved columns it names (the last one, without ``partial_step``, closes the
  step).

The reservation code is :class:`~ostinato.writers.columns.ColumnHistory`'s own
(``ColumnHistory.RESERVE``, ``ColumnHistory.FILL``), written there next to the methods it
stands for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ostinato.writers import columns as columns_lib
from ostinato.writers.chunker import NUMPY_REAL_SCALARS

#: The value types a generated writer stores (others take ``append``'s general path, which
#: converts them or says what is wrong).
LEAF_TYPES = frozenset({np.ndarray, int, float, bool, *NUMPY_REAL_SCALARS})


def _compile(lines: list[str], scope: dict[str, Any], name: str) -> Any:
    src = "\n".join(lines) + "\n"
    exec(compile(src, f"<ostinato.writers.step_writers {name}>", "exec"), scope)
    return scope["put"]


def _take_values(n: int) -> list[str]:
    """Lines binding ``v0 .. v{n-1}`` to ``d[K0] ..``, returning False when a key is missing
    (a dict of ``n`` keys in which all are found has no other) or a value is not a leaf."""
    values = ", ".join(f"v{i}" for i in range(n))
    lookups = ", ".join(f"d[K{i}]" for i in range(n))
    not_leaf = " or ".join(f"type(v{i}) not in LEAF" for i in range(n))
    return [
        "    try:",
        f"        {values}, = {lookups},",
        "    except KeyError:",
        "        return False",
        f"    if {not_leaf}:",
        "        return False",
    ]


def whole_step_writer(keys: Sequence[Any], stores: Sequence[Any]) -> Any:
    """``put(step, episode) -> bool``: appends a flat dict step that names every column (its
    keys ``keys``, sorted: the columns' order) with each column's chunker ``append`` of
    ``stores``, and returns True; False (nothing appended) for a step it was not made for."""
    n = len(keys)
    lines = [
        "def put(d, episode):",
        *_take_values(n),
        *[f"    S{i}(v{i}, episode)" for i in range(n)],
        "    return True",
    ]
    scope: dict[str, Any] = {
        "LEAF": LEAF_TYPES,
        **{f"K{i}": k for i, k in enumerate(keys)},
        **{f"S{i}": st for i, st in enumerate(stores)},
    }
    return _compile(lines, scope, f"step of {n} columns")


def part_step_writer(
    keys: Sequence[Any],
    stores: Sequence[Any],
    named: Sequence[columns_lib.ColumnHistory],
    left_out: Sequence[columns_lib.ColumnHistory],
    *,
    filling: bool,
) -> Any:
    """``put(step, episode) -> bool`` for one part of a step written in several appends: a
    flat dict of ``keys`` whose columns have the chunker ``append`` of ``stores`` and the
    histories ``named``; ``left_out``: the histories of the writer's other columns.

    Opening (``filling=False``, the step not open, ``partial_step=True``): appends the values
    in order, then reserves each left-out column's step (``ColumnHistory.append(None)``).

    Filling (``filling=True``, the step open; without ``partial_step`` the append closes it):
    checks that every named column's step is reserved (a field already set in the step sends
    the step to the general path, which raises), then fills each with its value
    (``drop_reserved``, then the chunker's ``append``; if that raises, the step is reserved
    again and the error propagates); left-out columns keep their reservation.

    A history without a buffer (the usual case) is reserved and filled inline, one with a
    buffer through its methods. ``append`` sets the step open or closed and counts it."""
    n = len(keys)
    lines = ["def put(d, episode):", *_take_values(n)]
    scope: dict[str, Any] = {
        "LEAF": LEAF_TYPES,
        "PENDING": columns_lib._PENDING,
        **{f"K{i}": k for i, k in enumerate(keys)},
        **{f"S{i}": st for i, st in enumerate(stores)},
        **{f"H{i}": h for i, h in enumerate(named)},
        **{f"L{j}": h for j, h in enumerate(left_out)},
        # The histories' chunkers (each history's own, for good: ColumnHistory._attach).
        **{f"C{i}": h._chunker for i, h in enumerate(named)},
        **{f"M{j}": h._chunker for j, h in enumerate(left_out)},
    }
    hist = columns_lib.ColumnHistory
    # Each history's usual state (no buffer) is handled inline; one with a buffer (a step of
    # its column stayed without a value this episode) through its methods.
    if filling:
        ready = " and ".join(
            f"({hist.FILLABLE.format(h=f'H{i}')} or H{i}.can_set_last())" for i in range(n)
        )
        lines += [f"    if not ({ready}):", "        return False"]
        for i in range(n):
            lines += [
                f"    if H{i}._buf is None:",
                *[f"        {s}" for s in hist.FILL.format(h=f"H{i}", c=f"C{i}").split("\n")],
                "    else:",
                f"        H{i}.drop_reserved()",
                "    try:",
                f"        S{i}(v{i}, episode)",
                "    except BaseException:",
                f"        H{i}.append(None)",
                "        raise",
            ]
    else:
        lines += [f"    S{i}(v{i}, episode)" for i in range(n)]
        for j in range(len(left_out)):
            lines += [
                f"    if {hist.RESERVABLE.format(h=f'L{j}')}:",
                *[f"        {s}" for s in hist.RESERVE.format(h=f"L{j}", c=f"M{j}").split("\n")],
                "    else:",
                f"        L{j}.append(None)",
            ]
    lines.append("    return True")
    kind = "filling" if filling else "opening"
    return _compile(lines, scope, f"{kind} part of {n} of {n + len(left_out)} columns")
