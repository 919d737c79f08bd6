"""A real plugin distribution (tests/plugins/example-plugin), installed with pip into the
test environment and found through its `ge_hub` entry point: its op appears in
`ge-hub ops` and in `ge_hub.es`, its kernel runs in compiled graphs, its command runs,
and the allow and block lists control it."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

PLUGIN_DIR = pathlib.Path(__file__).parent / "plugins" / "example-plugin"


@pytest.fixture(scope="module", autouse=True)
def installed_plugin(example_plugin):
    yield


def ge_hub_cli(*args, **env):
    """Run `ge-hub` in a fresh interpreter, with only the given plugin variables set."""
    base = {k: v for k, v in os.environ.items()
            if k not in ("GE_HUB_PLUGINS", "GE_HUB_DISABLE_PLUGINS")}
    return subprocess.run([sys.executable, "-m", "ge_hub", *args], capture_output=True,
                          text=True, env={**base, **env})


def test_discovered_through_its_entry_point():
    result = ge_hub_cli("plugins", "--json")
    assert result.returncode == 0, result.stderr
    plugins = {p["name"]: p for p in json.loads(result.stdout)}
    assert plugins["example"]["version"] == "0.3.0"
    assert set(plugins["example"]["hooks"]) == {"register_ops", "register_kernels",
                                                "register_passes", "register_commands"}


def test_its_op_is_listed_and_its_command_runs():
    ops = json.loads(ge_hub_cli("ops", "--json").stdout)
    row = next(r for r in ops if r["name"] == "ScaleShift")
    assert row["domain"] == "example" and row["plugin"] == "example"
    assert row["kernels"] == ["cpu:example.scale_shift"]
    result = ge_hub_cli("example-hello")
    assert result.returncode == 0 and result.stdout.strip() == "hello from the example plugin"


def test_its_op_is_in_es_and_runs_compiled():
    code = """
import numpy as np, ge_hub
from ge_hub import es
from ge_hub.reference import evaluate
with es.GraphBuilder("g") as gb:
    x = es.input("x", "float32", [2, 3])
    gb.output(es.example.scale_shift(x, scale=2.0, shift=1.0), "y")
x = np.arange(6, dtype=np.float32).reshape(2, 3)
model = ge_hub.compile(gb.graph)
(y,) = model.run({"x": x})
assert np.array_equal(y, x * 2 + 1), y
assert np.array_equal(evaluate(gb.graph, {"x": x})[0], y)
assert model.summary()["fallback_steps"] == 0
print(model.plan.steps[0].kernel)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "example.scale_shift"


@pytest.mark.parametrize("env, loaded", [
    ({"GE_HUB_PLUGINS": ""}, False),
    ({"GE_HUB_PLUGINS": "example"}, True),
    ({"GE_HUB_PLUGINS": "someone-else"}, False),
    ({"GE_HUB_DISABLE_PLUGINS": "example"}, False),
])
def test_allow_and_block_lists(env, loaded):
    result = ge_hub_cli("plugins", "--json", **env)
    names = {p["name"] for p in json.loads(result.stdout)}
    assert ("example" in names) is loaded
    assert "builtin" in names
