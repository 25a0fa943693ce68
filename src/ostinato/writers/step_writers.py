"""Generated step writers: :meth:`TrajectoryWriter.append <ostinato.writers.trajectory_writer.
TrajectoryWriter.append>` for flat dict steps whose keys it has seen, with the columns unrolled.

Each is what ``append``'s general path does for such a step, as straight-line code (as
``collections.namedtuple`` generates its classes): no tuple of the values, no loop, no call per
column beyond the chunker's ``append``. A writer returns False, having changed nothing, when
the step is not one it was made for (a key missing, a value that is not an array or scalar, a
column's history not in the state it handles); ``append`` then takes the general path, which
also raises the errors. ``append`` runs one per step.

* :func:`whole_step_writer`: a step that names every column;
* :func:`part_step_writer`: the two halves of a step written in two appends (Acme's adders):
  the opening one (``partial_step=True``) reserves the columns it leaves out, the closing one
  fills the reserved columns it names.

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
    closing: bool,
) -> Any:
    """``put(step, episode) -> bool`` for one half of a step written in two appends: a flat
    dict of ``keys`` whose columns have the chunker ``append`` of ``stores`` and the
    histories ``named``; ``left_out``: the histories of the writer's other columns.

    Opening (``closing=False``, the step not open, ``partial_step=True``): appends the values
    in order, then reserves each left-out column's step (``ColumnHistory.append(None)``). Made
    for histories without a buffer, where reserving takes no call; a left-out history with one
    (or already reserved) sends the step to the general path.

    Closing (``closing=True``, the step open, ``partial_step=False``): fills each named
    column's reserved step with its value (``drop_reserved``, then the chunker's ``append``;
    if that raises, the step is reserved again and the error propagates); left-out columns
    keep their reservation. Made for named histories without a buffer whose newest step is
    reserved; any other (a field already set in the step: the general path raises) sends the
    step to the general path.

    Either checks every history before it changes anything; ``append`` sets the step open or
    closed and counts it."""
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
    if closing:
        ready = " and ".join(hist.FILLABLE.format(h=f"H{i}") for i in range(n))
        lines += [f"    if not ({ready}):", "        return False"]
        for i in range(n):
            lines += [
                *[f"    {s}" for s in hist.FILL.format(h=f"H{i}", c=f"C{i}").split("\n")],
                "    try:",
                f"        S{i}(v{i}, episode)",
                "    except BaseException:",
                f"        H{i}.append(None)",
                "        raise",
            ]
    else:
        if left_out:
            ready = " and ".join(hist.RESERVABLE.format(h=f"L{j}") for j in range(len(left_out)))
            lines += [f"    if not ({ready}):", "        return False"]
        lines += [f"    S{i}(v{i}, episode)" for i in range(n)]
        for j in range(len(left_out)):
            lines += [f"    {s}" for s in hist.RESERVE.format(h=f"L{j}", c=f"M{j}").split("\n")]
    lines.append("    return True")
    kind = "closing" if closing else "opening"
    return _compile(lines, scope, f"{kind} part of {n} of {n + len(left_out)} columns")
