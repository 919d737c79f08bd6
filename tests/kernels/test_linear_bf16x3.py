"""bf16x3 products (the `bf16x3` precision, `mixed`'s accurate products): ge_nn_linear_bf16
with each operand split into a high and a low bf16 part (core/kernels/nn_gemm_bf16.c,
ge_hub/kernels/nn_bf16.py). Against a float64 product of the unrounded fp32 inputs, within
bf16x3's bound (about 2^-16 of the sum of |x w|, far inside bf16's 2^-8), in both of its
forms (one product of three times the depth, and three passes for large inputs), with
FusedMatMul's bias, residual and activations (Sigmoid through the plain store, the others
stored in registers), with inf and NaN inputs, and in each micro-kernel variant's process
(test_nn_bf16's VARIANT_SCRIPT runs `run_all`)."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

import ge_hub
from ge_hub import es, precision_report
from ge_hub.kernels import nn_bf16
from tests.kernels.test_nn_bf16 import compile_fused_matmul, compile_linear

X3 = {"precision": "bf16", "precision_ops": {"MatMul": "bf16x3", "Gemm": "bf16x3"}}

# name -> (x shape, w shape, op, attrs, the split form the kernel takes)
CASES = {
    # one pass: X's [hi | lo | hi] rows fit one block
    "matmul_odd": ((17, 70), (70, 45), "MatMul", {}, nn_bf16.SPLIT_ONE_PASS),
    "matmul_3d": ((2, 13, 33), (33, 40), "MatMul", {}, nn_bf16.SPLIT_ONE_PASS),
    "gemm_trans_b": ((20, 100), (19, 100), "Gemm", dict(transB=1, alpha=0.5, beta=2.0),
                     nn_bf16.SPLIT_ONE_PASS),
    # three passes: 64 rows x 3 x 3008 values are past LINEAR_MAX_VALUES; and rows past one
    # block (several blocks, the last partial)
    "deep_three_passes": ((64, 3000), (3000, 37), "MatMul", {}, nn_bf16.SPLIT_THREE_PASSES),
    "tall_three_passes": ((1100, 200), (200, 20), "MatMul", {}, nn_bf16.SPLIT_THREE_PASSES),
}


def split_form(step) -> int:
    """The blob's `split` (ints rows, n, k, has_bias, block, activation, has_residual,
    split)."""
    return struct.unpack_from("=8q", step.attrs)[7]


def assert_within_x3(got, want, scale, depth):
    """|got - want| within bf16x3's error: each product off by at most 2^-16 of |x w|
    (the dropped lo lo and the low parts' rounding), plus fp32 sums over 3 * depth
    products and the epilogue's rounding."""
    bound = (2.0 ** -16 + (3 * depth + 8) * 2.0 ** -23) * scale + 1e-6
    err = np.abs(got.astype(np.float64) - want)
    assert (err <= bound).all(), f"max error {err.max()} (bound {bound.max()})"


def run_case(case, rng):
    x_shape, w_shape, op, attrs, form = CASES[case]
    model, x, w, c = compile_linear(x_shape, w_shape, op, attrs, rng, X3)
    (step,) = model.plan.steps
    assert precision_report.step_precision(step) == "bf16x3", step.kernel
    assert split_form(step) == form
    (got,) = model.run({"x": x})
    wt = (w.T if attrs.get("transB") else w).astype(np.float64) * attrs.get("alpha", 1.0)
    x64 = x.astype(np.float64)
    want, scale = x64 @ wt, np.abs(x64) @ np.abs(wt)
    if c is not None:
        bias = c.astype(np.float64) * attrs.get("beta", 1.0)
        want, scale = want + bias, scale + np.abs(bias)
    assert_within_x3(got, want, scale, wt.shape[0])


def run_fused_case(rng, rows=40, k=50, n=45, activation="Relu"):
    """MatMul + bias + residual + activation as one ge_hub.FusedMatMul in bf16x3: the
    epilogue applies once, to the whole sum (the three passes carry it in scratch)."""
    model, x, w, b, z = compile_fused_matmul(
        rng, rows, k, n, activation,
        {"precision": "bf16", "precision_ops": {"FusedMatMul": "bf16x3"}})
    (step,) = model.plan.steps
    assert precision_report.step_precision(step) == "bf16x3", step.kernel
    (got,) = model.run({"x": x, "z": z})
    pre = x.astype(np.float64) @ w.astype(np.float64) + b + z
    scale = np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)) + np.abs(b) + np.abs(z)
    bound = (2.0 ** -16 + (3 * k + 8) * 2.0 ** -23) * scale + 1e-6
    if activation == "Relu":
        want = np.maximum(pre, 0)
    elif activation == "Sigmoid":  # slope at most 1/4
        want = 1 / (1 + np.exp(-pre))
    else:  # Gelu, the bf16 store's erf form: within 2e-7 |x| of the exact one; slope < 1.2
        erf = np.vectorize(math.erf)
        want = 0.5 * pre * (1 + erf(pre / np.sqrt(2)))
        bound = 1.2 * bound + 2e-7 * np.abs(pre)
    err = np.abs(got.astype(np.float64) - want)
    assert (err <= bound + 1e-6).all(), f"max error {err.max()}"
    return split_form(step)


def run_specials(rng):
    """An inf in X gives +-inf where fp32 does (lo(inf) is 0, not inf - inf), a NaN gives
    NaN along its row; the other rows are untouched."""
    x = rng.standard_normal((20, 33)).astype(np.float32)
    w = rng.standard_normal((33, 9)).astype(np.float32)
    x[3, 5], x[7, 0] = np.inf, np.nan
    with es.GraphBuilder("g") as gb:
        es.output(es.op("MatMul", es.input("x", "float32", [20, 33]), es.const(w)), "y")
    (got,) = ge_hub.compile(gb.graph, options=X3).run({"x": x})
    np.testing.assert_array_equal(got[3], np.where(w[5] > 0, np.inf, -np.inf))
    assert np.isnan(got[7]).all()
    rest = [r for r in range(20) if r not in (3, 7)]
    want = x[rest].astype(np.float64) @ w.astype(np.float64)
    scale = np.abs(x[rest].astype(np.float64)) @ np.abs(w.astype(np.float64))
    assert_within_x3(got[rest], want, scale, 33)
    # and an inf weight: its column is +-inf by the sign of what it multiplies
    x = rng.standard_normal((20, 33)).astype(np.float32)
    w = w.copy()
    w[2, 4] = np.inf
    with es.GraphBuilder("g") as gb:
        es.output(es.op("MatMul", es.input("x", "float32", [20, 33]), es.const(w)), "y")
    (got,) = ge_hub.compile(gb.graph, options=X3).run({"x": x})
    np.testing.assert_array_equal(got[:, 4], np.where(x[:, 2] > 0, np.inf, -np.inf))


def run_all(rng):
    for case in CASES:
        run_case(case, rng)
    for activation in ("Relu", "Sigmoid", "Gelu"):
        run_fused_case(rng, activation=activation)
    assert run_fused_case(rng, rows=70, k=2500, n=40) == nn_bf16.SPLIT_THREE_PASSES
    run_specials(rng)


@pytest.mark.parametrize("case", CASES)
def test_cases(case, rng):
    run_case(case, rng)


@pytest.mark.parametrize("activation", ["Relu", "Sigmoid", "Gelu"])
def test_fused_epilogues_in_one_pass(activation, rng):
    assert run_fused_case(rng, activation=activation) == nn_bf16.SPLIT_ONE_PASS


@pytest.mark.parametrize("activation", ["Relu", "Sigmoid"])
def test_fused_epilogues_in_three_passes(activation, rng):
    form = run_fused_case(rng, rows=70, k=2500, n=40, activation=activation)
    assert form == nn_bf16.SPLIT_THREE_PASSES


def test_specials(rng):
    run_specials(rng)


def test_much_closer_than_bf16(rng):
    """The point of it: on the same product bf16x3's error is over 100x below bf16's."""
    x = rng.standard_normal((64, 300)).astype(np.float32)
    w = rng.standard_normal((300, 50)).astype(np.float32)
    with es.GraphBuilder("g") as gb:
        es.output(es.op("MatMul", es.input("x", "float32", [64, 300]), es.const(w)), "y")
    want = x.astype(np.float64) @ w.astype(np.float64)
    errors = {}
    for name, options in (("bf16", {"precision": "bf16"}), ("bf16x3", X3)):
        (got,) = ge_hub.compile(gb.graph, options=options).run({"x": x})
        errors[name] = np.abs(got - want).max() / np.abs(want).max()
    assert errors["bf16x3"] * 100 < errors["bf16"], errors


def test_split_parts():
    """hi + lo keeps x to 2^-17 of |x| (lo's own rounding); both are bf16 values; specials
    split to (themselves, 0)."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(10000) * np.exp(rng.uniform(-20, 20, 10000))).astype(np.float32)
    high, low = nn_bf16.split_bf16(x)
    np.testing.assert_array_equal(nn_bf16.round_bf16(high), high)
    np.testing.assert_array_equal(nn_bf16.round_bf16(low), low)
    err = np.abs(high.astype(np.float64) + low - x)
    assert (err <= 2.0 ** -17 * np.abs(x)).all()
    specials = np.array([np.inf, -np.inf, np.nan, 0.0], np.float32)
    high, low = nn_bf16.split_bf16(specials)
    np.testing.assert_array_equal(high[[0, 1, 3]], specials[[0, 1, 3]])
    assert np.isnan(high[2])
    np.testing.assert_array_equal(low, np.zeros(4, np.float32))


def test_fewer_rows_than_a_tile_run_fp32(rng):
    """A classifier at batch 1 marked bf16x3 runs the fp32 kernel (bf16x3 would read 1.5x
    its weight bytes for no gain), and is reported so."""
    with es.GraphBuilder("g") as gb:
        es.output(es.op("Gemm", es.input("x", "float32", [1, 64]),
                        es.const(rng.standard_normal((64, 10)).astype(np.float32))), "y")
    (step,) = ge_hub.compile(gb.graph, options=X3).plan.steps
    assert precision_report.step_precision(step) == "fp32", step.kernel


def test_offline_file_records_the_split_layout(tmp_path, rng):
    """A .ghm with a bf16x3 product records the layout split_bf16 (so that a ge-hub from
    before it plans the file again), and loads to the same results."""
    from ge_hub.offline import portability, reader, writer

    with es.GraphBuilder("g") as gb:
        es.output(es.op("MatMul", es.input("x", "float32", [20, 33]),
                        es.const(rng.standard_normal((33, 9)).astype(np.float32))), "y")
    model = ge_hub.compile(gb.graph, input_shapes={"x": (20, 33)}, options=X3)
    assert portability.layouts_of(model.plan) == {"packed_bf16", "split_bf16"}
    path = tmp_path / "x3.ghm"
    meta = writer.save(model, str(path))
    assert "split_bf16" in meta["portability"]["layouts"]
    assert portability.problems(meta["portability"]) == []
    x = rng.standard_normal((20, 33)).astype(np.float32)
    np.testing.assert_array_equal(reader.load_compiled(str(path)).run({"x": x})[0],
                                  model.run({"x": x})[0])
