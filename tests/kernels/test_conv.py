"""The conv family's C kernels (core/kernels/conv.c, conv_winograd.c: Conv, ConvTranspose)
against their ops' NumPy references: groups, depthwise, dilation, strides, asymmetric and
automatic pads, 1-D to 3-D, NaN and inf, and each convolution path (im2col, Winograd,
packed GEMM, every micro-kernel).
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ge_hub.kernels import conv as conv_kernels

from .nn_cases import SUMMED, check, compile_op, random_array, with_specials

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
    # 36 tiles, one panel's worth and a bit: one block, whose stages split over the pool
    "one_block": ((1, 16, 12, 12), (16, 16, 3, 3), dict(pads=[1, 1, 1, 1])),
}
# Cases with at least two panels of tiles (conv_kernels.PACK_NR each), which are cut into
# blocks run side by side even when the budget would hold them all in one.
WINOGRAD_SLOTTED = {"odd_sizes", "groups_asymmetric_pads", "no_padding"}


def conv_path(model) -> int:
    step = next(s for s in model.plan.steps if s.op == "Conv")
    return struct.unpack_from("=q", step.attrs)[0]


@pytest.mark.parametrize("small_blocks", [False, True])
@pytest.mark.parametrize("case", WINOGRAD_CASES)
def test_conv_winograd(rng, monkeypatch, case, small_blocks):
    if small_blocks:  # 5 tiles per block: blocks end in the middle of tile rows
        monkeypatch.setattr(conv_kernels, "WINOGRAD_MAX_FLOATS", 16 * 48 * 5)
    x_shape, w_shape, attrs = WINOGRAD_CASES[case]
    # weights scaled by fan-in as in a trained network, so that a sum of thousands of
    # terms stays of the size atol is meant for
    fan_in = w_shape[1] * 9
    inputs = [random_array(rng, x_shape), random_array(rng, w_shape) * (12 / fan_in) ** 0.5,
              random_array(rng, (w_shape[0],))]
    model, _ = compile_op("Conv", inputs, attrs, consts=(1, 2))
    assert conv_path(model) == conv_kernels.CONV_WINOGRAD
    # many blocks run side by side in scratch slots; one block splits each stage instead
    step = next(s for s in model.plan.steps if s.op == "Conv")
    slots = struct.unpack_from("=9q", step.attrs)[8]
    assert (slots > 1) == (case in WINOGRAD_SLOTTED or small_blocks and case != "k_slices"), slots
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
    assert conv_path(model) == conv_kernels.CONV_IM2COL
    w[3, 2, 1, 1], w[5, 0, 0, 2] = np.inf, -np.inf
    model, _ = compile_op("Conv", [x, w], attrs, consts=(1,))
    assert conv_path(model) == conv_kernels.CONV_PACKED
    got = check("Conv", [x, w], attrs, consts=(1,), tol=SUMMED)
    assert np.isinf(got[0]).any()


# (x shape, w shape, attrs): constant weights take the packed GEMM; these reach its edges.
PACKED_CASES = {
    # 7 output channels: one partial panel of 12 rows; 5 x 7 positions: one partial panel
    # (5 input channels: fewer per group take the few-channel path, test_conv_few_channels)
    "partial_panels": ((1, 5, 5, 7), (7, 5, 3, 3), dict(pads=[1, 1, 1, 1])),
    # 25 channels (two whole panels and one row), 10 x 9 = 90 positions (2 full panels
    # and a 26-wide one), 300 input rows: two k slices of the micro-kernel
    "k_slices": ((1, 300, 10, 9), (25, 300, 1, 1), {}),
    # a last panel at most 16 wide (the narrow micro-kernel): 7 x 7 = 49 = 32 + 17, then
    # 6 x 6 = 36 = 32 + 4
    "narrow_tail": ((2, 5, 7, 7), (13, 5, 3, 3), dict(pads=[1, 1, 1, 1])),
    "narrow_tail_4": ((1, 6, 6, 6), (24, 6, 3, 3), dict(pads=[1, 1, 1, 1])),
    # 70 channels (6 panels, 72 rows) over 49 positions (64 columns): the GEMM walks A's
    # panels in the outer loop, each meeting a full and a narrow panel of columns
    "rows_outer_narrow": ((1, 5, 7, 7), (70, 5, 3, 2), dict(pads=[1, 0, 1, 1])),
    "stride2_7x7": ((1, 3, 37, 41), (16, 3, 7, 7), dict(strides=[2, 2], pads=[3, 3, 3, 3])),
    "stride3_dilated": ((1, 5, 19, 23), (5, 5, 3, 3), dict(strides=[3, 3], dilations=[2, 2],
                                                           pads=[2, 1, 0, 2])),
    "groups": ((2, 10, 9, 11), (26, 5, 3, 3), dict(group=2, pads=[1, 1, 1, 1])),
    "pointwise": ((1, 20, 13, 11), (30, 20, 1, 1), {}),
    "conv1d": ((3, 5, 40), (14, 5, 3), dict(pads=[1, 1])),
    "conv3d": ((1, 3, 5, 6, 7), (13, 3, 2, 3, 3), dict(pads=[1, 1, 1, 0, 1, 1])),
    # a kernel 19 wide: the packer's valid-column ranges are tabulated up to 16 columns
    "wide_kernel": ((1, 2, 6, 40), (5, 2, 1, 19), dict(pads=[0, 9, 0, 8])),
    # 30 x 31 = 930 positions: the packer gathers each row in chunks of 512
    "many_positions": ((1, 5, 30, 31), (4, 5, 3, 3), dict(pads=[1, 1, 1, 1])),
    # 17 panels of rows over 3 of positions: the columns are packed first, split over
    # the pool by rows of the column matrix: 582 rows (97 channels x 6 taps) of 81
    # positions in two chunks of 291, so that the second starts mid-kernel
    "rows_split": ((1, 97, 9, 9), (200, 97, 3, 2), dict(pads=[1, 0, 1, 2])),
}


@pytest.mark.parametrize("small_blocks", [False, True])
@pytest.mark.parametrize("case", PACKED_CASES)
def test_conv_packed(rng, monkeypatch, case, small_blocks):
    # the packed path's own cases: the direct path (test_conv_direct) would take some
    monkeypatch.setattr(conv_kernels, "_direct_fits", lambda *args: False)
    if small_blocks:  # one panel of positions per block: blocks end mid-row
        monkeypatch.setattr(conv_kernels, "PACKED_MAX_FLOATS", 1)
    x_shape, w_shape, attrs = PACKED_CASES[case]
    inputs = [random_array(rng, x_shape), random_array(rng, w_shape),
              random_array(rng, (w_shape[0],))]
    model, _ = compile_op("Conv", inputs, attrs, consts=(1, 2))
    assert conv_path(model) == conv_kernels.CONV_PACKED
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
    mr, kc = conv_kernels.PACK_MR, conv_kernels.PACK_KC
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
