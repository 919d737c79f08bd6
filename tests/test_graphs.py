"""Whole graphs through the compiler and the C executor, against the reference evaluator.

MLP, CNN with BatchNormalization, depthwise-separable CNN and a transformer encoder
block: results match (rtol 1e-4), the arena stays within 1.05x of the lower bound,
graphs built to tempt in-place and view reuse into corrupting a live value still agree,
and one compiled model gives correct results to 8 threads at once.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.reference import evaluate

RTOL, ATOL = 1e-4, 1e-5


def first(result):
    """ES ops with optional outputs may return a tuple; take the main output."""
    return result[0] if isinstance(result, tuple) else result


def weights(rng, *shape, scale=None):
    scale = scale if scale is not None else 1.0 / np.sqrt(max(1, np.prod(shape[1:])))
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def mlp():
    rng = np.random.default_rng(0)
    with es.GraphBuilder("mlp") as gb:
        x = es.input("x", "float32", ["N", 784])
        h = es.relu(x @ weights(rng, 784, 256, scale=0.05) + weights(rng, 256, scale=0.1))
        h = es.relu(h @ weights(rng, 256, 256, scale=0.06) + weights(rng, 256, scale=0.1))
        gb.output(es.softmax(h @ weights(rng, 256, 10, scale=0.06)), "y")
    return gb.graph, {"x": rng.standard_normal((3, 784)).astype(np.float32)}


def batch_norm(rng, x, channels):
    scale = rng.uniform(0.5, 1.5, channels).astype(np.float32)
    bias = weights(rng, channels, scale=0.1)
    mean = weights(rng, channels, scale=0.1)
    var = rng.uniform(0.5, 1.5, channels).astype(np.float32)
    return first(es.batch_normalization(x, scale, bias, mean, var, epsilon=1e-5))


def cnn_bn():
    rng = np.random.default_rng(1)
    with es.GraphBuilder("cnn_bn") as gb:
        x = es.input("x", "float32", ["N", 3, 17, 17])
        y = es.conv(x, weights(rng, 16, 3, 3, 3), pads=[1, 1, 1, 1])
        y = es.relu(batch_norm(rng, y, 16))
        y = first(es.max_pool(y, kernel_shape=[2, 2], strides=[2, 2]))
        z = es.conv(y, weights(rng, 32, 16, 3, 3), strides=[2, 2], pads=[1, 0, 1, 0])
        z = es.relu(batch_norm(rng, z, 32))
        z = es.conv(z, weights(rng, 32, 32, 1, 1), weights(rng, 32, scale=0.1))
        z = es.flatten(es.global_average_pool(z))
        gb.output(z @ weights(rng, 32, 10), "logits")
    return gb.graph, {"x": rng.standard_normal((2, 3, 17, 17)).astype(np.float32)}


def depthwise_separable():
    rng = np.random.default_rng(2)

    def block(x, cin, cout, stride):
        d = es.conv(x, weights(rng, cin, 1, 3, 3), group=cin, strides=[stride, stride],
                    pads=[1, 1, 1, 1])
        d = es.clip(batch_norm(rng, d, cin), np.float32(0), np.float32(6))
        p = es.conv(d, weights(rng, cout, cin, 1, 1))
        return es.relu(batch_norm(rng, p, cout))

    with es.GraphBuilder("dwsep") as gb:
        x = es.input("x", "float32", ["N", 8, 15, 15])
        y = block(x, 8, 16, 1)
        y = block(y, 16, 24, 2)
        y = block(y, 24, 24, 1) + y
        gb.output(es.flatten(es.global_average_pool(y)), "features")
    return gb.graph, {"x": rng.standard_normal((2, 8, 15, 15)).astype(np.float32)}


def transformer_block():
    rng = np.random.default_rng(3)
    d_model, heads, ffn = 32, 4, 64
    head_dim = d_model // heads

    def heads_first(t):  # [N, S, D] -> [N, H, S, d]
        t = es.reshape(t, np.array([0, 0, heads, head_dim], np.int64))
        return es.transpose(t, perm=[0, 2, 1, 3])

    def layer_norm(t):
        gamma = rng.uniform(0.5, 1.5, d_model).astype(np.float32)
        return first(es.layer_normalization(t, gamma, weights(rng, d_model, scale=0.1),
                                            axis=-1, epsilon=1e-5))

    with es.GraphBuilder("encoder") as gb:
        x = es.input("x", "float32", ["N", "S", d_model])
        mask = es.input("mask", "float32", ["N", 1, 1, "S"])  # 0 keep, -1e9 pad
        q = heads_first(x @ weights(rng, d_model, d_model) + weights(rng, d_model, scale=0.1))
        k = heads_first(x @ weights(rng, d_model, d_model) + weights(rng, d_model, scale=0.1))
        v = heads_first(x @ weights(rng, d_model, d_model) + weights(rng, d_model, scale=0.1))
        scores = q @ es.transpose(k, perm=[0, 1, 3, 2]) * np.float32(1 / np.sqrt(head_dim))
        attention = es.softmax(scores + mask, axis=-1) @ v
        merged = es.reshape(es.transpose(attention, perm=[0, 2, 1, 3]),
                            np.array([0, 0, d_model], np.int64))
        h = layer_norm(x + merged @ weights(rng, d_model, d_model))
        f = es.gelu(h @ weights(rng, d_model, ffn) + weights(rng, ffn, scale=0.1))
        gb.output(layer_norm(h + f @ weights(rng, ffn, d_model)), "y")
    n, s = 2, 7
    mask = np.zeros((n, 1, 1, s), np.float32)
    mask[1, ..., 5:] = -1e9
    return gb.graph, {"x": rng.standard_normal((n, s, d_model)).astype(np.float32),
                      "mask": mask}


MODELS = [mlp, cnn_bn, depthwise_separable, transformer_block]


@pytest.mark.parametrize("build", MODELS, ids=lambda f: f.__name__)
def test_matches_reference(build):
    graph, feed = build()
    model = ge_hub.compile(graph, options={"verify": True})
    got = model.run(feed)
    expected = evaluate(graph, feed)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("build", MODELS, ids=lambda f: f.__name__)
def test_arena_within_5_percent_of_lower_bound(build):
    graph, feed = build()
    model = ge_hub.compile(graph)
    model.run(feed)
    summary = model.summary()
    assert summary["lower_bound_bytes"] <= summary["arena_bytes"]
    assert summary["arena_bytes"] <= 1.05 * summary["lower_bound_bytes"]
    assert summary["arena_bytes"] < summary["naive_bytes"]


def tempting_graph():
    """Values read long after later elementwise ops and views could overwrite them."""
    with es.GraphBuilder("tempting") as gb:
        x = es.input("x", "float32", [6, 10])
        a = es.relu(x)                       # read again at the very end
        b = es.reshape(a, np.array([60], np.int64))   # a view of a
        c = es.sigmoid(b)                    # must not write into a's buffer
        d = es.tanh(c) * 3.0                 # in place into c is fine
        e = es.exp(es.reshape(d, np.array([6, 10], np.int64)) - 1.0)
        f = e + a                            # reads a: still intact?
        g = es.neg(f)
        gb.output(g, "g")
        gb.output(b, "b_view_of_a")          # an output that is a view
        gb.output(x, "x_passthrough")        # an output that is an input
        gb.output(g, "g_again")              # the same value twice
    return gb.graph


def test_inplace_and_views_never_corrupt_live_values():
    graph = tempting_graph()
    rng = np.random.default_rng(5)
    feed = {"x": rng.standard_normal((6, 10)).astype(np.float32)}
    original = feed["x"].copy()
    got = ge_hub.compile(graph).run(feed)
    for g, e in zip(got, evaluate(graph, feed)):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(feed["x"], original)  # inputs are never written
    assert not np.shares_memory(got[2], feed["x"])
    assert not np.shares_memory(got[0], got[3])


def test_eight_threads_share_one_compiled_model():
    graph, _ = cnn_bn()
    model = ge_hub.compile(graph)
    rng = np.random.default_rng(7)
    feeds = [{"x": rng.standard_normal((1 + i % 3, 3, 17, 17)).astype(np.float32)}
             for i in range(8)]
    expected = [evaluate(graph, f)[0] for f in feeds]
    results: list = [None] * 8
    errors: list = []
    barrier = threading.Barrier(8)

    def work(i):
        try:
            barrier.wait()
            for _ in range(5):
                (out,) = model.run(feeds[i])
                np.testing.assert_allclose(out, expected[i], rtol=RTOL, atol=ATOL)
            results[i] = out
        except Exception as exc:  # reported below with the thread's index
            errors.append((i, exc))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert all(r is not None for r in results)
