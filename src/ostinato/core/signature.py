"""Table signatures: nests of TensorSpec-like leaves, flattened with dict keys sorted.

Also the one check of an item's columns against a signature (:func:`check_columns`), used
wherever items are made or received -- the trajectory writer, ``Client.insert`` and the gRPC
service -- and the plain-data form of a signature that messages and checkpoints carry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import optree

from ostinato.core.specs import (
    TensorSpec,
    dtype_from_str,
    dtype_name,
    dtype_to_str,
    is_spec_like,
    shape_str,
)
from ostinato.errors import DecodeError, InvalidArgumentError

#: Most dimensions a spec in a message or checkpoint may have.
MAX_DIMS = 32


def _path_name(path: tuple[Any, ...]) -> str:
    return "/".join(str(p) for p in path)


def flatten_signature(signature: Any) -> list[TensorSpec] | None:
    """Flattens a signature nest into TensorSpecs named by their paths (``a/b``).

    Returns ``None`` for an empty signature (``None``, ``{}``). Leaves that are not spec-like
    raise ``ValueError('Unsupported signature spec: ...')`` as in Reverb.
    """
    if signature is None:
        return None
    paths, leaves, _ = optree.tree_flatten_with_path(
        signature, is_leaf=is_spec_like, none_is_leaf=True
    )
    if not leaves:
        return None
    out = []
    for path, leaf in zip(paths, leaves):
        if not is_spec_like(leaf):
            raise ValueError(f"Unsupported signature spec: {leaf!r}")
        name = getattr(leaf, "name", None) or _path_name(path) or None
        out.append(TensorSpec.from_spec(leaf, name=name))
    return out


def signature_structure(signature: Any) -> Any:
    """The optree structure of a signature nest (its leaves are the specs)."""
    return optree.tree_structure(signature, is_leaf=is_spec_like, none_is_leaf=True)


#: One column of an item as :func:`check_columns` sees it: ``(dtype, shape, step_shape)``.
#: ``shape`` is the column as the item holds it (time first, unless squeezed); ``step_shape``,
#: when not None, is the shape of one step, which a signature may also describe for columns
#: of whole steps (Reverb's legacy writer and ``Client.insert``).
ColumnShape = tuple[np.dtype, tuple[int, ...], "tuple[int, ...] | None"]


def check_columns(
    table: str, signature: Sequence[TensorSpec] | None, columns: Sequence[ColumnShape]
) -> None:
    """Raises unless an item's columns fit a table's flat signature (``None``: anything fits).

    Raises:
      InvalidArgumentError: (a ``ValueError``) naming the table, the column, what the
        signature expects and what came, in Reverb's words.
    """
    if signature is None:
        return
    if len(columns) != len(signature):
        raise InvalidArgumentError(
            f"Unable to create item in table '{table}' since the provided trajectory is "
            f"inconsistent with the table signature. The trajectory has {len(columns)} columns "
            f"but the table signature has {len(signature)} columns."
        )
    for i, ((dtype, shape, step_shape), spec) in enumerate(zip(columns, signature)):
        if dtype == spec.dtype and (
            spec.is_compatible_with(shape)
            or (step_shape is not None and spec.is_compatible_with(step_shape))
        ):
            continue
        raise InvalidArgumentError(
            f"Unable to create item in table '{table}' since the provided trajectory is "
            f"inconsistent with the table signature. The table expects column {i} "
            f"({spec.name}) to be a {dtype_name(spec.dtype)} {shape_str(spec.shape)} "
            f"tensor but got a {dtype_name(dtype)} {shape_str(shape)} tensor."
        )


# -- a signature as plain data (messages, checkpoints) ---------------------------------------------
def signature_to_data(obj: Any) -> Any:
    """A nest of TensorSpecs (dict / list / tuple / None) as msgpack- and JSON-able data."""
    if obj is None:
        return None
    if is_spec_like(obj):
        s = TensorSpec.from_spec(obj)
        return {"spec": [[-1 if d is None else d for d in s.shape], dtype_to_str(s.dtype), s.name]}
    if isinstance(obj, dict):
        return {"dict": [[k, signature_to_data(v)] for k, v in obj.items()]}
    if isinstance(obj, tuple):
        return {"tuple": [signature_to_data(v) for v in obj]}
    if isinstance(obj, list):
        return {"list": [signature_to_data(v) for v in obj]}
    raise ValueError(f"cannot encode signature element {obj!r}")


def signature_from_data(m: Any) -> Any:
    """The signature :func:`signature_to_data` wrote; anything malformed raises
    :class:`~ostinato.errors.DecodeError`."""
    try:
        return _from_data(m, 0)
    except DecodeError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError) as e:
        raise DecodeError(f"bad signature: {e}") from None


def _from_data(m: Any, depth: int) -> Any:
    if depth > 64:
        raise DecodeError("signature nested too deeply")
    if m is None:
        return None
    if not isinstance(m, dict) or len(m) != 1:
        raise DecodeError("bad signature element")
    ((kind, v),) = m.items()
    if kind == "spec":
        if not isinstance(v, list) or len(v) != 3:
            raise DecodeError("bad spec")
        dims = v[0]
        if (
            not isinstance(dims, list)
            or len(dims) > MAX_DIMS
            or not all(
                isinstance(d, int) and not isinstance(d, bool) and -1 <= d < 2**31 for d in dims
            )
        ):
            raise DecodeError(f"bad spec shape {dims!r}")
        shape = [None if d == -1 else d for d in dims]
        return TensorSpec(shape, dtype_from_str(v[1]), v[2] if isinstance(v[2], str) else None)
    if kind == "dict":
        if not isinstance(v, list):
            raise DecodeError("bad signature dict")
        out = {}
        for pair in v:
            if not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[0], (str, int)):
                raise DecodeError("bad signature dict entry")
            out[pair[0]] = _from_data(pair[1], depth + 1)
        return out
    if kind in ("tuple", "list"):
        if not isinstance(v, list):
            raise DecodeError(f"bad signature {kind}")
        seq = [_from_data(x, depth + 1) for x in v]
        return tuple(seq) if kind == "tuple" else seq
    raise DecodeError(f"bad signature element kind {kind!r}")
