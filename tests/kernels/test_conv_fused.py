"""ge_hub.FusedConv's C kernel (ge_conv_fused_f32) against the NumPy reference of the
subgraph it replaces (Conv, then Add of the residual, then the activation's own
reference), on every conv path (packed GEMM, Winograd, direct depthwise, general
depthwise, im2col, pointwise), every activation, odd sizes, NaN and inf, and each
micro-kernel variant (GE_HUB_GEMM_KERNEL, GE_HUB_DEPTHWISE_KERNEL)."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.kernels import conv as conv_kernels
from ge_hub.ops.conv import CONV_ACTIVATIONS, FUSED_DOMAIN
from ge_hub.reference import evaluate
from ge_hub.testing import assert_outputs_close

KERNEL = "ge_conv_fused_f32"
TOL = dict(rtol=2e-4, atol=2e-4)

# activation -> (alpha, beta)
PARAMS = {"": (0.0, 0.0), "Relu": (0.0, 0.0), "Clip": (0.0, 6.0), "LeakyRelu": (0.13, 0.0),
          "Sigmoid": (0.0, 0.0), "HardSigmoid": (0.3, 0.45), "HardSwish": (0.0, 0.0),
          "SiLU": (0.0, 0.0), "Gelu": (0.0, 0.0), "GeluTanh": (0.0, 0.0)}

# name -> (x shape, w shape, attrs, path); weights are constants unless the path needs
# them fed at run time (im2col, pointwise)
CASES = {
    "packed": ((1, 7, 9, 11), (29, 7, 3, 3), dict(pads=[1, 1, 1, 1]),
               conv_kernels.CONV_PACKED),
    "packed_stride2_groups": ((2, 6, 13, 9), (10, 3, 5, 5),
                              dict(strides=[2, 2], pads=[2, 1, 2, 1], group=2),
                              conv_kernels.CONV_PACKED),
    "packed_k_slices": ((1, 40, 5, 7), (13, 40, 3, 3), dict(pads=[1, 1, 1, 1]),
                        conv_kernels.CONV_PACKED),
    # 1x1, stride 1, no padding: the packed GEMM reads the input planes in place (63
    # positions: a full panel and one of 31; 13: one narrow panel; 300 channels per
    # group: two k slices)
    "packed_1x1_in_place": ((2, 13, 7, 9), (29, 13, 1, 1), {}, conv_kernels.CONV_PACKED),
    "packed_1x1_narrow": ((1, 9, 1, 13), (5, 9, 1, 1), {}, conv_kernels.CONV_PACKED),
    "packed_1x1_k_slices_groups": ((1, 600, 3, 7), (14, 300, 1, 1), dict(group=2),
                                   conv_kernels.CONV_PACKED),
    "packed_1x1_many_positions": ((1, 6, 23, 29), (7, 6, 1, 1), {},
                                  conv_kernels.CONV_PACKED),
    # 9 panels of output channels over one of positions, 4100 x 17 inputs: the tiles
    # would walk the weights' panels outermost over more than NN_PACK_IN_PLACE_MAX
    # (nn_gemm_packed.c) floats of input, so the input is packed after all
    "packed_1x1_many_channels": ((1, 4100, 1, 17), (100, 4100, 1, 1), {},
                                 conv_kernels.CONV_PACKED),
    # the last columns through the AVX-512 column tail (nn_gemm_packed_tail.h): 49
    # positions are panels of 32 and 17 (16 + 1); 196 end in a panel of 4; 6 and 24
    # positions are a tail of 6 alone and 16 + 8. Rows: short last panels (29, 97, 100
    # channels), and panel groups of 8 and 6 with a shorter last group.
    "packed_1x1_tail_7x7": ((1, 300, 7, 7), (29, 300, 1, 1), {}, conv_kernels.CONV_PACKED),
    "packed_tail_14x14": ((1, 20, 28, 28), (100, 20, 3, 3), dict(strides=[2, 2],
                                                                 pads=[1, 1, 1, 1]),
                          conv_kernels.CONV_PACKED),
    "packed_1x1_tail_only": ((2, 40, 2, 3), (97, 40, 1, 1), {}, conv_kernels.CONV_PACKED),
    "packed_1x1_tail_8": ((1, 33, 4, 6), (41, 33, 1, 1), {}, conv_kernels.CONV_PACKED),
    "winograd": ((1, 16, 17, 19), (20, 16, 3, 3), dict(pads=[1, 1, 1, 1]),
                 conv_kernels.CONV_WINOGRAD),
    # 49 tiles: the 16 products end in a column tail of 1
    "winograd_14x14": ((1, 16, 14, 14), (20, 16, 3, 3), dict(pads=[1, 1, 1, 1]),
                       conv_kernels.CONV_WINOGRAD),
    # 36 tiles per tile row: strips of 32 tiles (two halves of 16) and of 4
    "winograd_wide": ((1, 16, 9, 71), (20, 16, 3, 3), dict(pads=[1, 1, 1, 1]),
                      conv_kernels.CONV_WINOGRAD),
    # the input transform's loads start before and end past the row, unevenly
    "winograd_wide_asymmetric": ((1, 16, 8, 67), (20, 16, 3, 3), dict(pads=[0, 2, 1, 0]),
                                 conv_kernels.CONV_WINOGRAD),
    "depthwise_3x3": ((2, 5, 13, 37), (5, 1, 3, 3), dict(group=5, pads=[1, 1, 1, 1]),
                      conv_kernels.CONV_DEPTHWISE),
    "depthwise_3x3_stride2": ((1, 6, 15, 35), (6, 1, 3, 3),
                              dict(group=6, strides=[2, 2], pads=[1, 1, 1, 1]),
                              conv_kernels.CONV_DEPTHWISE),
    # 3x3 stride 2 read in place by the AVX-512 kernel: outputs rows of 36 (three
    # 16-lane chunks, the last short) with asymmetric padding, and of exactly 32
    "depthwise_3x3_stride2_wide_asymmetric": ((1, 3, 18, 71), (3, 1, 3, 3),
                                              dict(group=3, strides=[2, 2],
                                                   pads=[0, 1, 1, 0]),
                                              conv_kernels.CONV_DEPTHWISE),
    "depthwise_3x3_stride2_rows_of_32": ((2, 2, 9, 64), (2, 1, 3, 3),
                                         dict(group=2, strides=[2, 2], pads=[1, 1, 1, 1]),
                                         conv_kernels.CONV_DEPTHWISE),
    "depthwise_5x5": ((1, 3, 11, 9), (3, 1, 5, 5), dict(group=3, pads=[2, 2, 2, 2]),
                      conv_kernels.CONV_DEPTHWISE),
    "depthwise_5x5_stride2_asymmetric": ((1, 4, 16, 19), (4, 1, 5, 5),
                                         dict(group=4, strides=[2, 2], pads=[1, 2, 2, 1]),
                                         conv_kernels.CONV_DEPTHWISE),
    "depthwise_stride_2_1": ((1, 3, 10, 41), (3, 1, 3, 3),
                             dict(group=3, strides=[2, 1], pads=[0, 1, 1, 0]),
                             conv_kernels.CONV_DEPTHWISE),
    "depthwise_dilated": ((1, 4, 11, 10), (4, 1, 3, 3),
                          dict(group=4, dilations=[2, 2], pads=[2, 2, 2, 2]),
                          conv_kernels.CONV_DEPTHWISE),
    "depthwise_1d": ((2, 3, 17), (3, 1, 3), dict(group=3, pads=[1, 1]),
                     conv_kernels.CONV_DEPTHWISE),
    "conv1d": ((2, 5, 13), (4, 5, 3), dict(strides=[2], pads=[1, 2]),
               conv_kernels.CONV_PACKED),
    # at most 4 input channels per group: the depthwise kernel's spans (a stem)
    "few_channels_stem": ((2, 3, 15, 17), (10, 3, 3, 3), dict(strides=[2, 2],
                                                               pads=[1, 1, 1, 1]),
                          conv_kernels.CONV_FEW_CHANNELS),
    "conv3d": ((1, 2, 5, 6, 7), (3, 2, 2, 3, 3), dict(pads=[1, 0, 1, 0, 1, 1]),
               conv_kernels.CONV_PACKED),
    "im2col": ((1, 5, 9, 8), (7, 5, 3, 3), dict(pads=[1, 1, 1, 1]),
               conv_kernels.CONV_IM2COL),
    "im2col_blocked": ((1, 32, 48, 47), (4, 32, 3, 3), dict(pads=[1, 1, 1, 1]),
                       conv_kernels.CONV_IM2COL),
    "pointwise": ((2, 8, 5, 7), (6, 8, 1, 1), {}, conv_kernels.CONV_POINTWISE),
}


def inputs_for(case, rng, *, residual=True, bias=True):
    x_shape, w_shape, attrs, path = CASES[case]
    fan_in = int(np.prod(w_shape[1:]))
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = (rng.standard_normal(w_shape) * (3.0 / fan_in) ** 0.5).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32) if bias else None
    out = ge_hub.ops.get_schema("Conv").infer_types(
        [es_type(x), es_type(w)] + ([es_type(b)] if bias else []), attrs)[0].shape
    z = rng.standard_normal(out).astype(np.float32) if residual else None
    return x, w, b, z, attrs, path


def es_type(array):
    from ge_hub.ir.dtypes import DType
    from ge_hub.ir.types import TensorType

    return TensorType(DType.from_numpy(array.dtype), tuple(array.shape))


def fused_graph(x, w, b, z, attrs, activation, *, weights_fed):
    alpha, beta = PARAMS[activation]
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", "float32", list(x.shape))
        win = es.input("w", "float32", list(w.shape)) if weights_fed else es.const(w)
        bin_ = None if b is None else es.const(b)
        zin = None if z is None else es.input("z", "float32", list(z.shape))
        y = es.op("FusedConv", xin, win, bin_, zin, domain=FUSED_DOMAIN,
                  activation=activation, alpha=alpha, beta=beta, **attrs)
        es.output(y, "y")
    feeds = {"x": x}
    if weights_fed:
        feeds["w"] = w
    if z is not None:
        feeds["z"] = z
    return gb.graph, feeds


def run_and_compare(case, activation, rng, *, residual=True, bias=True, specials=False):
    x, w, b, z, attrs, path = inputs_for(case, rng, residual=residual, bias=bias)
    if specials:
        flat = x.reshape(-1)
        flat[rng.choice(flat.size, 3, replace=False)] = [np.nan, np.inf, -np.inf]
    weights_fed = path in (conv_kernels.CONV_IM2COL, conv_kernels.CONV_POINTWISE)
    graph, feeds = fused_graph(x, w, b, z, attrs, activation, weights_fed=weights_fed)
    model = ge_hub.compile(graph)
    (step,) = model.plan.steps
    assert step.kernel == KERNEL, step.kernel
    assert struct.unpack_from("=q", step.attrs)[0] == path
    got = model.run(feeds)
    want = evaluate(graph, feeds)
    assert_outputs_close(got, want, ["y"], **TOL)
    return got[0], want[0]


@pytest.fixture
def rng():
    return np.random.default_rng(11)


@pytest.mark.parametrize("activation", CONV_ACTIVATIONS)
@pytest.mark.parametrize("case", ["packed", "winograd", "winograd_wide", "depthwise_3x3_stride2",
                                  "few_channels_stem", "im2col"])
def test_every_activation_on_the_main_paths(case, activation, rng):
    run_and_compare(case, activation, rng)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("residual, bias, activation", [(True, True, "Relu"),
                                                        (False, False, "Clip"),
                                                        (True, False, "HardSwish")])
def test_every_path(case, residual, bias, activation, rng):
    run_and_compare(case, activation, rng, residual=residual, bias=bias)


@pytest.mark.parametrize("case", ["packed", "packed_1x1_in_place", "winograd", "depthwise_3x3",
                                  "depthwise_3x3_stride2_wide_asymmetric",
                                  "depthwise_dilated", "im2col", "pointwise"])
@pytest.mark.parametrize("activation", ["Relu", "Clip", "Sigmoid", ""])
def test_nan_and_inf_propagate(case, activation, rng):
    got, want = run_and_compare(case, activation, rng, specials=True)
    assert np.isnan(got).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


def test_a_residual_of_the_wrong_shape_is_refused_at_compile_time(rng):
    x, w, b, z, attrs, _ = inputs_for("packed", rng)
    with pytest.raises(ge_hub.errors.OpError, match="'Z'"):
        fused_graph(x, w, b, z[:, :, :-1], attrs, "Relu", weights_fed=False)


@pytest.mark.parametrize("variant", ["generic", "avx2", "avx512"])
def test_each_micro_kernel_variant(variant):
    """The GEMM and depthwise row kernels are picked once per process from the CPU;
    GE_HUB_GEMM_KERNEL and GE_HUB_DEPTHWISE_KERNEL force a lesser one (ignored where the
    CPU lacks it), so each variant runs in a process of its own."""
    script = textwrap.dedent("""
        import numpy as np
        from tests.kernels import test_conv_fused as t
        rng = np.random.default_rng(5)
        for case in ("packed", "packed_stride2_groups", "packed_1x1_in_place",
                     "packed_1x1_narrow", "packed_1x1_k_slices_groups",
                     "packed_1x1_many_channels", "packed_1x1_tail_7x7", "packed_tail_14x14",
                     "packed_1x1_tail_only", "packed_1x1_tail_8", "winograd", "winograd_14x14",
                     "winograd_wide", "winograd_wide_asymmetric",
                     "depthwise_3x3",
                     "depthwise_3x3_stride2", "depthwise_5x5_stride2_asymmetric",
                     "depthwise_3x3_stride2_wide_asymmetric",
                     "depthwise_3x3_stride2_rows_of_32"):
            for activation in ("Relu", "Clip", "HardSwish", "LeakyRelu", "SiLU", ""):
                t.run_and_compare(case, activation, rng)
            t.run_and_compare(case, "Relu", rng, specials=True)
        print("ok")
    """)
    env = dict(os.environ, GE_HUB_GEMM_KERNEL=variant, GE_HUB_DEPTHWISE_KERNEL=variant)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"


@pytest.mark.parametrize("activation", ["", "Relu", "Clip", "Sigmoid", "Gelu"])
@pytest.mark.parametrize("positions", [1, 4, 6, 8, 17, 20, 24, 49])
def test_column_tail_matches_the_row_tiles_bit_for_bit(positions, activation, rng):
    """The last columns of a product that the AVX-512 column tail computes hold exactly
    what the row tiles compute for the same columns of a product 64 wide (the same
    multiply-add chain per value), epilogue included; two k slices, a short row panel."""
    cin, cout = 300, 29
    x = rng.standard_normal((1, cin, 1, 64)).astype(np.float32)
    w = (rng.standard_normal((cout, cin, 1, 1)) * 0.1).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    z = rng.standard_normal((1, cout, 1, 64)).astype(np.float32)
    outputs = []
    for width in (positions, 64):
        graph, feeds = fused_graph(x[..., :width], w, b, z[..., :width], {}, activation,
                                   weights_fed=False)
        outputs.append(ge_hub.compile(graph).run(feeds)[0])
    np.testing.assert_array_equal(outputs[0], outputs[1][..., :positions])


def test_1x1_packed_as_before_when_asked():
    """GE_HUB_CONV_POINTWISE=packed (read once per process) makes a 1x1 conv pack its
    input into panels as every other packed conv does, instead of reading it in place:
    the results of both stay those of the reference."""
    script = textwrap.dedent("""
        import numpy as np
        from tests.kernels import test_conv_fused as t
        rng = np.random.default_rng(7)
        for case in ("packed_1x1_in_place", "packed_1x1_narrow", "packed_1x1_k_slices_groups",
                     "packed_1x1_many_positions", "packed_1x1_many_channels"):
            for activation in ("Relu", "HardSwish", ""):
                t.run_and_compare(case, activation, rng)
        print("ok")
    """)
    env = dict(os.environ, GE_HUB_CONV_POINTWISE="packed")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"
