"""Spec and argument conversion for :mod:`ostinato.datasets.tf_dataset`.

How the datasets read what users pass (Reverb's rules: lists become tuples, a shape is a leaf,
the address and table may be eager string tensors) and check what is sampled against the
requested specs and the table's signature. Imports TensorFlow: like ``tf_dataset``, loaded only
when a TensorFlow dataset is first used.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from ostinato.core.specs import TensorSpec, is_spec_like
from ostinato.datasets import specs as specs_lib
from ostinato.datasets.stream import Piece


def _is_leaf(x: Any) -> bool:
    return isinstance(x, (tf.DType, tf.TensorShape, np.dtype, type)) or is_spec_like(x)


def lists_to_tuples(tree: Any) -> Any:
    """Reverb converts every list in the element structure to a tuple, bottom-up."""
    if isinstance(tree, list):
        return tuple(lists_to_tuples(x) for x in tree)
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return type(tree)(*(lists_to_tuples(x) for x in tree))
    if isinstance(tree, tuple):
        return tuple(lists_to_tuples(x) for x in tree)
    if isinstance(tree, dict):
        return type(tree)((k, lists_to_tuples(v)) for k, v in tree.items())
    return tree


def _shape_leaf(x: Any) -> bool:
    # A list or tuple of ints/None is one shape, not a nest of dimensions.
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return all(d is None or isinstance(d, (int, np.integer)) for d in x)
    return isinstance(x, tf.TensorShape) or x is None


def _text(value: Any, name: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, tf.Tensor):
        try:
            v = value.numpy()
        except (AttributeError, NotImplementedError):  # a symbolic (graph) tensor
            raise ValueError(
                f"{name} ({value!r}) must be a Python string or an eager tensor"
            ) from None
        return v.decode() if isinstance(v, bytes) else str(v)
    raise ValueError(f"{name} ({value!r}) must be a string")


def _validator(table: str, specs: list[TensorSpec]) -> Any:
    def validate(piece: Piece) -> None:
        if piece.columns is not None:
            specs_lib.check_stacked_columns(table, specs, piece.columns)
        else:
            for row in piece.row_data or ():
                specs_lib.check_row(table, specs, row)

    return validate


def _check_signature(table: str, specs: list[TensorSpec], signature: Any, timesteps: bool) -> None:
    from ostinato.core.signature import flatten_signature

    flat = flatten_signature(signature)
    if flat is None:
        return
    if timesteps and len(flat) == len(specs):
        # A trajectory-writer table's signature has a time dimension; a step has not.
        flat = [
            TensorSpec(f.shape[1:], f.dtype, f.name)
            if f.shape and not specs_lib.compatible(want.shape, f.shape)
            else f
            for f, want in zip(flat, specs)
        ]
    specs_lib.check_against_signature(table, specs, flat)
