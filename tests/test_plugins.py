"""The plugin hub: entry-point discovery, lazy loading, allow/block lists, clashes."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import ge_hub
from ge_hub import plugins
from ge_hub.errors import PluginError, UnknownOpError

ACME_PLUGIN = '''
import numpy as np
import ge_hub
from ge_hub.ops import Input, Output, op
from ge_hub.ops.inference import same_as_input
from ge_hub.ops.schema import FLOATS
from ge_hub.registry import Command, Frontend

@op("Twice", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=same_as_input,
    domain="acme")
def twice(x):
    """Y = 2 * X."""
    return (x * 2).astype(x.dtype)

@ge_hub.hookimpl
def register_ops(registry):
    registry.add_op(twice)

@ge_hub.hookimpl
def register_frontends(registry):
    registry.add_frontend(Frontend("acme", accepts=lambda m: str(m).endswith(".acme"),
                                   load=lambda m, **o: ("loaded", str(m), o)))

@ge_hub.hookimpl
def register_commands(registry):
    registry.add_command(Command("acme-hello", "say hello", lambda args: print("hello") or 0))
'''


def install_fake_plugin(root, name: str, source: str, version: str = "1.2.3") -> None:
    """Write a module and a dist-info with a `ge_hub` entry point under `root`."""
    module = f"{name}_plugin"
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    dist = root / f"{name}-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (dist / "entry_points.txt").write_text(f"[ge_hub]\n{name} = {module}\n")


@pytest.fixture
def fresh_hub(monkeypatch):
    monkeypatch.delenv(plugins.ALLOW_ENV, raising=False)
    monkeypatch.delenv(plugins.BLOCK_ENV, raising=False)
    plugins.reset()
    yield
    plugins.reset()


@pytest.fixture
def acme(tmp_path, monkeypatch, fresh_hub):
    install_fake_plugin(tmp_path, "acme", ACME_PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_import_loads_no_plugin():
    code = "import ge_hub, ge_hub.es, ge_hub.plugins as p; print(p.is_loaded())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_builtin_ops_register_through_hooks(fresh_hub):
    info = {i.name: i for i in plugins.loaded_plugins()}
    assert "register_ops" in info["builtin"].hooks
    assert "Add" in info["builtin"].registered["ops"]
    assert plugins.get_registry().op_owner(ge_hub.ops.get_schema("Add")) == "builtin"


def test_entry_point_plugin_is_loaded_with_version(acme):
    infos = {i.name: i for i in plugins.loaded_plugins()}
    assert infos["acme"].version == "1.2.3"
    assert set(infos["acme"].hooks) == {"register_ops", "register_frontends", "register_commands"}
    assert ge_hub.ops.get_schema("Twice", "acme").domain == "acme"
    assert ge_hub.load("model.acme", flag=1) == ("loaded", "model.acme", {"flag": 1})


def test_loading_happens_once(acme):
    first = plugins.get_registry()
    assert plugins.get_registry() is first


def test_allow_list_empty_means_builtins_only(acme, monkeypatch):
    monkeypatch.setenv(plugins.ALLOW_ENV, "")
    assert [i.name for i in plugins.loaded_plugins()] == ["builtin"]
    with pytest.raises(UnknownOpError, match="acme.Twice"):
        ge_hub.ops.get_schema("Twice", "acme")


def test_allow_list_names_plugins(acme, monkeypatch):
    monkeypatch.setenv(plugins.ALLOW_ENV, "acme, other")
    assert "acme" in [i.name for i in plugins.loaded_plugins()]


def test_block_list(acme, monkeypatch):
    monkeypatch.setenv(plugins.BLOCK_ENV, "acme")
    assert "acme" not in [i.name for i in plugins.loaded_plugins()]


def test_duplicate_name_names_both_plugins(acme, tmp_path, monkeypatch):
    clash = ACME_PLUGIN.replace('"acme-hello"', '"acme-bye"').replace(
        'Frontend("acme"', 'Frontend("acme2"')
    install_fake_plugin(tmp_path, "zeta", clash)
    with pytest.raises(PluginError, match=r"acme\.Twice.*'acme'.*'zeta'"):
        plugins.get_registry()


def test_plugin_cannot_take_core_domain(tmp_path, monkeypatch, fresh_hub):
    source = ACME_PLUGIN.replace('domain="acme"', 'domain=""')
    install_fake_plugin(tmp_path, "rogue", source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError, match="rogue.*own domain"):
        plugins.get_registry()


def test_broken_plugin_is_named(tmp_path, monkeypatch, fresh_hub):
    install_fake_plugin(tmp_path, "broken", "raise ImportError('no such thing')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError, match=r"'broken'.*no such thing.*GE_HUB_DISABLE_PLUGINS"):
        plugins.get_registry()
    monkeypatch.setenv(plugins.BLOCK_ENV, "broken")
    plugins.reset()
    assert "broken" not in [i.name for i in plugins.loaded_plugins()]


def test_plugin_command_runs(acme, capsys):
    from ge_hub.cli import main

    assert main(["acme-hello"]) == 0
    assert capsys.readouterr().out.strip() == "hello"
