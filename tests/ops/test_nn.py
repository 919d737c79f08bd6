"""Tests of the neural-network ops (ge_hub/ops/nn.py): inference on concrete, symbolic
and unknown shapes, the NumPy references against independent direct-loop or
hand-computed results, and clear errors on bad input."""

from __future__ import annotations

import itertools
import math

import ml_dtypes
import numpy as np
import pytest
from conftest import random_array, run_op

from ge_hub.errors import OpError
from ge_hub.ir.types import Sym, TensorType, dim_add, dim_floordiv, dim_mul, dim_sub
from ge_hub.ops import get_schema

N, C, H, W = Sym("N"), Sym("C"), Sym("H"), Sym("W")


def positions(size, minus, stride):
    """floor((size - minus) / stride) + 1 built with the IR's dim helpers, as symbolic
    shape inference is expected to build it."""
    return dim_add(dim_floordiv(dim_sub(size, minus), stride), 1)


def infer(op_name, types, attrs=None, consts=None, num_outputs=None):
    return get_schema(op_name).infer_types(types, attrs or {}, consts=consts,
                                           num_outputs=num_outputs)


def tt(dtype, shape):
    return TensorType(dtype, shape)


def close(actual, expected, dtype="float32"):
    """Compare with a tolerance that suits the dtype of the op's output."""
    tolerance = {"float64": 1e-10, "float32": 1e-5, "float16": 2e-3, "bfloat16": 2e-2}
    tol = tolerance.get(str(np.dtype(dtype)), 0)
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64),
                               np.asarray(expected, dtype=np.float64), rtol=tol, atol=tol)


# -- MatMul ----------------------------------------------------------------------------


@pytest.mark.parametrize("a_shape, b_shape", [
    ((3, 5), (5, 4)),
    ((5,), (5, 4)),
    ((3, 5), (5,)),
    ((5,), (5,)),
    ((2, 1, 3, 5), (4, 5, 7)),
    ((7, 3, 5), (5, 2)),
    ((5,), (3, 5, 2)),
])
def test_matmul_matches_einsum_with_promotion_and_batch_broadcast(rng, a_shape, b_shape):
    a, b = random_array(rng, a_shape), random_array(rng, b_shape)
    (y,) = run_op("MatMul", [a, b])
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    expected = np.einsum("...ik,...kj->...ij",
                         np.broadcast_to(a2, (*batch, *a2.shape[-2:])).astype(np.float64),
                         np.broadcast_to(b2, (*batch, *b2.shape[-2:])).astype(np.float64))
    if a.ndim == 1:
        expected = expected[..., 0, :]
    if b.ndim == 1:
        expected = expected[..., 0]
    close(y, expected)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64", "int32", "int64"])
def test_matmul_dtypes(rng, dtype):
    a, b = random_array(rng, (2, 3, 5), dtype), random_array(rng, (5, 3), dtype)
    (y,) = run_op("MatMul", [a, b])
    assert y.dtype == a.dtype
    expected = [[[sum(float(a[n, i, k]) * float(b[k, j]) for k in range(5)) for j in range(3)]
                 for i in range(3)] for n in range(2)]
    close(y, expected, dtype)


def test_matmul_inference_symbolic_and_unknown():
    (y,) = infer("MatMul", [tt("float32", (N, Sym("S"), 64)), tt("float32", (64, 32))])
    assert y.shape == (N, Sym("S"), 32)
    (y,) = infer("MatMul", [tt("float32", (N, 1, 3, 8)), tt("float32", (5, 8, 2))])
    assert y.shape == (N, 5, 3, 2)
    (y,) = infer("MatMul", [tt("float32", (8,)), tt("float32", (N, 8, 2))])
    assert y.shape == (N, 2)
    (y,) = infer("MatMul", [tt("float32", None), tt("float32", (8, 2))])
    assert y.shape is None


def test_matmul_rejects_mismatched_inner_dims_scalars_and_dtypes():
    with pytest.raises(OpError, match=r"MatMul.*inner dims.*'A'.*5 columns.*'B'.*4 rows"):
        infer("MatMul", [tt("float32", (3, 5)), tt("float32", (4, 2))])
    with pytest.raises(OpError, match=r"input 'B' must have rank >= 1"):
        infer("MatMul", [tt("float32", (3, 5)), tt("float32", ())])
    with pytest.raises(OpError, match=r"input 'A' must have dtype in .*got uint8"):
        infer("MatMul", [tt("uint8", (3, 5)), tt("uint8", (5, 2))])
    with pytest.raises(OpError, match=r"input 'B' must have the same dtype as 'A'"):
        infer("MatMul", [tt("float32", (3, 5)), tt("float64", (5, 2))])


# -- Gemm ------------------------------------------------------------------------------


def loop_gemm(a, b, c, alpha, beta, trans_a, trans_b):
    a = a.T if trans_a else a
    b = b.T if trans_b else b
    m, k = a.shape
    n = b.shape[1]
    c = np.zeros((1,)) if c is None else c
    c = np.broadcast_to(c, (m, n))
    return [[alpha * sum(float(a[i, p]) * float(b[p, j]) for p in range(k))
             + beta * float(c[i, j]) for j in range(n)] for i in range(m)]


@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("c_shape", [None, (), (1,), (5,), (3, 1), (1, 5), (3, 5)])
def test_gemm_transposes_and_broadcast_c(rng, trans_a, trans_b, c_shape):
    a = random_array(rng, (7, 3) if trans_a else (3, 7))
    b = random_array(rng, (5, 7) if trans_b else (7, 5))
    c = None if c_shape is None else random_array(rng, c_shape)
    attrs = {"alpha": 0.75, "beta": -1.5, "transA": trans_a, "transB": trans_b}
    (y,) = run_op("Gemm", [a, b, c] if c is not None else [a, b], attrs)
    close(y, loop_gemm(a, b, c, 0.75, -1.5, trans_a, trans_b))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64", "int32", "int64"])
def test_gemm_dtypes(rng, dtype):
    a, b, c = (random_array(rng, s, dtype) for s in ((3, 4), (4, 5), (5,)))
    attrs = {"alpha": 2.0, "beta": 3.0}
    (y,) = run_op("Gemm", [a, b, c], attrs)
    expected = loop_gemm(a, b, c, 2.0, 3.0, 0, 0)
    if dtype.startswith("int"):
        np.testing.assert_array_equal(y, np.array(expected, dtype=np.int64))
    else:
        close(y, expected, dtype)


def test_gemm_inference_symbolic():
    (y,) = infer("Gemm", [tt("float32", (N, 16)), tt("float32", (32, 16)),
                          tt("float32", (32,))], {"transB": 1})
    assert y.shape == (N, 32)
    (y,) = infer("Gemm", [tt("float32", (16, N)), tt("float32", None)], {"transA": 1})
    assert y.shape[0] == N and isinstance(y.shape[1], Sym)


def test_gemm_rejects_bad_rank_k_c_and_flags():
    with pytest.raises(OpError, match=r"Gemm: input 'A' must have rank 2"):
        infer("Gemm", [tt("float32", (2, 3, 4)), tt("float32", (4, 5))])
    with pytest.raises(OpError, match=r"inner dims.*K=3.*K=4"):
        infer("Gemm", [tt("float32", (2, 3)), tt("float32", (4, 5))])
    with pytest.raises(OpError, match=r"input 'C' float32\[3\] cannot be broadcast to \[2,5\]"):
        infer("Gemm", [tt("float32", (2, 4)), tt("float32", (4, 5)), tt("float32", (3,))])
    with pytest.raises(OpError, match=r"attribute 'transA' must be 0 or 1, got 2"):
        infer("Gemm", [tt("float32", (2, 4)), tt("float32", (4, 5))], {"transA": 2})


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


# -- pooling ---------------------------------------------------------------------------


def pool_out_dims(in_dims, kernel, strides, pads, dilations, ceil_mode):
    """Output size as PyTorch documents it (ceil_mode drops windows starting in the end
    padding); an independent formulation of the spec's formula."""
    r = len(in_dims)
    dims = []
    for i in range(r):
        span = in_dims[i] + pads[i] + pads[i + r] - dilations[i] * (kernel[i] - 1) - 1
        out = (math.ceil if ceil_mode else math.floor)(span / strides[i]) + 1
        if ceil_mode and (out - 1) * strides[i] >= in_dims[i] + pads[i]:
            out -= 1
        dims.append(out)
    return dims


def loop_pool(x, kernel, strides, pads, dilations, ceil_mode, kind, count_include_pad=0,
              storage_order=0):
    """Direct pooling, one window at a time; returns (values, flat argmax indices)."""
    n, c, *in_dims = x.shape
    r = len(in_dims)
    out_dims = pool_out_dims(in_dims, kernel, strides, pads, dilations, ceil_mode)
    y = np.zeros((n, c, *out_dims))
    where = np.zeros((n, c, *out_dims), dtype=np.int64)
    for index in itertools.product(range(n), range(c), *map(range, out_dims)):
        batch, channel, *out = index
        values, coords, counted = [], [], 0
        for tap in itertools.product(*map(range, kernel)):
            pos = [out[i] * strides[i] - pads[i] + tap[i] * dilations[i] for i in range(r)]
            if all(-pads[i] <= pos[i] < in_dims[i] + pads[i + r] for i in range(r)):
                counted += 1  # inside input + explicit pads (not ceil_mode overhang)
            if all(0 <= pos[i] < in_dims[i] for i in range(r)):
                values.append(float(x[(batch, channel, *pos)]))
                coords.append(pos)
        if kind == "max":
            best = int(np.argmax(values))
            y[index] = values[best]
            order = range(r) if storage_order == 0 else reversed(range(r))
            flat = 0
            for i in order:
                flat = flat * in_dims[i] + coords[best][i]
            where[index] = (batch * c + channel) * math.prod(in_dims) + flat
        else:
            y[index] = sum(values) / (counted if count_include_pad else len(values))
    return y, where


POOL_CASES = [
    ((2, 3, 9), dict(kernel_shape=[3], strides=[2], pads=[1, 1], dilations=[1], ceil_mode=0)),
    ((1, 2, 8), dict(kernel_shape=[2], strides=[3], pads=[0, 1], dilations=[2], ceil_mode=1)),
    ((2, 2, 5, 6), dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1],
                        dilations=[1, 1], ceil_mode=1)),
    ((1, 3, 7, 7), dict(kernel_shape=[2, 3], strides=[1, 2], pads=[0, 1, 1, 0],
                        dilations=[2, 1], ceil_mode=0)),
    ((1, 2, 5, 5), dict(kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1],
                        dilations=[1, 1], ceil_mode=1)),  # last window would start in pad
    ((1, 2, 4, 3, 5), dict(kernel_shape=[2, 2, 3], strides=[2, 1, 2], pads=[1, 0, 1, 0, 1, 1],
                           dilations=[1, 2, 1], ceil_mode=1)),
]


@pytest.mark.parametrize("x_shape, attrs", POOL_CASES)
@pytest.mark.parametrize("storage_order", [0, 1])
def test_max_pool_matches_direct_loops(rng, x_shape, attrs, storage_order):
    x = random_array(rng, x_shape)
    y, indices = run_op("MaxPool", [x], {**attrs, "storage_order": storage_order},
                        num_outputs=2)
    expected, expected_indices = loop_pool(x, attrs["kernel_shape"], attrs["strides"],
                                           attrs["pads"], attrs["dilations"],
                                           attrs["ceil_mode"], "max",
                                           storage_order=storage_order)
    close(y, expected)
    np.testing.assert_array_equal(indices, expected_indices)
    if storage_order == 0:
        np.testing.assert_array_equal(x.reshape(-1)[indices], y)


@pytest.mark.parametrize("x_shape, attrs", POOL_CASES)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool_matches_direct_loops(rng, x_shape, attrs, count_include_pad):
    x = random_array(rng, x_shape)
    (y,) = run_op("AveragePool", [x], {**attrs, "count_include_pad": count_include_pad})
    expected, _ = loop_pool(x, attrs["kernel_shape"], attrs["strides"], attrs["pads"],
                            attrs["dilations"], attrs["ceil_mode"], "avg",
                            count_include_pad=count_include_pad)
    close(y, expected)


def test_pools_by_hand_ceil_mode():
    # ONNX's maxpool_2d_ceil / averagepool_2d_ceil examples.
    x = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}
    np.testing.assert_array_equal(run_op("MaxPool", [x], attrs)[0][0, 0], [[11, 12], [15, 16]])
    np.testing.assert_array_equal(run_op("AveragePool", [x], attrs)[0][0, 0],
                                  [[6, 7.5], [12, 13.5]])


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_pools_auto_pad(rng, auto_pad):
    x = random_array(rng, (1, 2, 7, 6))
    kernel, strides = [3, 2], [2, 2]
    pads = [0, 0, 0, 0]
    if auto_pad != "VALID":
        begins, ends = [], []
        for size, k, s in zip((7, 6), kernel, strides):
            total = max(0, (math.ceil(size / s) - 1) * s + k - size)
            small, big = total // 2, total - total // 2
            begins.append(small if auto_pad == "SAME_UPPER" else big)
            ends.append(big if auto_pad == "SAME_UPPER" else small)
        pads = begins + ends
    attrs = {"kernel_shape": kernel, "strides": strides, "auto_pad": auto_pad}
    y, _ = run_op("MaxPool", [x], attrs, num_outputs=2)
    expected, _ = loop_pool(x, kernel, strides, pads, [1, 1], 0, "max")
    close(y, expected)
    (avg,) = run_op("AveragePool", [x], {**attrs, "count_include_pad": 1})
    expected, _ = loop_pool(x, kernel, strides, pads, [1, 1], 0, "avg", count_include_pad=1)
    close(avg, expected)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64", "int8", "uint8"])
def test_max_pool_dtypes(rng, dtype):
    x = random_array(rng, (1, 2, 5, 4), dtype, low=-100, high=100)
    attrs = {"kernel_shape": [2, 2], "pads": [1, 0, 0, 1]}
    y, indices = run_op("MaxPool", [x], attrs, num_outputs=2)
    assert y.dtype == x.dtype and indices.dtype == np.int64
    expected, _ = loop_pool(x, [2, 2], [1, 1], [1, 0, 0, 1], [1, 1], 0, "max")
    close(y, expected, dtype)
    np.testing.assert_array_equal(x.reshape(-1)[indices], y)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_average_pool_dtypes(rng, dtype):
    x = random_array(rng, (1, 2, 5, 4), dtype)
    (y,) = run_op("AveragePool", [x], {"kernel_shape": [3, 2], "strides": [2, 1]})
    close(y, loop_pool(x, [3, 2], [2, 1], [0] * 4, [1, 1], 0, "avg")[0], dtype)


def test_max_pool_indices_never_point_into_padding():
    x = np.full((1, 1, 3), -np.inf, dtype=np.float32)
    y, indices = run_op("MaxPool", [x], {"kernel_shape": [2], "pads": [1, 1]}, num_outputs=2)
    assert np.isneginf(y).all()
    np.testing.assert_array_equal(indices[0, 0], [0, 0, 1, 2])


def test_max_pool_propagates_nan():
    x = np.array([[[1.0, np.nan, 3.0, 0.5]]], dtype=np.float32)
    (y,) = run_op("MaxPool", [x], {"kernel_shape": [2]})
    assert np.isnan(y[0, 0, :2]).all() and y[0, 0, 2] == 3.0


def test_pool_inference_symbolic():
    x = tt("float32", (N, C, H, W))
    (y,) = infer("MaxPool", [x], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]})
    assert y.shape == (N, C, H, W)
    y, indices = infer("MaxPool", [x], {"kernel_shape": [2, 2], "strides": [2, 2]},
                       num_outputs=2)
    assert y.shape == (N, C, positions(H, 2, 2), positions(W, 2, 2))
    assert indices == y.with_dtype("int64")
    # ceil_mode with no end padding cannot drop a window: still an expression of H.
    (y,) = infer("AveragePool", [x], {"kernel_shape": [3, 3], "strides": [2, 2],
                                      "ceil_mode": 1})
    assert y.shape[2] == positions(H, 2, 2)
    # ... but with end padding it might: a fresh symbol.
    (y,) = infer("AveragePool", [x], {"kernel_shape": [2, 2], "strides": [2, 2],
                                      "ceil_mode": 1, "pads": [0, 0, 1, 1]})
    assert isinstance(y.shape[2], Sym) and "H" not in y.shape[2].name
    (y,) = infer("MaxPool", [x], {"kernel_shape": [3, 3], "strides": [2, 2],
                                  "auto_pad": "SAME_LOWER"})
    assert y.shape == (N, C, dim_floordiv(dim_add(H, 1), 2), dim_floordiv(dim_add(W, 1), 2))
    (y,) = infer("MaxPool", [tt("float32", None)], {"kernel_shape": [3, 3]})
    assert y.rank == 4


def test_pool_rejects_bad_input():
    x = tt("float32", (1, 2, 8, 8))
    with pytest.raises(OpError, match=r"MaxPool: attribute 'kernel_shape' \(ints\) is required"):
        infer("MaxPool", [x])
    with pytest.raises(OpError, match=r"'kernel_shape' \[3\] has 1 values but input 'X'"):
        infer("MaxPool", [x], {"kernel_shape": [3]})
    with pytest.raises(OpError, match=r"attribute 'storage_order' must be 0 or 1, got 2"):
        infer("MaxPool", [x], {"kernel_shape": [3, 3], "storage_order": 2})
    with pytest.raises(OpError, match=r"AveragePool: input 'X' must have dtype .*got int8"):
        infer("AveragePool", [tt("int8", (1, 2, 8, 8))], {"kernel_shape": [3, 3]})
    with pytest.raises(OpError, match=r"AveragePool: attribute 'dilations' must have 2 values"):
        infer("AveragePool", [x], {"kernel_shape": [3, 3], "dilations": [1, 1, 1]})
    with pytest.raises(OpError, match=r"MaxPool: expected 1 to 2 outputs .*got 3"):
        infer("MaxPool", [x], {"kernel_shape": [3, 3]}, num_outputs=3)
    with pytest.raises(OpError, match=r"input 'X' must have rank >= 3"):
        infer("AveragePool", [tt("float32", (2, 8))], {"kernel_shape": [3]})


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 4, 3), (2, 2, 3, 2, 3)])
def test_global_pools(rng, dtype, shape):
    x = random_array(rng, shape, dtype)
    (avg,) = run_op("GlobalAveragePool", [x])
    (top,) = run_op("GlobalMaxPool", [x])
    flat = x.astype(np.float64).reshape(shape[0], shape[1], -1)
    keep = (shape[0], shape[1], *([1] * (len(shape) - 2)))
    close(avg, (flat.sum(-1) / flat.shape[-1]).reshape(keep), dtype)
    close(top, np.sort(flat, axis=-1)[..., -1].reshape(keep), dtype)


def test_global_pools_inference_and_errors():
    (y,) = infer("GlobalAveragePool", [tt("float32", (N, C, H, W))])
    assert y.shape == (N, C, 1, 1)
    (y,) = infer("GlobalMaxPool", [tt("float16", None)])
    assert y.shape is None and y.dtype == "float16"
    with pytest.raises(OpError, match=r"GlobalMaxPool: input 'X' must have rank >= 2"):
        infer("GlobalMaxPool", [tt("float32", (5,))])


# -- normalization ---------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (1, 4, 3, 5)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_batch_normalization(rng, shape, dtype):
    x = random_array(rng, shape, dtype)
    scale, b, mean = (random_array(rng, (shape[1],), dtype) for _ in range(3))
    var = random_array(rng, (shape[1],), dtype, low=0.1, high=2.0)
    (y,) = run_op("BatchNormalization", [x, scale, b, mean, var], {"epsilon": 1e-3})
    # Channels last, so the per-channel vectors broadcast on the trailing axis.
    moved = np.moveaxis(x.astype(np.float64), 1, -1)
    expected = ((moved - mean.astype(np.float64)) / np.sqrt(var.astype(np.float64) + 1e-3)
                * scale.astype(np.float64) + b.astype(np.float64))
    close(y, np.moveaxis(expected, -1, 1), dtype)


def test_batch_normalization_mixed_parameter_dtypes(rng):
    x = random_array(rng, (2, 3, 4), "float16")
    scale, b = (random_array(rng, (3,), "float32") for _ in range(2))
    mean = random_array(rng, (3,), "float64")
    var = random_array(rng, (3,), "float64", low=0.5, high=1.0)
    (y,) = run_op("BatchNormalization", [x, scale, b, mean, var])
    assert y.dtype == np.float16
    expected = (x.astype(np.float64) - mean[:, None]) / np.sqrt(var[:, None] + 1e-5) \
        * scale[:, None] + b[:, None]
    close(y, expected, "float16")


def test_batch_normalization_inference_and_errors():
    x = tt("float32", (N, 16, H, W))
    v = tt("float32", (16,))
    (y,) = infer("BatchNormalization", [x, v, v, v, v])
    assert y == x
    with pytest.raises(OpError, match=r"attribute 'training_mode' must be 0.*got 1"):
        infer("BatchNormalization", [x, v, v, v, v], {"training_mode": 1})
    with pytest.raises(OpError, match=r"input 'input_var' must have 16 values"):
        infer("BatchNormalization", [x, v, v, v, tt("float32", (8,))])
    with pytest.raises(OpError, match=r"input 'scale' must have rank 1"):
        infer("BatchNormalization", [x, tt("float32", (16, 1)), v, v, v])
    with pytest.raises(OpError, match=r"running_mean.*only in training mode"):
        infer("BatchNormalization", [x, v, v, v, v], num_outputs=3)
    with pytest.raises(OpError, match=r"training_mode.*must be 0"):
        get_schema("BatchNormalization").run_reference(
            [np.ones((1, 1), np.float32)] * 5, {"training_mode": 1})


@pytest.mark.parametrize("shape, axis", [((2, 3, 5), -1), ((2, 3, 5), 1), ((4, 7), 0),
                                         ((2, 3, 2, 3), -2)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_layer_normalization(rng, shape, axis, dtype):
    x = random_array(rng, shape, dtype)
    normalized = shape[axis:]
    scale, b = random_array(rng, normalized, dtype), random_array(rng, normalized, dtype)
    y, mean, inv_std = run_op("LayerNormalization", [x, scale, b], {"axis": axis},
                              num_outputs=3)
    axes = tuple(range(axis % len(shape), len(shape)))
    data = x.astype(np.float64)
    expected_mean = data.mean(axis=axes, keepdims=True)
    expected_std = np.sqrt(data.var(axis=axes, keepdims=True) + 1e-5)
    expected = (data - expected_mean) / expected_std * scale.astype(np.float64) + b
    # The default stash_type computes in float32, even for float64 data.
    close(y, expected, "float32" if dtype == "float64" else dtype)
    close(mean, expected_mean, "float32")
    close(inv_std, 1 / expected_std, "float32")
    assert mean.dtype == np.float32 and inv_std.dtype == np.float32


def test_layer_normalization_broadcast_scale_without_bias(rng):
    x = random_array(rng, (2, 3, 4))
    scale = random_array(rng, (1, 4))
    (y,) = run_op("LayerNormalization", [x, scale], {"axis": 1})
    data = x.astype(np.float64).reshape(2, -1)
    normalized = (data - data.mean(1, keepdims=True)) / np.sqrt(data.var(1, keepdims=True)
                                                                + 1e-5)
    close(y, normalized.reshape(2, 3, 4) * scale)


def test_layer_normalization_stash_type_float64(rng):
    x = random_array(rng, (3, 5), "float64")
    y, mean, inv_std = run_op("LayerNormalization", [x, np.ones(5)], {"stash_type": 11},
                              num_outputs=3)
    assert mean.dtype == np.float64 and inv_std.dtype == np.float64
    close(y, (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5),
          "float64")


def test_layer_normalization_inference_and_errors():
    x = tt("float16", (N, Sym("S"), 64))
    y, mean, inv_std = infer("LayerNormalization", [x, tt("float16", (64,))], num_outputs=3)
    assert y == x and mean == tt("float32", (N, Sym("S"), 1)) and inv_std == mean
    (y,) = infer("LayerNormalization", [x, tt("float16", (64,))], {"axis": 1})
    assert y == x
    _, mean = infer("LayerNormalization", [x, tt("float16", (Sym("S"), 64))], {"axis": -2},
                    num_outputs=2)
    assert mean.shape == (N, 1, 1)
    with pytest.raises(OpError, match=r"attribute 'axis' 3 is out of range for rank 3"):
        infer("LayerNormalization", [x, tt("float16", (64,))], {"axis": 3})
    with pytest.raises(OpError, match=r"input 'Scale' float16\[32\] cannot be broadcast"):
        infer("LayerNormalization", [x, tt("float16", (32,))])
    with pytest.raises(OpError, match=r"attribute 'stash_type' must be 1 .* got 10"):
        infer("LayerNormalization", [x, tt("float16", (64,))], {"stash_type": 10})
    with pytest.raises(OpError, match=r"input 'B' must have the same dtype as 'X'"):
        infer("LayerNormalization", [x, tt("float16", (64,)), tt("float32", (64,))])


@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 2, 3, 4), (2, 1, 2, 3, 2)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_instance_normalization(rng, shape, dtype):
    x = random_array(rng, shape, dtype)
    scale, b = random_array(rng, (shape[1],), dtype), random_array(rng, (shape[1],), dtype)
    (y,) = run_op("InstanceNormalization", [x, scale, b], {"epsilon": 1e-4})
    flat = x.astype(np.float64).reshape(shape[0], shape[1], -1)
    normalized = (flat - flat.mean(-1, keepdims=True)) / np.sqrt(flat.var(-1, keepdims=True)
                                                                 + 1e-4)
    expected = normalized * scale[:, None].astype(np.float64) + b[:, None]
    close(y, expected.reshape(shape), dtype)


def test_instance_normalization_inference_and_errors():
    (y,) = infer("InstanceNormalization", [tt("float32", (N, 3, H, W)), tt("float32", (3,)),
                                           tt("float32", (3,))])
    assert y.shape == (N, 3, H, W)
    with pytest.raises(OpError, match=r"input 'B' must have 3 values"):
        infer("InstanceNormalization", [tt("float32", (N, 3, H)), tt("float32", (3,)),
                                        tt("float32", (4,))])
    with pytest.raises(OpError, match=r"input 'input' must have rank >= 3"):
        infer("InstanceNormalization", [tt("float32", (2, 3)), tt("float32", (3,)),
                                        tt("float32", (3,))])


@pytest.mark.parametrize("size", [1, 2, 3, 5])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_lrn(rng, size, dtype):
    x = random_array(rng, (2, 5, 3, 2), dtype)
    attrs = {"size": size, "alpha": 0.1, "beta": 0.6, "bias": 1.5}
    (y,) = run_op("LRN", [x], attrs)
    data = x.astype(np.float64)
    expected = np.empty_like(data)
    for c in range(5):
        low, high = max(0, c - (size - 1) // 2), min(4, c + math.ceil((size - 1) / 2))
        square_sum = sum(data[:, i] ** 2 for i in range(low, high + 1))
        expected[:, c] = data[:, c] / (1.5 + 0.1 / size * square_sum) ** 0.6
    close(y, expected, dtype)


def test_lrn_inference_and_errors():
    (y,) = infer("LRN", [tt("float32", (N, C, H, W))], {"size": 3})
    assert y.shape == (N, C, H, W)
    with pytest.raises(OpError, match=r"LRN: attribute 'size' \(int\) is required"):
        infer("LRN", [tt("float32", (N, C, H, W))])
    with pytest.raises(OpError, match=r"attribute 'size' must be >= 1, got 0"):
        infer("LRN", [tt("float32", (N, C, H, W))], {"size": 0})


# -- Softmax / LogSoftmax --------------------------------------------------------------


@pytest.mark.parametrize("axis", [-1, 0, 1, -2])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_softmax_and_log_softmax(rng, axis, dtype):
    x = random_array(rng, (3, 4, 5), dtype)
    (soft,) = run_op("Softmax", [x], {"axis": axis})
    (log_soft,) = run_op("LogSoftmax", [x], {"axis": axis})
    moved = np.moveaxis(x.astype(np.float64), axis, -1)
    expected = np.empty_like(moved)
    for index in np.ndindex(*moved.shape[:-1]):
        exps = [math.exp(v) for v in moved[index]]
        expected[index] = [e / math.fsum(exps) for e in exps]
    close(soft, np.moveaxis(expected, -1, axis), dtype)
    close(log_soft, np.log(np.moveaxis(expected, -1, axis)), dtype)


def test_softmax_is_numerically_stable():
    x = np.array([[1000.0, 1000.0, -1000.0], [-5e4, -5e4 + 1, -5e4]], dtype=np.float32)
    (soft,) = run_op("Softmax", [x])
    (log_soft,) = run_op("LogSoftmax", [x])
    e = math.exp(1)
    close(soft, [[0.5, 0.5, 0.0], [1 / (2 + e), e / (2 + e), 1 / (2 + e)]])
    close(log_soft[1], [-math.log(2 + e), 1 - math.log(2 + e), -math.log(2 + e)])
    assert np.isfinite(log_soft[0, :2]).all()


def test_softmax_inference_and_errors():
    (y,) = infer("Softmax", [tt("float32", (N, H, 10))], {"axis": 1})
    assert y.shape == (N, H, 10)
    with pytest.raises(OpError, match=r"LogSoftmax: attribute 'axis' -4 is out of range"):
        infer("LogSoftmax", [tt("float32", (N, H, 10))], {"axis": -4})
    with pytest.raises(OpError, match=r"Softmax: input 'input' must have dtype .*got int32"):
        infer("Softmax", [tt("int32", (2, 3))])


# -- Dropout ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_dropout_inference_mode_is_identity(rng, dtype):
    x = random_array(rng, (3, 5), dtype)
    y, mask = run_op("Dropout", [x], num_outputs=2)
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.bool_ and mask.all()
    y, mask = run_op("Dropout", [x, np.array(0.7, np.float32), np.array(False)],
                     num_outputs=2)
    np.testing.assert_array_equal(y, x)
    assert mask.all()


def test_dropout_training_mode_with_seed(rng):
    x = random_array(rng, (40, 50))
    inputs = [x, np.array(0.25, np.float32), np.array(True)]
    y, mask = run_op("Dropout", inputs, {"seed": 7}, num_outputs=2)
    again, _ = run_op("Dropout", inputs, {"seed": 7}, num_outputs=2)
    np.testing.assert_array_equal(y, again)  # seeded: reproducible
    assert 0.2 < 1 - mask.mean() < 0.3  # about a quarter dropped
    close(y[mask], x[mask] / 0.75)
    assert not y[~mask].any()


def test_dropout_inference_and_errors():
    y, mask = infer("Dropout", [tt("float16", (N, 8))], num_outputs=2)
    assert y == tt("float16", (N, 8)) and mask == tt("bool", (N, 8))
    assert len(infer("Dropout", [tt("float16", (N, 8))])) == 1
    with pytest.raises(OpError, match=r"input 'ratio' must be in \[0, 1\), got 1.5"):
        infer("Dropout", [tt("float32", (2,)), tt("float32", ())],
              consts=[None, np.array(1.5, np.float32)])
    with pytest.raises(OpError, match=r"input 'training_mode' must have rank 0"):
        infer("Dropout", [tt("float32", (2,)), tt("float32", ()), tt("bool", (1,))])
    with pytest.raises(OpError, match=r"input 'training_mode' must have dtype in \{bool\}"):
        infer("Dropout", [tt("float32", (2,)), tt("float32", ()), tt("int64", ())])


# -- Resize ----------------------------------------------------------------------------


def source_coord(mode, x, in_size, scale):
    """The spec's coordinate transforms, one output coordinate at a time; the resized
    length is scale * in_size, fractional when the scale does not divide evenly (as in
    ONNX's reference and its conformance data)."""
    length = scale * in_size
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if length > 1 else 0.0
    if mode == "align_corners":
        return 0.0 if length == 1 else x * (in_size - 1) / (length - 1)
    assert mode == "asymmetric"
    return x / scale


def cubic_weight(d, a):
    d = abs(d)
    if d <= 1:
        return (a + 2) * d ** 3 - (a + 3) * d ** 2 + 1
    if d < 2:
        return a * d ** 3 - 5 * a * d ** 2 + 8 * a * d - 4 * a
    return 0.0


def loop_resize_2d(image, out_h, out_w, scale_h, scale_w, mode, transform,
                   nearest_mode="round_prefer_floor", a=-0.75, exclude_outside=0):
    """Resize one H x W image, one output pixel at a time."""
    in_h, in_w = image.shape

    def taps(coord, size):
        """(index, weight) pairs along one axis."""
        if mode == "nearest":
            below, fraction = math.floor(coord), coord - math.floor(coord)
            index = {
                "floor": below,
                "ceil": math.ceil(coord),
                "round_prefer_floor": below if fraction <= 0.5 else below + 1,
                "round_prefer_ceil": below if fraction < 0.5 else below + 1,
            }[nearest_mode]
            return [(min(max(index, 0), size - 1), 1.0)]
        base = math.floor(coord)
        t = coord - base
        if mode == "linear":
            pairs = [(base, 1 - t), (base + 1, t)]
        else:
            pairs = [(base + k, cubic_weight(t - k, a)) for k in (-1, 0, 1, 2)]
        if exclude_outside:
            pairs = [(i, w if 0 <= i < size else 0.0) for i, w in pairs]
            total = sum(w for _, w in pairs)
            pairs = [(i, w / total) for i, w in pairs]
        return [(min(max(i, 0), size - 1), w) for i, w in pairs]

    out = np.zeros((out_h, out_w))
    for i, j in itertools.product(range(out_h), range(out_w)):
        rows = taps(source_coord(transform, i, in_h, scale_h), in_h)
        cols = taps(source_coord(transform, j, in_w, scale_w), in_w)
        out[i, j] = sum(wr * wc * float(image[r, c]) for r, wr in rows for c, wc in cols)
    return out


def loop_resize(x, out_h, out_w, scale_h, scale_w, **kwargs):
    n, c = x.shape[:2]
    return np.stack([np.stack([loop_resize_2d(x[i, k], out_h, out_w, scale_h, scale_w,
                                              **kwargs) for k in range(c)])
                     for i in range(n)])


RESIZE_SCALES = [(2.0, 3.0), (0.5, 0.5), (1.5, 0.75), (3.0, 1.0)]


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("transform", ["half_pixel", "asymmetric", "align_corners",
                                       "pytorch_half_pixel"])
@pytest.mark.parametrize("scales", RESIZE_SCALES)
def test_resize_scales_match_direct_loops(rng, mode, transform, scales):
    x = random_array(rng, (1, 2, 4, 5))
    scale_h, scale_w = scales
    attrs = {"mode": mode, "coordinate_transformation_mode": transform}
    (y,) = run_op("Resize", [x, None, np.array([1, 1, scale_h, scale_w], np.float32)], attrs)
    out_h, out_w = math.floor(4 * scale_h), math.floor(5 * scale_w)
    close(y, loop_resize(x, out_h, out_w, scale_h, scale_w, mode=mode, transform=transform))


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor",
                                          "ceil"])
def test_resize_nearest_modes(rng, nearest_mode):
    # half_pixel at scale 0.5 samples exactly between two cells: the tie-breaking shows.
    x = random_array(rng, (1, 1, 6, 8))
    attrs = {"mode": "nearest", "nearest_mode": nearest_mode}
    for scales in ((0.5, 0.5), (2.0, 1.5)):
        (y,) = run_op("Resize", [x, None, np.array([1, 1, *scales], np.float32)], attrs)
        expected = loop_resize(x, int(6 * scales[0]), int(8 * scales[1]), *scales,
                               mode="nearest", transform="half_pixel",
                               nearest_mode=nearest_mode)
        np.testing.assert_array_equal(y, expected.astype(np.float32))


def test_resize_by_hand():
    # ONNX's resize examples (scales on all four NCHW axes).
    small = np.array([[[[1, 2], [3, 4]]]], dtype=np.float32)
    wide = np.array([[[[1, 2, 3, 4], [5, 6, 7, 8]]]], dtype=np.float32)

    def resize(x, scales, **attrs):
        return run_op("Resize", [x, None, np.array(scales, np.float32)], attrs)[0][0, 0]

    np.testing.assert_array_equal(resize(small, [1, 1, 2, 3]),
                                  [[1, 1, 1, 2, 2, 2]] * 2 + [[3, 3, 3, 4, 4, 4]] * 2)
    close(resize(small, [1, 1, 2, 2], mode="linear"),
          [[1, 1.25, 1.75, 2], [1.5, 1.75, 2.25, 2.5], [2.5, 2.75, 3.25, 3.5],
           [3, 3.25, 3.75, 4]])
    close(resize(wide, [1, 1, 0.6, 0.6], mode="linear"), [[2.6666665, 4.3333331]])
    close(resize(wide, [1, 1, 0.6, 0.6], mode="linear",
                 coordinate_transformation_mode="align_corners"), [[1, 3.142857]])
    np.testing.assert_array_equal(resize(wide, [1, 1, 0.6, 0.6]), [[1, 3]])
    # half_pixel_symmetric keeps the centre fixed when 4 * 0.6 is not whole: the
    # 2 output cells sample 0.667 and 2.333.
    close(resize(wide[:, :, :1], [1, 1, 1, 0.6], mode="linear",
                 coordinate_transformation_mode="half_pixel_symmetric"), [[5 / 3, 10 / 3]])


def test_resize_cubic_by_hand():
    # ONNX's resize_*_cubic examples on a 4x4 ramp.
    ramp = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)

    def resize(scales, **attrs):
        return run_op("Resize", [ramp, None, np.array(scales, np.float32)],
                      {"mode": "cubic", **attrs})[0][0, 0]

    close(resize([1, 1, 2, 2])[0], [0.47265625, 0.76953125, 1.24609375, 1.875, 2.28125,
                                    2.91015625, 3.38671875, 3.68359375])
    close(resize([1, 1, 0.8, 0.8]), [[1.47119141, 2.78125, 4.08251953],
                                     [6.71142578, 8.02148438, 9.32275391],
                                     [11.91650391, 13.2265625, 14.52783203]])
    close(resize([1, 1, 2, 2], coordinate_transformation_mode="align_corners")[0],
          [1, 1.34110787, 1.80029155, 2.32944606, 2.67055394, 3.19970845, 3.65889213, 4])
    close(resize([1, 1, 2, 2], cubic_coeff_a=-0.5, exclude_outside=1)[0],
          [0.55882353, 0.81494204, 1.35698249, 1.89705882, 2.39705882, 2.93713516,
           3.47917561, 3.73529412])


@pytest.mark.parametrize("exclude_outside", [0, 1])
def test_resize_cubic_coefficient_and_exclude_outside(rng, exclude_outside):
    x = random_array(rng, (1, 1, 5, 4))
    attrs = {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": exclude_outside}
    (y,) = run_op("Resize", [x, None, np.array([1, 1, 1.6, 2.0], np.float32)], attrs)
    close(y, loop_resize(x, 8, 8, 1.6, 2.0, mode="cubic", transform="half_pixel", a=-0.5,
                         exclude_outside=exclude_outside))


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
def test_resize_sizes_and_aspect_policy(rng, policy):
    x = random_array(rng, (2, 3, 4, 6))
    sizes = np.array([6, 6], dtype=np.int64)
    attrs = {"mode": "linear", "axes": [2, 3], "keep_aspect_ratio_policy": policy}
    (y,) = run_op("Resize", [x, None, None, sizes], attrs)
    if policy == "stretch":
        shape, scales = (6, 6), (6 / 4, 6 / 6)
    else:
        scale = min(6 / 4, 6 / 6) if policy == "not_larger" else max(6 / 4, 6 / 6)
        shape, scales = (int(4 * scale + 0.5), int(6 * scale + 0.5)), (scale, scale)
    assert y.shape == (2, 3, *shape)
    close(y, loop_resize(x, *shape, *scales, mode="linear", transform="half_pixel"))


def test_resize_tf_crop_and_resize(rng):
    x = random_array(rng, (1, 1, 5, 5))
    roi = np.array([0.2, -0.5, 0.8, 0.5], dtype=np.float32)  # H: 0.2..0.8, W: -0.5..0.5
    attrs = {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
             "axes": [2, 3], "extrapolation_value": 10.0}
    (y,) = run_op("Resize", [x, roi, None, np.array([3, 3], np.int64)], attrs)
    # H samples rows 0.8, 2.0, 3.2; W samples columns -2, 0, 2 (the first one outside).
    rows = [(0, 1, 0.8), (2, 3, 0.0), (3, 4, 0.2)]
    for i, (r0, r1, t) in enumerate(rows):
        for j, col in enumerate((-2, 0, 2)):
            expected = 10.0 if col < 0 else (1 - t) * x[0, 0, r0, col] + t * x[0, 0, r1, col]
            close(y[0, 0, i, j], expected)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64", "int32", "uint8",
                                   "int64"])
def test_resize_dtypes(rng, dtype):
    x = random_array(rng, (1, 1, 3, 4), dtype, low=-100, high=100)
    scales = np.array([1, 1, 2, 1.5], np.float32)
    (nearest,) = run_op("Resize", [x, None, scales], {"nearest_mode": "floor"})
    (linear,) = run_op("Resize", [x, None, scales], {"mode": "linear"})
    assert nearest.dtype == linear.dtype == x.dtype
    expected = loop_resize(x, 6, 6, 2.0, 1.5, mode="nearest", transform="half_pixel",
                           nearest_mode="floor")
    np.testing.assert_array_equal(nearest, expected.astype(x.dtype))
    expected = loop_resize(x.astype(np.float64), 6, 6, 2.0, 1.5, mode="linear",
                           transform="half_pixel")
    if dtype.startswith(("int", "uint")):
        # Rounded to nearest: within half a unit of the exact value (float32 sample
        # coordinates may tip an exact .5 either way).
        assert np.abs(linear.astype(np.float64) - expected).max() <= 0.5 + 1e-4
    else:
        # Sample coordinates are float32 (as in ONNX Runtime), even for float64 data.
        close(linear, expected, "float32" if dtype == "float64" else dtype)


def test_resize_keeps_large_int64_exact_in_nearest_mode():
    x = np.array([[2**62 + 1, 2**62 + 3]], dtype=np.int64)
    (y,) = run_op("Resize", [x, None, np.array([1, 2], np.float32)])
    np.testing.assert_array_equal(y, [[2**62 + 1] * 2 + [2**62 + 3] * 2])


def test_resize_inference_symbolic_and_unknown():
    x = tt("float32", (N, 3, H, W))
    scales = tt("float32", (4,))
    (y,) = infer("Resize", [x, None, scales], consts=[None, None, np.array([1, 1, 2, 1],
                                                                           np.float32)])
    assert y.shape == (N, 3, dim_mul(H, 2), W)
    (y,) = infer("Resize", [x, None, scales], consts=[None, None, np.array([1, 1, 0.5, 1.5],
                                                                           np.float32)])
    assert y.shape[:2] == (N, 3) and isinstance(y.shape[2], Sym) and y.shape[2] != H
    # Scales not constant: every resized dim is unknown, the others stay.
    (y,) = infer("Resize", [x, None, scales])
    assert y.rank == 4 and not {N, H, W} & set(y.shape) and 3 not in y.shape
    (y,) = infer("Resize", [x, None, tt("float32", (2,))], {"axes": [2, 3]})
    assert y.shape[:2] == (N, 3) and not {H, W} & set(y.shape[2:])
    (y,) = infer("Resize", [x, None, None, tt("int64", (2,))], {"axes": [-2, -1]},
                 consts=[None, None, None, np.array([224, 160])])
    assert y.shape == (N, 3, 224, 160)
    (y,) = infer("Resize", [tt("float32", None), None, scales])
    assert y.shape is None
    # An empty 'scales' next to 'sizes' means "absent" (older exporters write it so).
    (y,) = infer("Resize", [tt("float32", (1, 3, 4, 4)), tt("float32", (0,)),
                            tt("float32", (0,)), tt("int64", (4,))],
                 consts=[None, None, None, np.array([1, 3, 8, 2])])
    assert y.shape == (1, 3, 8, 2)


def test_resize_rejects_bad_input():
    x = tt("float32", (1, 3, 4, 4))
    scales, sizes = tt("float32", (4,)), tt("int64", (4,))
    with pytest.raises(OpError, match=r"exactly one of inputs 'scales' and 'sizes'.*both"):
        infer("Resize", [x, None, scales, sizes])
    with pytest.raises(OpError, match=r"exactly one of inputs 'scales' and 'sizes'.*neither"):
        infer("Resize", [x])
    with pytest.raises(OpError, match=r"attribute 'mode' must be one of .*got 'area'"):
        infer("Resize", [x, None, scales], {"mode": "area"})
    with pytest.raises(OpError, match=r"'coordinate_transformation_mode' must be one of"):
        infer("Resize", [x, None, scales], {"coordinate_transformation_mode": "center"})
    with pytest.raises(OpError, match=r"attribute 'nearest_mode' must be one of"):
        infer("Resize", [x, None, scales], {"nearest_mode": "round"})
    with pytest.raises(OpError, match=r"attribute 'antialias' must be 0"):
        infer("Resize", [x, None, scales], {"antialias": 1})
    with pytest.raises(OpError, match=r"input 'scales' must have 2 values .*got float32\[4\]"):
        infer("Resize", [x, None, scales], {"axes": [2, 3]})
    with pytest.raises(OpError, match=r"input 'scales' values must be > 0"):
        infer("Resize", [x, None, scales], consts=[None, None, np.array([1, 1, 0, 2],
                                                                        np.float32)])
    with pytest.raises(OpError, match=r"input 'roi' is required"):
        infer("Resize", [x, None, None, sizes],
              {"coordinate_transformation_mode": "tf_crop_and_resize"})
    with pytest.raises(OpError, match=r"input 'scales' must have dtype in \{float32\}"):
        infer("Resize", [x, None, tt("float64", (4,))])
    with pytest.raises(OpError, match=r"Resize: input 'X' must have dtype in .*got bool"):
        infer("Resize", [tt("bool", (1, 3, 4, 4)), None, scales])


def test_references_accept_bfloat16_end_to_end(rng):
    x = random_array(rng, (1, 2, 4, 4), "bfloat16")
    w = random_array(rng, (2, 2, 3, 3), "bfloat16")
    (y,) = run_op("Conv", [x, w], {"pads": [1, 1, 1, 1]})
    assert y.dtype == ml_dtypes.bfloat16
    close(y, loop_conv(x, w, None, [1, 1], [1, 1, 1, 1], [1, 1], 1), "bfloat16")
