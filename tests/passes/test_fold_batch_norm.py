"""fold_batch_norm (rules): Conv, ConvTranspose, Gemm and MatMul followed by an inference
BatchNormalization become one node with the same results; the fold stays away where it
would be wrong."""

from __future__ import annotations

import numpy as np
import pytest

from ge_hub import es

from .rulecheck import does_not_fire, fires_and_agrees


def bn_params(channels, rng):
    scale = rng.uniform(0.5, 1.5, channels) * rng.choice([-1, 1], channels)
    return [scale.astype(np.float32), rng.standard_normal(channels).astype(np.float32),
            rng.standard_normal(channels).astype(np.float32),
            rng.uniform(0.5, 1.5, channels).astype(np.float32)]


def with_bn(build_producer, input_shape, channels, *, also_output_producer=False):
    rng = np.random.default_rng(0)
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", list(input_shape))
        y = build_producer(x, rng)
        gb.output(es.batch_normalization(y, *bn_params(channels, rng), epsilon=1e-3), "z")
        if also_output_producer:
            gb.output(y, "y")
    return gb.graph


def conv(bias, group=1):
    def build(x, rng):
        w = rng.standard_normal((4, 4 // group, 3, 3)).astype(np.float32)
        b = rng.standard_normal(4).astype(np.float32) if bias else None
        return es.conv(x, w, b, pads=[1, 1, 1, 1], group=group)
    return build


def conv_transpose(bias, group=1):
    def build(x, rng):
        w = rng.standard_normal((4, 6 // group, 3, 3)).astype(np.float32)
        b = rng.standard_normal(6).astype(np.float32) if bias else None
        return es.conv_transpose(x, w, b, strides=[2, 2], group=group)
    return build


def gemm(trans_b, c_shape, beta=1.0):
    def build(x, rng):
        w = rng.standard_normal((5, 7) if trans_b else (7, 5)).astype(np.float32)
        c = None if c_shape is None else rng.standard_normal(c_shape).astype(np.float32)
        return es.gemm(x, w, c, alpha=0.5, beta=beta, transB=trans_b)
    return build


def matmul(x, rng):
    return es.matmul(x, rng.standard_normal((7, 5)).astype(np.float32))


@pytest.mark.parametrize("bias, group", [(True, 1), (False, 1), (True, 2), (False, 4)])
def test_conv(bias, group):
    graph = with_bn(conv(bias, group), (2, 4, 9, 9), 4)
    rewritten = fires_and_agrees(graph, "fold_batch_norm.conv", rtol=1e-4, atol=1e-5)
    assert [n.op for n in rewritten.nodes] == ["Conv"]
    assert rewritten.output_names == ["z"]


@pytest.mark.parametrize("bias, group", [(True, 1), (False, 1), (True, 2)])
def test_conv_transpose(bias, group):
    graph = with_bn(conv_transpose(bias, group), (1, 4, 5, 5), 6)
    rewritten = fires_and_agrees(graph, "fold_batch_norm.conv_transpose", rtol=1e-4,
                                 atol=1e-5)
    assert [n.op for n in rewritten.nodes] == ["ConvTranspose"]


@pytest.mark.parametrize("trans_b, c_shape, beta", [(0, None, 1.0), (1, (5,), 0.5),
                                                    (0, (3, 5), 2.0), (1, (1,), 1.0)])
def test_gemm(trans_b, c_shape, beta):
    graph = with_bn(gemm(trans_b, c_shape, beta), (3, 7), 5)
    rewritten = fires_and_agrees(graph, "fold_batch_norm.gemm", rtol=1e-4, atol=1e-5)
    assert [n.op for n in rewritten.nodes] == ["Gemm"]


def test_matmul_2d_becomes_gemm():
    rewritten = fires_and_agrees(with_bn(matmul, (3, 7), 5), "fold_batch_norm.matmul",
                                 rtol=1e-4, atol=1e-5)
    assert [n.op for n in rewritten.nodes] == ["Gemm"]


def test_matmul_3d_is_left_alone():
    # BatchNormalization normalizes axis 1, which is not MatMul's column axis here.
    reasons = does_not_fire(with_bn(matmul, (3, 5, 7), 5), "fold_batch_norm.matmul")
    assert reasons and "2-D" in reasons[0]


def test_conv_whose_output_is_also_read_elsewhere_is_left_alone():
    graph = with_bn(conv(True), (1, 4, 5, 5), 4, also_output_producer=True)
    (reason,) = does_not_fire(graph, "fold_batch_norm.conv")
    assert "graph output" in reason


def test_weights_that_are_not_constants_are_left_alone():
    rng = np.random.default_rng(0)
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [1, 2, 5, 5])
        w = es.input("w", "float32", [2, 2, 3, 3])
        gb.output(es.batch_normalization(es.conv(x, w), *bn_params(2, rng)), "z")
    assert does_not_fire(gb.graph, "fold_batch_norm.conv") == []


def test_the_pass_keeps_its_name_and_can_be_disabled():
    import ge_hub

    graph = with_bn(conv(True), (1, 4, 5, 5), 4)
    model = ge_hub.compile(graph, options={"disable_passes": ["fold_batch_norm"]})
    assert model.summary()["rules"] == {}
    assert "BatchNormalization" in [s.op for s in model.plan.steps]
