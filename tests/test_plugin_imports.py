"""Plugins reach ge-hub only through its public modules.

The example plugin and the frontends under plugins/ are what third parties copy; if they
import `ge_hub.ir.graph` or `ge_hub.registry` directly, so will everyone else, and those modules
stop being free to change. This test reads every module of their packages (top-level and
function-local imports alike) and fails on an import of any other ge_hub module, naming
the file and line.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PUBLIC_MODULES = {"ge_hub", "ge_hub.plugin", "ge_hub.testing"}
PLUGIN_PACKAGES = [
    ROOT / "tests/plugins/example-plugin/ge_hub_example",
    ROOT / "plugins/ge-onnx/ge_onnx",
    ROOT / "plugins/ge-torch/ge_torch",
    ROOT / "plugins/ge-mindspore/ge_mindspore",
    ROOT / "plugins/ge-paddle/ge_paddle",
]


def ge_hub_imports(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, module) for every ge_hub module the file imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            if node.module == "ge_hub":  # `from ge_hub import ir` imports a submodule
                found += [(node.lineno, f"ge_hub.{alias.name}") for alias in node.names
                          if (ROOT / "ge_hub" / alias.name).exists()
                          or (ROOT / "ge_hub" / f"{alias.name}.py").exists()]
    return [(line, name) for line, name in found
            if name == "ge_hub" or name.startswith("ge_hub.")]


@pytest.mark.parametrize("package", PLUGIN_PACKAGES, ids=lambda p: p.name)
def test_plugin_imports_only_public_modules(package):
    files = sorted(package.rglob("*.py"))
    assert files, f"no modules under {package}"
    private = [f"{path.relative_to(ROOT)}:{line} imports {name}"
               for path in files for line, name in ge_hub_imports(path)
               if name not in PUBLIC_MODULES]
    assert not private, ("plugins must import from ge_hub, ge_hub.plugin or ge_hub.testing "
                         "only:\n" + "\n".join(private))


def test_the_checker_sees_function_local_and_from_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import ge_hub\nfrom ge_hub import ir, plugin\n"
                      "def f():\n    from ge_hub.ir.graph import Graph\n")
    assert ge_hub_imports(module) == [(1, "ge_hub"), (2, "ge_hub"), (2, "ge_hub.ir"),
                                      (2, "ge_hub.plugin"), (4, "ge_hub.ir.graph")]
