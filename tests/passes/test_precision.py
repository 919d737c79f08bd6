"""The precision option and its pass (ge_hub/passes/precision.py): which products each
mode marks bf16 on graphs mixing sensitive and insensitive ops, forced choices, bad
options; whole models in each mode within stated tolerances of fp32; summary(), the CLI
and the offline file saying what ran."""

from __future__ import annotations

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.passes import precision
from ge_hub.precision_report import kernel_name


def _w(rng, *shape, scale=None):
    fan_in = int(np.prod(shape[1:])) if len(shape) > 2 else shape[0]
    return (rng.standard_normal(shape) * (scale or (2.0 / fan_in) ** 0.5)).astype(np.float32)


def cnn(seed=0):
    """conv (first) -> relu -> conv -> relu -> conv -> global pool -> flatten -> gemm (last),
    plus a branch MatMul -> Softmax."""
    rng = np.random.default_rng(seed)
    with es.GraphBuilder("cnn") as gb:
        x = es.input("x", "float32", [2, 8, 16, 16])
        y = es.relu(es.conv(x, _w(rng, 24, 8, 3, 3), pads=[1] * 4))
        y = es.relu(es.conv(y, _w(rng, 32, 24, 3, 3), pads=[1] * 4))
        y = es.relu(es.conv(y, _w(rng, 40, 32, 1, 1)))
        pooled = es.flatten(es.global_average_pool(y))
        logits = es.gemm(pooled, _w(rng, 40, 10), np.zeros(10, np.float32))
        es.output(logits, "logits")
        scores = es.softmax(es.flatten(y) @ _w(rng, 40 * 256, 16, scale=0.01))
        es.output(scores, "scores")
    return gb.graph


def marks(graph, **options):
    model = ge_hub.compile(graph, options=options)
    model.run({"x": np.zeros((2, 8, 16, 16), np.float32)})
    return model, model.summary()["precision"]


def product_names(graph):
    return [n.name for n in graph.nodes if precision.is_product(n)]


def test_fp32_is_the_default_and_changes_nothing():
    graph = cnn()
    model, summary = marks(graph)
    assert summary["mode"] == "fp32" and summary["bf16_steps"] == 0
    assert summary["bf16_kernel"] is None
    assert all(p == "fp32" for p in summary["products"].values())
    x = np.random.default_rng(1).standard_normal((2, 8, 16, 16)).astype(np.float32)
    explicit = ge_hub.compile(graph, options={"precision": "fp32"}).run({"x": x})
    for a, b in zip(model.run({"x": x}), explicit):
        np.testing.assert_array_equal(a, b)


def test_bf16_marks_every_product():
    _, summary = marks(cnn(), precision="bf16")
    assert summary["fp32_products"] == []
    assert summary["bf16_steps"] == len(summary["products"]) == 5
    assert summary["bf16_kernel"] == kernel_name()


def test_mixed_keeps_the_sensitive_layers_in_fp32():
    graph = cnn()
    model, summary = marks(graph, precision="mixed")
    ops = {s.node: s.op.rpartition(".")[2] for s in model.plan.steps}
    kept = sorted(ops[name] for name in summary["fp32_products"])
    # the conv read by GlobalAveragePool, the last Gemm, and the MatMul read by Softmax; the
    # first conv (which reads x) and the middle one run bf16. They are marked bf16x3, which
    # the Convs have no kernel for and the Gemm and MatMul of 2 rows do not take.
    assert kept == ["FusedConv", "Gemm", "MatMul"]
    assert summary["bf16_steps"] == 2 and summary["bf16x3_steps"] == 0


def encoder_block(seed=0, tokens=32, width=64):
    """x -> embedding (first) -> FFN (up, Relu, down) + residual -> LayerNorm -> head
    (last): the down projection is read by the normalization."""
    rng = np.random.default_rng(seed)
    with es.GraphBuilder("block") as gb:
        x = es.input("x", "float32", [tokens, width])
        e = es.relu(x @ _w(rng, width, width))
        h = es.relu(e @ _w(rng, width, 4 * width))
        y = es.op("LayerNormalization", h @ _w(rng, 4 * width, width) + e,
                  np.ones(width, np.float32), np.zeros(width, np.float32), axis=-1)
        es.output(y @ _w(rng, width, 10), "y")
    return gb.graph


def test_mixed_runs_its_accurate_products_in_bf16x3():
    """The products mixed keeps accurate run bf16x3 where they have the kernel (MatMuls of
    16 rows or more): the down projection and the embedding (both read by the
    SkipLayerNormalization that the LayerNormalization of their sum became) and the head
    (the last layer); the up projection runs bf16."""
    graph = encoder_block()
    model = ge_hub.compile(graph, options={"precision": "mixed"})
    summary = model.summary()["precision"]
    assert summary["bf16_steps"] == 1 and summary["bf16x3_steps"] == 3
    assert summary["fp32_products"] == []
    assert sorted(summary["products"].values()) == ["bf16", "bf16x3", "bf16x3", "bf16x3"]
    x = np.random.default_rng(1).standard_normal((32, 64)).astype(np.float32)
    (want,) = ge_hub.compile(graph).run({"x": x})
    (mixed,) = model.run({"x": x})
    (bf16,) = ge_hub.compile(graph, options={"precision": "bf16"}).run({"x": x})
    assert 0 < relative_error(mixed, want) < relative_error(bf16, want)
    # forced fp32 is fp32 still
    forced = ge_hub.compile(graph, options={"precision": "mixed",
                                            "precision_ops": {"MatMul": "fp32"}})
    assert forced.summary()["precision"]["bf16x3_steps"] == 0


def test_reasons_name_the_sensitive_reader():
    graph = cnn()
    nodes = {n.op: n for n in graph.nodes}
    last = precision._reaches_output_without_product(graph)
    assert precision.mixed_keeps_accurate(nodes["MatMul"], graph, last) == "read by Softmax"
    assert precision.mixed_keeps_accurate(nodes["Gemm"], graph, last) == "last layer"


def test_forced_ops_win_by_name_then_by_type():
    graph = cnn()
    gemm = next(n.name for n in graph.nodes if n.op == "Gemm")
    model, summary = marks(graph, precision="mixed",
                           precision_ops={"Conv": "bf16", gemm: "bf16", "MatMul": "fp32"})
    ops = {s.node: s.op for s in model.plan.steps}
    assert [ops[name] for name in summary["fp32_products"]] == ["MatMul"]  # "Conv" covers
    # the FusedConvs that Conv + Relu became
    assert summary["bf16_steps"] == 4
    _, summary = marks(cnn(), precision="bf16", precision_ops={"Conv": "fp32"})
    assert summary["bf16_steps"] == 2  # the Gemm and the MatMul


@pytest.mark.parametrize("options, culprit", [
    ({"precision": "fp16"}, "fp16"),
    ({"precision": "bf16", "precision_ops": {"Conv": "int8"}}, "precision_ops['Conv']"),
    ({"precision": "bf16", "precision_ops": ["Conv"]}, "precision_ops"),
])
def test_bad_options_are_refused_by_name(options, culprit):
    with pytest.raises(ValueError, match=culprit.replace("[", r"\[").replace("]", r"\]")):
        ge_hub.compile(cnn(), options=options)


# -- whole models in each mode ---------------------------------------------------------------

# Relative error (max |y - y_fp32| / max |y_fp32|) allowed per mode: bf16 keeps 8 bits of
# mantissa (relative rounding 2^-9 per input), sums are fp32.
TOLERANCE = {"bf16": 3e-2, "mixed": 3e-2}


def relative_error(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.mark.parametrize("mode", ["bf16", "mixed"])
def test_whole_cnn_in_each_mode(mode):
    graph = cnn()
    x = np.random.default_rng(2).standard_normal((2, 8, 16, 16)).astype(np.float32)
    want = ge_hub.compile(graph).run({"x": x})
    got = ge_hub.compile(graph, options={"precision": mode}).run({"x": x})
    for g, w in zip(got, want):
        err = relative_error(g, w)
        assert 0 < err < TOLERANCE[mode], err


def mlp_graph(seed=0):
    rng = np.random.default_rng(seed)
    with es.GraphBuilder("mlp") as gb:
        x = es.input("x", "float32", [4, 96])
        h = x
        for cin, cout in ((96, 128), (128, 128), (128, 64), (64, 10)):
            h = es.relu(h @ _w(rng, cin, cout) + np.full(cout, 0.1, np.float32))
        es.output(h, "y")
    return gb.graph


def test_mixed_is_closer_to_fp32_than_bf16_on_an_mlp():
    graph = mlp_graph()
    x = np.random.default_rng(3).standard_normal((4, 96)).astype(np.float32)
    (want,) = ge_hub.compile(graph).run({"x": x})
    errors = {}
    for mode in ("bf16", "mixed"):
        model = ge_hub.compile(graph, options={"precision": mode})
        (got,) = model.run({"x": x})
        errors[mode] = relative_error(got, want)
        assert errors[mode] < TOLERANCE[mode]
    assert errors["mixed"] < errors["bf16"]


def test_cli_run_reports_the_precision(tmp_path, capsys):
    from ge_hub.cli import main
    from ge_hub.ir.serialize import save

    path = tmp_path / "cnn.gehub"
    save(cnn(), str(path))
    assert main(["run", str(path), "--precision", "mixed"]) == 0
    out = capsys.readouterr().out
    assert "precision mixed: 2 product steps in bf16" in out


def test_the_offline_file_records_precision_and_layout(tmp_path):
    from ge_hub.offline import portability, reader, writer

    graph = cnn()
    model = ge_hub.compile(graph, input_shapes={"x": (2, 8, 16, 16)},
                           options={"precision": "bf16"})
    path = tmp_path / "cnn.ghm"
    meta = writer.save(model, str(path))
    assert meta["options"]["precision"] == "bf16"
    record = meta["portability"]
    assert "packed_bf16" in record["layouts"]
    assert record["layouts"]["packed_bf16"]["geometry"] == {"mr": 16, "nr": 32, "kb": 32,
                                                           "linear": 2}
    assert record["bf16_kernel"]["name"] == kernel_name()
    assert portability.problems(record) == []
    # a file whose MatMul weights were packed the earlier way (as A, no "linear" key) is
    # planned again, not misread
    import copy
    older = copy.deepcopy(record)
    del older["layouts"]["packed_bf16"]["geometry"]["linear"]
    assert any("packed_bf16" in p for p in portability.problems(older))
    loaded = reader.load_compiled(str(path))
    x = np.random.default_rng(4).standard_normal((2, 8, 16, 16)).astype(np.float32)
    for a, b in zip(loaded.run({"x": x}), model.run({"x": x})):
        np.testing.assert_array_equal(a, b)
    assert loaded.summary()["precision"]["bf16_steps"] == 5
