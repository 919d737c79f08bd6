"""ge_hub.FusedConvNHWC (core/kernels/conv.c, ge_conv_nhwc_bf16: conv path
CONV_NHWC_BF16_CL): a FusedConv on channels-last tensors, X, Z and Y all float32 or all
bfloat16, against a float64 reference from the same bf16-rounded inputs, in every
geometry of the channels-last grid (tests/kernels/test_nn_bf16.py's NHWC_CASES) and the
1x1 windows only this op takes, each epilogue; and its NumPy reference against FusedConv's
on the same data turned around. The micro-kernel variants run these in processes of their
own (test_nn_bf16.VARIANT_SCRIPT)."""

from __future__ import annotations

import struct

import ml_dtypes
import numpy as np
import pytest

import ge_hub
from ge_hub import es, precision_report
from ge_hub.errors import OpError
from ge_hub.kernels import conv as conv_kernels
from ge_hub.ops import conv as conv_ops
from ge_hub.ops.conv import FUSED_DOMAIN
from tests.kernels.test_nn_bf16 import (
    BF16,
    NHWC_CASES,
    assert_fp32_sum_of,
    conv2d64,
    fused_epilogue,
    round64,
)

# 1x1 windows, which only the channels-last op reads from the grid: unit stride (the
# input's positions are the grid), stride 2 (a shortcut of ResNet: phase planes), and
# 48 output channels (a block of 32 and one of 16) over rows longer than a block.
POINTWISE_CASES = {
    "pointwise": ((1, 64, 5, 37), (48, 64, 1, 1), {}),
    "pointwise_stride2": ((2, 32, 9, 14), (40, 32, 1, 1), dict(strides=[2, 2])),
}
# Stems (at most 4 channels: the depth is the window's rows, conv_nhwc_bf16.h's
# stem_width): ResNet's 7x7 stride 2 at odd sizes with 40 output channels (a panel and a
# part), a 3x3 stride-2 one of two images, 4 channels at unit stride with uneven padding,
# and one channel under a window as wide as a depth block (8), strides 1 x 2.
STEM_CASES = {
    "stem_7x7_stride2": ((1, 3, 37, 41), (40, 3, 7, 7), dict(strides=[2, 2], pads=[3, 3, 3, 3])),
    "stem_3x3_stride2": ((2, 3, 17, 20), (32, 3, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    "stem_unit_stride": ((1, 4, 11, 13), (24, 4, 5, 5), dict(pads=[2, 1, 0, 2])),
    "stem_wide": ((1, 1, 15, 21), (16, 1, 4, 8), dict(strides=[1, 2], pads=[0, 3, 1, 0])),
}
CASES = {**NHWC_CASES, **POINTWISE_CASES, **STEM_CASES}
BF16_DTYPE = np.dtype(ml_dtypes.bfloat16)


def last(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1))


def run_case(case, rng, dtype=np.float32, activation="Relu", residual=True, bias=True):
    x_shape, w_shape, attrs = CASES[case]
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = (rng.standard_normal(w_shape) * (3.0 / np.prod(w_shape[1:])) ** 0.5).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32) if bias else None
    window = (attrs.get("strides", (1, 1)), attrs.get("pads", (0, 0, 0, 0)), 1,
              attrs.get("dilations", (1, 1)))
    want = conv2d64(round64(x), round64(w), None if b is None else b.astype(np.float64),
                    *window)
    scale = conv2d64(np.abs(round64(x)), np.abs(round64(w)),
                     None if b is None else np.abs(b.astype(np.float64)), *window)
    z = rng.standard_normal(want.shape).astype(np.float32) if residual else None
    if dtype == BF16_DTYPE and z is not None:
        z = z.astype(BF16_DTYPE).astype(np.float32)  # the residual the kernel reads
    x_in, z_in = last(x).astype(dtype), None if z is None else last(z).astype(dtype)
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", str(np.dtype(dtype)), list(x_in.shape))
        zin = es.input("z", str(np.dtype(dtype)), list(z_in.shape)) if residual else None
        y = es.op("FusedConvNHWC", xin, es.const(w), None if b is None else es.const(b), zin,
                  domain=FUSED_DOMAIN, activation=activation, alpha=0.0, beta=6.0, **attrs)
        es.output(y, "y")
    model = ge_hub.compile(gb.graph, options=BF16)
    (step,) = model.plan.steps
    assert step.kernel == conv_kernels.CONV_NHWC_KERNEL
    assert struct.unpack_from("=q", step.attrs)[0] == conv_kernels.CONV_NHWC_BF16_CL
    assert precision_report.step_precision(step) == "bf16"
    (got,) = model.run({"x": x_in, **({"z": z_in} if residual else {})})
    assert got.dtype == dtype and got.shape == last(want).shape
    want, scale = fused_epilogue(want, scale, z, activation)
    got = got.astype(np.float32).transpose(0, 3, 1, 2)
    if dtype == BF16_DTYPE:  # the fp32 sum, then its rounding to bf16 (half a unit)
        err = np.abs(got - want)
        bound = (w_shape[1] * w_shape[2] * w_shape[3] + 4) * 2.0 ** -23 * scale \
            + 2.0 ** -8 * np.abs(want) + 1e-6
        assert (err <= bound).all(), f"max error {err.max()}"
    else:
        assert_fp32_sum_of(got, want, scale, w_shape[1] * w_shape[2] * w_shape[3])


@pytest.fixture
def rng():
    return np.random.default_rng(11)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", [np.float32, BF16_DTYPE], ids=["float32", "bfloat16"])
def test_cases(case, dtype, rng):
    run_case(case, rng, dtype)


@pytest.mark.parametrize("activation, residual, bias", [("Clip", False, False),
                                                        ("", False, True),
                                                        ("Gelu", True, True),
                                                        ("Relu", True, False)])
@pytest.mark.parametrize("dtype", [np.float32, BF16_DTYPE], ids=["float32", "bfloat16"])
def test_epilogues(activation, residual, bias, dtype, rng):
    run_case("uneven", rng, dtype, activation=activation, residual=residual, bias=bias)


@pytest.mark.parametrize("dtype", [np.float32, BF16_DTYPE], ids=["float32", "bfloat16"])
def test_stem_specials_stay_in_their_windows(dtype, rng):
    """A stem's depth blocks read an 8th pixel past a 7-wide window (times a zero weight):
    an inf or a NaN there must not turn the neighbouring outputs NaN. Outputs whose window
    reads one are inf or NaN as the reference's; the others are finite and right."""
    x = rng.standard_normal((1, 3, 24, 30)).astype(np.float32)
    x[0, 0, 5, 9], x[0, 2, 12, 20], x[0, 1, 20, 3] = np.inf, -np.inf, np.nan
    w = (rng.standard_normal((40, 3, 7, 7)) * 0.1).astype(np.float32)
    b = rng.standard_normal(40).astype(np.float32)
    attrs = dict(strides=[2, 2], pads=[3, 3, 3, 3])
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", str(np.dtype(dtype)), [1, 24, 30, 3])
        es.output(es.op("FusedConvNHWC", xin, es.const(w), es.const(b), None,
                        domain=FUSED_DOMAIN, activation="", alpha=0.0, beta=0.0, **attrs), "y")
    (got,) = ge_hub.compile(gb.graph, options=BF16).run({"x": last(x).astype(dtype)})
    got = got.astype(np.float32)
    x16 = last(x).astype(BF16_DTYPE).astype(np.float32)
    want = conv_ops.fused_conv_nhwc(x16, w.astype(BF16_DTYPE).astype(np.float32), b, None,
                                    auto_pad="NOTSET", dilations=None, group=1,
                                    kernel_shape=None, activation="", alpha=0.0, beta=0.0,
                                    **attrs)
    assert np.isnan(want).any() and np.isinf(want).any() and np.isfinite(want).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=2e-2, atol=2e-2)


def test_reference_is_fused_conv_turned_around(rng):
    """The op's NumPy reference: FusedConv on X and Z turned channels-first, Y turned
    back; with bf16 X and Z, summed in W's fp32 and rounded once."""
    x = rng.standard_normal((2, 7, 9, 32)).astype(np.float32)
    w = rng.standard_normal((12, 32, 3, 3)).astype(np.float32)
    b = rng.standard_normal(12).astype(np.float32)
    z = rng.standard_normal((2, 7, 9, 12)).astype(np.float32)
    attrs = dict(auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                 pads=[1, 1, 1, 1], strides=None, activation="Relu", alpha=0.0, beta=0.0)
    want = conv_ops.fused_conv(x.transpose(0, 3, 1, 2), w, b, z.transpose(0, 3, 1, 2), **attrs)
    got = conv_ops.fused_conv_nhwc(x, w, b, z, **attrs)
    np.testing.assert_array_equal(got, want.transpose(0, 2, 3, 1))
    got16 = conv_ops.fused_conv_nhwc(x.astype(BF16_DTYPE), w, b, z.astype(BF16_DTYPE), **attrs)
    want16 = conv_ops.fused_conv(x.astype(BF16_DTYPE).astype(np.float32).transpose(0, 3, 1, 2),
                                 w, b, z.astype(BF16_DTYPE).astype(np.float32)
                                 .transpose(0, 3, 1, 2), **attrs)
    assert got16.dtype == BF16_DTYPE
    np.testing.assert_array_equal(got16, want16.transpose(0, 2, 3, 1).astype(BF16_DTYPE))


def test_shape_inference_and_bad_inputs():
    """Y's shape is the Conv's turned channels-last; a residual of another shape, an X of
    rank 3 and a Z of another dtype than X are refused by name."""
    w = np.ones((8, 32, 3, 3), np.float32)
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "bfloat16", [1, 10, 12, 32])
        y = es.op("FusedConvNHWC", x, es.const(w), domain=FUSED_DOMAIN, strides=[2, 2],
                  pads=[1, 1, 1, 1])
        es.output(y, "y")
    (out,) = gb.graph.outputs
    assert tuple(out.type.shape) == (1, 5, 6, 8) and str(out.type.dtype) == "bfloat16"
    bad = {"rank": ([1, 10, 32], "float32", None),
           "residual": ([1, 10, 12, 32], "float32", ([1, 10, 12, 9], "float32")),
           "dtype": ([1, 10, 12, 32], "bfloat16", ([1, 10, 12, 8], "float32"))}
    for x_shape, x_dtype, z in bad.values():
        with pytest.raises(OpError, match="FusedConvNHWC"):
            with es.GraphBuilder("g"):
                x = es.input("x", x_dtype, x_shape)
                zin = None if z is None else es.input("z", z[1], z[0])
                es.op("FusedConvNHWC", x, es.const(w), None, zin, domain=FUSED_DOMAIN,
                      pads=[1, 1, 1, 1])


def test_a_window_the_path_cannot_take_runs_the_counted_reference(rng):
    """Groups (or a stride of 3) have no channels-last kernel: the reference runs the node,
    and the plan counts it as a Python step."""
    x = rng.standard_normal((1, 6, 6, 64)).astype(np.float32)
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", "float32", list(x.shape))
        es.output(es.op("FusedConvNHWC", xin, es.const(np.ones((16, 32, 3, 3), np.float32)),
                        domain=FUSED_DOMAIN, group=2, pads=[1, 1, 1, 1]), "y")
    model = ge_hub.compile(gb.graph, options=BF16)
    (step,) = model.plan.steps
    assert step.kernel != conv_kernels.CONV_NHWC_KERNEL
    assert model.summary()["python_steps"] == 1
    want = conv_ops.fused_conv_nhwc(x, np.ones((16, 32, 3, 3), np.float32), None, None,
                                    auto_pad="NOTSET", dilations=None, group=2,
                                    kernel_shape=None, pads=[1, 1, 1, 1], strides=None,
                                    activation="", alpha=0.0, beta=0.0)
    np.testing.assert_allclose(model.run({"x": x})[0], want, rtol=1e-5, atol=1e-4)


# ge_hub.ToChannelsLast (ge_to_channels_last_bf16): x shape -> what it exercises
TO_CHANNELS_LAST_CASES = {
    "grid": (2, 64, 7, 37),     # channels a multiple of 32: the grid conversion, odd rows
    "plain": (1, 40, 5, 9),     # other channel counts: the plain loop
    "one_row": (1, 32, 1, 70),  # a row longer than the conversion's runs
    # at most 4 channels (a stem's input): interleaved 16 positions at a time, in runs of
    # 4096 positions; planes with a partial run and a partial 16
    "stem": (2, 3, 67, 71),
    "one_channel": (1, 1, 5, 7),
    "two_channels": (1, 2, 3, 3),
    "four_channels": (1, 4, 9, 13),
}


def run_to_channels_last_case(case, rng):
    x = rng.standard_normal(TO_CHANNELS_LAST_CASES[case]).astype(np.float32)
    x.flat[::97] = np.float32(3.0) + np.float32(2.0 ** -7)  # half a bf16 unit: a tie
    x.flat[5::89], x.flat[7::101] = np.inf, np.nan
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", "float32", list(x.shape))
        es.output(es.op("ToChannelsLast", xin, domain=FUSED_DOMAIN), "y")
    model = ge_hub.compile(gb.graph, options=BF16)
    (step,) = model.plan.steps
    assert step.kernel == conv_kernels.TO_CHANNELS_LAST_KERNEL
    (got,) = model.run({"x": x})
    assert got.dtype == BF16_DTYPE and got.shape == last(x).shape
    np.testing.assert_array_equal(got.view(np.uint16), last(x).astype(BF16_DTYPE).view(np.uint16))


@pytest.mark.parametrize("case", TO_CHANNELS_LAST_CASES)
def test_to_channels_last(case, rng):
    """Bit for bit what Cast(Transpose(X)) gives (ml_dtypes' rounding to nearest even)."""
    run_to_channels_last_case(case, rng)


def test_to_channels_last_reference_and_inference():
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    got = conv_ops.to_channels_last_op(x, to="bfloat16")
    np.testing.assert_array_equal(got, x.transpose(0, 2, 3, 1).astype(BF16_DTYPE))
    with es.GraphBuilder("g") as gb:
        y = es.op("ToChannelsLast", es.input("x", "float32", [2, 3, 4, 5]), domain=FUSED_DOMAIN)
        es.output(y, "y")
    (out,) = gb.graph.outputs
    assert tuple(out.type.shape) == (2, 4, 5, 3) and str(out.type.dtype) == "bfloat16"
    with pytest.raises(OpError, match="ToChannelsLast"):
        with es.GraphBuilder("g"):
            es.op("ToChannelsLast", es.input("x", "float32", [3, 4, 5]), domain=FUSED_DOMAIN)
