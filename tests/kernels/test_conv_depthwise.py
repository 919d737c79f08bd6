"""The direct depthwise convolution (core/kernels/conv_depthwise.c) behind Conv and
ge_hub.FusedConv with group == C == M, against the NumPy references of Conv and of the
unfused subgraph: wide planes (one span per output row) and narrow ones (the whole plane
as one span), strides 1, 2, 3 and mixed, symmetric, asymmetric, zero and oversized pads,
dilation, kernels 1x1 to 7x7 and 1-D, batches, each activation (Relu and Clip in the
span's registers, the rest over the finished plane), residuals, NaN and inf passing
through (in the input and in the weights), and each span kernel
(GE_HUB_DEPTHWISE_KERNEL=avx512|avx512f|avx2|generic) in a process of its own. A
MobileNetV2-style block gives the same outputs with fusion on and off."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.kernels import conv as conv_kernels
from ge_hub.ops.conv import FUSED_DOMAIN
from ge_hub.reference import evaluate
from ge_hub.testing import assert_outputs_close
from tests.kernels.isolated import run_isolated

TOL = dict(rtol=2e-4, atol=2e-4)

# name -> (x shape, kernel (kh, kw), attrs); every case is depthwise (group = C).
GEOMETRIES = {
    "3x3_wide": ((1, 3, 40, 67), (3, 3), dict(pads=[1, 1, 1, 1])),
    "3x3_narrow_7": ((2, 5, 7, 7), (3, 3), dict(pads=[1, 1, 1, 1])),
    "3x3_narrow_14": ((1, 6, 14, 14), (3, 3), dict(pads=[1, 1, 1, 1])),
    "3x3_stride2_even": ((1, 4, 28, 28), (3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    "3x3_stride2_odd": ((1, 3, 29, 71), (3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    "3x3_stride2_wide": ((1, 2, 9, 133), (3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    # rows past fill_pairs' 16 * NN_DW_PAIR_CHUNKS phase columns take fill_phase's loops
    "3x3_stride2_very_wide": ((1, 2, 5, 530), (3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    # rows of at most 7 outputs: two output rows to a vector (an odd count: one alone last)
    "3x3_stride2_two_rows": ((1, 3, 13, 13), (3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    "3x3_stride2_two_rows_narrow": ((1, 2, 10, 5), (3, 3),
                                    dict(strides=[2, 2], pads=[0, 2, 1, 0])),
    # rows of more than 1024 outputs: past the in-place kernel's mask table, the phases
    "3x3_stride2_past_the_masks": ((1, 1, 3, 2071), (3, 3),
                                   dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    "3x3_stride2_no_pad": ((1, 3, 15, 16), (3, 3), dict(strides=[2, 2])),
    "3x3_stride2_asymmetric": ((1, 3, 16, 17), (3, 3),
                               dict(strides=[2, 2], pads=[0, 1, 1, 0])),
    "stride_2_1": ((1, 3, 11, 37), (3, 3), dict(strides=[2, 1], pads=[1, 1, 1, 1])),
    "stride_1_2": ((1, 3, 11, 37), (3, 3), dict(strides=[1, 2], pads=[1, 1, 1, 1])),
    "stride_3": ((1, 2, 23, 41), (3, 3), dict(strides=[3, 3], pads=[1, 2, 0, 1])),
    "5x5_stride2": ((1, 4, 19, 21), (5, 5), dict(strides=[2, 2], pads=[2, 2, 2, 2])),
    "5x5_wide": ((1, 2, 12, 70), (5, 5), dict(pads=[2, 2, 2, 2])),
    # stride 1 with out_w == in_w reads the plane in place under masks (direct_avx512):
    # a multiple of 64 outputs, 4-chunk steps and a tail, 5x5, dilated, uneven pads
    "3x3_same_16x16": ((1, 2, 16, 16), (3, 3), dict(pads=[1, 1, 1, 1])),
    "3x3_same_28": ((1, 4, 28, 28), (3, 3), dict(pads=[1, 1, 1, 1])),
    "5x5_same_narrow": ((1, 3, 10, 10), (5, 5), dict(pads=[2, 2, 2, 2])),
    "dilated_same_narrow": ((1, 3, 9, 9), (3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2])),
    "3x3_same_uneven_rows": ((1, 3, 12, 13), (3, 3), dict(pads=[0, 1, 2, 1])),
    # 3x3 stride 1 with pad 1 left and right takes direct3_avx512 (three shifted loads per
    # vector): rows one and two wide, two rows of padding above (none below), four-vector
    # steps at the plane's edges and inside it, and a tail of three vectors
    "3x3_same_one_wide": ((1, 3, 9, 1), (3, 3), dict(pads=[1, 1, 1, 1])),
    "3x3_same_two_wide": ((1, 2, 11, 2), (3, 3), dict(pads=[1, 1, 1, 1])),
    "3x3_same_rows_above": ((1, 2, 9, 19), (3, 3), dict(pads=[2, 1, 0, 1])),
    "3x3_same_tail_of_three": ((2, 3, 10, 17), (3, 3), dict(pads=[1, 1, 1, 1])),
    # stride 1 with rows narrower than the input: the padded copy (wide and narrow)
    "3x3_wide_no_pad": ((1, 3, 9, 70), (3, 3), {}),
    "7x7": ((1, 3, 13, 11), (7, 7), dict(pads=[3, 3, 3, 3])),
    "3x5": ((1, 3, 12, 35), (3, 5), dict(pads=[1, 2, 1, 2])),
    "1x1_stride2": ((1, 3, 9, 10), (1, 1), dict(strides=[2, 2])),
    "dilated_2": ((1, 4, 17, 38), (3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2])),
    "dilated_stride2": ((1, 3, 19, 23), (3, 3),
                        dict(dilations=[2, 3], strides=[2, 2], pads=[2, 3, 1, 2])),
    "big_pads": ((1, 2, 5, 6), (3, 3), dict(pads=[3, 4, 2, 5])),
    "kernel_wider_than_input": ((1, 2, 4, 3), (5, 5), dict(pads=[2, 2, 2, 2])),
    "one_by_n": ((1, 3, 1, 50), (1, 3), dict(pads=[0, 1, 0, 1])),
    "1d": ((2, 3, 37), (3,), dict(pads=[1, 1])),
    "1d_stride2": ((1, 4, 30), (5,), dict(strides=[2], pads=[2, 1])),
}

ACTIVATIONS = {"": (0.0, 0.0), "Relu": (0.0, 0.0), "Clip": (0.0, 6.0),
               "LeakyRelu": (0.1, 0.0), "HardSwish": (0.0, 0.0), "Sigmoid": (0.0, 0.0)}


def case_arrays(name, rng, *, bias=True, residual=False, specials=False):
    x_shape, k, attrs = GEOMETRIES[name]
    c = x_shape[1]
    x = rng.standard_normal(x_shape).astype(np.float32) * 2.0
    if specials:
        flat = x.reshape(-1)
        flat[rng.choice(flat.size, 3, replace=False)] = [np.nan, np.inf, -np.inf]
    w = (rng.standard_normal((c, 1, *k)) * 0.7).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32) if bias else None
    return x, w, b, dict(attrs, group=c)


def conv_graph(x, w, b, attrs, activation=None, residual=None):
    """Conv (activation None) or FusedConv with that activation and an optional residual."""
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", "float32", list(x.shape))
        bin_ = None if b is None else es.const(b)
        if activation is None:
            y = es.op("Conv", xin, es.const(w), bin_, **attrs)
        else:
            alpha, beta = ACTIVATIONS[activation]
            zin = None if residual is None else es.input("z", "float32", list(residual.shape))
            y = es.op("FusedConv", xin, es.const(w), bin_, zin, domain=FUSED_DOMAIN,
                      activation=activation, alpha=alpha, beta=beta, **attrs)
        es.output(y, "y")
    return gb.graph


def check(graph, feeds):
    model = ge_hub.compile(graph)
    (step,) = model.plan.steps
    assert struct.unpack_from("=q", step.attrs)[0] == conv_kernels.CONV_DEPTHWISE
    got = model.run(feeds)
    want = evaluate(graph, feeds)
    assert_outputs_close(got, want, ["y"], **TOL)
    return got[0], want[0]


def output_shape(x, w, b, attrs):
    return evaluate(conv_graph(x, w, b, attrs), {"x": x})[0].shape


@pytest.fixture
def rng():
    return np.random.default_rng(23)


@pytest.mark.parametrize("name", GEOMETRIES)
def test_plain_conv_every_geometry(name, rng):
    x, w, b, attrs = case_arrays(name, rng)
    check(conv_graph(x, w, b, attrs), {"x": x})


@pytest.mark.parametrize("name", GEOMETRIES)
def test_without_bias(name, rng):
    x, w, _, attrs = case_arrays(name, rng, bias=False)
    check(conv_graph(x, w, None, attrs), {"x": x})


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("name", ["3x3_wide", "3x3_narrow_7", "3x3_stride2_odd", "5x5_stride2",
                                  "dilated_stride2", "1d", "3x3_stride2_two_rows"])
def test_fused_activations(name, activation, rng):
    x, w, b, attrs = case_arrays(name, rng)
    check(conv_graph(x, w, b, attrs, activation), {"x": x})


@pytest.mark.parametrize("activation", ["Relu", "Clip", "HardSwish"])
@pytest.mark.parametrize("name", ["3x3_wide", "3x3_narrow_14", "3x3_stride2_even",
                                  "3x3_stride2_two_rows"])
def test_fused_residual(name, activation, rng):
    x, w, b, attrs = case_arrays(name, rng)
    z = rng.standard_normal(output_shape(x, w, b, attrs)).astype(np.float32)
    check(conv_graph(x, w, b, attrs, activation, residual=z), {"x": x, "z": z})


def test_clip_with_other_bounds(rng):
    x, w, b, attrs = case_arrays("3x3_narrow_14", rng)
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", "float32", list(x.shape))
        y = es.op("FusedConv", xin, es.const(w), es.const(b), None, domain=FUSED_DOMAIN,
                  activation="Clip", alpha=-0.5, beta=0.25, **attrs)
        es.output(y, "y")
    got, _ = check(gb.graph, {"x": x})
    assert got.min() == np.float32(-0.5) and got.max() == np.float32(0.25)


@pytest.mark.parametrize("activation", [None, "", "Relu", "Clip", "Sigmoid"])
@pytest.mark.parametrize("name", ["3x3_wide", "3x3_narrow_7", "3x3_stride2_odd", "dilated_2",
                                  "3x3_stride2_two_rows"])
def test_nan_and_inf_pass_through(name, activation, rng):
    x, w, b, attrs = case_arrays(name, rng, specials=True)
    got, want = check(conv_graph(x, w, b, attrs, activation), {"x": x})
    assert np.isnan(got).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


@pytest.mark.parametrize("name", ["3x3_narrow_14", "3x3_same_tail_of_three"])
def test_infinite_weight_meets_the_padding(name, rng):
    """A 3x3 stride-1 plane with an inf or NaN weight leaves direct3_avx512 (which skips the
    taps that read the padding) for direct_avx512, so that 0 * inf is NaN as in the
    reference; the other planes keep it."""
    x, w, b, attrs = case_arrays(name, rng)
    w[0, 0, 0, 0] = np.inf
    w[-1, 0, 1, 2] = np.nan
    got, want = check(conv_graph(x, w, b, attrs, "Relu"), {"x": x})
    assert np.isnan(got[:, 0]).any() and np.isnan(got[:, -1]).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


def test_many_planes_split_over_the_pool(rng):
    """Enough planes that the pool splits them into chunks, each with its own buffer."""
    x = rng.standard_normal((2, 96, 14, 14)).astype(np.float32)
    w = rng.standard_normal((96, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(96).astype(np.float32)
    attrs = dict(group=96, strides=[2, 2], pads=[1, 1, 1, 1])
    check(conv_graph(x, w, b, attrs, "Clip"), {"x": x})


@pytest.mark.parametrize("variant", ["generic", "avx2", "avx512f", "avx512"])
def test_each_span_kernel(variant):
    """The span kernel is picked once per process; GE_HUB_DEPTHWISE_KERNEL forces a lesser
    one (ignored where the CPU lacks it), so each variant runs in a process of its own."""
    run_isolated("""
        import os
        import numpy as np
        from tests.kernels import test_conv_depthwise as t
        rng = np.random.default_rng(7)
        for name in t.GEOMETRIES:
            x, w, b, attrs = t.case_arrays(name, rng)
            t.check(t.conv_graph(x, w, b, attrs), {"x": x})
            for activation in ("Relu", "Clip", "HardSwish"):
                t.check(t.conv_graph(x, w, b, attrs, activation), {"x": x})
            x, w, b, attrs = t.case_arrays(name, rng, specials=True)
            got, want = t.check(t.conv_graph(x, w, b, attrs, "Relu"), {"x": x})
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        ran = t.kernel_ran()
        assert ran == t.expected_kernel(os.environ["GE_HUB_DEPTHWISE_KERNEL"]), ran
        print("ok")
    """, GE_HUB_DEPTHWISE_KERNEL=variant)


# Span kernels from the best to the least, with the CPU features each needs.
SPAN_KERNELS = (("avx512", {"avx512f", "avx512bw"}), ("avx512f", {"avx512f"}),
                ("avx2", {"avx2", "fma"}), ("generic", set()))


def kernel_ran() -> str:
    """The span kernel this process picked (conv_depthwise.c, through ctypes)."""
    import ctypes

    from ge_hub import _core

    lib = ctypes.CDLL(_core.__file__)
    lib.ge_hub_depthwise_kernel_name.restype = ctypes.c_char_p
    return lib.ge_hub_depthwise_kernel_name().decode()


def expected_kernel(wanted: str) -> str:
    """What GE_HUB_DEPTHWISE_KERNEL=wanted runs on this CPU: that kernel, or the best lesser
    one the CPU has."""
    from ge_hub.kernels.cpu import cpu_flags

    names = [name for name, _ in SPAN_KERNELS]
    flags = set(cpu_flags())
    return next(name for name, needs in SPAN_KERNELS[names.index(wanted):] if needs <= flags)


def mobilenet_block_graph(rng):
    """Inverted residual blocks as exporters write them: 1x1 expand + BatchNorm + Clip(0, 6),
    3x3 depthwise (stride 1, then 2) + BatchNorm + Clip, 1x1 project + BatchNorm, residual Add."""
    def conv_bn(x, c_in, c_out, k, group=1, stride=1, relu6=True):
        w = (rng.standard_normal((c_out, c_in // group, k, k)) * (2.0 / (c_in // group * k * k))
             ** 0.5).astype(np.float32)
        y = es.op("Conv", x, es.const(w), group=group, strides=[stride, stride],
                  pads=[k // 2] * 4)
        stats = [rng.random(c_out).astype(np.float32) + 0.5,
                 (rng.standard_normal(c_out) * 0.1).astype(np.float32),
                 (rng.standard_normal(c_out) * 0.1).astype(np.float32),
                 rng.random(c_out).astype(np.float32) + 0.5]
        y = es.op("BatchNormalization", y, *[es.const(s) for s in stats])
        if relu6:
            y = es.op("Clip", y, es.const(np.float32(0.0)), es.const(np.float32(6.0)))
        return y

    with es.GraphBuilder("mbv2_blocks") as gb:
        x = es.input("x", "float32", [1, 16, 23, 23])
        h = conv_bn(x, 16, 48, 1)
        h = conv_bn(h, 48, 48, 3, group=48)
        h = conv_bn(h, 48, 16, 1, relu6=False)
        x = es.op("Add", x, h)
        h = conv_bn(x, 16, 64, 1)
        h = conv_bn(h, 64, 64, 3, group=64, stride=2)
        y = conv_bn(h, 64, 24, 1, relu6=False)
        es.output(y, "y")
    return gb.graph


def test_mobilenet_blocks_same_with_fusion_on_and_off(rng):
    graph = mobilenet_block_graph(rng)
    feeds = {"x": rng.standard_normal((1, 16, 23, 23)).astype(np.float32)}
    fused = ge_hub.compile(graph.copy())
    unfused = ge_hub.compile(graph.copy(),
                             options={"disable_passes": ["fuse_conv_epilogue"]})
    assert len(fused.plan.steps) < len(unfused.plan.steps)
    want = evaluate(graph, feeds)
    assert_outputs_close(fused.run(feeds), want, ["y"], **TOL)
    assert_outputs_close(unfused.run(feeds), want, ["y"], **TOL)
    np.testing.assert_allclose(fused.run(feeds)[0], unfused.run(feeds)[0], rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("multiplier, strides", [(2, [1, 1]), (3, [2, 2])])
def test_channel_multiplier(multiplier, strides, rng):
    """group == C with M = multiplier * C (each input channel feeds `multiplier` filters):
    not the depthwise path (conv.c's packed GEMM per group runs it), checked all the same."""
    c = 5
    x = rng.standard_normal((1, c, 13, 34)).astype(np.float32)
    w = rng.standard_normal((c * multiplier, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(c * multiplier).astype(np.float32)
    attrs = dict(group=c, strides=strides, pads=[1, 1, 1, 1])
    for activation in (None, "Relu", "Clip"):
        graph = conv_graph(x, w, b, attrs, activation)
        got = ge_hub.compile(graph).run({"x": x})
        assert_outputs_close(got, evaluate(graph, {"x": x}), ["y"], **TOL)
