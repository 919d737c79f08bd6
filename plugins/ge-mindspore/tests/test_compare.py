"""`ge-hub compare --against mindspore`: ge-hub's outputs against MindSpore running the
MINDIR file (or the Cell); the report says only outputs are compared, and a subtly wrong
kernel puts the outputs out of tolerance."""

from __future__ import annotations

import json

import ge_hub
import mindspore as ms
import numpy as np
import pytest
from ge_hub import testing
from ge_hub.cli import main
from ge_hub.compare import compare_model
from mindspore import nn, ops

from .conftest import random


class Small(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(6, 8)
        self.fc2 = nn.Dense(8, 4)

    def construct(self, x):
        return self.fc2(ops.tanh(self.fc1(x)))


@pytest.fixture
def cell():
    ms.set_seed(0)
    small = Small()
    small.set_train(False)
    return small


@pytest.fixture
def wrong_tanh():
    """A plugin's Tanh kernel that is off by 1% (and wins kernel selection)."""
    with testing.wrong_kernel("Tanh", lambda x: np.tanh(x) * np.float32(1.01),
                              plugin="test-wrong-tanh", name="test_wrong_tanh"):
        yield


def compare(path, against="mindspore", model=None):
    graph = ge_hub.load(path)
    compiled = ge_hub.compile(graph)
    feeds = {graph.input_names[0]: random((2, 6), seed=1)}
    return compiled, compare_model(compiled, graph, feeds, against=against,
                                   model=path if model is None else model)


def test_a_mindir_file_matches_mindspore_on_its_outputs(cell, export):
    path = export(cell, random((2, 6)))
    _, result = compare(path)
    assert result.outputs_ok and result.first_divergence is None
    assert len(result.values) == 1 and result.values[0].is_output
    assert result.values[0].cosine == pytest.approx(1.0, abs=1e-6)
    assert "outputs only" in result.note and "outputs only" in result.format()


def test_a_cell_is_run_as_it_stands(cell, export):
    path = export(cell, random((2, 6)))
    _, result = compare(path, model=cell)
    assert result.outputs_ok and len(result.values) == 1


def test_a_wrong_kernel_puts_the_outputs_out_of_tolerance(cell, export, wrong_tanh):
    path = export(cell, random((2, 6)))
    compiled, result = compare(path)
    assert any(s.kernel == "test_wrong_tanh" for s in compiled.plan.steps)
    assert not result.outputs_ok and result.first_divergence.is_output


def test_the_command_compares_against_mindspore(cell, export, capsys):
    path = export(cell, random((2, 6)))
    assert main(["compare", path, "--against", "mindspore"]) == 0
    out = capsys.readouterr().out
    assert "ge-hub against mindspore: 1 values matched" in out
    assert "mindspore gives the model's outputs only" in out
    assert main(["compare", path, "--against", "mindspore", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["outputs_ok"] is True and "outputs only" in report["note"]
