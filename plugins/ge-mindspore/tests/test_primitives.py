"""Primitives beyond the zoo, each family in a small Cell, against MindSpore
(`mindspore.load` + `nn.GraphCell` of the exported file)."""

from __future__ import annotations

import ge_hub
import mindspore as ms
import numpy as np
import pytest
from mindspore import mint, nn, ops

from ge_mindspore import testing

from .conftest import random


class Activations(nn.Cell):
    def __init__(self):
        super().__init__()
        self.gelu = nn.GELU(approximate=False)     # written out with Erf
        self.gelu_tanh = nn.GELU(approximate=True)  # the GeLU primitive
        self.silu, self.hswish, self.hsigmoid = nn.SiLU(), nn.HSwish(), nn.HSigmoid()
        self.leaky, self.elu, self.softplus = nn.LeakyReLU(0.2), nn.ELU(), ops.Softplus()
        self.log_softmax = nn.LogSoftmax(axis=-1)

    def construct(self, x):
        return (self.gelu(x), self.gelu_tanh(x), self.silu(x), self.hswish(x),
                self.hsigmoid(x), self.leaky(x), self.elu(x), self.softplus(x),
                self.log_softmax(x), ops.rsqrt(ops.abs(x) + 1), ops.square(x),
                ops.pow(ops.abs(x), 1.5), ops.floor(x), ops.neg(x))


class Shapes(nn.Cell):
    def construct(self, x):
        index = ms.Tensor(np.array([2, 0, 1], np.int32))
        reduced = (ops.reduce_max(x, 2) + ops.reduce_min(x, 2) + ops.reduce_sum(x, 2)
                   + x.mean(axis=2))
        first, second = ops.split(x, 2, axis=2)
        return (ops.gather(x, index, 1), ops.tile(x, (1, 2, 1)),
                ops.expand_dims(x, 1).squeeze(1), ops.cast(x, ms.float16).astype(ms.float32),
                reduced, ops.where(x > 0, x, x * 0.1), ops.flatten(x, start_dim=1),
                ops.matmul(x, x.transpose(0, 2, 1)), ops.concat([x, x], axis=-1),
                first + second, x.max(), ops.maximum(x, 0.5), ops.minimum(x, -0.5))


class Convolutions(nn.Cell):
    def __init__(self):
        super().__init__()
        self.same = nn.Conv2d(4, 8, 3, stride=2, pad_mode="same")
        self.dilated = nn.Conv2d(8, 8, 3, pad_mode="pad", padding=2, dilation=2, group=4,
                                 has_bias=True)
        self.max_pool = nn.MaxPool2d(3, 2, pad_mode="same")
        self.avg_same = nn.AvgPool2d(3, 1, pad_mode="same")
        self.avg = nn.AvgPool2d(2, 2)
        self.dropout = nn.Dropout(p=0.5)
        self.linear = mint.nn.Linear(8 * 2 * 2, 5)  # the Dense primitive

    def construct(self, x):
        y = self.avg(self.avg_same(self.max_pool(self.dilated(self.same(x)))))
        return self.linear(self.dropout(y).reshape(y.shape[0], -1))


@pytest.mark.parametrize(("cell", "shape"), [(Activations, (2, 3, 5)), (Shapes, (2, 3, 4)),
                                             (Convolutions, (2, 4, 16, 16))],
                         ids=["activations", "shapes", "convolutions"])
def test_against_mindspore(cell, shape, export):
    x = random(shape)
    report = testing.compare(export(cell(), x), [x])
    assert report.max_rel_error < 1e-5, report
    assert report.python_steps == 0, report


def test_conv2d_ext_against_nn_conv2d(export):
    """mint.nn.Conv2d exports the Conv2DExt primitive, which MindSpore 2.10 cannot run on
    CPU; nn.Conv2d with the same weights is the reference."""
    ms.set_seed(0)
    mint_conv = mint.nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=1, groups=2)
    reference = nn.Conv2d(4, 6, 3, stride=2, pad_mode="pad", padding=1, group=2, has_bias=True)
    reference.weight.set_data(mint_conv.weight.data)
    reference.bias.set_data(mint_conv.bias.data)
    reference.set_train(False)
    x = random((2, 4, 9, 9))
    graph = ge_hub.load(export(mint_conv, x))
    (got,) = ge_hub.compile(graph).run([x])
    (want,) = testing.run_cell(reference, [x])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
