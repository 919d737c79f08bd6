"""The layers of ge_hub, and a check that every import goes down them, never up.

Each module of ge_hub belongs to one layer; a module may import modules of its own layer
and of the layers below it. The test reads every module's imports with `ast`, top-level
and function-local alike (a function-local import is still a dependency: it only moves
the failure to run time), and fails on an edge that goes up, naming the module, the line,
the imported module and both layers. It also fails on any import circle among modules
(strongly connected components of the import graph), within a layer or across layers.

What counts as an edge: `import ge_hub.x.y` and `from ge_hub.x import y` import module
`ge_hub.x.y` when it exists, else the nearest enclosing module (a name defined in a
package's `__init__`); `from ge_hub import _core` imports the C extension. Importing a
module runs its parent packages' `__init__` too; those implicit edges are not counted
(every module has them, and they say nothing about what the module uses). Imports under
`if TYPE_CHECKING:` are not counted either: they never run.

docs/architecture.md shows the same table with what each layer is for.
"""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys
from dataclasses import dataclass

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ge_hub"

# Bottom first. A module belongs to the layer of its longest listed prefix.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("ge_hub.errors", "ge_hub._version", "ge_hub.profiling_phases")),
    ("ir", ("ge_hub.ir", "ge_hub.inputs")),
    ("ops", ("ge_hub.ops", "ge_hub.reference", "ge_hub.registry")),
    ("hub", ("ge_hub.hookspecs", "ge_hub.plugins")),
    ("plan", ("ge_hub.plan",)),
    ("kernels", ("ge_hub.kernels",)),
    ("passes", ("ge_hub.passes", "ge_hub.rewrite")),
    ("compiler", ("ge_hub.memory", "ge_hub.emit", "ge_hub.compiler")),
    ("executor", ("ge_hub._core", "ge_hub._blas", "ge_hub.executor")),
    ("runtime", ("ge_hub.frontend", "ge_hub.runtime", "ge_hub.segments", "ge_hub.profiling",
                 "ge_hub.dump", "ge_hub.compare", "ge_hub.precision_report")),
    ("offline", ("ge_hub.offline",)),
    ("frontends", ("ge_hub.frontends", "ge_hub.es", "ge_hub.commands")),
    ("cli", ("ge_hub.cli", "ge_hub.__main__")),
    ("public", ("ge_hub", "ge_hub.builtin", "ge_hub.plugin", "ge_hub.testing")),
]
LEVEL = {name: level for level, (name, _) in enumerate(LAYERS)}


@dataclass(frozen=True)
class Edge:
    module: str
    line: int
    imported: str


def module_files() -> dict[str, pathlib.Path]:
    """Every module of the package by dotted name (a package by its `__init__`)."""
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def extension_modules() -> set[str]:
    """The compiled extensions (ge_hub._core), whether or not they are built here."""
    return {"ge_hub._core"}


def layer_of(module: str) -> str | None:
    best, best_len = None, -1
    for name, prefixes in LAYERS:
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = name, len(prefix)
    return best


def imports_of(module: str, path: pathlib.Path, known: set[str]) -> list[Edge]:
    """Every ge_hub module `module` imports, anywhere in its file."""

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), str(path))
    type_only = {id(n) for block in ast.walk(tree) if _is_type_checking_block(block)
                 for stmt in block.body for n in ast.walk(stmt)}
    edges = []
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[:len(package) - node.level + 1]
                base = ".".join(package + ([base] if base else []))
            submodules = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
            targets = submodules
            if len(submodules) < len(node.names):  # names defined in `base` itself
                targets = [base, *submodules]
        for target in targets:
            if target == "ge_hub" or target.startswith("ge_hub."):
                resolved = resolve(target)
                if resolved and resolved != module:
                    edges.append(Edge(module, node.lineno, resolved))
    return edges


def _is_type_checking_block(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_graph() -> dict[str, list[Edge]]:
    files = module_files()
    known = set(files) | extension_modules()
    return {module: imports_of(module, path, known) for module, path in files.items()}


def circles(graph: dict[str, list[Edge]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    successors = {m: sorted({e.imported for e in edges}) for m, edges in graph.items()}
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(successors.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(successors.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def upward_edges(graph: dict[str, list[Edge]]) -> list[str]:
    wrong = []
    for module, edges in sorted(graph.items()):
        for edge in edges:
            here, there = layer_of(module), layer_of(edge.imported)
            if LEVEL[there] > LEVEL[here]:
                wrong.append(f"{module} (line {edge.line}) imports {edge.imported}: "
                             f"layer {here!r} must not import layer {there!r}, which is above it")
    return wrong


# -- the tests ---------------------------------------------------------------------------


def test_every_module_has_a_layer():
    missing = [m for m in module_files() if layer_of(m) is None]
    assert not missing, f"give these modules a layer in LAYERS: {missing}"


def test_imports_only_go_down_the_layers():
    wrong = upward_edges(import_graph())
    assert not wrong, "imports that go up the layers:\n" + "\n".join(wrong)


def test_no_import_circles():
    found = circles(import_graph())
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


# Where a lower layer gets something from above, it must be in place whichever module a
# program imports first (ge_hub/__init__.py runs first and imports the layers that hand
# things down): each of these is imported in a clean state, then lookups, verification
# (the schema check included), printing, copying and Tensor operators are used.
ENTRY_MODULES = ["ge_hub.registry", "ge_hub.ir.graph", "ge_hub.kernels.control",
                 "ge_hub.es.tensor"]
ENTRY_CHECK = """
import importlib, sys
for entry in sys.argv[1:]:
    for name in [m for m in sys.modules if m == "ge_hub" or m.startswith("ge_hub.")]:
        del sys.modules[name]
    importlib.import_module(entry)
    from ge_hub import es, runtime
    from ge_hub.errors import GraphError
    from ge_hub.kernels import control
    from ge_hub.ops import get_schema
    assert get_schema("Relu").name == "Relu", entry
    with es.GraphBuilder("g") as gb:
        gb.output(-es.relu(es.input("x", "float32", [2])), "y")
    graph = gb.graph
    assert "Relu" in str(graph) and graph.copy().nodes[0].op == "Relu", entry
    graph.nodes[0].op = "NoSuchOp"
    try:
        graph.verify()
    except GraphError as exc:
        assert "NoSuchOp" in str(exc), (entry, exc)
    else:
        raise AssertionError(f"{entry}: the schema check did not run")
    assert control._body_compiler is not None and runtime._offline is not None, entry
print("ok")
"""


def test_lower_layers_find_what_upper_layers_hand_them_whatever_is_imported_first():
    # Built-in plugins only: a plugin module would keep objects of the purged ge_hub.
    env = {**os.environ, "GE_HUB_PLUGINS": ""}
    done = subprocess.run([sys.executable, "-c", ENTRY_CHECK, *ENTRY_MODULES],
                          capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_the_architecture_page_shows_these_layers():
    page = (ROOT / "docs" / "architecture.md").read_text()
    section = page.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1].strip() for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| layer")]
    assert rows == [name for name, _ in LAYERS]


# -- the checker itself ---------------------------------------------------------------


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    """A throwaway `ge_hub` tree, for checking the checker."""
    package = tmp_path / "ge_hub"
    (package / "ir").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "ir" / "__init__.py").write_text("")
    (package / "ir" / "graph.py").write_text(
        "import os\n"
        "def verify():\n"
        "    from ge_hub.ops import get_schema\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from ge_hub.ops import OpSchema\n")
    (package / "ops.py").write_text("from ge_hub.ir import graph\nfrom ge_hub import ir\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", package)
    return package


def test_the_checker_sees_function_local_imports_and_names_the_edge(fake_package):
    # ...and leaves out what only type checkers import.
    graph = import_graph()
    assert graph["ge_hub.ir.graph"] == [Edge("ge_hub.ir.graph", 3, "ge_hub.ops")]
    # `from ge_hub import ir` imports the subpackage, not the package's __init__.
    assert graph["ge_hub.ops"] == [Edge("ge_hub.ops", 1, "ge_hub.ir.graph"),
                                   Edge("ge_hub.ops", 2, "ge_hub.ir")]
    assert upward_edges(graph) == [
        "ge_hub.ir.graph (line 3) imports ge_hub.ops: layer 'ir' must not import "
        "layer 'ops', which is above it"]
    assert circles(graph) == [["ge_hub.ir.graph", "ge_hub.ops"]]


def test_circles_finds_each_component_once():
    def edges(pairs):
        graph: dict[str, list[Edge]] = {}
        for a, b in pairs:
            graph.setdefault(a, []).append(Edge(a, 1, b))
            graph.setdefault(b, [])
        return graph

    assert circles(edges([("a", "b"), ("b", "c")])) == []
    assert circles(edges([("a", "b"), ("b", "a"), ("b", "c"), ("c", "d"), ("d", "c")])) == \
        [["c", "d"], ["a", "b"]]
    assert circles(edges([("a", "b"), ("b", "c"), ("c", "a"), ("c", "c")])) == [["a", "b", "c"]]
