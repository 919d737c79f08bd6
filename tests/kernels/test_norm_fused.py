"""ge_hub.SkipLayerNormalization's C kernel (core/kernels/norm_fused.c) against the NumPy
references of the unfused nodes it replaces (the bias Add, the residual Add and the
LayerNormalization): odd sizes, Scale/B/Bias that repeat along a longer row, absent B and
Bias, NaN and inf, and Y sharing an input's memory."""

from __future__ import annotations

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.reference import evaluate
from ge_hub.testing import assert_outputs_close

from .nn_cases import random_array, with_specials

KERNEL = "ge_nn_skip_layer_norm_f32"


def block(rng, shape, *, axis=-1, param_shape=None, with_b=True, with_bias=True,
          x_data=None):
    """LayerNormalization((x + bias) + skip): graph and feeds."""
    rank = len(shape)
    row = list(shape[axis % rank:])
    param_shape = row if param_shape is None else param_shape
    feeds = {"x": random_array(rng, shape) if x_data is None else x_data,
             "skip": random_array(rng, shape)}
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", list(shape))
        skip = es.input("skip", "float32", list(shape))
        if with_bias:
            x = es.add(x, es.const(random_array(rng, param_shape)))
        scale = es.const(random_array(rng, param_shape, 0.5, 2.0))
        b = es.const(random_array(rng, param_shape)) if with_b else None
        gb.output(es.layer_normalization(es.add(x, skip), scale, b, axis=axis,
                                         epsilon=1e-3), "y")
    return gb.graph, feeds


def run_fused(graph, feeds):
    model = ge_hub.compile(graph)
    kernels = [s.kernel for s in model.plan.steps]
    assert kernels == [KERNEL], kernels
    return model.run(feeds)


@pytest.mark.parametrize("shape", [(1, 7, 33), (2, 3, 768), (5, 1), (3, 129)])
@pytest.mark.parametrize("with_b, with_bias", [(True, True), (True, False), (False, True),
                                               (False, False)])
def test_matches_the_unfused_nodes(rng, shape, with_b, with_bias):
    graph, feeds = block(rng, shape, with_b=with_b, with_bias=with_bias)
    assert_outputs_close(run_fused(graph, feeds), evaluate(graph, feeds), ["y"], 1e-5, 1e-5)


@pytest.mark.parametrize("shape, axis, param_shape", [
    ((2, 5, 7), -2, [7]),          # row of 35 elements, params repeating every 7
    ((3, 4, 6, 5), 1, [1, 1, 5]),  # leading 1s in the params
    ((2, 9, 11), -2, [1, 11]),
])
def test_params_repeating_along_a_longer_row(rng, shape, axis, param_shape):
    graph, feeds = block(rng, shape, axis=axis, param_shape=param_shape)
    assert_outputs_close(run_fused(graph, feeds), evaluate(graph, feeds), ["y"], 1e-5, 1e-5)


def test_nan_and_inf_propagate_like_the_reference(rng):
    x = with_specials(random_array(rng, (6, 17)), rng)
    graph, feeds = block(rng, (6, 17), x_data=x)
    (got,) = run_fused(graph, feeds)
    with np.errstate(invalid="ignore", over="ignore"):
        (want,) = evaluate(graph, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)
    assert np.isnan(got).any()


def test_output_may_reuse_an_input_buffer(rng):
    # A chain of two blocks: the second's X is the first's Y, which the arena may reuse.
    shape = (4, 10, 24)
    feeds = {"x": random_array(rng, shape), "skip": random_array(rng, shape)}
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", list(shape))
        skip = es.input("skip", "float32", list(shape))
        scale = es.const(random_array(rng, [24], 0.5, 2.0))
        y = es.layer_normalization(es.add(es.relu(x), skip), scale)
        y = es.layer_normalization(es.add(es.relu(y), skip), scale)
        gb.output(y, "y")
    model = ge_hub.compile(gb.graph)
    assert [s.kernel for s in model.plan.steps].count(KERNEL) == 2
    assert_outputs_close(model.run(feeds), evaluate(gb.graph, feeds), ["y"], 1e-5, 1e-5)


@pytest.mark.parametrize("with_bias", [True, False])
def test_sum_output_of_a_pre_norm_block(rng, with_bias):
    # The residual sum is read again after the LayerNormalization: the fused step writes
    # it as its second output, which the graph's last Add reads.
    shape = (3, 11, 40)
    feeds = {"x": random_array(rng, shape), "skip": random_array(rng, shape)}
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", list(shape))
        skip = es.input("skip", "float32", list(shape))
        h = es.add(x, es.const(random_array(rng, [40]))) if with_bias else x
        total = es.add(h, skip)
        normed = es.layer_normalization(total, es.const(random_array(rng, [40], 0.5, 2.0)),
                                        es.const(random_array(rng, [40])))
        gb.output(es.add(total, es.tanh(normed)), "y")
    # (fuse_elementwise off: the Tanh and the Add reading the sum stay steps of their own)
    model = ge_hub.compile(gb.graph, options={"disable_passes": ["fuse_elementwise"]})
    kernels = [s.kernel for s in model.plan.steps]
    assert kernels.count(KERNEL) == 1 and len(kernels) == 3, kernels
    assert_outputs_close(model.run(feeds), evaluate(gb.graph, feeds), ["y"], 1e-5, 1e-5)
