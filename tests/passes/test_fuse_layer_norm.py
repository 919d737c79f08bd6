"""fuse_layer_norm (rules): decomposed LayerNormalization (ReduceMean, Sub, Pow or Mul,
ReduceMean, Add, Sqrt, Div, with or without scale and bias) becomes LayerNormalization;
a residual Add (with the bias Add before it) and a LayerNormalization become one
ge_hub.SkipLayerNormalization; both with the unfused graph's results, and left alone
where the axes, shapes, readers or dtype do not fit."""

from __future__ import annotations

import numpy as np
import pytest

from ge_hub import es, rewrite
from ge_hub.passes.fuse_layer_norm import RULES
from ge_hub.testing import check_rule

RNG = np.random.default_rng(3)


def decomposed(x, axes=(-1,), square="pow", scale=None, bias=None, axes2=None, eps=1e-5):
    axes_const = np.asarray(axes, np.int64)
    d = es.sub(x, es.reduce_mean(x, axes_const, keepdims=1))
    sq = es.pow(d, np.float32(2.0)) if square == "pow" else es.mul(d, d)
    var = es.reduce_mean(sq, np.asarray(axes2 or axes, np.int64), keepdims=1)
    y = es.div(d, es.sqrt(es.add(var, np.float32(eps))))
    if scale is not None:
        y = es.mul(y, scale)
    if bias is not None:
        y = es.add(y, bias)
    return y


def graph_of(make, shape=(2, 5, 24), dtype="float32"):
    with es.GraphBuilder("g") as gb:
        x = es.input("x", dtype, list(shape))
        outputs = make(x)
        for i, y in enumerate(outputs if isinstance(outputs, tuple) else (outputs,)):
            gb.output(y, f"y{i}")
    return gb.graph


def apply_all(graph):
    ctx = rewrite.PassContext()
    rewritten, fired = rewrite.apply(graph.copy(), RULES, ctx)
    return rewritten, fired, [e.reason for e in ctx.refusals()]


def param(shape, low=-2.0, high=2.0):
    return RNG.uniform(low, high, size=shape).astype(np.float32)


@pytest.mark.parametrize("square", ["pow", "mul"])
@pytest.mark.parametrize("affine", ["none", "scale", "scale_bias"])
def test_decomposed_forms_become_layer_norm(square, affine):
    scale = param([24], 0.5, 2) if affine != "none" else None
    bias = param([24]) if affine == "scale_bias" else None
    graph = graph_of(lambda x: decomposed(x, square=square, scale=scale, bias=bias))
    rewritten, fired = check_rule(RULES, graph, rtol=1e-4, atol=1e-5)
    (node,) = rewritten.nodes
    assert node.op == "LayerNormalization" and node.attrs["axis"] == -1


def test_two_trailing_axes_and_a_scale_with_leading_ones():
    graph = graph_of(lambda x: decomposed(x, axes=(1, 2), scale=param([1, 5, 24]),
                                          bias=param([24])))
    rewritten, _ = check_rule(RULES, graph, rtol=1e-4, atol=1e-5)
    (node,) = rewritten.nodes
    assert node.op == "LayerNormalization" and node.attrs["axis"] == -2


@pytest.mark.parametrize("axes, axes2, why", [((1,), None, "trailing"),
                                              ((-1,), (-2,), "differ")])
def test_axes_that_are_not_a_layer_norm_are_left(axes, axes2, why):
    rewritten, fired, reasons = apply_all(graph_of(lambda x: decomposed(x, axes, axes2=axes2)))
    assert fired == 0 and "LayerNormalization" not in [n.op for n in rewritten.nodes]
    assert any(why in r for r in reasons), reasons


def test_a_scale_broadcasting_beyond_the_row_stays_a_mul():
    graph = graph_of(lambda x: decomposed(x, scale=param([5, 1])), shape=(2, 5, 24))
    rewritten, fired, _ = apply_all(graph)
    assert "Mul" in [n.op for n in rewritten.nodes]
    check_rule(RULES, graph, rtol=1e-4, atol=1e-5)  # the inner part still fuses


def test_centered_values_read_elsewhere_are_not_swallowed():
    def make(x):
        d = es.sub(x, es.reduce_mean(x, np.asarray([-1], np.int64), keepdims=1))
        var = es.reduce_mean(es.pow(d, np.float32(2.0)), np.asarray([-1], np.int64))
        return es.div(d, es.sqrt(es.add(var, np.float32(1e-5)))), d

    rewritten, fired, reasons = apply_all(graph_of(make))
    assert fired == 0 and reasons


def skip_graph(*, bias=True, skip_shape=None, also_output_sum=False, dtype="float32"):
    with es.GraphBuilder("g") as gb:
        x = es.input("x", dtype, [3, 7, 16])
        skip = es.input("skip", dtype, list(skip_shape or [3, 7, 16]))
        h = es.add(x, param([16]).astype(dtype)) if bias else x
        total = es.add(h, skip)
        gb.output(es.layer_normalization(total, param([16], 0.5, 2).astype(dtype),
                                         param([16]).astype(dtype)), "y")
        if also_output_sum:
            gb.output(total, "sum")
    return gb.graph


@pytest.mark.parametrize("bias", [True, False])
def test_residual_add_and_layer_norm_become_one_step(bias):
    rewritten, fired = check_rule(RULES, skip_graph(bias=bias), rtol=1e-5, atol=1e-5)
    (node,) = rewritten.nodes
    assert (node.op, node.domain) == ("SkipLayerNormalization", "ge_hub")
    assert (len(node.inputs) > 4 and node.inputs[4] is not None) == bias


def test_a_broadcast_skip_stays_an_add():
    rewritten, fired, reasons = apply_all(skip_graph(bias=False, skip_shape=[1, 7, 16]))
    assert fired == 0 and any("broadcast" in r for r in reasons), reasons


@pytest.mark.parametrize("bias", [True, False])
def test_a_sum_read_elsewhere_becomes_the_fused_steps_second_output(bias):
    graph = skip_graph(bias=bias, also_output_sum=True)
    rewritten, fired = check_rule(RULES, graph, rtol=1e-5, atol=1e-5)
    (node,) = rewritten.nodes
    assert node.op == "SkipLayerNormalization" and len(node.outputs) == 2
    assert rule_counts(graph) == {f"fuse_layer_norm.skip{'_bias' if bias else ''}_sum": 1}


def rule_counts(graph):
    ctx = rewrite.PassContext()
    rewrite.apply(graph.copy(), RULES, ctx)
    return dict(ctx.fired)


def test_float64_is_not_fused():
    rewritten, fired, reasons = apply_all(skip_graph(dtype="float64"))
    assert fired == 0 and any("float32" in r for r in reasons), reasons
