"""The dense and NN C kernels (core/kernels/nn_*.c) against their ops' NumPy references.

Each case builds a one-op graph with ES, compiles it, checks that every step ran in C
(no fallback), and compares the result with the op's reference on the same random
non-zero inputs: odd sizes, broadcasting where the op broadcasts, every window variant
(groups, depthwise, dilation, strides, asymmetric and automatic pads, ceil_mode, 1-D to
3-D), NaN and inf where the op defines them, and small graphs whose memory plan writes
in place. A few cases check that unsupported variants fall back (counted) and that a
malformed attribute blob is an error, not a crash.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.executor import Executor, KernelError
from ge_hub.kernels import nn as nn_kernels
from ge_hub.ops import get_schema
from ge_hub.passes.select_kernels import choose_kernel, is_fallback
from ge_hub.reference import evaluate

# float32 against a float32 (or float64) reference: elementwise-exact ops stay close; the
# GEMM-based ones sum in another order.
EXACT = dict(rtol=1e-5, atol=1e-6)
SUMMED = dict(rtol=1e-4, atol=1e-4)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def random_array(rng, shape, low=-3.0, high=3.0):
    """Random non-zero float32 data."""
    data = rng.uniform(low, high, size=shape)
    data[data == 0] = 0.5
    return data.astype(np.float32)


def compile_op(op, inputs, attrs=None, *, consts=(), outputs=None):
    """A compiled one-node graph: input i is a graph input, a constant (i in `consts`)
    or omitted (None). Returns (model, feeds)."""
    feeds = {}
    with es.GraphBuilder("g") as gb:
        args = []
        for i, array in enumerate(inputs):
            if array is None:
                args.append(None)
            elif i in consts:
                args.append(es.const(array))
            else:
                feeds[f"x{i}"] = array
                args.append(es.input(f"x{i}", array.dtype.name, list(array.shape)))
        kwargs = dict(attrs or {})
        if outputs is not None:
            kwargs["outputs"] = outputs
        result = es.op(op, *args, **kwargs)
        for j, tensor in enumerate(result if isinstance(result, tuple) else (result,)):
            gb.output(tensor, f"y{j}")
    return ge_hub.compile(gb.graph), feeds


def check(op, inputs, attrs=None, *, consts=(), outputs=None, tol=EXACT):
    """Run `op` in C and compare every output with the reference; returns the outputs."""
    model, feeds = compile_op(op, inputs, attrs, consts=consts, outputs=outputs)
    summary = model.summary()
    assert summary["fallback_steps"] == 0, summary
    got = model.run(feeds)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN and inf cases
        want = get_schema(op).run_reference(inputs, dict(attrs or {}))
    for j, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (j, g.dtype, g.shape, w.shape)
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, w, equal_nan=True, err_msg=f"output {j}", **tol)
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"output {j}")
    return got


def with_specials(x, rng, count=3):
    """`x` with a NaN, +inf and -inf at random places."""
    x = x.copy()
    flat = x.reshape(-1)
    for value in (np.nan, np.inf, -np.inf)[:count]:
        flat[rng.integers(flat.size)] = value
    return x


# -- MatMul ---------------------------------------------------------------------------------

MATMUL_SHAPES = {
    "2d": [(3, 5), (5, 7)],
    "vector_left": [(5,), (5, 7)],
    "vector_right": [(3, 5), (5,)],
    "dot": [(9,), (9,)],
    "batched": [(2, 3, 5), (2, 5, 7)],
    "shared_b_folds": [(4, 3, 5), (5, 7)],
    "shared_a": [(3, 5), (4, 5, 7)],
    "both_sides": [(2, 1, 3, 5), (1, 4, 5, 7)],
    "middle": [(2, 3, 3, 5), (3, 5, 7)],
    "rank_mismatch": [(3, 1, 3, 5), (4, 5, 2)],
    "vector_batched": [(5,), (2, 5, 3)],
    "batched_vector": [(2, 3, 5), (5,)],
    "many_small": [(65, 7, 9), (65, 9, 5)],
    "large": [(67, 131), (131, 69)],
}


@pytest.mark.parametrize("case", MATMUL_SHAPES)
def test_matmul(rng, case):
    a_shape, b_shape = MATMUL_SHAPES[case]
    check("MatMul", [random_array(rng, a_shape), random_array(rng, b_shape)], tol=SUMMED)


def test_matmul_with_constant_weights_and_specials(rng):
    a = with_specials(random_array(rng, (2, 4, 6)), rng)
    check("MatMul", [a, random_array(rng, (6, 3))], consts=(1,), tol=SUMMED)


# -- Gemm -----------------------------------------------------------------------------------

GEMM_C_SHAPES = {"none": None, "scalar": (), "row": (7,), "row_2d": (1, 7), "column": (5, 1),
                 "full": (5, 7), "one": (1, 1)}


@pytest.mark.parametrize("c_shape", GEMM_C_SHAPES)
@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm(rng, c_shape, trans_a, trans_b):
    m, k, n = 5, 11, 7
    a = random_array(rng, (k, m) if trans_a else (m, k))
    b = random_array(rng, (n, k) if trans_b else (k, n))
    shape = GEMM_C_SHAPES[c_shape]
    inputs = [a, b] if shape is None else [a, b, random_array(rng, shape)]
    attrs = dict(alpha=0.75, beta=-1.5, transA=trans_a, transB=trans_b)
    check("Gemm", inputs, attrs, consts=(1, 2), tol=SUMMED)


def test_gemm_defaults_and_nan_in_c(rng):
    c = with_specials(random_array(rng, (4, 6)), rng, count=1)
    check("Gemm", [random_array(rng, (4, 9)), random_array(rng, (9, 6)), c], tol=SUMMED)
    # beta 0 still reads C: 0 * NaN is NaN in the reference too.
    check("Gemm", [random_array(rng, (4, 9)), random_array(rng, (9, 6)), c], {"beta": 0.0},
          tol=SUMMED)


# -- Conv -----------------------------------------------------------------------------------

# (x shape, w shape, attrs, with bias)
CONV_CASES = {
    "basic": ((1, 3, 7, 9), (4, 3, 3, 3), dict(pads=[1, 1, 1, 1]), True),
    "groups": ((2, 6, 7, 8), (4, 3, 3, 3), dict(group=2, pads=[1, 0, 1, 0]), True),
    "depthwise": ((2, 5, 9, 7), (5, 1, 3, 3), dict(group=5, pads=[1, 1, 1, 1]), True),
    "depthwise_stride_dilation": ((1, 4, 11, 10), (4, 1, 3, 3),
                                  dict(group=4, strides=[2, 2], dilations=[2, 1],
                                       pads=[2, 0, 1, 3]), False),
    "depthwise_multiplier": ((1, 3, 8, 7), (6, 1, 3, 3), dict(group=3), True),
    "dilation": ((1, 2, 11, 10), (3, 2, 3, 3), dict(dilations=[2, 2]), True),
    "stride2": ((2, 3, 11, 9), (5, 3, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1]), True),
    "asymmetric_pads": ((1, 3, 7, 8), (2, 3, 3, 2), dict(pads=[0, 1, 2, 0]), False),
    "pointwise": ((2, 8, 5, 7), (6, 8, 1, 1), {}, True),
    "pointwise_groups": ((1, 8, 5, 7), (6, 4, 1, 1), dict(group=2), False),
    "pointwise_stride2": ((1, 8, 9, 7), (6, 8, 1, 1), dict(strides=[2, 2]), True),
    "conv1d": ((2, 3, 13), (4, 3, 3), dict(strides=[2], pads=[1, 2], dilations=[2]), True),
    "conv3d": ((1, 2, 5, 6, 7), (3, 2, 2, 3, 3),
               dict(strides=[1, 2, 1], pads=[1, 0, 1, 0, 1, 1]), True),
    "same_upper": ((1, 3, 8, 9), (4, 3, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2]),
                   True),
    "same_lower": ((1, 3, 8, 9), (4, 3, 4, 4), dict(auto_pad="SAME_LOWER"), False),
    "valid": ((1, 3, 8, 9), (4, 3, 3, 2), dict(auto_pad="VALID", strides=[1, 2]), True),
    "kernel_larger_than_stride": ((1, 2, 9, 9), (2, 2, 5, 5), dict(strides=[3, 3],
                                                                   pads=[2, 2, 2, 2]), True),
    # More columns than one im2col block: blocks end in the middle of output rows.
    "blocked_im2col": ((1, 32, 48, 47), (4, 32, 3, 3), dict(pads=[1, 1, 1, 1]), True),
}


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv(rng, case):
    x_shape, w_shape, attrs, bias = CONV_CASES[case]
    inputs = [random_array(rng, x_shape), random_array(rng, w_shape)]
    if bias:
        inputs.append(random_array(rng, (w_shape[0],)))
    check("Conv", inputs, attrs, consts=(1, 2), tol=SUMMED)


@pytest.mark.parametrize("case", ["basic", "depthwise", "pointwise"])
def test_conv_weights_as_inputs_and_nan(rng, case):
    x_shape, w_shape, attrs, _ = CONV_CASES[case]
    x = with_specials(random_array(rng, x_shape), rng, count=1)
    check("Conv", [x, random_array(rng, w_shape), random_array(rng, (w_shape[0],))], attrs,
          tol=SUMMED)


# (x shape, w shape, attrs): 3x3, stride 1, enough channels and tiles for Winograd
WINOGRAD_CASES = {
    "odd_sizes": ((1, 16, 17, 19), (16, 16, 3, 3), dict(pads=[1, 1, 1, 1])),
    "groups_asymmetric_pads": ((2, 32, 16, 19), (32, 16, 3, 3), dict(group=2, pads=[0, 1, 2, 0])),
    "no_padding": ((1, 16, 18, 21), (24, 16, 3, 3), {}),
    # more input channels than one k slice of the packed GEMM (PACK_KC)
    "k_slices": ((1, 260, 9, 10), (20, 260, 3, 3), dict(pads=[1, 1, 1, 1])),
}


def conv_path(model) -> int:
    step = next(s for s in model.plan.steps if s.op == "Conv")
    return struct.unpack_from("=q", step.attrs)[0]


@pytest.mark.parametrize("small_blocks", [False, True])
@pytest.mark.parametrize("case", WINOGRAD_CASES)
def test_conv_winograd(rng, monkeypatch, case, small_blocks):
    if small_blocks:  # 5 tiles per block: blocks end in the middle of tile rows
        monkeypatch.setattr(nn_kernels, "WINOGRAD_MAX_FLOATS", 16 * 48 * 5)
    x_shape, w_shape, attrs = WINOGRAD_CASES[case]
    # weights scaled by fan-in as in a trained network, so that a sum of thousands of
    # terms stays of the size atol is meant for
    fan_in = w_shape[1] * 9
    inputs = [random_array(rng, x_shape), random_array(rng, w_shape) * (12 / fan_in) ** 0.5,
              random_array(rng, (w_shape[0],))]
    model, _ = compile_op("Conv", inputs, attrs, consts=(1, 2))
    assert conv_path(model) == nn_kernels.CONV_WINOGRAD
    # many blocks run side by side in scratch slots; one block splits each stage instead
    step = next(s for s in model.plan.steps if s.op == "Conv")
    slots = struct.unpack_from("=9q", step.attrs)[8]
    assert (slots > 1) == (small_blocks and case != "k_slices"), slots
    check("Conv", inputs, attrs, consts=(1, 2), tol=SUMMED)


def test_conv_winograd_leaves_infinities_to_im2col(rng):
    """Winograd's transforms would turn inf into inf - inf; such inputs take im2col."""
    x_shape, w_shape, attrs = WINOGRAD_CASES["odd_sizes"]
    x = random_array(rng, x_shape)
    x[0, 3, 5, 7], x[0, 9, 0, 0], x[0, 1, 16, 18] = np.inf, -np.inf, np.nan
    got = check("Conv", [x, random_array(rng, w_shape)], attrs, consts=(1,), tol=SUMMED)
    assert np.isinf(got[0]).any() and np.isnan(got[0]).any()


def test_conv_winograd_needs_constant_finite_weights(rng):
    """Winograd's kernels are transformed at compile time: weights given at run time take
    im2col, and weights holding inf (inf - inf in the transform) the packed path."""
    x_shape, w_shape, attrs = WINOGRAD_CASES["odd_sizes"]
    x, w = random_array(rng, x_shape), random_array(rng, w_shape)
    model, _ = compile_op("Conv", [x, w], attrs)
    assert conv_path(model) == nn_kernels.CONV_IM2COL
    w[3, 2, 1, 1], w[5, 0, 0, 2] = np.inf, -np.inf
    model, _ = compile_op("Conv", [x, w], attrs, consts=(1,))
    assert conv_path(model) == nn_kernels.CONV_PACKED
    got = check("Conv", [x, w], attrs, consts=(1,), tol=SUMMED)
    assert np.isinf(got[0]).any()


# (x shape, w shape, attrs): constant weights take the packed GEMM; these reach its edges.
PACKED_CASES = {
    # 7 output channels: one partial panel of 12 rows; 5 x 7 positions: one partial panel
    "partial_panels": ((1, 3, 5, 7), (7, 3, 3, 3), dict(pads=[1, 1, 1, 1])),
    # 25 channels (two whole panels and one row), 10 x 9 = 90 positions (2 full panels
    # and a 26-wide one), 300 input rows: two k slices of the micro-kernel
    "k_slices": ((1, 300, 10, 9), (25, 300, 1, 1), {}),
    # a last panel at most 16 wide (the narrow micro-kernel): 7 x 7 = 49 = 32 + 17, then
    # 6 x 6 = 36 = 32 + 4
    "narrow_tail": ((2, 5, 7, 7), (13, 5, 3, 3), dict(pads=[1, 1, 1, 1])),
    "narrow_tail_4": ((1, 6, 6, 6), (24, 6, 3, 3), dict(pads=[1, 1, 1, 1])),
    "stride2_7x7": ((1, 3, 37, 41), (16, 3, 7, 7), dict(strides=[2, 2], pads=[3, 3, 3, 3])),
    "stride3_dilated": ((1, 4, 19, 23), (5, 4, 3, 3), dict(strides=[3, 3], dilations=[2, 2],
                                                           pads=[2, 1, 0, 2])),
    "groups": ((2, 8, 9, 11), (26, 4, 3, 3), dict(group=2, pads=[1, 1, 1, 1])),
    "pointwise": ((1, 20, 13, 11), (30, 20, 1, 1), {}),
    "conv1d": ((3, 5, 40), (14, 5, 3), dict(pads=[1, 1])),
    "conv3d": ((1, 3, 5, 6, 7), (13, 3, 2, 3, 3), dict(pads=[1, 1, 1, 0, 1, 1])),
}


@pytest.mark.parametrize("small_blocks", [False, True])
@pytest.mark.parametrize("case", PACKED_CASES)
def test_conv_packed(rng, monkeypatch, case, small_blocks):
    if small_blocks:  # one panel of positions per block: blocks end mid-row
        monkeypatch.setattr(nn_kernels, "PACKED_MAX_FLOATS", 1)
    x_shape, w_shape, attrs = PACKED_CASES[case]
    inputs = [random_array(rng, x_shape), random_array(rng, w_shape),
              random_array(rng, (w_shape[0],))]
    model, _ = compile_op("Conv", inputs, attrs, consts=(1, 2))
    assert conv_path(model) == nn_kernels.CONV_PACKED
    check("Conv", inputs, attrs, consts=(1, 2), tol=SUMMED)
    check("Conv", inputs[:2], attrs, consts=(1,), tol=SUMMED)  # no bias


def test_conv_packed_weights_are_laid_out_at_compile_time(rng):
    """The plan carries the packed weights as a constant of their own: per group, k (here
    the 300 (channel, tap) pairs) in slices of PACK_KC, each slice holding every panel of
    PACK_MR output channels (zero rows past the end) for its values of k."""
    x, w = random_array(rng, (1, 200, 5, 5)), random_array(rng, (28, 100, 1, 3))
    model, _ = compile_op("Conv", [x, w], dict(group=2), consts=(1,))
    step = next(s for s in model.plan.steps if s.op == "Conv")
    spec = model.plan.tensors[step.inputs[1]]
    packed = model.plan.constants[spec.index]
    assert spec.name.endswith(":packed:" + step.node)
    mr, kc = nn_kernels.PACK_MR, nn_kernels.PACK_KC
    assert packed.shape == (2, 2 * 300 * mr) == spec.shape  # 14 rows per group: 2 panels
    grouped = w.reshape(2, 14, 300)
    first = packed[:, :2 * kc * mr].reshape(2, 2, kc, mr)  # k 0..255
    last = packed[:, 2 * kc * mr:].reshape(2, 2, 300 - kc, mr)  # k 256..299
    np.testing.assert_array_equal(first[1, 0, :, 3], grouped[1, 3, :kc])
    np.testing.assert_array_equal(last[0, 0].T, grouped[0, :12, kc:])
    np.testing.assert_array_equal(last[1, 1, :, :2].T, grouped[1, 12:, kc:])
    assert not first[:, 1, :, 2:].any() and not last[:, 1, :, 2:].any()


def test_conv_packed_nan_and_inf_propagate(rng):
    x_shape, w_shape, attrs = PACKED_CASES["partial_panels"]
    x = random_array(rng, x_shape)
    x[0, 1, 2, 3], x[0, 0, 4, 6] = np.nan, np.inf
    got = check("Conv", [x, random_array(rng, w_shape)], attrs, consts=(1,), tol=SUMMED)
    assert np.isnan(got[0]).any() and np.isinf(got[0]).any()


@pytest.mark.parametrize("micro_kernel", ["generic", "avx2"])
def test_conv_packed_other_micro_kernels(micro_kernel):
    """The micro-kernel is picked once per process from the CPU; GE_HUB_GEMM_KERNEL picks
    a lesser one (ignored where the CPU lacks it), so each runs in a process of its own."""
    script = textwrap.dedent("""
        import numpy as np, ge_hub
        from ge_hub import es
        from ge_hub.reference import evaluate
        rng = np.random.default_rng(3)
        cases = [((1, 7, 9, 11), (29, 7, 3, 3), 1), ((2, 3, 20, 17), (13, 3, 5, 5), 2)]
        for x_shape, w_shape, stride in cases:
            x = rng.standard_normal(x_shape).astype(np.float32)
            w = rng.standard_normal(w_shape).astype(np.float32)
            b = rng.standard_normal(w_shape[0]).astype(np.float32)
            with es.GraphBuilder("g") as gb:
                y = es.conv(es.input("x", "float32", list(x_shape)), es.const(w), es.const(b),
                            strides=[stride, stride], pads=[1] * 4)
                es.output(y, "y")
            got = ge_hub.compile(gb.graph).run([x])[0]
            want = evaluate(gb.graph, {"x": x})[0]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        print("ok")
    """)
    env = dict(os.environ, GE_HUB_GEMM_KERNEL=micro_kernel)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


# -- ConvTranspose --------------------------------------------------------------------------

CONV_TRANSPOSE_CASES = {
    "basic": ((1, 3, 5, 6), (3, 4, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1],
                                               output_padding=[1, 0]), True),
    "groups": ((2, 4, 4, 5), (4, 3, 3, 3), dict(group=2), True),
    "dilation": ((1, 2, 5, 4), (2, 3, 3, 2), dict(dilations=[2, 3], pads=[1, 0, 2, 1]), False),
    "conv1d": ((2, 3, 7), (3, 2, 4), dict(strides=[3], pads=[1, 2]), True),
    "conv3d": ((1, 2, 3, 4, 3), (2, 3, 2, 3, 2), dict(strides=[2, 1, 2]), True),
    "output_shape_grows": ((1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[2, 2],
                                                             output_shape=[9, 10]), True),
    "same_upper": ((1, 3, 4, 5), (3, 2, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER"),
                   True),
}


@pytest.mark.parametrize("case", CONV_TRANSPOSE_CASES)
def test_conv_transpose(rng, case):
    x_shape, w_shape, attrs, bias = CONV_TRANSPOSE_CASES[case]
    inputs = [random_array(rng, x_shape), random_array(rng, w_shape)]
    if bias:
        inputs.append(random_array(rng, (w_shape[1] * attrs.get("group", 1),)))
    check("ConvTranspose", inputs, attrs, consts=(1, 2), tol=SUMMED)


# -- pools ----------------------------------------------------------------------------------

POOL_CASES = {
    "resnet": ((1, 3, 13, 12), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    "ceil_mode": ((2, 2, 9, 8), dict(kernel_shape=[3, 2], strides=[2, 2], ceil_mode=1)),
    "ceil_mode_pads": ((1, 2, 7, 10), dict(kernel_shape=[3, 3], strides=[3, 3], ceil_mode=1,
                                           pads=[1, 0, 1, 1])),
    "dilation": ((1, 3, 11, 9), dict(kernel_shape=[2, 3], dilations=[2, 2], pads=[1, 1, 0, 2])),
    "asymmetric_pads": ((1, 2, 6, 7), dict(kernel_shape=[3, 3], pads=[0, 2, 2, 0])),
    "same_upper": ((1, 2, 7, 8), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")),
    "same_lower": ((1, 2, 7, 8), dict(kernel_shape=[2, 2], auto_pad="SAME_LOWER")),
    "pool1d": ((2, 3, 15), dict(kernel_shape=[4], strides=[3], pads=[1, 2])),
    "pool3d": ((1, 2, 5, 6, 7), dict(kernel_shape=[2, 3, 2], strides=[2, 1, 2],
                                     pads=[0, 1, 1, 1, 0, 0])),
    # rows wider than MaxPool's separable path keeps on the stack (NN_POOL_ROW_MAX)
    "wide_rows": ((1, 1, 3, 4099), dict(kernel_shape=[2, 3], strides=[1, 2], pads=[1, 1, 0, 1])),
}


@pytest.mark.parametrize("case", POOL_CASES)
def test_max_pool(rng, case):
    shape, attrs = POOL_CASES[case]
    check("MaxPool", [random_array(rng, shape)], attrs)
    check("MaxPool", [random_array(rng, shape)], attrs, outputs=2)


def test_max_pool_indices_column_major_and_ties(rng):
    shape, attrs = POOL_CASES["resnet"]
    check("MaxPool", [random_array(rng, shape)], dict(attrs, storage_order=1), outputs=2)
    check("MaxPool", [random_array(rng, POOL_CASES["pool3d"][0])],
          dict(POOL_CASES["pool3d"][1], storage_order=1), outputs=2)
    # Ties: integers in a small range repeat; the first maximum in tap order wins.
    x = rng.integers(-2, 3, size=(1, 2, 7, 7)).astype(np.float32)
    check("MaxPool", [x], dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), outputs=2)


def test_max_pool_nan_and_infinities(rng):
    shape, attrs = POOL_CASES["resnet"]
    x = with_specials(random_array(rng, shape), rng)
    check("MaxPool", [x], attrs)  # rows first, then columns: a NaN still wins
    check("MaxPool", [x], attrs, outputs=2)
    # An input of -inf: the winner is the first tap inside X, never the padding.
    check("MaxPool", [np.full((1, 1, 5, 5), -np.inf, np.float32)], attrs, outputs=2)


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("case", POOL_CASES)
def test_average_pool(rng, case, count_include_pad):
    shape, attrs = POOL_CASES[case]
    check("AveragePool", [random_array(rng, shape)],
          dict(attrs, count_include_pad=count_include_pad))


def test_average_pool_nan_and_infinities(rng):
    shape, attrs = POOL_CASES["resnet"]
    check("AveragePool", [with_specials(random_array(rng, shape), rng)], attrs)


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (2, 3, 9), (1, 2, 3, 4, 5), (2, 5),
                                   (1, 4, 67, 61)])
@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools(rng, op, shape):
    check(op, [random_array(rng, shape)])


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools_nan_and_infinities(rng, op):
    x = random_array(rng, (2, 3, 4, 5))
    x[0, 0, 1, 1], x[0, 1, 2, 2], x[1, 2, 0, 3] = np.nan, np.inf, -np.inf
    check(op, [x])


# -- normalization --------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (4, 5), (1, 3, 9), (2, 3, 2, 3, 4)])
@pytest.mark.parametrize("constant_stats", [True, False])
def test_batch_norm(rng, shape, constant_stats):
    c = shape[1]
    stats = [random_array(rng, (c,)), random_array(rng, (c,)), random_array(rng, (c,)),
             rng.uniform(0.5, 2.0, size=c).astype(np.float32)]
    check("BatchNormalization", [random_array(rng, shape), *stats], {"epsilon": 1e-3},
          consts=(1, 2, 3, 4) if constant_stats else (), tol=dict(rtol=1e-5, atol=1e-5))


def test_batch_norm_specials(rng):
    x = with_specials(random_array(rng, (2, 3, 4, 5)), rng)
    stats = [random_array(rng, (3,)) for _ in range(3)] + [np.ones(3, np.float32)]
    check("BatchNormalization", [x, *stats], consts=(1, 2, 3, 4),
          tol=dict(rtol=1e-5, atol=1e-5))


@pytest.mark.parametrize("outputs", [3, 1])
def test_batch_norm_training_mode_is_left_to_the_fallback(rng, outputs):
    # The kernel only normalizes with given statistics; training mode runs the reference.
    x = random_array(rng, (2, 3, 4, 5))
    stats = [random_array(rng, (3,)) for _ in range(3)] + [np.ones(3, np.float32)]
    attrs = {"training_mode": 1, "momentum": 0.7}
    model, feeds = compile_op("BatchNormalization", [x, *stats], attrs, outputs=outputs)
    assert model.summary()["fallback_steps"] == 1
    got = model.run(feeds)
    want = get_schema("BatchNormalization").run_reference([x, *stats], attrs)
    assert len(got) == outputs
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, **EXACT)


# (X shape, axis, Scale shape, B shape or None)
LAYER_NORM_CASES = {
    "last": ((3, 5, 7), -1, (7,), (7,)),
    "no_bias": ((3, 5, 7), -1, (7,), None),
    "two_axes": ((2, 3, 4, 5), 2, (4, 5), (4, 5)),
    "scale_repeats": ((2, 3, 4, 5), 1, (5,), (1, 4, 5)),
    "scalar_scale": ((4, 9), 1, (1,), ()),
    "whole": ((3, 4), 0, (3, 4), (4,)),
    "long_rows": ((5, 1031), -1, (1031,), (1031,)),
}


@pytest.mark.parametrize("outputs", [1, 3])
@pytest.mark.parametrize("case", LAYER_NORM_CASES)
def test_layer_norm(rng, case, outputs):
    shape, axis, scale_shape, bias_shape = LAYER_NORM_CASES[case]
    inputs = [random_array(rng, shape), random_array(rng, scale_shape)]
    if bias_shape is not None:
        inputs.append(random_array(rng, bias_shape))
    check("LayerNormalization", inputs, {"axis": axis, "epsilon": 1e-4}, consts=(1, 2),
          outputs=outputs, tol=dict(rtol=1e-4, atol=1e-5))


def test_layer_norm_nan_stays_in_its_row(rng):
    x = random_array(rng, (4, 6))
    x[1, 2] = np.nan
    got = check("LayerNormalization", [x, random_array(rng, (6,)), random_array(rng, (6,))],
                outputs=3, tol=dict(rtol=1e-4, atol=1e-5))
    assert np.isnan(got[0][1]).all() and not np.isnan(got[0][[0, 2, 3]]).any()


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 4, 11), (2, 2, 3, 4, 5)])
def test_instance_norm(rng, shape):
    c = shape[1]
    check("InstanceNormalization",
          [random_array(rng, shape), random_array(rng, (c,)), random_array(rng, (c,))],
          {"epsilon": 1e-4}, consts=(1, 2), tol=dict(rtol=1e-4, atol=1e-5))


# -- Softmax --------------------------------------------------------------------------------

SOFTMAX_CASES = {
    "last": ((3, 5, 7), -1),
    "middle": ((3, 5, 7), 1),
    "first": ((6, 4, 3), 0),
    "vector": ((11,), 0),
    "long_rows": ((4, 2049), 1),
    "many_middle_blocks": ((40, 33, 50), 1),
}


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("case", SOFTMAX_CASES)
def test_softmax(rng, op, case):
    shape, axis = SOFTMAX_CASES[case]
    # A wide range: the stable form matters (exp(30) alone overflows nothing, exp(90) would).
    check(op, [random_array(rng, shape, -90.0, 90.0)], {"axis": axis})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [1, 2])
def test_softmax_nan_and_infinities(rng, op, axis):
    x = random_array(rng, (2, 5, 6))
    x[0, 1, 2] = np.nan
    x[1, 2, 3] = np.inf
    x[1, 3, 1] = -np.inf
    x[0, :, 5] = -np.inf  # a whole row of -inf (along axis 1) is NaN too
    check(op, [x], {"axis": axis})


# -- Resize ---------------------------------------------------------------------------------

RESIZE_CASES = {
    "nearest_up": (dict(mode="nearest"), [1, 1, 2, 3], None),
    "nearest_down_floor": (dict(mode="nearest", nearest_mode="floor"), [1, 1, 0.5, 0.6], None),
    "nearest_asymmetric_ceil": (dict(mode="nearest", nearest_mode="ceil",
                                     coordinate_transformation_mode="asymmetric"),
                                [1, 1, 1.7, 2.5], None),
    "nearest_sizes": (dict(mode="nearest", nearest_mode="round_prefer_ceil"), None,
                      [2, 3, 11, 4]),
    "linear_half_pixel": (dict(mode="linear"), [1, 1, 2, 1.5], None),
    "linear_align_corners": (dict(mode="linear", coordinate_transformation_mode="align_corners"),
                             None, [2, 3, 9, 13]),
    "linear_pytorch": (dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"),
                       [1, 1, 0.6, 2], None),
    "linear_asymmetric": (dict(mode="linear", coordinate_transformation_mode="asymmetric"),
                          [1, 1, 1.3, 0.8], None),
    "linear_symmetric": (dict(mode="linear",
                              coordinate_transformation_mode="half_pixel_symmetric"),
                         [1, 1, 2.5, 1.25], None),
    "linear_exclude_outside": (dict(mode="linear", exclude_outside=1), [1, 1, 1.6, 2.2], None),
    "linear_one_axis": (dict(mode="linear"), [1, 1, 1, 2], None),
    "linear_axes_attr": (dict(mode="linear", axes=[2, 3]), [2.0, 0.7], None),
    "linear_keep_aspect": (dict(mode="linear", keep_aspect_ratio_policy="not_larger",
                                axes=[2, 3]), None, [10, 10]),
}


@pytest.mark.parametrize("case", RESIZE_CASES)
def test_resize(rng, case):
    attrs, scales, sizes = RESIZE_CASES[case]
    x = random_array(rng, (2, 3, 5, 7))
    inputs = [x, None,
              None if scales is None else np.array(scales, np.float32),
              None if sizes is None else np.array(sizes, np.int64)]
    check("Resize", inputs, attrs, consts=(2, 3))


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_large_enough_to_split_over_slots(rng, mode):
    x = random_array(rng, (2, 8, 33, 47))
    check("Resize", [x, None, np.array([1, 1, 2, 1.5], np.float32)], {"mode": mode},
          consts=(2,))


def test_resize_nan_and_infinities(rng):
    x = with_specials(random_array(rng, (1, 2, 4, 5)), rng)
    check("Resize", [x, None, np.array([1, 1, 2, 2], np.float32)], {"mode": "nearest"},
          consts=(2,))
    check("Resize", [x, None, np.array([1, 1, 2, 2], np.float32)], {"mode": "linear"},
          consts=(2,))


@pytest.mark.parametrize("attrs, scales, has_kernel", [
    (dict(mode="linear"), [1, 1, 2, 2], True),
    (dict(mode="cubic"), [1, 1, 2, 2], False),
    (dict(mode="linear"), [1, 2, 2, 2], False),  # a channel axis that moves
    (dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize"), [1, 1, 2, 2],
     False),
    (dict(mode="linear", antialias=1), [1, 1, 0.5, 0.6], False),  # antialiased downsampling
    (dict(mode="cubic", antialias=1), [1, 1, 0.5, 0.6], False),
])
def test_resize_variants_without_a_kernel_are_left_to_the_fallback(rng, attrs, scales,
                                                                    has_kernel):
    inputs = [random_array(rng, (1, 2, 4, 5)),
              np.array([0, 0, 0.1, 0.2, 1, 1, 0.9, 0.8], np.float32),
              np.array(scales, np.float32)]
    with es.GraphBuilder("g") as gb:
        y = es.resize(es.input("x", "float32", [1, 2, 4, 5]), es.const(inputs[1]),
                      es.const(inputs[2]), **attrs)
        gb.output(y, "y")
    kernel = choose_kernel(y.value.producer)
    assert is_fallback(kernel) != has_kernel, kernel.name
    # Either way the compiled model answers like the reference; a fallback is counted.
    model = ge_hub.compile(gb.graph)
    assert model.summary()["fallback_steps"] == (0 if has_kernel else 1)
    np.testing.assert_allclose(model.run({"x": inputs[0]})[0],
                               get_schema("Resize").run_reference(inputs, attrs)[0], **EXACT)


def test_resize_with_an_axis_past_the_table_limit_runs_the_reference(rng, monkeypatch):
    """The packer tabulates taps per cell of every axis: a declared dim of 2**32 must not
    become a 32 GiB table at compile time, so such a Resize is left to the reference."""
    with es.GraphBuilder("g") as gb:
        y = es.resize(es.input("x", "float32", [2**32, 1, 2, 2]), None,
                      es.const(np.array([1, 1, 2, 2], np.float32)))
        gb.output(y, "y")
    assert is_fallback(choose_kernel(y.value.producer))
    monkeypatch.setattr(nn_kernels, "RESIZE_MAX_AXIS", 8)
    x = random_array(rng, (1, 2, 4, 5))
    model, feeds = compile_op("Resize", [x, None, np.array([1, 1, 2, 2], np.float32)],
                              {"mode": "linear"}, consts=(2,))
    assert model.summary()["fallback_steps"] == 1  # the output's W is 10 cells
    np.testing.assert_allclose(
        model.run(feeds)[0],
        get_schema("Resize").run_reference([x, None, np.array([1, 1, 2, 2], np.float32)],
                                           {"mode": "linear"})[0], **EXACT)


# -- graphs that write in place ------------------------------------------------------------


def test_in_place_normalizations_keep_values_still_in_use(rng):
    """Softmax, LogSoftmax, LayerNormalization, BatchNormalization and
    InstanceNormalization write over their input when it dies there; a value still read
    later (h) must survive, and the in-place chain (g) must still be right."""
    x = random_array(rng, (2, 4, 5, 6))
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", "float32", [2, 4, 5, 6])
        h = es.matmul(xin, es.const(random_array(rng, (6, 6))))
        s = es.softmax(h, axis=1)           # h is read again at the end: not in place
        n = es.layer_normalization(s, es.const(random_array(rng, (6,))))
        n = n[0] if isinstance(n, tuple) else n
        stats = [es.const(random_array(rng, (4,))) for _ in range(3)]
        b = es.batch_normalization(n, *stats, es.const(np.ones(4, np.float32)))
        i = es.instance_normalization(b, es.const(random_array(rng, (4,))),
                                      es.const(random_array(rng, (4,))))
        ls = es.log_softmax(i, axis=-1)
        g = es.matmul(xin, es.const(random_array(rng, (6, 6))))
        g = es.softmax(g, axis=2)           # dies here: in place, middle axis
        g = es.layer_normalization(g, es.const(random_array(rng, (5, 6))), axis=2)
        g = g[0] if isinstance(g, tuple) else g
        g = es.log_softmax(g, axis=1)
        gb.output(ls + h + g, "y")
        gb.output(s, "s")
    model = ge_hub.compile(gb.graph)
    assert model.summary()["fallback_steps"] == 0
    plan = model.plan
    in_place = {step.op for step in plan.steps
                if plan.tensors[step.outputs[0]] == dataclasses.replace(
                    plan.tensors[step.inputs[0]], name=plan.tensors[step.outputs[0]].name)}
    assert {"Softmax", "LayerNormalization", "BatchNormalization", "InstanceNormalization",
            "LogSoftmax"} <= in_place, in_place
    got = model.run({"x": x})
    want = evaluate(gb.graph, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_small_cnn_matches_the_reference(rng):
    """Conv, BatchNormalization (folded or not), pools, Gemm and Softmax in one graph."""
    x = random_array(rng, (2, 3, 16, 15))
    with es.GraphBuilder("cnn") as gb:
        xin = es.input("x", "float32", [2, 3, 16, 15])
        h = es.conv(xin, es.const(random_array(rng, (8, 3, 3, 3)) * 0.3),
                    es.const(random_array(rng, (8,))), pads=[1, 1, 1, 1], strides=[2, 2])
        h = es.batch_normalization(
            h, es.const(random_array(rng, (8,))), es.const(random_array(rng, (8,))),
            es.const(random_array(rng, (8,))), es.const(np.full(8, 2.0, np.float32)))
        pooled = es.max_pool(h, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
        if isinstance(pooled, tuple):
            pooled = pooled[0]
        d = es.conv(pooled, es.const(random_array(rng, (8, 1, 3, 3))), group=8,
                    pads=[1, 1, 1, 1])
        p = es.conv(d, es.const(random_array(rng, (6, 8, 1, 1))))
        g = es.flatten(es.global_average_pool(p))
        logits = es.gemm(g, es.const(random_array(rng, (6, 4))), es.const(random_array(rng, (4,))))
        gb.output(es.softmax(logits), "probs")
    model = ge_hub.compile(gb.graph)
    assert model.summary()["fallback_steps"] == 0, model.summary()
    np.testing.assert_allclose(model.run({"x": x})[0], evaluate(gb.graph, {"x": x})[0],
                               rtol=1e-4, atol=1e-5)


def test_threads_running_one_model_keep_their_scratch_apart(rng):
    """Scratch (im2col columns, Winograd buffers, Softmax slots) lives in each run's own
    arena: 8 threads running one model on different inputs all get their own answers."""
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [1, 16, 16, 17])
        h = es.conv(x, es.const(random_array(rng, (16, 16, 3, 3)) * 0.2), pads=[1, 1, 1, 1])
        h = es.conv(h, es.const(random_array(rng, (8, 16, 3, 3)) * 0.2), strides=[2, 2])
        gb.output(es.softmax(h, axis=1), "y")
    model = ge_hub.compile(gb.graph)
    assert model.summary()["fallback_steps"] == 0
    inputs = [random_array(rng, (1, 16, 16, 17)) for _ in range(8)]
    expected = [evaluate(gb.graph, {"x": x})[0] for x in inputs]
    results: list = [None] * len(inputs)

    def work(i):
        for _ in range(20):
            results[i] = model.run({"x": inputs[i]})[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


# -- malformed blobs --------------------------------------------------------------------------


@pytest.mark.parametrize("op, inputs, attrs", [
    ("Conv", [(1, 3, 7, 9), (4, 3, 3, 3)], dict(pads=[1, 1, 1, 1])),
    ("MatMul", [(2, 3, 5), (5, 4)], {}),
    ("MaxPool", [(1, 3, 7, 9)], dict(kernel_shape=[3, 3])),
    ("Softmax", [(3, 5, 7)], dict(axis=1)),
    ("Resize", [(1, 2, 3, 4), None, (4,)], dict(mode="linear")),
])
def test_a_truncated_or_padded_blob_is_an_error_not_a_crash(rng, op, inputs, attrs):
    arrays = [None if s is None else random_array(rng, s) for s in inputs]
    if op == "Resize":
        arrays[2] = np.array([1, 1, 2, 2], np.float32)
    model, feeds = compile_op(op, arrays, attrs, consts=(2,))
    plan = model.plan
    step = next(s for s in plan.steps if s.op == op)
    for attrs_blob in (step.attrs[:-8], step.attrs + bytes(8), b""):
        bad = dataclasses.replace(step, attrs=attrs_blob)
        executor = Executor(dataclasses.replace(plan, steps=(bad,)))
        with pytest.raises(KernelError, match="attribute blob"):
            executor.run([feeds[name] for name in plan.input_names])
