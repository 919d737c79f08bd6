"""How `ge_hub.load` picks a frontend, and what it refuses: claims before catch-alls,
ambiguity as an error, broken `accepts` named and skipped, code-executing formats only
when trusted; plugins that exit or override built-in kernels are named."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from test_plugins import install_fake_plugin

import ge_hub
from ge_hub import es, plugins
from ge_hub.errors import (
    AmbiguousFrontendError,
    FrontendNotFoundError,
    PluginError,
    UntrustedModelError,
)
from ge_hub.ir.serialize import save
from ge_hub.registry import Frontend


@pytest.fixture
def registry(monkeypatch):
    monkeypatch.setenv(plugins.ALLOW_ENV, "")
    plugins.reset()
    registry = plugins.get_registry()
    registry.current_plugin = "test"
    yield registry
    plugins.reset()


def _frontend(name, accepts=lambda m: True, **claims):
    return Frontend(name, accepts=accepts, load=lambda m, **o: (name, o), **claims)


def _saved_graph(tmp_path):
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [2])
        gb.output(es.relu(x), "y")
    path = tmp_path / "g.gehub"
    save(gb.graph, path)
    return path


def test_catch_all_cannot_take_a_claimed_suffix(registry, tmp_path):
    path = _saved_graph(tmp_path)
    registry.add_frontend(_frontend("greedy"))  # claims nothing, accepts everything
    graph = ge_hub.load(path)
    assert isinstance(graph, ge_hub.Graph)  # ge-hub-ir claims .gehub and won
    assert ge_hub.load(tmp_path / "other.thing") == ("greedy", {})  # unclaimed: catch-all


def test_claim_by_magic_bytes(registry, tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(b"ACME\x00rest")
    registry.add_frontend(_frontend("acme", magic=(b"ACME",)))
    registry.add_frontend(_frontend("greedy"))
    assert ge_hub.load(path) == ("acme", {})


def test_claim_by_object_module_follows_base_classes(registry):
    class FromNumpy(np.ndarray):
        pass

    registry.add_frontend(_frontend("numpy-models", object_modules=("numpy",)))
    registry.add_frontend(_frontend("greedy"))
    assert ge_hub.load(np.zeros(2).view(FromNumpy)) == ("numpy-models", {})


def test_two_claiming_frontends_is_an_error_naming_both(registry, tmp_path):
    registry.add_frontend(_frontend("first", suffixes=(".acme",)))
    registry.current_plugin = "other-plugin"
    registry.add_frontend(_frontend("second", suffixes=(".acme",)))
    with pytest.raises(AmbiguousFrontendError) as info:
        ge_hub.load(tmp_path / "m.acme")
    message = str(info.value)
    assert "'first' (plugin 'test')" in message
    assert "'second' (plugin 'other-plugin')" in message


def test_two_catch_alls_is_an_error(registry):
    registry.add_frontend(_frontend("a"))
    registry.add_frontend(_frontend("b"))
    with pytest.raises(AmbiguousFrontendError, match="'a'.*'b'"):
        ge_hub.load(object())


def test_claiming_frontend_that_declines_leaves_it_to_catch_alls(registry, tmp_path):
    registry.add_frontend(_frontend("picky", accepts=lambda m: False, suffixes=(".acme",)))
    registry.add_frontend(_frontend("greedy"))
    assert ge_hub.load(tmp_path / "m.acme") == ("greedy", {})


def _boom(model):
    raise RuntimeError("accepts exploded")


def test_raising_accepts_is_skipped_and_named_in_a_warning(registry, tmp_path):
    registry.add_frontend(_frontend("broken", accepts=_boom, suffixes=(".acme",)))
    registry.add_frontend(_frontend("greedy"))
    with pytest.warns(RuntimeWarning, match=r"'broken' \(plugin 'test'\).*accepts exploded"):
        assert ge_hub.load(tmp_path / "m.acme") == ("greedy", {})


def test_raising_accepts_is_named_when_nothing_loads(registry, tmp_path):
    registry.add_frontend(_frontend("broken", accepts=_boom))
    with pytest.raises(FrontendNotFoundError, match=r"'broken'.*RuntimeError: accepts exploded"):
        ge_hub.load(tmp_path / "m.acme")


def test_code_executing_format_needs_trust(registry, tmp_path):
    loaded = []
    registry.add_frontend(Frontend(
        "pickles", accepts=lambda m: True, suffixes=(".pkl",),
        load=lambda m, **o: loaded.append(o) or "graph",
        executes_code=lambda m: True))
    path = tmp_path / "m.pkl"
    path.write_bytes(b"\x80\x04.")
    with pytest.raises(UntrustedModelError, match=r"m\.pkl.*trusted=True.*--trust-pickle"):
        ge_hub.load(path)
    assert loaded == []  # the frontend's load was never called
    assert ge_hub.load(path, trusted=True) == "graph"
    assert loaded == [{"trusted": True}]


def test_cli_refuses_untrusted_pickle_format(registry, tmp_path, capsys):
    from ge_hub.cli import main

    registry.add_frontend(Frontend("pickles", accepts=lambda m: True, suffixes=(".pkl",),
                                   load=lambda m, **o: 1 / 0, executes_code=lambda m: True))
    path = tmp_path / "m.pkl"
    path.write_bytes(b"\x80\x04.")
    assert main(["run", str(path)]) == 1
    assert "--trust-pickle" in capsys.readouterr().err


def test_suffixes_are_validated(registry):
    with pytest.raises(PluginError, match="lower case and start with"):
        registry.add_frontend(_frontend("bad", suffixes=("ONNX",)))


def test_onnx_and_gehub_never_execute_code(registry):
    for frontend, _plugin in registry.frontends():
        if frontend.name == "ge-hub-ir":
            assert frontend.executes_code is None


EXITING_PLUGIN = "import sys\nsys.exit(3)\n"


def test_plugin_exiting_at_import_is_named(tmp_path, monkeypatch):
    install_fake_plugin(tmp_path, "quitter", EXITING_PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(plugins.ALLOW_ENV, raising=False)
    monkeypatch.delenv(plugins.BLOCK_ENV, raising=False)
    plugins.reset()
    try:
        with pytest.raises(PluginError, match=r"'quitter'.*sys\.exit\(3\)"):
            plugins.get_registry()
    finally:
        plugins.reset()


def test_cli_with_exiting_plugin_says_which(tmp_path):
    install_fake_plugin(tmp_path, "quitter", EXITING_PLUGIN)
    env_code = ("import sys; sys.path.insert(0, sys.argv[1]); from ge_hub.cli import main; "
                "sys.exit(main(['ops']))")
    result = subprocess.run([sys.executable, "-c", env_code, str(tmp_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "quitter" in result.stderr and "sys.exit(3)" in result.stderr


OVERRIDING_PLUGIN = '''
import numpy as np
import ge_hub
from ge_hub.kernels.base import PyKernel
from ge_hub.registry import KernelSpec

@ge_hub.hookimpl
def register_kernels(registry):
    registry.add_kernel(KernelSpec("Relu", PyKernel(lambda x: np.maximum(x, 0)),
                                   priority=1000, name="shady_relu"))
'''


def test_plugin_kernel_outranking_a_builtin_is_listed(tmp_path, monkeypatch, capsys):
    from ge_hub.cli import main

    install_fake_plugin(tmp_path, "shady", OVERRIDING_PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(plugins.ALLOW_ENV, "shady")
    plugins.reset()
    try:
        overrides = plugins.get_registry().kernel_overrides()
        assert [(k.name, p, b.op) for k, p, b in overrides] == [
            ("shady_relu", "shady", "Relu")] * len(overrides)
        assert overrides
        assert main(["plugins"]) == 0
        out = capsys.readouterr().out
        assert "overrides: kernel shady_relu replaces built-in" in out
        assert main(["ops"]) == 0
        relu_line = next(line for line in capsys.readouterr().out.splitlines()
                         if line.startswith("Relu "))
        assert "override: shady_relu (plugin shady)" in relu_line
    finally:
        plugins.reset()


def test_no_overrides_among_builtins(registry):
    assert registry.kernel_overrides() == []
