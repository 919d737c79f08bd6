"""Branchy benchmark models for multi-stream execution, built with the ES API (random
weights, nothing downloaded).

- `inception_stack`: GoogLeNet's (Inception-v1's) blocks 3a, 3b, a stride-2 max pool and
  4a at batch 1 on a 28x28 map, each block four branches (1x1; 1x1 then 3x3; 1x1 then
  5x5; 3x3 max pool then 1x1) joined by a Concat.
- `towers`: a recommender-style model: 8 independent MLP towers of small GEMMs (each
  256 -> 128 -> 64 -> 16 with Relu) over one input, concatenated, then a small head.
"""

from __future__ import annotations

import numpy as np

from ge_hub import es

# (1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool projection) of GoogLeNet's table 1.
INCEPTION_3A = (64, 96, 128, 16, 32, 32)
INCEPTION_3B = (128, 128, 192, 32, 96, 64)
INCEPTION_4A = (192, 96, 208, 16, 48, 64)


def _conv_relu(rng, x, cin, cout, k):
    w = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))).astype(np.float32)
    b = (rng.standard_normal(cout) * 0.05).astype(np.float32)
    return es.relu(es.conv(x, w, b, pads=[k // 2] * 4))


def inception_block(rng, x, cin, widths):
    one, r3, three, r5, five, proj = widths
    b1 = _conv_relu(rng, x, cin, one, 1)
    b2 = _conv_relu(rng, _conv_relu(rng, x, cin, r3, 1), r3, three, 3)
    b3 = _conv_relu(rng, _conv_relu(rng, x, cin, r5, 1), r5, five, 5)
    pooled = es.max_pool(x, kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    b4 = _conv_relu(rng, pooled, cin, proj, 1)
    return es.concat([b1, b2, b3, b4], axis=1), one + three + five + proj


def inception_stack(batch: int = 1, size: int = 28, seed: int = 0):
    """Blocks 3a, 3b, max pool /2, 4a; returns (graph, feeds)."""
    rng = np.random.default_rng(seed)
    with es.GraphBuilder("inception_v1_blocks") as gb:
        x = es.input("x", "float32", [batch, 192, size, size])
        y, c = inception_block(rng, x, 192, INCEPTION_3A)
        y, c = inception_block(rng, y, c, INCEPTION_3B)
        y = es.max_pool(y, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
        y, c = inception_block(rng, y, c, INCEPTION_4A)
        gb.output(y, "y")
    feeds = {"x": rng.standard_normal((batch, 192, size, size)).astype(np.float32)}
    return gb.graph, feeds


def towers(batch: int = 64, features: int = 256, n_towers: int = 8, seed: int = 0):
    """8 MLP towers over one input, concatenated, then a 128 -> 1 head."""
    rng = np.random.default_rng(seed)

    def dense(h, cin, cout, relu=True):
        w = (rng.standard_normal((cin, cout)) / np.sqrt(cin)).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.05).astype(np.float32)
        h = h @ w + b
        return es.relu(h) if relu else h

    with es.GraphBuilder("towers8") as gb:
        x = es.input("x", "float32", [batch, features])
        outs = []
        for _ in range(n_towers):
            h = dense(x, features, 128)
            h = dense(h, 128, 64)
            outs.append(dense(h, 64, 16))
        joined = es.concat(outs, axis=1)
        gb.output(dense(dense(joined, 16 * n_towers, 128), 128, 1, relu=False), "y")
    feeds = {"x": rng.standard_normal((batch, features)).astype(np.float32)}
    return gb.graph, feeds


MODELS = {"inception-v1-blocks": inception_stack, "towers8-mlp": towers}
