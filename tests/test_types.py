"""``ostinato.types`` (``reverb.reverb_types``): the aliases Reverb 0.7 and 0.14 both have and
typed Reverb programs name (Acme 0.4's ``reverb_utils``: ``reverb_types.SelectorType``)."""

from __future__ import annotations

import typing

import ostinato
import ostinato.types as types


def test_selector_aliases_are_the_selector_classes():
    assert types.Fifo is ostinato.selectors.Fifo
    assert types.Lifo is ostinato.selectors.Lifo
    assert types.Uniform is ostinato.selectors.Uniform
    assert types.Prioritized is ostinato.selectors.Prioritized
    assert types.Heap is ostinato.selectors.HeapSelector
    assert isinstance(ostinato.selectors.MaxHeap(), types.Heap)


def test_selector_type_is_the_union_of_every_selector():
    members = set(typing.get_args(types.SelectorType))
    assert members == {types.Fifo, types.Heap, types.Lifo, types.Prioritized, types.Uniform}
    for selector in (
        ostinato.selectors.Fifo(),
        ostinato.selectors.Lifo(),
        ostinato.selectors.Uniform(),
        ostinato.selectors.Prioritized(0.5),
        ostinato.selectors.MinHeap(),
    ):
        assert isinstance(selector, tuple(members))


def test_spec_nest_names_tensor_specs_and_their_nests():
    args = typing.get_args(types.SpecNest)
    assert ostinato.TensorSpec in args and len(args) == 3

    def annotated(signature: types.SpecNest) -> types.SelectorType:  # usable in annotations
        raise NotImplementedError

    hints = typing.get_type_hints(annotated, {**globals(), **vars(types)})
    assert hints["return"] == types.SelectorType
    assert ostinato.TensorSpec in typing.get_args(hints["signature"])


def test_the_names_are_exported_and_resolve_under_install_as_reverb():
    for name in ("Fifo", "Heap", "Lifo", "Prioritized", "Uniform", "SelectorType", "SpecNest"):
        assert name in types.__all__
    import subprocess
    import sys

    code = (
        "import ostinato; ostinato.install_as_reverb()\n"
        "from reverb import reverb_types\n"
        "assert reverb_types.SelectorType is ostinato.types.SelectorType\n"
        "assert reverb_types.Heap is ostinato.selectors.HeapSelector\n"
        "assert reverb_types.SpecNest is ostinato.types.SpecNest\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
