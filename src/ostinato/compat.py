"""Run unmodified Reverb code (TF-Agents, RLDS, Acme) on Ostinato: ``import reverb`` -> Ostinato.

One line, before the code that imports ``reverb`` runs::

    import ostinato; ostinato.install_as_reverb()

or, without touching the program at all::

    python -m ostinato.as_reverb train.py --flags          # a script
    python -m ostinato.as_reverb -m pytest --pyargs tf_agents.replay_buffers.reverb_utils_test

After that ``import reverb``, ``from reverb import structured_writer``,
``reverb.platform.checkpointers_lib`` and every other ``reverb.*`` module that TF-Agents, RLDS
and Acme import resolve to Ostinato's modules (the table below). Nothing is written to disk and
nothing is imported eagerly: a module whose Ostinato counterpart needs TensorFlow
(``reverb.tf_client``, ``reverb.trajectory_dataset``, ...) imports it when first used.

A real dm-reverb that is installed is left alone: without this call ``import reverb`` is
DeepMind's package as before, and calling it after dm-reverb was imported in the same process
raises instead of mixing the two.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import types
from collections.abc import Sequence
from typing import Any

#: Reverb's module -> the Ostinato modules that provide its names (searched in order).
#: ``None`` marks a package-like module that only holds submodules.
MODULES: dict[str, tuple[str, ...]] = {
    "reverb": ("ostinato",),
    "reverb.client": ("ostinato.client", "ostinato.writers.legacy_writer"),
    "reverb.errors": ("ostinato.errors",),
    "reverb.item_selectors": ("ostinato.selectors",),
    "reverb.rate_limiters": ("ostinato.rate_limiters",),
    "reverb.replay_sample": ("ostinato.replay_sample",),
    "reverb.reverb_types": ("ostinato.types",),
    "reverb.server": ("ostinato.server",),
    "reverb.tf_client": ("ostinato.datasets.tf_client",),
    "reverb.trajectory_dataset": ("ostinato.datasets.tf_dataset",),
    "reverb.timestep_dataset": ("ostinato.datasets.tf_dataset",),
    "reverb.trajectory_writer": ("ostinato.writers.trajectory_writer", "ostinato.writers.columns"),
    "reverb.structured_writer": ("ostinato.structured_writer",),
    "reverb.pattern_dataset": ("ostinato.datasets.pattern_dataset",),
    "reverb.platform": (),
    "reverb.platform.checkpointers_lib": ("ostinato.checkpointers",),
    "reverb.platform.default": (),
    "reverb.platform.default.checkpointers": ("ostinato.checkpointers",),
}

#: Names on ``reverb`` itself that are not on ``ostinato`` (Reverb's top-level aliases).
_TOP_LEVEL: dict[str, str | tuple[str, str]] = {
    "structured": "reverb.structured_writer",
    "PatternDataset": ("reverb.pattern_dataset", "PatternDataset"),
}


class ReverbAlias(types.ModuleType):
    """A ``reverb.*`` module whose names come from Ostinato modules, imported on first use."""

    def __init__(self, name: str, targets: Sequence[str]):
        super().__init__(name, f"Reverb's {name!r}, provided by Ostinato ({', '.join(targets)}).")
        self.__dict__["_targets"] = tuple(targets)
        self.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
        self.__path__: list[str] = []  # a package: ``import reverb.x.y`` looks here
        self.__dict__["__ostinato__"] = True

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        sub = f"{self.__name__}.{attr}"
        if sub in MODULES:
            value: Any = sys.modules.get(sub) or _register(sub)
        elif self.__name__ == "reverb" and attr in _TOP_LEVEL:
            spec = _TOP_LEVEL[attr]
            if isinstance(spec, str):
                value = sys.modules.get(spec) or _register(spec)
            else:
                value = getattr(sys.modules.get(spec[0]) or _register(spec[0]), spec[1])
        else:
            for target in self.__dict__["_targets"]:
                module = importlib.import_module(target)
                if hasattr(module, attr):
                    value = getattr(module, attr)
                    break
            else:
                raise AttributeError(
                    f"module {self.__name__!r} (Ostinato's stand-in for Reverb) has no "
                    f"attribute {attr!r}"
                )
        self.__dict__[attr] = value
        return value

    def __dir__(self) -> list[str]:
        names = set(self.__dict__)
        for target in self.__dict__["_targets"]:
            try:
                names.update(dir(importlib.import_module(target)))
            except ImportError:
                pass
        prefix = self.__name__ + "."
        names.update(
            m[len(prefix) :]
            for m in MODULES
            if m.startswith(prefix) and "." not in m[len(prefix) :]
        )
        return sorted(names)


def _register(name: str) -> ReverbAlias:
    module = ReverbAlias(name, MODULES[name])
    sys.modules[name] = module
    return module


def install_as_reverb() -> types.ModuleType:
    """Makes ``import reverb`` (and its submodules) resolve to Ostinato in this process.

    Call it before the code that imports ``reverb``. Calling it again does nothing.

    Returns:
      The ``reverb`` module now in ``sys.modules``.

    Raises:
      RuntimeError: DeepMind's dm-reverb was already imported in this process.
    """
    current = sys.modules.get("reverb")
    if current is not None:
        if getattr(current, "__ostinato__", False):
            return current
        raise RuntimeError(
            "install_as_reverb(): dm-reverb was already imported in this process "
            f"({getattr(current, '__file__', current)!r}); call install_as_reverb() before "
            "anything imports reverb"
        )
    stale = [m for m in sys.modules if m.startswith("reverb.")]
    if stale:
        raise RuntimeError(f"install_as_reverb(): reverb submodules already imported: {stale}")
    for name in MODULES:
        _register(name)
    return sys.modules["reverb"]


def uninstall_as_reverb() -> None:
    """Removes what :func:`install_as_reverb` put into ``sys.modules`` (for tests)."""
    for name in list(sys.modules):
        if (name == "reverb" or name.startswith("reverb.")) and getattr(
            sys.modules[name], "__ostinato__", False
        ):
            del sys.modules[name]


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m ostinato.as_reverb [-m module | script] [args...]``: runs a program with
    ``import reverb`` resolving to Ostinato."""
    import runpy

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print("usage: python -m ostinato.as_reverb [-m module | script.py] [args ...]")
        raise SystemExit(0 if args else 2)
    install_as_reverb()
    if args[0] == "-m":
        if len(args) < 2:
            raise SystemExit("python -m ostinato.as_reverb -m: a module name is needed")
        sys.argv = args[1:]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = args
        runpy.run_path(args[0], run_name="__main__")
