"""ge_hub.compare and `ge-hub compare`: a subtly wrong kernel is found and named."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_profiling import conv_mlp_graph

import ge_hub
from ge_hub import es, testing
from ge_hub.cli import main
from ge_hub.compare import compare_arrays, compare_model
from ge_hub.ir import serialize


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "conv_mlp.gehub"
    serialize.save(conv_mlp_graph(), path)
    return str(path)


@pytest.fixture
def wrong_tanh():
    """A plugin's Tanh kernel that is off by 1% (and wins kernel selection)."""
    with testing.wrong_kernel("Tanh", lambda x: np.tanh(x) * np.float32(1.01),
                              plugin="test-wrong-tanh", name="test_wrong_tanh"):
        yield


def feeds():
    return {"x": np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)}


def test_a_correct_model_matches_the_reference():
    graph = conv_mlp_graph()
    # fuse_elementwise off: the Tanh/Add/Mul chain's values are compared one by one
    compiled = ge_hub.compile(graph, options={"disable_passes": ["fuse_elementwise"]})
    result = compare_model(compiled, graph, feeds())
    assert result.outputs_ok and result.first_divergence is None
    names = [v.value for v in result.values]
    assert {"matmul_5", "tanh_6", "add_7", "out"} <= set(names)
    assert all(v.cosine == pytest.approx(1.0, abs=1e-6) for v in result.values)


def test_the_wrong_kernel_is_the_first_divergence(wrong_tanh):
    graph = conv_mlp_graph()
    compiled = ge_hub.compile(graph)
    assert any(s.kernel == "test_wrong_tanh" for s in compiled.plan.steps)
    result = compare_model(compiled, graph, feeds())
    first = result.first_divergence
    assert first.value == "tanh_6" and first.op == "Tanh"
    before = result.values[:result.values.index(first)]
    assert before and all(v.ok for v in before)  # the conv and matmul before it are fine
    assert not result.outputs_ok
    assert first.rel == pytest.approx(0.01, rel=0.05)


def test_the_command_names_the_divergence_and_fails(wrong_tanh, model_path, capsys):
    assert main(["compare", model_path]) == 1
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.lstrip().startswith(">>"))
    assert "tanh_6" in line and "Tanh" in line
    assert "first divergence: tanh_6 (output of Tanh node" in out
    assert "OUT OF TOLERANCE" in out
    assert main(["compare", model_path, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["first_divergence"] == "tanh_6" and report["outputs_ok"] is False


def test_the_command_passes_a_correct_model(model_path, capsys):
    assert main(["compare", model_path, "--all"]) == 0
    out = capsys.readouterr().out
    assert "every matched value is within tolerance" in out


def test_an_unknown_reference_is_one_line(model_path, capsys):
    assert main(["compare", model_path, "--against", "nothing"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ge-hub compare: error: no installed plugin runs models for "
                          "--against 'nothing'") and err.count("\n") == 1


@pytest.mark.parametrize("ours, reference, ok", [
    (np.array([1.0, 2.0]), np.array([1.0, 2.0]), True),
    (np.array([1.0, 2.0005]), np.array([1.0, 2.0]), True),
    (np.array([1.0, 2.1]), np.array([1.0, 2.0]), False),
    (np.array([1, 2]), np.array([1, 3]), False),
    (np.array([np.nan]), np.array([1.0]), False),
    (np.zeros((2, 2)), np.zeros(4), False),
])
def test_compare_arrays(ours, reference, ok):
    assert compare_arrays(ours, reference)[3] is ok


def bf16_model_path(tmp_path):
    """A Conv (8 channels: deep enough for the bf16 path) and a MatMul: two products."""
    rng = np.random.default_rng(5)
    with es.GraphBuilder("bf16_pair") as gb:
        x = es.input("x", "float32", [1, 8, 6, 6])
        y = es.relu(es.conv(x, rng.standard_normal((8, 8, 3, 3)).astype(np.float32),
                            pads=[1, 1, 1, 1]))
        y = es.reshape(y, np.array([1, 288], np.int64))
        gb.output(y @ rng.standard_normal((288, 16)).astype(np.float32), "out")
    path = tmp_path / "bf16_pair.gehub"
    serialize.save(gb.graph, path)
    return str(path)


def test_compare_across_precisions_names_the_bf16_steps(tmp_path, capsys):
    """`--precision bf16`: ge-hub's products round their inputs to bf16, so at the
    default tolerance they are where it first diverges from the fp32 reference, marked
    as run in bf16; at a bf16-sized tolerance the model passes."""
    path = bf16_model_path(tmp_path)
    assert main(["compare", path, "--precision", "bf16", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["precision"] == "bf16" and report["bf16_steps"] == 2
    # the FusedConv's value has no reference counterpart (fusion made it): the MatMul's has
    products = [v for v in report["values"] if v["precision"] is not None]
    assert [v["op"] for v in products] == ["MatMul"] and products[0]["precision"] == "bf16"
    first = next(v for v in report["values"] if v["value"] == report["first_divergence"])
    assert first["precision"] == "bf16"
    assert 1e-4 < first["rel"] < 2e-2  # bf16's rounding, not a wrong kernel
    # the outputs reach about 150: bf16 sums of 288 products err by up to about 0.5
    assert main(["compare", path, "--precision", "bf16", "--rtol", "3e-2",
                 "--atol", "1"]) == 0
    out = capsys.readouterr().out
    assert "ge-hub in precision bf16: 2 product steps in bf16" in out
    assert "in bf16, " in out  # the product rows say so
    assert main(["compare", path, "--json"]) == 0  # fp32: exact to the reference
    report = json.loads(capsys.readouterr().out)
    assert report["precision"] == "fp32" and report["bf16_steps"] == 0


def test_profile_and_bench_take_a_precision(tmp_path, capsys):
    """`ge-hub profile` marks the steps that ran in bf16; `ge-hub bench` says how many."""
    path = bf16_model_path(tmp_path)
    assert main(["profile", path, "--precision", "bf16", "--runs", "2", "--json"]) == 0
    steps = json.loads(capsys.readouterr().out)["top_steps"]
    assert sorted(s["precision"] for s in steps) == ["bf16", "bf16"]
    assert main(["profile", path, "--precision", "bf16", "--runs", "2"]) == 0
    assert capsys.readouterr().out.count(" in bf16)") == 2
    assert main(["profile", path, "--runs", "2", "--json"]) == 0
    steps = json.loads(capsys.readouterr().out)["top_steps"]
    assert [s["precision"] for s in steps] == ["fp32", "fp32"]
    assert main(["bench", path, "--precision", "mixed", "-n", "3", "--warmup", "1"]) == 0
    # mixed keeps the last layer (it reaches the output) accurate: fp32 for one row
    assert "precision mixed (1 product steps in bf16, " in capsys.readouterr().out
    assert main(["bench", path, "--precision", "bf16", "-n", "3", "--warmup", "1",
                 "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["precision"]["bf16_steps"] == 2
