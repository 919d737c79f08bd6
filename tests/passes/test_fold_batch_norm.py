"""fold_batch_norm: Conv + BatchNormalization becomes one Conv with the same results."""

from __future__ import annotations

import numpy as np

from ge_hub import es
from ge_hub.passes.fold_batch_norm import fold_batch_norm
from ge_hub.reference import evaluate


def conv_bn(with_bias: bool, conv_output_also_used: bool = False):
    rng = np.random.default_rng(0)
    with es.GraphBuilder("conv_bn") as gb:
        x = es.input("x", "float32", ["N", 3, 9, 9])
        w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
        b = rng.standard_normal(4).astype(np.float32) if with_bias else None
        y = es.conv(x, w, b, pads=[1, 1, 1, 1])
        params = [rng.uniform(0.5, 1.5, 4).astype(np.float32) for _ in range(4)]
        z = es.batch_normalization(y, *params, epsilon=1e-3)
        gb.output(z, "z")
        if conv_output_also_used:
            gb.output(y, "y")
    return gb.graph


def test_folds_with_and_without_conv_bias():
    feed = {"x": np.random.default_rng(1).standard_normal((2, 3, 9, 9)).astype(np.float32)}
    for with_bias in (True, False):
        graph = conv_bn(with_bias)
        expected = evaluate(graph, feed)
        result = fold_batch_norm(graph)
        assert result.changed
        result.graph.verify()
        assert [n.op for n in result.graph.nodes] == ["Conv"]
        assert result.graph.output_names == ["z"]
        np.testing.assert_allclose(evaluate(result.graph, feed)[0], expected[0],
                                   rtol=1e-5, atol=1e-5)


def test_leaves_conv_whose_output_is_used_elsewhere():
    graph = conv_bn(True, conv_output_also_used=True)
    result = fold_batch_norm(graph)
    assert not result.changed
    assert [n.op for n in result.graph.nodes] == ["Conv", "BatchNormalization"]
