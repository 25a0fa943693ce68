"""The examples in the device docstrings run."""

import doctest
import importlib

import pytest

MODULES = {
    "ostinato.device.spec": None,
    "ostinato.device.ring": None,
    "ostinato.device.factory": "torch",
    "ostinato.device.uniform": "torch",
    "ostinato.device.priority": "torch",
    "ostinato.device.torch.storage": "torch",
    "ostinato.device.torch.sum_tree": "torch",
    "ostinato.device.jax.functional": "jax",
}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_docstring_examples(name):
    if MODULES[name]:
        pytest.importorskip(MODULES[name])
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
