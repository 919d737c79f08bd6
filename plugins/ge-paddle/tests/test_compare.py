"""`ge-hub compare --against paddle`: ge-hub's outputs against Paddle Inference (a saved
model) and against a Layer run eagerly; the report says only outputs are compared, and a
subtly wrong kernel puts the outputs out of tolerance."""

from __future__ import annotations

import json

import ge_hub
import numpy as np
import paddle
import pytest
from conftest import save_pir
from ge_hub import testing
from ge_hub.cli import main
from ge_hub.compare import compare_model


class Small(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1 = paddle.nn.Linear(6, 8)
        self.fc2 = paddle.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc2(paddle.tanh(self.fc1(x)))


@pytest.fixture
def layer():
    paddle.seed(0)
    small = Small()
    small.eval()
    return small


@pytest.fixture
def saved(layer, tmp_path):
    return save_pir(layer, str(tmp_path / "small"), [2, 6])


@pytest.fixture
def wrong_tanh():
    """A plugin's Tanh kernel that is off by 1% (and wins kernel selection)."""
    with testing.wrong_kernel("Tanh", lambda x: np.tanh(x) * np.float32(1.01),
                              plugin="test-wrong-tanh", name="test_wrong_tanh"):
        yield


def feeds(graph):
    x = np.random.default_rng(0).standard_normal((2, 6)).astype(np.float32)
    return {graph.input_names[0]: x}


def test_a_saved_model_matches_paddle_inference_on_its_outputs(saved):
    graph = ge_hub.load(saved)
    result = compare_model(ge_hub.compile(graph), graph, feeds(graph), against="paddle",
                           model=saved)
    assert result.outputs_ok and result.first_divergence is None
    assert [v.value for v in result.values] == list(graph.output_names)
    assert result.values[0].cosine == pytest.approx(1.0, abs=1e-6)
    assert "outputs only" in result.note and "outputs only" in result.format()


def test_a_layer_is_run_eagerly(layer):
    x = np.random.default_rng(0).standard_normal((2, 6)).astype(np.float32)
    graph = ge_hub.load(layer, example_inputs=[x])
    result = compare_model(ge_hub.compile(graph), graph, {graph.input_names[0]: x},
                           against="paddle", model=layer)
    assert result.outputs_ok and len(result.values) == 1


def test_a_wrong_kernel_puts_the_outputs_out_of_tolerance(saved, wrong_tanh):
    graph = ge_hub.load(saved)
    compiled = ge_hub.compile(graph)
    assert any(s.kernel == "test_wrong_tanh" for s in compiled.plan.steps)
    result = compare_model(compiled, graph, feeds(graph), against="paddle", model=saved)
    assert not result.outputs_ok
    assert result.first_divergence.value == graph.output_names[0]


def test_the_command_compares_against_paddle(saved, capsys):
    saved += ".json"  # the command takes a file
    assert main(["compare", saved, "--against", "paddle"]) == 0
    out = capsys.readouterr().out
    assert "ge-hub against paddle: 1 values matched" in out
    assert "paddle gives the model's outputs only" in out
    assert "outputs: within tolerance" in out
    assert main(["compare", saved, "--against", "paddle", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["outputs_ok"] is True and "outputs only" in report["note"]
