"""Winograd convolutions on data holding inf or NaN (core/kernels/conv.c,
winograd_nonfinite) against the NumPy references: the plan keeps no copy of the weights
for such data, only their signs, and every output comes out as the direct sum gives it
(NaN from a NaN, from inf times a zero weight, or from infinities of both signs; else
the infinity of the one sign), with bias, residual and activation after. Files written
before this layout (U followed by the packed path's weights) still run."""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.kernels import conv as conv_kernels
from ge_hub.ops.conv import FUSED_DOMAIN
from ge_hub.reference import evaluate

from .nn_cases import SUMMED, check, compile_op, random_array

# (x shape, w shape, attrs): 3x3, stride 1, enough channels and tiles for Winograd
CASES = {
    "padded": ((1, 16, 13, 11), (20, 16, 3, 3), dict(pads=[1, 1, 1, 1])),
    "groups_batch": ((2, 32, 10, 9), (32, 16, 3, 3), dict(group=2, pads=[0, 1, 2, 0])),
    "no_padding": ((1, 17, 12, 14), (16, 17, 3, 3), {}),
}


@pytest.fixture
def rng():
    return np.random.default_rng(23)


def weights(rng, shape):
    return random_array(rng, shape) * (3.0 / (shape[1] * 9)) ** 0.5


def conv_path(model) -> int:
    step = next(s for s in model.plan.steps if s.op.endswith("Conv"))
    return struct.unpack_from("=q", step.attrs)[0]


def specials(x, rng, places):
    """x with inf, -inf and NaN at `places` random positions each, and one at a corner."""
    x = x.copy()
    flat = x.reshape(-1)
    for value in (np.inf, -np.inf, np.nan):
        flat[rng.choice(flat.size, places, replace=False)] = value
    x[0, 0, 0, 0] = np.inf
    return x


@pytest.mark.parametrize("places", [1, 4, 40])
@pytest.mark.parametrize("case", CASES)
def test_outputs_reading_inf_or_nan_are_the_direct_sums(rng, case, places):
    x_shape, w_shape, attrs = CASES[case]
    x = specials(random_array(rng, x_shape), rng, places)
    inputs = [x, weights(rng, w_shape), random_array(rng, (w_shape[0],))]
    model, _ = compile_op("Conv", inputs, attrs, consts=(1, 2))
    assert conv_path(model) == conv_kernels.CONV_WINOGRAD
    got = check("Conv", inputs, attrs, consts=(1, 2), tol=SUMMED)[0]
    assert np.isposinf(got).any() and np.isneginf(got).any() and np.isnan(got).any()


def test_inf_times_a_zero_weight_is_nan_and_lone_infinities_keep_their_sign(rng):
    x_shape, w_shape, attrs = CASES["padded"]
    x = random_array(rng, x_shape)
    w = weights(rng, w_shape)
    x[0, 3, 6, 5] = np.inf          # read by outputs (5..7, 4..6) of every channel
    w[2, 3] = 0.0                   # channel 2: inf * 0 at every tap: NaN
    w[4, 3] = np.abs(w[4, 3])       # channel 4: all positive: +inf
    w[5, 3] = -np.abs(w[5, 3])      # channel 5: all negative: -inf
    w[6, 3] = np.abs(w[6, 3]) * 1e-30  # tiny but positive: still +inf
    w[6, 3, 1, 1] = -1e-38              # one tap negative (the centre): that output -inf
    inputs = [x, w]
    got = check("Conv", inputs, attrs, consts=(1,), tol=SUMMED)[0]
    window = (0, slice(None), slice(5, 8), slice(4, 7))
    assert np.isnan(got[window][2]).all()
    assert np.isposinf(got[window][4]).all() and np.isneginf(got[window][5]).all()
    assert np.isneginf(got[0, 6, 6, 5]) and np.isposinf(got[0, 6, 5, 4])
    # outputs whose windows miss the inf are finite, though their tiles held it
    assert np.isfinite(got[0, :, 4, :]).all() and np.isfinite(got[0, :, :, 7]).all()


def test_infinities_of_both_signs_in_one_window_give_nan(rng):
    x_shape, w_shape, attrs = CASES["no_padding"]
    x = random_array(rng, x_shape)
    w = np.abs(weights(rng, w_shape))  # all positive
    x[0, 1, 4, 4], x[0, 9, 5, 6] = np.inf, -np.inf  # both in the window at (3..4, 4)
    got = check("Conv", [x, w], attrs, consts=(1,), tol=SUMMED)[0]
    assert np.isnan(got[0, :, 4, 4]).all() and np.isposinf(got[0, :, 2, 2]).all()


@pytest.mark.parametrize("activation, alpha, beta",
                         [("Relu", 0.0, 0.0), ("Clip", -1.0, 6.0), ("Sigmoid", 0.0, 0.0),
                          ("LeakyRelu", 0.1, 0.0), ("", 0.0, 0.0)])
def test_fused_epilogue_follows_the_sum(rng, activation, alpha, beta):
    """FusedConv: bias, residual (itself holding inf and NaN) and activation applied to
    the outputs set from the signs as to every other."""
    x_shape, w_shape, attrs = CASES["padded"]
    x = specials(random_array(rng, x_shape), rng, 3)
    w, b = weights(rng, w_shape), random_array(rng, (w_shape[0],))
    z = random_array(rng, (1, 20, 13, 11))
    z[0, 2, 0, 0], z[0, 5, 7, 7], z[0, 9, 3, 3] = -np.inf, np.nan, np.inf
    with es.GraphBuilder("g") as gb:
        y = es.op("FusedConv", es.input("x", "float32", list(x.shape)), es.const(w),
                  es.const(b), es.input("z", "float32", list(z.shape)), domain=FUSED_DOMAIN,
                  activation=activation, alpha=alpha, beta=beta, **attrs)
        es.output(y, "y")
    model = ge_hub.compile(gb.graph)
    assert conv_path(model) == conv_kernels.CONV_WINOGRAD
    got = model.run({"x": x, "z": z})[0]
    with np.errstate(invalid="ignore", over="ignore"):
        want = evaluate(gb.graph, {"x": x, "z": z})[0]
    np.testing.assert_allclose(got, want, equal_nan=True, rtol=2e-4, atol=2e-4)
    assert not np.isfinite(got).all()


def test_the_plan_keeps_signs_not_a_second_copy_of_the_weights(rng):
    x_shape, w_shape, attrs = CASES["groups_batch"]
    w = weights(rng, w_shape)
    w[3, 1, 2, 0] = 0.0
    model, _ = compile_op("Conv", [random_array(rng, x_shape), w], attrs, consts=(1,))
    (constant,) = model.plan.constants
    group, mg, cg = 2, 16, 16
    u_floats = group * 16 * conv_kernels._packed_floats(mg, cg)
    assert constant.size == u_floats + (32 * cg * 9 + 3) // 4
    signs = constant[u_floats:].view(np.int8)[:32 * cg * 9]
    np.testing.assert_array_equal(signs, np.sign(w).astype(np.int8).reshape(-1))


def test_the_layout_of_files_written_before_still_runs(rng):
    """U followed by the packed path's weights (the layout before the signs), as a .ghm
    file written then holds it: the kernel tells the layouts apart by W's size and runs
    the packed path for data holding inf or NaN."""
    from ge_hub.compiler import optimize
    from ge_hub.emit import emit_plan
    from ge_hub.executor import Executor, registry_resolver
    from ge_hub.plugins import get_registry

    x_shape, w_shape, attrs = CASES["padded"]
    w, b = weights(rng, w_shape), random_array(rng, (w_shape[0],))
    u_floats = 16 * conv_kernels._packed_floats(20, 16)

    def legacy(node, input_types, output_types):
        u = conv_kernels.prepack_conv(node, input_types, output_types)[1][:u_floats]
        return {1: np.concatenate([u, conv_kernels._pack_panels(w.reshape(1, 20, -1))
                                   .reshape(-1)])}

    for x in (random_array(rng, x_shape), specials(random_array(rng, x_shape), rng, 2)):
        with es.GraphBuilder("g") as gb:
            es.output(es.conv(es.input("x", "float32", list(x_shape)), es.const(w),
                              es.const(b), **attrs), "y")
        graph = optimize(gb.graph, {"x": list(x_shape)})
        (node,) = [n for n in graph.nodes if n.op == "Conv"]
        kernel = node.meta["kernel"]
        node.meta["kernel"] = dataclasses.replace(
            kernel, impl=dataclasses.replace(kernel.impl, prepack=legacy))
        plan = emit_plan(graph)
        (packed,) = [c for c in plan.constants if c.size > 20]
        assert packed.size == u_floats + conv_kernels._packed_floats(20, 16 * 9)
        got = Executor(plan, registry_resolver(get_registry())).run([x])[0]
        with np.errstate(invalid="ignore", over="ignore"):
            want = ge_hub.ops.get_schema("Conv").run_reference([x, w, b], attrs)[0]
        np.testing.assert_allclose(got, want, equal_nan=True, **SUMMED)
