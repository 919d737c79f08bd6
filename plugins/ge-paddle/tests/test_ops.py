"""Converters one by one: small layers through `ge_hub.load(layer, input_spec=...)`,
compared with the layer in dynamic-graph mode, covering the ops the detection and OCR
heads use beside the zoo's (transposed convolution, resizing, padding, channel-last
layouts, slicing, reductions, comparisons)."""

from __future__ import annotations

import ge_hub
import numpy as np
import paddle
import paddle.nn.functional as F
import pytest
from conftest import max_relative_error, paddle_eager, run_ge


class Lambda(paddle.nn.Layer):
    def __init__(self, function, *layers):
        super().__init__()
        self.function = function
        self.parts = paddle.nn.LayerList(layers)

    def forward(self, x):
        return self.function(x, *self.parts)


def _layer(function, *layers):
    paddle.seed(0)
    layer = Lambda(function, *layers)
    layer.eval()
    return layer


IMAGE = (2, 4, 8, 8)

CASES = {
    "conv_transpose": (lambda x, c: c(x), [paddle.nn.Conv2DTranspose(4, 3, 3, stride=2,
                                                                    padding=1,
                                                                    output_padding=1)], IMAGE),
    "conv_same_nhwc": (lambda x, c: c(x), [paddle.nn.Conv2D(4, 6, 3, stride=2, padding="SAME",
                                                            data_format="NHWC")], (2, 9, 9, 4)),
    "conv_valid_dilated": (lambda x, c: c(x), [paddle.nn.Conv2D(4, 5, 3, padding="VALID",
                                                                dilation=2)], IMAGE),
    "conv_asymmetric_pads": (lambda x, c: c(x), [paddle.nn.Conv2D(4, 5, 3,
                                                                  padding=[1, 0, 2, 1])], IMAGE),
    "batch_norm_nhwc": (lambda x, b: b(x), [paddle.nn.BatchNorm2D(4, data_format="NHWC")],
                        (2, 5, 5, 4)),
    "avg_pool_padded": (lambda x: F.avg_pool2d(x, 3, 2, padding=1, exclusive=True), [], IMAGE),
    "avg_pool_inclusive": (lambda x: F.avg_pool2d(x, 3, 2, padding=1, exclusive=False), [],
                           IMAGE),
    "max_pool_ceil": (lambda x: F.max_pool2d(x, 3, 2, ceil_mode=True), [], (2, 4, 9, 9)),
    "adaptive_avg_2x2": (lambda x: F.adaptive_avg_pool2d(x, 2), [], IMAGE),
    "adaptive_max_1": (lambda x: F.adaptive_max_pool2d(x, 1), [], IMAGE),
    "adaptive_avg_unequal": (lambda x: F.adaptive_avg_pool2d(x, [3, 5]), [], (2, 4, 8, 7)),
    "adaptive_max_unequal": (lambda x: F.adaptive_max_pool2d(x, 3), [], (2, 4, 10, 8)),
    "bilinear_half_pixel": (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), [],
                            IMAGE),
    "bilinear_align_corners": (lambda x: F.interpolate(x, size=[11, 13], mode="bilinear",
                                                       align_corners=True), [], IMAGE),
    "nearest_upsample": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), [],
                         IMAGE),
    "nearest_to_size": (lambda x: F.interpolate(x, size=[12, 5], mode="nearest"), [], IMAGE),
    "pad_reflect": (lambda x: F.pad(x, [1, 2, 0, 1], mode="reflect"), [], IMAGE),
    "pad_constant": (lambda x: F.pad(x, [1, 1, 2, 2], value=0.5), [], IMAGE),
    "activations": (lambda x: F.hardsigmoid(x) + F.leaky_relu(x, 0.1) + F.elu(x)
                    + F.gelu(x, approximate=True) + F.gelu(x) + F.sigmoid(x) + F.silu(x)
                    + F.softplus(x) + F.relu6(x) + F.hardswish(x) + paddle.tanh(x), [], IMAGE),
    "prelu": (lambda x, p: p(x), [paddle.nn.PReLU(4, 0.2)], IMAGE),
    "group_norm": (lambda x, g: g(x), [paddle.nn.GroupNorm(2, 4)], IMAGE),
    "instance_norm": (lambda x, n: n(x), [paddle.nn.InstanceNorm2D(4)], IMAGE),
    "slices": (lambda x: x[:, 1:3, ::2, -3:] - x[:, :2, 1::2, :3], [], IMAGE),
    "concat_split_stack": (lambda x: paddle.stack(paddle.split(paddle.concat([x, x * 2], 1),
                                                                 [3, 5], axis=1)[1:] * 2, 0),
                           [], IMAGE),
    "split_num": (lambda x: paddle.split(x, 2, axis=1)[1], [], IMAGE),
    "squeeze_unsqueeze": (lambda x: paddle.unsqueeze(paddle.squeeze(x[:, :1], 1), [0, 3]),
                          [], IMAGE),
    "expand_tile": (lambda x: paddle.expand(x[:, :1], [2, 3, 8, 8])
                    + paddle.tile(x[:, :1], [1, 3, 1, 1]), [], IMAGE),
    "reductions": (lambda x: paddle.mean(x, axis=[2, 3]) + paddle.sum(x, axis=-1).max(-1)
                   - paddle.min(x, axis=[1, 2, 3], keepdim=True).squeeze([2, 3]), [], IMAGE),
    "argmax": (lambda x: paddle.argmax(x, axis=1), [], IMAGE),
    "compare_where": (lambda x: paddle.where(x > 0.5, x, paddle.zeros_like(x))
                      + paddle.cast(x <= -0.5, "float32"), [], IMAGE),
    "clip_pow": (lambda x: paddle.clip(x, -0.5, 0.7) + paddle.pow(paddle.abs(x), 1.5), [],
                 IMAGE),
    "matmul_transposes": (lambda x: paddle.matmul(x, x, transpose_x=True), [], IMAGE),
    "flatten_middle": (lambda x: paddle.flatten(x, 1, 2) * 3.0, [], IMAGE),
    "softmax_log_softmax": (lambda x: F.softmax(x, 1) + F.log_softmax(x, -1), [], IMAGE),
    "dynamic_reshape": (lambda x: paddle.reshape(x, [paddle.shape(x)[0], -1]), [], IMAGE),
    "gather_index": (lambda x: paddle.gather(x, paddle.to_tensor([2, 0]), axis=1), [], IMAGE),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_converter_matches_paddle(case):
    function, layers, shape = CASES[case]
    layer = _layer(function, *layers)
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    want = paddle_eager(layer, [x])
    graph = ge_hub.load(layer, input_spec=[paddle.static.InputSpec(list(shape), "float32",
                                                                   "x")])
    got, steps = run_ge(graph, [x])
    assert max_relative_error(got, want) <= 1e-4
    assert steps == 0


def test_symbolic_batch_runs_two_sizes():
    layer = _layer(lambda x, c: F.relu(c(x)), paddle.nn.Conv2D(4, 4, 3, padding=1))
    graph = ge_hub.load(layer, input_spec=[paddle.static.InputSpec([None, 4, 8, 8],
                                                                   "float32", "x")])
    assert str(graph.inputs[0].type.shape[0]) == "x.0"
    compiled = ge_hub.compile(graph)
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 4, 8, 8)).astype(np.float32)
        (got,) = compiled.run([x])
        assert max_relative_error([got], paddle_eager(layer, [x])) <= 1e-4


def test_example_inputs_fix_the_shapes():
    layer = _layer(lambda x: x * 2.0)
    x = np.ones((2, 3), np.float32)
    graph = ge_hub.load(layer, example_inputs=(x,))
    assert graph.inputs[0].type.shape == (2, 3)
    assert layer.training is False


class Branchy(paddle.nn.Layer):
    """A data-dependent if and a while loop over a run-time count (pd_op.if/pd_op.while)."""

    def forward(self, x):
        if paddle.mean(x) > 0:
            y = x * 2.0
        else:
            y = x - 1.0
        i = paddle.zeros([1], "int64")
        while i < paddle.shape(x)[0]:
            y = y + 1.0
            i = i + 1
        return y


def test_if_and_while_become_if_and_loop():
    layer = Branchy()
    layer.eval()
    graph = ge_hub.load(layer, input_spec=[paddle.static.InputSpec([None, 4], "float32", "x")])
    assert {"If", "Loop"} <= {node.op for node in graph.nodes}
    compiled = ge_hub.compile(graph)
    for x in (np.full((3, 4), 0.5, np.float32), np.full((2, 4), -0.5, np.float32)):
        (got,) = compiled.run([x])
        np.testing.assert_allclose(got, paddle_eager(layer, [x])[0], rtol=1e-6)
