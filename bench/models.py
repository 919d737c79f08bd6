"""Benchmark models built with the ES API, with random weights (nothing downloaded)."""

from __future__ import annotations

import numpy as np

from ge_hub import es


def elementwise_chain(length: int, width: int = 64, cheap: bool = False):
    """`length` small elementwise ops on a [1, width] tensor, values kept bounded.

    The ops cycle through Add, Mul, Relu and Tanh; with `cheap`, Neg replaces Tanh, so
    that the per-op time is the engine's overhead rather than a transcendental's cost."""
    with es.GraphBuilder(f"chain{length}") as gb:
        x = es.input("x", "float32", [1, width])
        y = x
        for i in range(length):
            kind = i % 4
            if kind == 0:
                y = y + np.float32(0.01)
            elif kind == 1:
                y = y * np.float32(0.99)
            elif kind == 2:
                y = es.relu(y)
            else:
                y = es.neg(y) if cheap else es.tanh(y)
        gb.output(y, "y")
    return gb.graph


def mlp(batch: int | str = "N", sizes=(784, 256, 256, 10), seed: int = 0):
    rng = np.random.default_rng(seed)
    with es.GraphBuilder("mlp") as gb:
        x = es.input("x", "float32", [batch, sizes[0]])
        h = x
        for i, (cin, cout) in enumerate(zip(sizes[:-1], sizes[1:])):
            w = (rng.standard_normal((cin, cout)) / np.sqrt(cin)).astype(np.float32)
            b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
            h = h @ w + b
            if i < len(sizes) - 2:
                h = es.relu(h)
        gb.output(h, "y")
    return gb.graph


def _conv(rng, x, cin, cout, k, stride=1, pad=0):
    w = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))).astype(np.float32)
    return es.conv(x, w, strides=[stride, stride], pads=[pad] * 4)


def _bn(rng, x, c):
    scale = rng.uniform(0.5, 1.0, c).astype(np.float32)
    bias = (rng.standard_normal(c) * 0.1).astype(np.float32)
    mean = (rng.standard_normal(c) * 0.1).astype(np.float32)
    var = rng.uniform(0.5, 1.5, c).astype(np.float32)
    return es.batch_normalization(x, scale, bias, mean, var)


def _basic_block(rng, x, cin, cout, stride):
    y = es.relu(_bn(rng, _conv(rng, x, cin, cout, 3, stride, 1), cout))
    y = _bn(rng, _conv(rng, y, cout, cout, 3, 1, 1), cout)
    shortcut = x
    if stride != 1 or cin != cout:
        shortcut = _bn(rng, _conv(rng, x, cin, cout, 1, stride, 0), cout)
    return es.relu(y + shortcut)


def resnet18(batch: int | str = "N", size: int = 224, classes: int = 1000, seed: int = 0):
    """ResNet-18 (He et al.): 7x7 stem, 4 stages of 2 basic blocks, global pool, FC."""
    rng = np.random.default_rng(seed)
    with es.GraphBuilder("resnet18") as gb:
        x = es.input("x", "float32", [batch, 3, size, size])
        y = es.relu(_bn(rng, _conv(rng, x, 3, 64, 7, 2, 3), 64))
        y = es.max_pool(y, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
        cin = 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            y = _basic_block(rng, y, cin, cout, stride)
            y = _basic_block(rng, y, cout, cout, 1)
            cin = cout
        y = es.flatten(es.global_average_pool(y))
        w = (rng.standard_normal((512, classes)) / np.sqrt(512)).astype(np.float32)
        gb.output(y @ w + np.zeros(classes, np.float32), "logits")
    return gb.graph
