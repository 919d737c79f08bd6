"""Tests of Conv, ConvTranspose, Col2Im and DeformConv (ge_hub/ops/conv.py): inference on
concrete, symbolic and unknown shapes, the NumPy references against independent direct-loop
or hand-computed results, and clear errors on bad input."""

from __future__ import annotations

import itertools
import math

import ml_dtypes
import numpy as np
import pytest
from conftest import close, infer, positions, random_array, run_op, tt

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import Sym, dim_add, dim_floordiv, dim_mul, dim_sub

N, H, W = Sym("N"), Sym("H"), Sym("W")


# -- Conv ------------------------------------------------------------------------------


def loop_conv(x, w, b, strides, pads, dilations, group):
    """Direct convolution: one output cell at a time, skipping taps in the padding."""
    n, _, *in_dims = x.shape
    m, c_per_group, *kernel = w.shape
    r = len(in_dims)
    out_dims = [(in_dims[i] + pads[i] + pads[i + r] - (kernel[i] - 1) * dilations[i] - 1)
                // strides[i] + 1 for i in range(r)]
    y = np.zeros((n, m, *out_dims))
    m_per_group = m // group
    for index in itertools.product(range(n), range(m), *map(range, out_dims)):
        batch, out_channel, *out = index
        g = out_channel // m_per_group
        total = 0.0 if b is None else float(b[out_channel])
        for ci in range(c_per_group):
            for tap in itertools.product(*map(range, kernel)):
                pos = [out[i] * strides[i] - pads[i] + tap[i] * dilations[i] for i in range(r)]
                if all(0 <= pos[i] < in_dims[i] for i in range(r)):
                    total += (float(x[(batch, g * c_per_group + ci, *pos)])
                              * float(w[(out_channel, ci, *tap)]))
        y[index] = total
    return y


CONV_CASES = [
    # x shape, w shape, attrs (strides, pads, dilations, group)
    ((2, 3, 7), (4, 3, 3), dict(strides=[1], pads=[0, 0], dilations=[1], group=1)),
    ((1, 4, 9), (4, 2, 2), dict(strides=[2], pads=[1, 2], dilations=[2], group=2)),
    ((2, 3, 5, 6), (2, 3, 3, 3), dict(strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1],
                                      group=1)),
    ((1, 4, 7, 5), (6, 2, 3, 2), dict(strides=[2, 1], pads=[2, 0, 1, 1], dilations=[1, 2],
                                      group=2)),
    # depthwise: one filter per input channel
    ((2, 3, 6, 5), (3, 1, 3, 3), dict(strides=[1, 2], pads=[0, 1, 2, 0], dilations=[2, 1],
                                      group=3)),
    ((1, 2, 4, 5, 3), (2, 2, 2, 3, 2), dict(strides=[1, 2, 1], pads=[1, 0, 0, 0, 1, 1],
                                            dilations=[1, 1, 2], group=1)),
]


@pytest.mark.parametrize("x_shape, w_shape, attrs", CONV_CASES)
def test_conv_matches_direct_loops(rng, x_shape, w_shape, attrs):
    x, w = random_array(rng, x_shape), random_array(rng, w_shape)
    b = random_array(rng, (w_shape[0],))
    (y,) = run_op("Conv", [x, w, b], attrs)
    close(y, loop_conv(x, w, b, attrs["strides"], attrs["pads"], attrs["dilations"],
                       attrs["group"]))
    (y_no_bias,) = run_op("Conv", [x, w], {**attrs, "kernel_shape": list(w_shape[2:])})
    close(y_no_bias, loop_conv(x, w, None, attrs["strides"], attrs["pads"],
                               attrs["dilations"], attrs["group"]))


def test_conv_same_padding_by_hand():
    x = np.array([[[1.0, 2.0, 3.0, 4.0]]], dtype=np.float32)
    w = np.array([[[1.0, 10.0]]], dtype=np.float32)
    (upper,) = run_op("Conv", [x, w], {"auto_pad": "SAME_UPPER"})
    (lower,) = run_op("Conv", [x, w], {"auto_pad": "SAME_LOWER"})
    (valid,) = run_op("Conv", [x, w], {"auto_pad": "VALID", "pads": [5, 5]})
    np.testing.assert_array_equal(upper[0, 0], [21, 32, 43, 4])  # odd pad cell at the end
    np.testing.assert_array_equal(lower[0, 0], [10, 21, 32, 43])  # ... at the beginning
    np.testing.assert_array_equal(valid[0, 0], [21, 32, 43])


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_conv_same_padding_matches_explicit_pads(rng, auto_pad):
    x, w = random_array(rng, (1, 2, 7, 6)), random_array(rng, (3, 2, 3, 2))
    strides, dilations = [2, 3], [1, 2]
    (y,) = run_op("Conv", [x, w], {"auto_pad": auto_pad, "strides": strides,
                                   "dilations": dilations})
    pads_begin, pads_end = [], []
    for size, k, s, d in zip((7, 6), (3, 2), strides, dilations):
        total = max(0, (math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        pads_begin.append(small if auto_pad == "SAME_UPPER" else big)
        pads_end.append(big if auto_pad == "SAME_UPPER" else small)
    assert y.shape[2:] == (math.ceil(7 / 2), math.ceil(6 / 3))
    close(y, loop_conv(x, w, None, strides, pads_begin + pads_end, dilations, 1))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_conv_dtypes(rng, dtype):
    x, w = random_array(rng, (1, 2, 5, 5), dtype), random_array(rng, (2, 1, 2, 2), dtype)
    (y,) = run_op("Conv", [x, w], {"group": 2, "pads": [1, 0, 0, 1]})
    assert y.dtype == x.dtype
    close(y, loop_conv(x, w, None, [1, 1], [1, 0, 0, 1], [1, 1], 2), dtype)


def test_conv_inference_symbolic_and_unknown_rank():
    (y,) = infer("Conv", [tt("float32", (N, 3, H, W)), tt("float32", (8, 3, 3, 3))],
                 {"pads": [1, 1, 1, 1]})
    assert y.shape == (N, 8, H, W)  # a 3x3 'same' conv keeps symbolic H and W as they are
    (y,) = infer("Conv", [tt("float32", (N, 3, H, W)), tt("float32", (8, 3, 3, 3))],
                 {"strides": [2, 2]})
    again = infer("Conv", [tt("float32", (N, 3, H, W)), tt("float32", (8, 3, 3, 3))],
                  {"strides": [2, 2]})[0]
    assert y.shape == (N, 8, positions(H, 3, 2), positions(W, 3, 2)) and y == again
    (y,) = infer("Conv", [tt("float32", (N, 4, H, W)), tt("float32", (4, 1, 3, 3))],
                 {"group": 4, "auto_pad": "SAME_UPPER"})
    assert y.shape == (N, 4, H, W)
    (y,) = infer("Conv", [tt("float32", None), tt("float32", (8, 3, 3, 3))])
    assert y.rank == 4 and y.shape[1] == 8
    (y,) = infer("Conv", [tt("float32", (1, 3, 10)), tt("float32", None)],
                 {"kernel_shape": [3]})
    assert y.rank == 3 and y.shape[0] == 1 and y.shape[2] == 8
    (y,) = infer("Conv", [tt("float32", None), tt("float32", None)])
    assert y.shape is None


def test_conv_rejects_bad_input():
    x, w = tt("float32", (1, 4, 8, 8)), tt("float32", (6, 2, 3, 3))
    with pytest.raises(OpError, match=r"Conv: input 'X' .* has 4 channels but input 'W'"):
        infer("Conv", [x, w])
    with pytest.raises(OpError, match=r"attribute 'strides' must have 2 values.*got \[1\]"):
        infer("Conv", [x, w], {"group": 2, "strides": [1]})
    with pytest.raises(OpError, match=r"attribute 'pads' values must be >= 0"):
        infer("Conv", [x, w], {"group": 2, "pads": [0, -1, 0, 0]})
    with pytest.raises(OpError, match=r"attribute 'auto_pad' must be one of .*got 'SAME'"):
        infer("Conv", [x, w], {"group": 2, "auto_pad": "SAME"})
    with pytest.raises(OpError, match=r"attribute 'kernel_shape' \[5, 5\] does not match"):
        infer("Conv", [x, w], {"group": 2, "kernel_shape": [5, 5]})
    with pytest.raises(OpError, match=r"input 'B' must have 6 values"):
        infer("Conv", [x, w, tt("float32", (4,))], {"group": 2})
    with pytest.raises(OpError, match=r"inputs 'X' .* and 'W' .* must have the same rank"):
        infer("Conv", [x, tt("float32", (6, 4, 3))])
    with pytest.raises(OpError, match=r"input 'X' float32\[1,4,2,8\] is too small"):
        infer("Conv", [tt("float32", (1, 4, 2, 8)), w], {"group": 2})
    with pytest.raises(OpError, match=r"Conv: input 'X' must have dtype in .*got int32"):
        infer("Conv", [tt("int32", (1, 4, 8, 8)), tt("int32", (6, 2, 3, 3))])
    with pytest.raises(OpError, match=r"attribute 'group' must be >= 1, got 0"):
        infer("Conv", [x, w], {"group": 0})


# -- ConvTranspose ---------------------------------------------------------------------


def loop_conv_transpose(x, w, b, strides, pads, dilations, group, output_padding):
    """Direct transposed convolution: every input cell scatters into the output."""
    n, c, *in_dims = x.shape
    _, m_per_group, *kernel = w.shape
    r = len(in_dims)
    c_per_group = c // group
    out_dims = [(in_dims[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1
                + output_padding[i] - pads[i] - pads[i + r] for i in range(r)]
    y = np.zeros((n, m_per_group * group, *out_dims))
    for batch, ci, *cell in itertools.product(range(n), range(c), *map(range, in_dims)):
        g = ci // c_per_group
        for j in range(m_per_group):
            for tap in itertools.product(*map(range, kernel)):
                pos = [cell[i] * strides[i] + tap[i] * dilations[i] - pads[i] for i in range(r)]
                if all(0 <= pos[i] < out_dims[i] for i in range(r)):
                    y[(batch, g * m_per_group + j, *pos)] += (
                        float(x[(batch, ci, *cell)]) * float(w[(ci, j, *tap)]))
    if b is not None:
        y += np.asarray(b, dtype=np.float64).reshape(-1, *([1] * r))
    return y


CONV_TRANSPOSE_CASES = [
    ((1, 2, 4), (2, 3, 3), dict(strides=[1], pads=[0, 0], dilations=[1], group=1,
                                output_padding=[0])),
    ((2, 4, 3), (4, 1, 3), dict(strides=[3], pads=[1, 2], dilations=[2], group=2,
                                output_padding=[2])),
    ((1, 2, 3, 4), (2, 3, 3, 2), dict(strides=[2, 1], pads=[1, 0, 0, 1], dilations=[1, 1],
                                      group=1, output_padding=[1, 0])),
    ((1, 3, 3, 3), (3, 1, 2, 3), dict(strides=[2, 2], pads=[0, 1, 1, 0], dilations=[2, 1],
                                      group=3, output_padding=[0, 1])),
    ((1, 2, 2, 3, 2), (2, 2, 2, 2, 2), dict(strides=[1, 2, 2], pads=[0] * 6,
                                            dilations=[1, 1, 1], group=1,
                                            output_padding=[0, 1, 0])),
]


@pytest.mark.parametrize("x_shape, w_shape, attrs", CONV_TRANSPOSE_CASES)
def test_conv_transpose_matches_direct_loops(rng, x_shape, w_shape, attrs):
    x, w = random_array(rng, x_shape), random_array(rng, w_shape)
    b = random_array(rng, (w_shape[1] * attrs["group"],))
    (y,) = run_op("ConvTranspose", [x, w, b], attrs)
    close(y, loop_conv_transpose(x, w, b, **attrs))


def test_conv_transpose_by_hand():
    # ONNX's convtranspose_1d example.
    x = np.array([[[0.0, 1.0, 2.0]]], dtype=np.float32)
    w = np.ones((1, 2, 3), dtype=np.float32)
    (y,) = run_op("ConvTranspose", [x, w])
    np.testing.assert_array_equal(y, [[[0, 1, 3, 3, 2], [0, 1, 3, 3, 2]]])


def test_conv_transpose_output_shape_and_same_padding(rng):
    x, w = random_array(rng, (1, 2, 3, 3)), random_array(rng, (2, 1, 3, 3))
    attrs = dict(strides=[2, 2], dilations=[1, 1], group=1)
    # Full output is 7x7; asking for 6x5 (or the whole NCHW shape) crops it, by default
    # keeping the odd cell at the beginning.
    (y,) = run_op("ConvTranspose", [x, w], {**attrs, "output_shape": [6, 5]})
    (y_full_shape,) = run_op("ConvTranspose", [x, w], {**attrs, "output_shape": [1, 1, 6, 5]})
    full = loop_conv_transpose(x, w, None, pads=[0] * 4, output_padding=[0, 0], **attrs)
    close(y, full[:, :, 1:, 1:6])
    np.testing.assert_array_equal(y, y_full_shape)
    # SAME_UPPER gives in * stride cells, cropping the odd cell at the end.
    (same,) = run_op("ConvTranspose", [x, w], {**attrs, "auto_pad": "SAME_UPPER"})
    close(same, full[:, :, :6, :6])
    (valid,) = run_op("ConvTranspose", [x, w], {**attrs, "auto_pad": "VALID",
                                                "pads": [1, 1, 1, 1]})
    close(valid, full)  # VALID: no padding, whatever 'pads' says
    (lower,) = run_op("ConvTranspose", [x, w], {**attrs, "auto_pad": "SAME_LOWER"})
    close(lower, full[:, :, 1:, 1:])
    # Larger than the full output: the missing cells are zeros.
    (big,) = run_op("ConvTranspose", [x, w], {**attrs, "output_shape": [9, 7]})
    close(big[:, :, 1:8], full)
    assert not big[:, :, 0].any() and not big[:, :, 8].any()


@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_conv_transpose_dtypes(rng, dtype):
    x, w = random_array(rng, (1, 2, 3, 2), dtype), random_array(rng, (2, 2, 2, 2), dtype)
    (y,) = run_op("ConvTranspose", [x, w], {"strides": [2, 1]})
    close(y, loop_conv_transpose(x, w, None, [2, 1], [0] * 4, [1, 1], 1, [0, 0]), dtype)


def test_conv_transpose_inference_symbolic():
    x, w = tt("float32", (N, 8, H, W)), tt("float32", (8, 4, 4, 4))
    (y,) = infer("ConvTranspose", [x, w], {"strides": [2, 2], "pads": [1, 1, 1, 1]})
    assert y.shape == (N, 4, dim_mul(H, 2), dim_mul(W, 2))  # 2x upsampling: (H-1)*2 + 4 - 2
    (y,) = infer("ConvTranspose", [x, w], {"strides": [2, 2], "auto_pad": "SAME_UPPER"})
    assert y.shape == (N, 4, dim_mul(H, 2), dim_mul(W, 2))
    (y,) = infer("ConvTranspose", [x, w], {"output_shape": [30, 40]})
    assert y.shape == (N, 4, 30, 40)
    (y,) = infer("ConvTranspose", [x, tt("float32", (8, 2, 3, 3))], {"group": 2})
    assert y.shape == (N, 4, dim_add(H, 2), dim_add(W, 2))


def test_conv_transpose_rejects_bad_input():
    x, w = tt("float32", (1, 8, 5, 5)), tt("float32", (4, 2, 3, 3))
    with pytest.raises(OpError, match=r"ConvTranspose: input 'X' .* has 8 channels but "
                                      r"input 'W' .* expects 4"):
        infer("ConvTranspose", [x, w])
    with pytest.raises(OpError, match=r"attribute 'output_padding' must have 2 values"):
        infer("ConvTranspose", [x, tt("float32", (8, 2, 3, 3))], {"output_padding": [1]})
    with pytest.raises(OpError, match=r"input 'B' must have 4 values"):
        infer("ConvTranspose", [x, tt("float32", (8, 2, 3, 3)), tt("float32", (2,))],
              {"group": 2})


def test_references_accept_bfloat16_end_to_end(rng):
    x = random_array(rng, (1, 2, 4, 4), "bfloat16")
    w = random_array(rng, (2, 2, 3, 3), "bfloat16")
    (y,) = run_op("Conv", [x, w], {"pads": [1, 1, 1, 1]})
    assert y.dtype == ml_dtypes.bfloat16
    close(y, loop_conv(x, w, None, [1, 1], [1, 1, 1, 1], [1, 1], 1), "bfloat16")


# --- Col2Im -------------------------------------------------------------------------------

F32 = DType.FLOAT32


def i64(value):
    return np.array(value, dtype=np.int64)


def col2im_by_loops(x, image, block, dilations, pads, strides):
    """Every (column, block offset) adds its value at the image position it lands on."""
    rank = len(image)
    positions = [(image[d] + pads[d] + pads[d + rank] - dilations[d] * (block[d] - 1) - 1)
                 // strides[d] + 1 for d in range(rank)]
    size = int(np.prod(block))
    channels = x.shape[1] // size
    out = np.zeros((x.shape[0], channels, *image))
    for n in range(x.shape[0]):
        for c in range(channels):
            for k, offset in enumerate(np.ndindex(*block)):
                for col, where in enumerate(np.ndindex(*positions)):
                    pos = [where[d] * strides[d] - pads[d] + offset[d] * dilations[d]
                           for d in range(rank)]
                    if all(0 <= pos[d] < image[d] for d in range(rank)):
                        out[(n, c, *pos)] += x[n, c * size + k, col]
    return out


@pytest.mark.parametrize("image,block,attrs", [
    ([5, 5], [1, 5], {}),
    ([5, 6], [2, 3], {"strides": [2, 1], "pads": [1, 0, 1, 2]}),
    ([6, 7], [2, 2], {"dilations": [1, 3], "strides": [1, 2]}),
    ([4, 3, 5], [2, 1, 2], {"pads": [1, 1, 0, 0, 2, 1], "strides": [1, 1, 2]}),
    ([9], [3], {"dilations": [2], "strides": [2], "pads": [1, 2]}),
])
def test_col2im_matches_loops(rng, image, block, attrs):
    rank = len(image)
    full = {"dilations": [1] * rank, "pads": [0] * 2 * rank, "strides": [1] * rank, **attrs}
    positions = [(image[d] + full["pads"][d] + full["pads"][d + rank]
                  - full["dilations"][d] * (block[d] - 1) - 1) // full["strides"][d] + 1
                 for d in range(rank)]
    x = random_array(rng, (2, 3 * int(np.prod(block)), int(np.prod(positions))))
    (y,) = run_op("Col2Im", [x, i64(image), i64(block)], attrs)
    assert y.shape == (2, 3, *image)
    close(y, col2im_by_loops(x, image, block, **full))


def test_col2im_integer_data(rng):
    x = random_array(rng, (1, 4, 16), "int32")
    (y,) = run_op("Col2Im", [x, i64([5, 5]), i64([2, 2])])
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, col2im_by_loops(x, [5, 5], [2, 2], [1, 1], [0] * 4,
                                                     [1, 1]))


def test_col2im_inference_symbolic():
    n, cols, length = Sym("n"), Sym("cols"), Sym("l")
    types = [tt(F32, (n, cols, length)), tt(DType.INT64, (2,)), tt(DType.INT64, (2,))]
    (out,) = infer("Col2Im", types, consts=[None, i64([7, 8]), i64([2, 3])])
    assert out == tt(F32, (n, dim_floordiv(cols, 6), 7, 8))
    (out,) = infer("Col2Im", types)
    assert out.shape[0] == n and len(out.shape) == 4 and all(
        isinstance(d, Sym) for d in out.shape[1:])


def test_col2im_bad_inputs():
    types = [tt(F32, (1, 6, 12)), tt(DType.INT64, (2,)), tt(DType.INT64, (2,))]
    with pytest.raises(OpError, match="Col2Im.*dim 1 must be a multiple of the block size 4"):
        infer("Col2Im", types, consts=[None, i64([4, 5]), i64([2, 2])])
    with pytest.raises(OpError, match="Col2Im.*dim 2 must be 16, the number of block"):
        infer("Col2Im", [tt(F32, (1, 8, 12)), *types[1:]], consts=[None, i64([5, 5]),
                                                                   i64([2, 2])])
    with pytest.raises(OpError, match="Col2Im.*'strides' must have 2 values"):
        infer("Col2Im", types, {"strides": [1]}, consts=[None, i64([4, 5]), i64([2, 3])])
    with pytest.raises(OpError, match="Col2Im.*same length"):
        infer("Col2Im", types, consts=[None, i64([4, 5]), i64([6])])
    with pytest.raises(OpError, match="Col2Im.*'input'.*rank 3"):
        infer("Col2Im", [tt(F32, (6, 12)), *types[1:]])


# --- DeformConv ---------------------------------------------------------------------------


def sample_2d(image, y, x):
    """Bilinear interpolation at (y, x), corners outside the image counting 0."""
    total = 0.0
    y0, x0 = math.floor(y), math.floor(x)
    for yy in (y0, y0 + 1):
        for xx in (x0, x0 + 1):
            if 0 <= yy < image.shape[0] and 0 <= xx < image.shape[1]:
                total += (1 - abs(y - yy)) * (1 - abs(x - xx)) * image[yy, xx]
    return total


def deform_conv_2d_by_loops(x, w, offset, b, mask, group, offset_group, pads, strides,
                            dilations):
    n, channels = x.shape[:2]
    out_channels, per_group, kh, kw = w.shape
    oh, ow = offset.shape[2:]
    offset = offset.reshape(n, offset_group, kh, kw, 2, oh, ow)
    mask = np.ones((n, offset_group, kh, kw, oh, ow)) if mask is None \
        else mask.reshape(n, offset_group, kh, kw, oh, ow)
    y = np.zeros((n, out_channels, oh, ow))
    for bi in range(n):
        for oc in range(out_channels):
            g = oc // (out_channels // group)
            for i in range(oh):
                for j in range(ow):
                    total = 0.0 if b is None else float(b[oc])
                    for c in range(per_group):
                        ic = g * per_group + c
                        og = ic // (channels // offset_group)
                        for ki in range(kh):
                            for kj in range(kw):
                                py = i * strides[0] - pads[0] + ki * dilations[0] \
                                    + offset[bi, og, ki, kj, 0, i, j]
                                px = j * strides[1] - pads[1] + kj * dilations[1] \
                                    + offset[bi, og, ki, kj, 1, i, j]
                                total += w[oc, c, ki, kj] * mask[bi, og, ki, kj, i, j] \
                                    * sample_2d(x[bi, ic], py, px)
                    y[bi, oc, i, j] = total
    return y


@pytest.mark.parametrize("group,offset_group,pads,strides,dilations,with_mask", [
    (1, 1, [0, 0, 0, 0], [1, 1], [1, 1], False),
    (2, 2, [1, 0, 1, 2], [2, 1], [1, 2], True),
    (1, 4, [1, 1, 1, 1], [1, 2], [2, 1], True),
])
def test_deform_conv_2d_matches_loops(rng, group, offset_group, pads, strides, dilations,
                                      with_mask):
    x = random_array(rng, (2, 4, 6, 7), "float64")
    w = random_array(rng, (4, 4 // group, 2, 3), "float64")
    oh = (6 + pads[0] + pads[2] - dilations[0] * 1 - 1) // strides[0] + 1
    ow = (7 + pads[1] + pads[3] - dilations[1] * 2 - 1) // strides[1] + 1
    offset = random_array(rng, (2, offset_group * 6 * 2, oh, ow), "float64", -2.0, 2.0)
    bias = random_array(rng, (4,), "float64")
    mask = random_array(rng, (2, offset_group * 6, oh, ow), "float64", 0.0, 1.0) \
        if with_mask else None
    attrs = {"group": group, "offset_group": offset_group, "pads": pads, "strides": strides,
             "dilations": dilations, "kernel_shape": [2, 3]}
    (y,) = run_op("DeformConv", [x, w, offset, bias, mask], attrs)
    close(y, deform_conv_2d_by_loops(x, w, offset, bias, mask, group, offset_group, pads,
                                     strides, dilations), "float64")


def test_deform_conv_with_zero_offsets_is_conv(rng):
    x = random_array(rng, (1, 3, 5, 4, 6))
    w = random_array(rng, (2, 3, 2, 2, 3))
    attrs = {"pads": [1, 0, 1, 0, 1, 1], "strides": [1, 2, 1]}
    (expected,) = run_op("Conv", [x, w], attrs)
    offset = np.zeros((1, 12 * 3, *expected.shape[2:]), np.float32)
    (y,) = run_op("DeformConv", [x, w, offset], attrs)
    close(y, expected)
    # An offset of exactly one pixel along the last axis reads the next column.
    shifted = offset.reshape(1, 1, 12, 3, *expected.shape[2:]).copy()
    shifted[:, :, :, 2] = 1.0
    (moved,) = run_op("DeformConv", [x, w, shifted.reshape(offset.shape)], attrs)
    # ... which is Conv with one column less padding before and one more after.
    (conv_moved,) = run_op("Conv", [x, w], {"pads": [1, 0, 0, 0, 1, 2], "strides": [1, 2, 1]})
    close(moved, conv_moved)


def test_deform_conv_inference():
    n, h = Sym("n"), Sym("h")
    types = [tt(F32, (n, 4, h, 9)), tt(F32, (6, 2, 3, 3)), tt(F32, (n, 36, Sym("oh"), 7)),
             tt(F32, (6,)), tt(F32, (n, 18, Sym("oh"), 7))]
    (out,) = infer("DeformConv", types, {"group": 2, "offset_group": 2})
    assert out == tt(F32, (n, 6, dim_add(dim_floordiv(dim_sub(h, 3), 1), 1), 7))


def test_deform_conv_bad_inputs():
    x, w = tt(F32, (1, 4, 6, 6)), tt(F32, (2, 4, 3, 3))
    offset = tt(F32, (1, 18, 4, 4))
    with pytest.raises(OpError, match="DeformConv.*'offset'.*must have 36 channels"):
        infer("DeformConv", [x, w, offset], {"offset_group": 2})
    with pytest.raises(OpError, match="DeformConv.*'X'.*4 channels.*expects 8"):
        infer("DeformConv", [x, w, offset], {"group": 2})
    with pytest.raises(OpError, match="DeformConv.*'offset'.*output's spatial dims \\[4, 4\\]"):
        infer("DeformConv", [x, w, tt(F32, (1, 18, 5, 4))])
    with pytest.raises(OpError, match="DeformConv.*'mask'.*must have 9 channels"):
        infer("DeformConv", [x, w, offset, None, tt(F32, (1, 8, 4, 4))])
    with pytest.raises(OpError, match="DeformConv.*'B' must have 2 values"):
        infer("DeformConv", [x, w, offset, tt(F32, (3,))])
    with pytest.raises(OpError, match="DeformConv.*'W'.*kernel dims \\[3, 3\\].*says \\[2, 2\\]"):
        infer("DeformConv", [x, w, offset], {"kernel_shape": [2, 2]})
