"""The layers stay layered.

* Importing the core (or the package) loads no transport or ML framework (run in
  ``test_import_weight.py``; checked on the core's source here).
* Each area (a subpackage or top-level module; every one is named in ``ALLOWED``) imports only
  the layers below it (docs/architecture.md): ``core`` only itself, ``errors`` and
  ``validate``; ``writers`` never the transports or the wire (they name ``Transport`` for the
  type checker only); the transports never the writers, the client, the server or (but for the
  one lazy dial in ``transport.connect``) the wire; the wire never the client or the server; the
  client never the server; ``device`` nothing of the rest.
* No import cycle among modules (imports at module level), no private name taken from another
  package, and no source file over 500 lines.

Checked on the source (``ast``), so that lazy imports inside functions count too; imports under
``if TYPE_CHECKING:`` do not run, so they are no edges.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

import ostinato

SRC = pathlib.Path(ostinato.__file__).parent
MAX_LINES = 500


def test_core_sources_do_not_import_forbidden_modules():
    for path in (SRC / "core").glob("*.py"):
        text = path.read_text()
        for name in ("grpc", "protobuf", "tensorflow", "torch", "jax"):
            assert f"import {name}" not in text, (path, name)
            assert f"from {name}" not in text, (path, name)


# -- the import graph ------------------------------------------------------------------------------
def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in SRC.rglob("*.py")}


def _is_type_checking(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``): imports only a type checker runs."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk_runtime(tree: ast.AST):
    """``ast.walk`` less the bodies of ``if TYPE_CHECKING:`` blocks (their ``else`` still runs)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if _is_type_checking(node):
            todo.extend(node.orelse)  # type: ignore[attr-defined]
            continue
        todo.extend(ast.iter_child_nodes(node))


def _imports() -> list[tuple[str, str, str | None, bool]]:
    """(importer, imported module, imported name or None, at module level?) for every import of
    an ostinato module anywhere in the source, less those under ``if TYPE_CHECKING:`` (no edge
    at run time)."""
    out = []
    for mod, path in MODULES.items():
        tree = ast.parse(path.read_text())
        top = set(map(id, tree.body))
        for node in _walk_runtime(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.level == 0
                and node.module.split(".")[0] == "ostinato"
            ):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if full in MODULES:
                        out.append((mod, full, None, id(node) in top))
                    else:
                        out.append((mod, node.module, alias.name, id(node) in top))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "ostinato":
                        out.append((mod, alias.name, None, id(node) in top))
    return out


IMPORTS = _imports()


def _area(module: str) -> str:
    """``core``, ``wire``, ... for modules in a package; the module's own name at the top."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "ostinato"


#: area -> the areas it may import (besides itself), for every area (package or top-level
#: module) under ``src/ostinato``; ``ostinato`` is the package's ``__init__``. Bottom to top.
ALLOWED: dict[str, set[str]] = {
    # the foundations
    "errors": set(),
    "validate": set(),
    "argtypes": set(),
    "replay_sample": set(),
    "core": {"errors", "validate"},
    "device": {"errors", "validate"},
    "types": {"core", "replay_sample"},
    # Reverb's public modules, over the core
    "selectors": {"core"},
    "rate_limiters": {"core"},
    "checkpointing": {"core", "errors", "validate"},
    "checkpointers": {"checkpointing", "errors"},
    # writing, and reaching a server
    "writers": {"core", "errors", "validate"},
    "structured_writer": {"writers"},
    "transport": {"core", "errors", "validate"},
    "wire": {"core", "errors", "transport", "validate"},
    "client_sampling": {"core", "errors", "writers", "transport", "replay_sample", "validate"},
    "client": {
        "client_sampling",
        "core",
        "errors",
        "writers",
        "transport",
        "replay_sample",
        "validate",
    },
    # the server and its operation
    "ops": {
        "argtypes",
        "client",
        "core",
        "errors",
        "gc_pauses",
        "transport",
        "ostinato",
        "validate",
    },
    "server": {
        "checkpointers",
        "client",
        "core",
        "errors",
        "gc_pauses",
        "ops",
        "transport",
        "validate",
        "wire",
    },
    "server_config": {"core", "errors", "rate_limiters", "selectors", "validate"},
    "server_cli": {"argtypes", "checkpointers", "gc_pauses", "server", "server_config", "validate"},
    "gc_pauses": {"validate"},
    "ray": {
        "checkpointers",
        "client",
        "core",
        "errors",
        "gc_pauses",
        "server",
        "server_config",
        "transport",
        "validate",
    },
    "testing": {"client", "core", "rate_limiters", "selectors", "server"},
    # client-side adapters (frameworks, RLDS)
    "datasets": {"client", "core", "errors", "replay_sample", "writers", "validate"},
    "observers": {"client", "core", "datasets", "errors", "replay_sample", "writers", "validate"},
    "rlds": {"argtypes", "errors", "observers", "ostinato", "types", "validate"},
    # the package, and what uses it whole
    "compat": set(),
    "ostinato": {
        "checkpointers",
        "client",
        "compat",
        "core",
        "errors",
        "rate_limiters",
        "replay_sample",
        "selectors",
        "server",
        "structured_writer",
        "writers",
    },
    "as_reverb": {"compat"},
    "demo": {"ostinato"},
}
#: The lazy edges that make a layer reach up on purpose: the client's address resolution dials
#: the gRPC transport only when an address is not served in this process, and
#: ``Client.metrics()`` gathers its servers' values with the operations layer's code.
LAZY_EXCEPTIONS = {
    ("ostinato.transport.connect", "ostinato.wire.grpc_transport"),
    ("ostinato.client", "ostinato.ops.stats"),
}
#: Areas that reach servers through the client only.
CLIENT_SIDE = {"datasets", "observers", "rlds"}


def test_each_layer_imports_only_the_layers_below_it():
    bad = []
    for importer, imported, _, _top in IMPORTS:
        a, b = _area(importer), _area(imported)
        if a == b or (importer, imported) in LAZY_EXCEPTIONS:
            continue
        if b not in ALLOWED.get(a, set()):
            bad.append(f"{importer} imports {imported}")
        if a in CLIENT_SIDE and b in ("wire", "server", "transport"):
            bad.append(f"{importer} imports {imported} (go through ostinato.client)")
    assert not bad, "\n".join(bad)


def _areas() -> set[str]:
    """Every area under ``src/ostinato``: its subpackages and top-level modules."""
    return {_area(m) for m in MODULES}


def test_every_area_is_constrained():
    missing = sorted(_areas() - set(ALLOWED))
    assert not missing, f"areas not in ALLOWED (say what each may import): {missing}"
    stale = sorted(set(ALLOWED) - _areas())
    assert not stale, f"ALLOWED names areas that do not exist: {stale}"
    unknown = sorted({b for bs in ALLOWED.values() for b in bs} - _areas())
    assert not unknown, f"ALLOWED lets areas import unknown areas: {unknown}"


def test_type_checking_imports_are_not_edges():
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import ostinato.server\n"
        "else:\n    import ostinato.errors\n"
        "def f():\n    import ostinato.client\n"
    )
    names = [a.name for n in _walk_runtime(tree) if isinstance(n, ast.Import) for a in n.names]
    assert sorted(names) == ["ostinato.client", "ostinato.errors"]


def test_writers_never_import_the_wire():
    assert not [(a, b) for a, b, _, _ in IMPORTS if _area(a) == "writers" and _area(b) == "wire"]


def test_no_private_name_is_imported_from_another_package():
    bad = [
        f"{a} imports {name} from {b}"
        for a, b, name, _ in IMPORTS
        if name is not None
        and name.startswith("_")
        and not name.startswith("__")
        and _area(a) != _area(b)
    ]
    bad += [
        f"{a} imports {b}"
        for a, b, _, _ in IMPORTS
        if b.rsplit(".", 1)[-1].startswith("_") and _area(a) != _area(b)
    ]
    assert not bad, "\n".join(bad)


def test_no_private_attribute_of_another_packages_module_is_read():
    bad = []
    for mod, path in MODULES.items():
        tree = ast.parse(path.read_text())
        aliases = {}  # local name -> module, for "from ostinato.x import y as z" of modules
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("ostinato")
            ):
                for alias in node.names:
                    if f"{node.module}.{alias.name}" in MODULES:
                        aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and _area(aliases[node.value.id]) != _area(mod)
            ):
                bad.append(f"{mod}: {node.value.id}.{node.attr}")
    assert not bad, "\n".join(bad)


def test_no_import_cycle_at_module_level():
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for a, b, _, top in IMPORTS:
        if top and b in MODULES and b != a and not b.startswith(a + "."):
            graph[a].add(b)
    # The package __init__ files import their submodules; a submodule importing a sibling
    # through the package is not a cycle worth reporting, so packages are left out.
    packages = {m for m, p in MODULES.items() if p.name == "__init__.py"}
    color: dict[str, int] = {}
    cycles = []

    def visit(m: str, stack: list[str]) -> None:
        color[m] = 1
        for n in sorted(graph[m] - packages):
            if color.get(n) == 1:
                cycles.append(" -> ".join(stack[stack.index(n) :] + [n]))
            elif n not in color:
                visit(n, stack + [n])
        color[m] = 2

    for m in sorted(set(graph) - packages):
        if m not in color:
            visit(m, [m])
    assert not cycles, "\n".join(cycles)


@pytest.mark.parametrize("path", sorted(SRC.rglob("*.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_no_source_file_over_500_lines(path):
    n = len(path.read_text().splitlines())
    assert n <= MAX_LINES, f"{path.relative_to(SRC)} has {n} lines; split it by concept"
