"""fuse_elementwise's BatchNormalization lowering (ge_hub.passes.batch_norm_affine): an
inference BatchNormalization with constant statistics next to a fusable elementwise op
becomes Mul + Add by per-channel constants inside that op's FusedElementwise group, with
the BatchNormalization reference's results (NaN and inf included); any other
BatchNormalization (alone, run-time statistics, training mode, a graph output, float64)
stays itself."""

from __future__ import annotations

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.ops import get_schema
from ge_hub.passes.fuse_elementwise import BATCH_NORM_RULE, NAME
from ge_hub.testing import assert_outputs_close, random_feeds

from .test_fuse_elementwise import build, fuse, ops_of

FUSED = "FusedElementwise"
EPS = 1e-3


@pytest.fixture
def rng():
    return np.random.default_rng(15)


def stats(rng, channels):
    """scale, B, mean, var: random and non-zero, var positive."""
    scale, bias, mean = (rng.uniform(-2, 2, channels).astype(np.float32) for _ in range(3))
    return scale, bias, mean, rng.uniform(0.3, 2.0, channels).astype(np.float32)


def bn(x, params, **attrs):
    return es.op("BatchNormalization", x, *(es.const(p) for p in params), epsilon=EPS, **attrs)




def on_and_off(graph, feeds):
    on = ge_hub.compile(graph.copy())
    off = ge_hub.compile(graph.copy(), options={"disable_passes": [NAME]})
    return on, off, on.run(feeds), off.run(feeds)


@pytest.mark.parametrize("shape", [(1, 7, 5, 9), (2, 3, 13), (3, 5), (1, 4, 3, 5, 6)])
def test_bn_relu_is_one_step_with_the_reference_results(rng, shape):
    params = stats(rng, shape[1])
    graph = build(lambda x: es.relu(bn(x, params)), [shape])
    fused, ctx = fuse(graph)
    assert ops_of(fused) == [FUSED]
    assert fused.nodes[0].attrs["ops"] == ["Mul", "Add", "Relu"]
    assert ctx.fired[BATCH_NORM_RULE] == 1 and ctx.fired[NAME] == 1
    feeds = random_feeds(graph, seed=7)
    on, off, got, unfused = on_and_off(graph, feeds)
    assert len(on.plan.steps) == 1 < len(off.plan.steps) == 2
    with np.errstate(invalid="ignore"):
        normalized = get_schema("BatchNormalization").run_reference(
            [feeds["x0"], *params], {"epsilon": EPS})[0]
    want = np.maximum(normalized, 0)
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[0], unfused[0], rtol=1e-5, atol=1e-5)


def test_densenet_pre_activation_chain_and_nan_inf(rng):
    """BN -> Mul -> Add -> Relu (a Caffe scale layer after the BN), as DenseNet's export
    has it, with NaN, +inf and -inf in the input."""
    c = 6
    params = stats(rng, c)
    gamma = rng.uniform(0.5, 1.5, (c, 1, 1)).astype(np.float32)
    beta = rng.uniform(-1, 1, (c, 1, 1)).astype(np.float32)
    graph = build(lambda x: es.relu(es.add(es.mul(bn(x, params), gamma), beta)),
                  [(1, c, 7, 11)])
    fused, _ = fuse(graph)
    assert ops_of(fused) == [FUSED]
    x = rng.uniform(-3, 3, (1, c, 7, 11)).astype(np.float32)
    x[0, 0, 0, 0], x[0, 2, 3, 4], x[0, 5, 6, 10] = np.nan, np.inf, -np.inf
    _, _, got, unfused = on_and_off(graph, {"x0": x})
    with np.errstate(invalid="ignore"):
        normalized = get_schema("BatchNormalization").run_reference([x, *params],
                                                                   {"epsilon": EPS})[0]
    want = np.maximum(normalized * gamma + beta, 0)
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-5, equal_nan=True)
    np.testing.assert_allclose(got[0], unfused[0], rtol=1e-5, atol=1e-5, equal_nan=True)
    assert np.isnan(got[0][0, 0, 0, 0])


def test_a_bn_after_an_elementwise_op_joins_it(rng):
    params = stats(rng, 5)
    graph = build(lambda x, y: bn(es.add(x, y), params), [(2, 5, 3, 3), (2, 5, 3, 3)])
    fused, _ = fuse(graph)
    assert ops_of(fused) == [FUSED]
    assert fused.nodes[0].attrs["ops"] == ["Add", "Mul", "Add"]
    assert fused.output_names == ["out0"]  # the BN's output was the graph's
    feeds = random_feeds(graph, seed=3)
    _, _, got, unfused = on_and_off(graph, feeds)
    assert_outputs_close(got, unfused, graph.output_names, 1e-5, 1e-5)


def test_other_batch_norms_stay_themselves(rng):
    params = stats(rng, 4)
    shape = (1, 4, 5, 5)
    cases = {
        "alone": build(lambda x: bn(x, params), [shape]),
        "alone, a graph output": build(lambda x: (bn(x, params), es.relu(bn(x, params))), [shape]),
        "float64": build(lambda x: es.relu(es.op(
            "BatchNormalization", x, *(es.const(p.astype(np.float64)) for p in params))),
            [shape], "float64"),
        "training mode": build(lambda x: es.relu(bn(x, params, training_mode=1)), [shape]),
        "run-time stats": build(lambda x, s: es.relu(es.op(
            "BatchNormalization", x, s, *(es.const(p) for p in params[1:]))), [shape, (4,)]),
    }
    for why, graph in cases.items():
        fused, ctx = fuse(graph)
        kept = ops_of(fused).count("BatchNormalization")
        if why == "alone, a graph output":
            # the BN read by Relu is lowered and fused, the lone one stays
            assert kept == 1 and FUSED in ops_of(fused), why
        else:
            assert kept == 1 and ctx.fired[BATCH_NORM_RULE] == 0, why
