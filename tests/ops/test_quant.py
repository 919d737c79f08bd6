"""Tests of the quantization ops (ge_hub/ops/quant.py): each NumPy reference against an
element-by-element computation of the ONNX formulas (Python's `round` rounds half to
even, independently of NumPy) and against hand cases from the ONNX spec, inference on
concrete and symbolic shapes, the dtypes claimed, and clear errors on bad input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import random_array, run_op

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import Sym, TensorType
from ge_hub.ops import get_schema

N, M, K = Sym("N"), Sym("M"), Sym("K")
RANGES = {np.int8: (-128, 127), np.uint8: (0, 255), np.int16: (-32768, 32767)}


def infer(op_name, types, attrs=None):
    return get_schema(op_name).infer_types(types, attrs or {})


def tt(dtype, shape):
    return TensorType(DType.parse(dtype), shape)


def quantize_one(value: float, scale: float, zero: int, dtype) -> int:
    """The ONNX formula for one element: saturate(round_half_even(x / scale) + zero)."""
    low, high = RANGES[dtype]
    return min(high, max(low, round(value / scale) + zero))


def scale_and_zero_at(index, scale, zero, axis, block):
    """The scale and zero point that apply at `index` of x (per tensor, axis or block)."""
    if scale.ndim == 0 or scale.size == 1:
        return float(scale.reshape(-1)[0]), int(zero.reshape(-1)[0])
    if not block:
        return float(scale[index[axis]]), int(zero[index[axis]])
    where = tuple(i // block if a == axis else i for a, i in enumerate(index))
    return float(scale[where]), int(zero[where])


# -- QuantizeLinear -----------------------------------------------------------------


def test_quantize_spec_example():
    x = np.array([0, 2, 3, 1000, -254, -1000], dtype=np.float32)
    (y,) = run_op("QuantizeLinear", [x, np.float32(2), np.uint8(128)])
    np.testing.assert_array_equal(y, np.array([128, 129, 130, 255, 1, 0], dtype=np.uint8))


def test_quantize_rounds_half_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.49, 2.51], dtype=np.float32)
    (y,) = run_op("QuantizeLinear", [x, np.float32(1), np.int8(0)])
    np.testing.assert_array_equal(y, np.array([0, 2, 2, 0, -2, -2, 2, 3], dtype=np.int8))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16])
@pytest.mark.parametrize("granularity", ["tensor", "axis", "block"])
def test_quantize_matches_formula(rng, dtype, granularity):
    shape, axis, block = (2, 5, 3), 1, 0
    x = random_array(rng, shape, "float32", -300, 300)
    if granularity == "tensor":
        scale_shape = ()
    elif granularity == "axis":
        scale_shape = (shape[axis],)
    else:
        block = 2  # 5 is not a multiple of 2: the last block is short
        scale_shape = (2, 3, 3)
    scale = random_array(rng, scale_shape, "float32", 0.5, 4.0)
    scale = np.abs(scale) + np.float32(0.25)
    low, high = RANGES[dtype]
    zero = rng.integers(low, high + 1, size=scale_shape).astype(dtype)
    attrs = {"axis": axis, "block_size": block}
    (y,) = run_op("QuantizeLinear", [x, scale, zero], attrs)
    expected = np.empty(shape, dtype=dtype)
    for index in itertools.product(*map(range, shape)):
        s, z = scale_and_zero_at(index, scale, zero, axis, block)
        expected[index] = quantize_one(float(np.float32(x[index]) / np.float32(s)), 1.0, z,
                                       dtype)
    np.testing.assert_array_equal(y, expected)


def test_quantize_without_zero_point_uses_output_dtype_or_uint8(rng):
    x = random_array(rng, (3, 4), "float32", -100, 100)
    (default,) = run_op("QuantizeLinear", [x, np.float32(0.5)])
    assert default.dtype == np.uint8
    np.testing.assert_array_equal(default, [[quantize_one(v, 0.5, 0, np.uint8) for v in row]
                                            for row in x.tolist()])
    (wide,) = run_op("QuantizeLinear", [x, np.float32(0.5)], {"output_dtype": "int16"})
    assert wide.dtype == np.int16
    np.testing.assert_array_equal(wide, [[quantize_one(v, 0.5, 0, np.int16) for v in row]
                                         for row in x.tolist()])


def test_quantize_float16_and_int32_inputs(rng):
    x = random_array(rng, (7,), "float16", -50, 50)
    scale = np.float16(0.75)
    (y,) = run_op("QuantizeLinear", [x, scale, np.int8(-3)])
    # The division runs in the scale's dtype: float16 here.
    expected = [quantize_one(float(np.float16(v) / scale), 1.0, -3, np.int8) for v in x]
    np.testing.assert_array_equal(y, expected)
    whole = random_array(rng, (6,), "int32", -1000, 1000)
    (y,) = run_op("QuantizeLinear", [whole, np.float32(8), np.int16(5)])
    np.testing.assert_array_equal(y, [quantize_one(float(v), 8.0, 5, np.int16) for v in whole])


def test_quantize_nan_becomes_zero_point_and_inf_saturates():
    x = np.array([np.nan, np.inf, -np.inf], dtype=np.float32)
    (y,) = run_op("QuantizeLinear", [x, np.float32(1), np.uint8(7)])
    np.testing.assert_array_equal(y, [7, 255, 0])


def test_quantize_inference_keeps_symbolic_dims():
    (y,) = infer("QuantizeLinear", [tt("float32", (N, 3, K)), tt("float32", (3,)),
                                    tt("int8", (3,))])
    assert y == tt("int8", (N, 3, K))
    (y,) = infer("QuantizeLinear", [tt("float32", (N, K)), tt("float32", (N, Sym("B")))],
                 {"axis": 1, "block_size": 4})
    assert y == tt("uint8", (N, K))


@pytest.mark.parametrize("types, attrs, message", [
    ([tt("float32", (2, 3)), tt("float32", ()), tt("int8", ())], {"output_dtype": "uint8"},
     "must match the dtype of input 'y_zero_point'"),
    ([tt("float32", (2, 3)), tt("float32", ())], {"output_dtype": "int32"},
     "attribute 'output_dtype' must be one of"),
    ([tt("float32", (2, 3)), tt("float32", (2,)), tt("uint8", (2,))], {},
     "one value per index of axis 1"),
    ([tt("float32", (2, 3)), tt("float32", (3,)), tt("uint8", (2,))], {},
     "must have the same shape"),
    ([tt("float32", (2, 3)), tt("float32", (2, 3))], {}, "scalar or a 1-D tensor"),
    ([tt("float32", (2, 5)), tt("float32", (2, 2))], {"block_size": 2},
     "must have 3 values along axis 1"),
    ([tt("float32", (2, 5)), tt("float32", (2,))], {"block_size": -1},
     "'block_size' must be >= 0"),
    ([tt("float32", (2, 5)), tt("float32", (5,))], {"axis": 2}, "axis 2 is out of range"),
    ([tt("int8", (2, 5)), tt("float32", ())], {}, "input 'x' must have dtype"),
    ([tt("float32", (2, 5)), tt("float32", ())], {"saturate": 2}, "'saturate' must be 0 or 1"),
    ([tt("float32", (2, 5)), tt("float32", ())], {"precision": "int8"},
     "'precision' must be one of"),
])
def test_quantize_rejects_bad_input(types, attrs, message):
    with pytest.raises(OpError, match="QuantizeLinear") as error:
        infer("QuantizeLinear", types, attrs)
    assert message in str(error.value)


def test_quantize_reference_rejects_bad_scale_shape():
    with pytest.raises(OpError, match="'y_scale' of shape \\(2,\\)"):
        get_schema("QuantizeLinear")(np.ones((2, 3), np.float32), np.ones(2, np.float32))


# -- DequantizeLinear ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16])
@pytest.mark.parametrize("granularity", ["tensor", "axis", "block"])
def test_dequantize_matches_formula(rng, dtype, granularity):
    shape, axis, block = (3, 2, 7), -1, 0
    low, high = RANGES[dtype]
    x = rng.integers(low, high + 1, size=shape).astype(dtype)
    if granularity == "tensor":
        scale_shape = ()
    elif granularity == "axis":
        scale_shape = (7,)
    else:
        block, scale_shape = 3, (3, 2, 3)
    scale = np.abs(random_array(rng, scale_shape, "float32", 0.01, 2.0))
    zero = rng.integers(low, high + 1, size=scale_shape).astype(dtype)
    (y,) = run_op("DequantizeLinear", [x, scale, zero], {"axis": axis, "block_size": block})
    expected = np.empty(shape, dtype=np.float32)
    for index in itertools.product(*map(range, shape)):
        s, z = scale_and_zero_at(index, scale, zero, axis % 3, block)
        expected[index] = np.float32((int(x[index]) - z) * s)
    np.testing.assert_array_equal(y, expected)


def test_dequantize_int32_without_zero_point_and_output_dtype(rng):
    x = random_array(rng, (4, 3), "int32", -4 * 10**5, 4 * 10**5)
    (y,) = run_op("DequantizeLinear", [x, np.float32(0.125)], {"output_dtype": "float16"})
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, (x.astype(np.float64) * 0.125).astype(np.float16))
    (y,) = run_op("DequantizeLinear", [x.astype(np.int8), np.float16(0.5), np.int8(2)])
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, (x.astype(np.int8).astype(np.float64) - 2) * 0.5)


def test_dequantize_inverts_quantize_within_half_a_step(rng):
    x = random_array(rng, (4, 6), "float32", -20, 20)
    scale = np.abs(random_array(rng, (6,), "float32", 0.1, 0.3))
    zero = rng.integers(-5, 6, size=(6,)).astype(np.int8)
    attrs = {"axis": 1}
    (q,) = run_op("QuantizeLinear", [x, scale, zero], attrs)
    (back,) = run_op("DequantizeLinear", [q, scale, zero], attrs)
    assert np.all(np.abs(back - x) <= scale / 2 + 1e-6)


def test_dequantize_inference():
    (y,) = infer("DequantizeLinear", [tt("uint8", (N, 4)), tt("bfloat16", (4,)),
                                      tt("uint8", (4,))])
    assert y == tt("bfloat16", (N, 4))
    (y,) = infer("DequantizeLinear", [tt("int32", (N, 4)), tt("float32", ())],
                 {"output_dtype": "float16"})
    assert y == tt("float16", (N, 4))


@pytest.mark.parametrize("types, attrs, message", [
    ([tt("uint8", (2, 3)), tt("float32", ()), tt("int8", ())], {}, "same dtype as 'x'"),
    ([tt("uint8", (2, 3)), tt("float32", ())], {"output_dtype": "int32"},
     "'output_dtype' must be one of"),
    ([tt("uint8", (2, 3)), tt("float32", (4,))], {"axis": 0}, "one value per index of axis 0"),
    ([tt("float32", (2, 3)), tt("float32", ())], {}, "input 'x' must have dtype"),
    ([tt("int8", (4, 6)), tt("float32", (4, 2))], {"axis": 1, "block_size": 2},
     "must have 3 values along axis 1"),
])
def test_dequantize_rejects_bad_input(types, attrs, message):
    with pytest.raises(OpError, match="DequantizeLinear") as error:
        infer("DequantizeLinear", types, attrs)
    assert message in str(error.value)


# -- DynamicQuantizeLinear ------------------------------------------------------------


def test_dynamic_quantize_spec_example():
    x = np.array([0, 2, -3, -2.5, 1.34, 0.5], dtype=np.float32)
    y, scale, zero = run_op("DynamicQuantizeLinear", [x])
    assert scale == np.float32(5) / np.float32(255)
    assert zero == 153
    np.testing.assert_array_equal(y, [153, 255, 0, 26, 221, 179])


@pytest.mark.parametrize("low, high", [(-4.0, 9.0), (1.0, 6.0), (-7.0, -2.0)])
def test_dynamic_quantize_matches_formula(rng, low, high):
    x = random_array(rng, (3, 5), "float32", low, high)
    y, scale, zero = run_op("DynamicQuantizeLinear", [x])
    # The range always includes 0, so all-positive or all-negative data is widened.
    top, bottom = max(0.0, float(x.max())), min(0.0, float(x.min()))
    expected_scale = np.float32(np.float32(top) - np.float32(bottom)) / np.float32(255)
    assert scale == expected_scale
    expected_zero = round(min(255.0, max(0.0, float(-np.float32(bottom) / expected_scale))))
    assert int(zero) == expected_zero
    np.testing.assert_array_equal(
        y, [[quantize_one(float(v / expected_scale), 1.0, expected_zero, np.uint8)
             for v in row] for row in x])


def test_dynamic_quantize_all_zero_input():
    y, scale, zero = run_op("DynamicQuantizeLinear", [np.zeros((2, 2), np.float32)])
    assert scale == 1 and zero == 0
    np.testing.assert_array_equal(y, np.zeros((2, 2), np.uint8))


def test_dynamic_quantize_inference_and_dtype_check():
    types = infer("DynamicQuantizeLinear", [tt("float32", (N, 3))])
    assert types == [tt("uint8", (N, 3)), tt("float32", ()), tt("uint8", ())]
    with pytest.raises(OpError, match="DynamicQuantizeLinear: input 'x' must have dtype"):
        infer("DynamicQuantizeLinear", [tt("float16", (2,))])


# -- MatMulInteger and QLinearMatMul ---------------------------------------------------


def loop_matmul(a, b, a_zero, b_zero):
    """2-D (a - a_zero) @ (b - b_zero) one sum at a time; zero points scalar, per row of a,
    per column of b."""
    rows, inner = a.shape
    cols = b.shape[1]
    a_zero = np.broadcast_to(np.asarray(a_zero).reshape(-1), (rows,))
    b_zero = np.broadcast_to(np.asarray(b_zero).reshape(-1), (cols,))
    out = np.zeros((rows, cols), dtype=np.int64)
    for i, j in itertools.product(range(rows), range(cols)):
        out[i, j] = sum((int(a[i, k]) - int(a_zero[i])) * (int(b[k, j]) - int(b_zero[j]))
                        for k in range(inner))
    return out


def random_quantized(rng, shape, dtype):
    low, high = RANGES[dtype]
    return rng.integers(low, high + 1, size=shape).astype(dtype)


@pytest.mark.parametrize("a_dtype, b_dtype", [(np.uint8, np.int8), (np.int8, np.uint8),
                                              (np.uint8, np.uint8)])
@pytest.mark.parametrize("per", ["tensor", "row/column"])
def test_matmul_integer_matches_loop(rng, a_dtype, b_dtype, per):
    a, b = random_quantized(rng, (4, 5), a_dtype), random_quantized(rng, (5, 3), b_dtype)
    zero_shapes = ((), ()) if per == "tensor" else ((4,), (3,))
    a_zero = random_quantized(rng, zero_shapes[0], a_dtype)
    b_zero = random_quantized(rng, zero_shapes[1], b_dtype)
    (y,) = run_op("MatMulInteger", [a, b, a_zero, b_zero])
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, loop_matmul(a, b, a_zero, b_zero))
    (plain,) = run_op("MatMulInteger", [a, b])
    np.testing.assert_array_equal(plain, loop_matmul(a, b, 0, 0))


def test_matmul_integer_broadcasts_batches(rng):
    a = random_quantized(rng, (2, 1, 3, 4), np.uint8)
    b = random_quantized(rng, (3, 4, 2), np.int8)
    a_zero = random_quantized(rng, (2, 1, 3, 1), np.uint8)  # per row, N-D form
    (y,) = run_op("MatMulInteger", [a, b, a_zero, np.int8(-2)])
    assert y.shape == (2, 3, 3, 2)
    for i, j in itertools.product(range(2), range(3)):
        np.testing.assert_array_equal(y[i, j], loop_matmul(a[i, 0], b[j], a_zero[i, 0], -2))


def test_matmul_integer_inference():
    (y,) = infer("MatMulInteger", [tt("uint8", (N, M, K)), tt("int8", (K, 8)),
                                   tt("uint8", (M,)), tt("int8", (8,))])
    assert y == tt("int32", (N, M, 8))


@pytest.mark.parametrize("types, message", [
    ([tt("uint8", (3, 4)), tt("int8", (5, 2))], "inner dims differ"),
    ([tt("uint8", (3, 4)), tt("int8", (4, 2)), tt("uint8", (4,))], "one value per row"),
    ([tt("uint8", (3, 4)), tt("int8", (4, 2)), None, tt("int8", (4,))],
     "one value per column"),
    ([tt("uint8", (3, 4)), tt("int8", (4, 2)), tt("int8", ())], "same dtype as 'A'"),
    ([tt("int16", (3, 4)), tt("int8", (4, 2))], "input 'A' must have dtype"),
])
def test_matmul_integer_rejects_bad_input(types, message):
    with pytest.raises(OpError, match="MatMulInteger") as error:
        infer("MatMulInteger", types)
    assert message in str(error.value)


@pytest.mark.parametrize("scale_dtype", ["float32", "float16"])
@pytest.mark.parametrize("y_dtype", [np.int8, np.uint8])
def test_qlinear_matmul_matches_loop(rng, scale_dtype, y_dtype):
    a, b = random_quantized(rng, (3, 6), np.uint8), random_quantized(rng, (6, 4), np.int8)
    a_scale = np.abs(random_array(rng, (3,), scale_dtype, 0.01, 0.05))  # per row
    b_scale = np.abs(random_array(rng, (), scale_dtype, 0.01, 0.05))
    y_scale = np.abs(random_array(rng, (), scale_dtype, 0.05, 0.2))
    a_zero = random_quantized(rng, (3,), np.uint8)
    b_zero = random_quantized(rng, (), np.int8)
    y_zero = random_quantized(rng, (), y_dtype)
    (y,) = run_op("QLinearMatMul", [a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero])
    accumulator = loop_matmul(a, b, a_zero, b_zero)
    expected = np.empty((3, 4), dtype=y_dtype)
    for i, j in itertools.product(range(3), range(4)):
        multiplier = float(a_scale[i] * b_scale / y_scale)  # formed in the scales' dtype
        expected[i, j] = quantize_one(accumulator[i, j] * multiplier, 1.0, int(y_zero),
                                      y_dtype)
    np.testing.assert_array_equal(y, expected)


def test_qlinear_matmul_inference_and_errors():
    types = [tt("uint8", (N, 3, 4)), tt("float32", ()), tt("uint8", ()),
             tt("int8", (4, 5)), tt("float32", (5,)), tt("int8", (5,)),
             tt("float32", ()), tt("int8", ())]
    (y,) = infer("QLinearMatMul", types)
    assert y == tt("int8", (N, 3, 5))
    bad_y_scale = types[:6] + [tt("float32", (5,)), tt("int8", (5,))]
    with pytest.raises(OpError, match="QLinearMatMul: input 'y_scale' must be a scalar"):
        infer("QLinearMatMul", bad_y_scale)
    mixed_scales = types[:4] + [tt("float16", (5,))] + types[5:]
    with pytest.raises(OpError, match="'b_scale' must have the same dtype as 'a_scale'"):
        infer("QLinearMatMul", mixed_scales)
    with pytest.raises(OpError, match="'a_scale' .* and 'a_zero_point' .* same shape"):
        infer("QLinearMatMul", [types[0], tt("float32", (3,)), tt("uint8", ())] + types[3:])


# -- ConvInteger and QLinearConv -------------------------------------------------------


def loop_conv_integer(x, w, x_zero, w_zero, strides, pads, dilations, group):
    """Direct 2-D grouped convolution of (x - x_zero) with (w - w_zero), integer sums;
    padded cells stand for x_zero, a real zero."""
    n, _, height, width = x.shape
    m, c_per_group, kh, kw = w.shape
    w_zero = np.broadcast_to(np.asarray(w_zero).reshape(-1), (m,))
    out_h = (height + pads[0] + pads[2] - (kh - 1) * dilations[0] - 1) // strides[0] + 1
    out_w = (width + pads[1] + pads[3] - (kw - 1) * dilations[1] - 1) // strides[1] + 1
    y = np.zeros((n, m, out_h, out_w), dtype=np.int64)
    for b, oc, oh, ow in itertools.product(range(n), range(m), range(out_h), range(out_w)):
        g = oc // (m // group)
        total = 0
        for ci, i, j in itertools.product(range(c_per_group), range(kh), range(kw)):
            row = oh * strides[0] - pads[0] + i * dilations[0]
            col = ow * strides[1] - pads[1] + j * dilations[1]
            if 0 <= row < height and 0 <= col < width:
                total += ((int(x[b, g * c_per_group + ci, row, col]) - int(x_zero))
                          * (int(w[oc, ci, i, j]) - int(w_zero[oc])))
        y[b, oc, oh, ow] = total
    return y


CONV_CASES = [
    ((1, 2, 5, 5), (3, 2, 3, 3), dict(strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1],
                                      group=1)),
    ((2, 4, 6, 5), (4, 2, 2, 3), dict(strides=[2, 1], pads=[0, 1, 1, 0], dilations=[1, 2],
                                      group=2)),
]


@pytest.mark.parametrize("x_shape, w_shape, attrs", CONV_CASES)
@pytest.mark.parametrize("per_channel", [False, True])
def test_conv_integer_matches_loop(rng, x_shape, w_shape, attrs, per_channel):
    x, w = random_quantized(rng, x_shape, np.uint8), random_quantized(rng, w_shape, np.int8)
    x_zero = random_quantized(rng, (), np.uint8)
    w_zero = random_quantized(rng, (w_shape[0],) if per_channel else (), np.int8)
    (y,) = run_op("ConvInteger", [x, w, x_zero, w_zero], attrs)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, loop_conv_integer(x, w, x_zero, w_zero, **attrs))


def test_conv_integer_spec_example():
    x = np.arange(2, 11, dtype=np.uint8).reshape(1, 1, 3, 3)
    w = np.ones((1, 1, 2, 2), dtype=np.uint8)
    (y,) = run_op("ConvInteger", [x, w, np.uint8(1)])
    np.testing.assert_array_equal(y, np.array([12, 16, 24, 28]).reshape(1, 1, 2, 2))


def test_conv_integer_inference_and_errors():
    h, w_dim = Sym("H"), Sym("W")
    (y,) = infer("ConvInteger", [tt("uint8", (N, 3, h, w_dim)), tt("uint8", (8, 3, 1, 1))])
    assert y == tt("int32", (N, 8, h, w_dim))
    (y,) = infer("ConvInteger", [tt("int8", (N, 3, 9)), tt("int8", (4, 3, 3))],
                 {"strides": [2], "pads": [1, 1]})
    assert y == tt("int32", (N, 4, 5))
    with pytest.raises(OpError, match="ConvInteger: input 'x_zero_point' must be a scalar"):
        infer("ConvInteger", [tt("uint8", (1, 3, 4, 4)), tt("uint8", (2, 3, 1, 1)),
                              tt("uint8", (3,))])
    with pytest.raises(OpError, match="'w_zero_point' .* one value per output channel"):
        infer("ConvInteger", [tt("uint8", (1, 3, 4, 4)), tt("uint8", (2, 3, 1, 1)), None,
                              tt("uint8", (3,))])
    with pytest.raises(OpError, match="ConvInteger: input 'X' .* has 4 channels"):
        infer("ConvInteger", [tt("uint8", (1, 4, 4, 4)), tt("uint8", (2, 3, 1, 1))])


@pytest.mark.parametrize("x_shape, w_shape, attrs", CONV_CASES)
@pytest.mark.parametrize("y_dtype", [np.int8, np.uint8])
def test_qlinear_conv_matches_loop(rng, x_shape, w_shape, attrs, y_dtype):
    m = w_shape[0]
    x, w = random_quantized(rng, x_shape, np.int8), random_quantized(rng, w_shape, np.uint8)
    x_scale = np.float32(0.02)
    w_scale = np.abs(random_array(rng, (m,), "float32", 0.005, 0.03))
    y_scale = np.float32(0.5)
    x_zero, y_zero = random_quantized(rng, (), np.int8), random_quantized(rng, (), y_dtype)
    w_zero = random_quantized(rng, (m,), np.uint8)
    bias = random_array(rng, (m,), "int32", -500, 500)
    (y,) = run_op("QLinearConv", [x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero,
                                  bias], attrs)
    accumulator = loop_conv_integer(x, w, x_zero, w_zero, **attrs)
    expected = np.empty(accumulator.shape, dtype=y_dtype)
    for index in itertools.product(*map(range, accumulator.shape)):
        oc = index[1]
        multiplier = float(x_scale * w_scale[oc] / y_scale)
        expected[index] = quantize_one((accumulator[index] + int(bias[oc])) * multiplier, 1.0,
                                       int(y_zero), y_dtype)
    np.testing.assert_array_equal(y, expected)


def test_qlinear_conv_inference_and_errors():
    def types(bias=None, x_scale=()):
        return [tt("uint8", (N, 2, 7, 7)), tt("float32", x_scale), tt("uint8", x_scale),
                tt("int8", (5, 2, 3, 3)), tt("float32", (5,)), tt("int8", (5,)),
                tt("float32", ()), tt("uint8", ()), bias]

    (y,) = infer("QLinearConv", types(), {"strides": [2, 2]})
    assert y == TensorType(DType.UINT8, (N, 5, 3, 3))
    with pytest.raises(OpError, match="QLinearConv: input 'B' .* one value per output"):
        infer("QLinearConv", types(bias=tt("int32", (4,))))
    with pytest.raises(OpError, match="input 'x_scale' must be a scalar"):
        infer("QLinearConv", types(x_scale=(2,)))
    with pytest.raises(OpError, match="input 'B' must have dtype"):
        infer("QLinearConv", types(bias=tt("float32", (5,))))


def test_qlinear_conv_saturates():
    x = np.full((1, 1, 3, 3), 127, dtype=np.int8)
    w = np.full((1, 1, 3, 3), 127, dtype=np.int8)
    args = [np.float32(1), np.int8(0), w, np.float32(1), np.int8(0), np.float32(1)]
    (high,) = run_op("QLinearConv", [x, *args, np.uint8(0)])
    assert high.item() == 255
    (low,) = run_op("QLinearConv", [-x, *args, np.int8(0)])
    assert low.item() == -128


def test_quantize_precision_attribute_sets_the_division_dtype(rng):
    x = random_array(rng, (9,), "float32", -40, 40)
    scale = np.float32(0.3)
    (y,) = run_op("QuantizeLinear", [x, scale, np.int8(0)], {"precision": "float16"})
    expected = [quantize_one(float(np.float16(v) / np.float16(scale)), 1.0, 0, np.int8)
                for v in x]
    np.testing.assert_array_equal(y, expected)
