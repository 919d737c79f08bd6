"""Graphs for the offline-model tests (tests/test_offline*.py), built with the ES API: an
MLP, a conv net with BatchNorm whose convolutions take the packed and the Winograd paths
(prepacked weights), a depthwise-separable net, a two-input attention block, a Loop
whose trip count is an input (a Python Closure step, plans specialized on a value), and a
model that runs in segments (NonZero, then TopK with a computed K)."""

from __future__ import annotations

import numpy as np

from ge_hub import es


def _w(rng, *shape, scale=None):
    scale = scale if scale is not None else 1.0 / np.sqrt(max(1, np.prod(shape[1:])))
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _first(result):
    return result[0] if isinstance(result, tuple) else result


def _bn(rng, x, channels):
    return _first(es.batch_normalization(
        x, rng.uniform(0.5, 1.5, channels).astype(np.float32), _w(rng, channels, scale=0.1),
        _w(rng, channels, scale=0.1), rng.uniform(0.5, 1.5, channels).astype(np.float32),
        epsilon=1e-5))


def mlp():
    rng = np.random.default_rng(0)
    with es.GraphBuilder("mlp") as gb:
        x = es.input("x", "float32", ["N", 64])
        h = es.relu(x @ _w(rng, 64, 48) + _w(rng, 48, scale=0.1))
        gb.output(es.softmax(h @ _w(rng, 48, 10)), "y")
    return gb.graph, {"x": (5, 64)}


def conv_net():
    rng = np.random.default_rng(1)
    with es.GraphBuilder("conv_net") as gb:
        x = es.input("x", "float32", ["N", 3, 18, 18])
        y = es.relu(_bn(rng, es.conv(x, _w(rng, 16, 3, 3, 3), pads=[1, 1, 1, 1]), 16))
        y = _first(es.max_pool(y, kernel_shape=[2, 2], strides=[2, 2]))
        z = es.relu(_bn(rng, es.conv(y, _w(rng, 32, 16, 3, 3), strides=[2, 2],
                                     pads=[1, 1, 1, 1]), 32))
        z = es.conv(z, _w(rng, 32, 32, 1, 1), _w(rng, 32, scale=0.1))
        gb.output(es.flatten(es.global_average_pool(z)) @ _w(rng, 32, 10), "logits")
    return gb.graph, {"x": (2, 3, 18, 18)}


def depthwise():
    rng = np.random.default_rng(2)
    with es.GraphBuilder("depthwise") as gb:
        x = es.input("x", "float32", ["N", 8, 15, 15])
        d = es.conv(x, _w(rng, 8, 1, 3, 3), group=8, pads=[1, 1, 1, 1])
        d = es.clip(_bn(rng, d, 8), np.float32(0), np.float32(6))
        p = es.relu(_bn(rng, es.conv(d, _w(rng, 16, 8, 1, 1)), 16))
        gb.output(es.flatten(es.global_average_pool(p)), "features")
    return gb.graph, {"x": (2, 8, 15, 15)}


def attention():
    rng = np.random.default_rng(3)
    d_model, heads = 16, 2
    head_dim = d_model // heads

    def split(t):
        t = es.reshape(t, np.array([0, 0, heads, head_dim], np.int64))
        return es.transpose(t, perm=[0, 2, 1, 3])

    with es.GraphBuilder("attention") as gb:
        x = es.input("x", "float32", ["N", "S", d_model])
        mask = es.input("mask", "float32", ["N", 1, 1, "S"])
        q, k, v = (split(x @ _w(rng, d_model, d_model)) for _ in range(3))
        scores = q @ es.transpose(k, perm=[0, 1, 3, 2]) * np.float32(1 / np.sqrt(head_dim))
        a = es.softmax(scores + mask, axis=-1) @ v
        merged = es.reshape(es.transpose(a, perm=[0, 2, 1, 3]),
                            np.array([0, 0, d_model], np.int64))
        gamma = rng.uniform(0.5, 1.5, d_model).astype(np.float32)
        gb.output(_first(es.layer_normalization(x + merged, gamma, _w(rng, d_model, scale=0.1),
                                                axis=-1, epsilon=1e-5)), "y")
    return gb.graph, {"x": (2, 7, d_model), "mask": (2, 1, 1, 7)}


def loop():
    """A Loop whose trip count `m` is a graph input: one control step (its body a
    sub-plan) in a plan specialized on m's value."""
    with es.GraphBuilder("loop") as main:
        x = es.input("x", "float32", [6])
        m = es.input("m", "int64", [])
        h = es.mul(es.relu(x), np.float32(3))
        with es.GraphBuilder("body") as body:
            i = es.input("i", "int64", [])
            c = es.input("c", "bool", [])
            s = es.input("s", "float32", [6])
            nxt = es.add(es.mul(s, np.float32(0.5)), h)
            body.output(c, "keep")
            body.output(nxt, "next")
            body.output(es.mul(nxt, es.cast(i, to="float32")), "scanned")
        final, scanned = es.loop(m, None, es.neg(x), body=body)
        main.output(es.add(es.exp(final), np.float32(1)), "final")
        main.output(es.tanh(scanned), "scanned")
    return main.graph, {"x": (6,), "m": ()}


def segmented():
    """Runs in segments: NonZero of a computed value, then TopK with a K it computes."""
    with es.GraphBuilder("segmented") as gb:
        x = es.input("x", "float32", ["N", 3])
        where = es.non_zero(es.relu(x))
        k = es.shape(where, start=1)
        values, _ = es.top_k(es.cast(es.reduce_sum(where, axes=np.array([0], np.int64),
                                                   keepdims=0), to="float32"), k, outputs=2)
        gb.output(values, "sums")
    return gb.graph, {"x": (4, 3)}


def feeds(graph, shapes, seed=0, m=3):
    rng = np.random.default_rng(seed)
    out = {}
    for value in graph.inputs:
        if value.type.dtype.value == "int64":
            out[value.name] = np.array(m, np.int64)
        else:
            out[value.name] = rng.standard_normal(shapes[value.name]).astype(np.float32)
    return out


MODELS = [mlp, conv_net, depthwise, attention]
