"""Table signatures: nests of TensorSpec-like leaves, flattened with dict keys sorted."""

from __future__ import annotations

from typing import Any

import optree

from ostinato.types import TensorSpec, is_spec_like


def _path_name(path: tuple[Any, ...]) -> str:
    return "/".join(str(p) for p in path)


def flatten_signature(signature: Any) -> list[TensorSpec] | None:
    """Flattens a signature nest into TensorSpecs named by their paths (``a/b``).

    Returns ``None`` for an empty signature (``None``, ``{}``). Leaves that are not spec-like
    raise ``ValueError('Unsupported signature spec: ...')`` as in Reverb.
    """
    if signature is None:
        return None
    paths, leaves, _ = optree.tree_flatten_with_path(signature, is_leaf=is_spec_like,
                                                     none_is_leaf=True)
    if not leaves:
        return None
    out = []
    for path, leaf in zip(paths, leaves):
        if not is_spec_like(leaf):
            raise ValueError(f"Unsupported signature spec: {leaf!r}")
        name = getattr(leaf, "name", None) or _path_name(path) or None
        out.append(TensorSpec.from_spec(leaf, name=name))
    return out


def signature_paths(signature: Any) -> list[tuple[Any, ...]]:
    paths, _, _ = optree.tree_flatten_with_path(signature, is_leaf=is_spec_like, none_is_leaf=True)
    return [tuple(p) for p in paths]


def unflatten_like(signature: Any, leaves: list[Any]) -> Any:
    """Puts flat column values back into the structure of the signature."""
    spec = optree.tree_structure(signature, is_leaf=is_spec_like, none_is_leaf=True)
    return optree.tree_unflatten(spec, leaves)
