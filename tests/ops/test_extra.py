"""Tests of ge_hub/ops/extra.py (and CumProd, which lives beside CumSum in reduce.py):
bitwise logic, CumProd, Hardmax, LpNormalization, EyeLike,
ReverseSequence, Det, Shrink, MeanVarianceNormalization and LpPool.

Each reference is checked against an independent computation: plain Python over single
elements or rows (math.fsum, itertools.accumulate, Laplace expansion for Det, one window
at a time for LpPool), or the hand-computed examples of the ONNX spec; inference on
concrete and symbolic dims; and clear errors on bad input.
"""

from __future__ import annotations

import itertools
import math
import operator

import numpy as np
import pytest
from conftest import close, infer, random_array, run_op, tt

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import Sym
from ge_hub.ops import get_schema

N, T, M = Sym("N"), Sym("T"), Sym("M")
FLOAT_DTYPES = ["float32", "float64", "float16", "bfloat16"]
INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8"]


def wrap(value: int, dtype) -> int:
    """A Python int wrapped to an integer dtype, as C overflow does."""
    info = np.iinfo(np.dtype(dtype))
    span = info.max - info.min + 1
    return (value - info.min) % span + info.min


def py_values(x):
    """Nested Python numbers (floats as float64) of an array of any dtype."""
    if DType.from_numpy(x.dtype).is_float:
        return x.astype(np.float64).tolist()
    return x.tolist()


# --- bitwise ----------------------------------------------------------------------------

BITWISE = {"BitwiseAnd": operator.and_, "BitwiseOr": operator.or_,
           "BitwiseXor": operator.xor}


@pytest.mark.parametrize("op", list(BITWISE))
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_bitwise_binary_matches_python_ints(rng, op, dtype):
    a = random_array(rng, (3, 1, 5), dtype, low=-120, high=120)
    b = random_array(rng, (4, 5), dtype, low=-120, high=120)
    (out,) = run_op(op, [a, b])
    wide_a, wide_b = np.broadcast_arrays(a, b)
    expected = [BITWISE[op](int(p), int(q)) for p, q in zip(wide_a.ravel(), wide_b.ravel())]
    assert out.shape == (3, 4, 5)
    assert out.ravel().tolist() == expected


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_bitwise_not_flips_every_bit(rng, dtype):
    x = random_array(rng, (2, 3, 4), dtype, low=-100, high=100)
    (out,) = run_op("BitwiseNot", [x])
    bits = np.dtype(dtype).itemsize * 8
    # Flipping every bit is subtracting from all-ones, read back in the dtype's range.
    expected = [wrap((1 << bits) - 1 - (int(v) % (1 << bits)), dtype) for v in x.ravel()]
    assert out.ravel().tolist() == expected


def test_bitwise_hand_cases():
    a = np.array([0b1100, -1, 7], dtype=np.int32)
    b = np.array([0b1010, 5, -8], dtype=np.int32)
    assert run_op("BitwiseAnd", [a, b])[0].tolist() == [0b1000, 5, 0]
    assert run_op("BitwiseOr", [a, b])[0].tolist() == [0b1110, -1, -1]
    assert run_op("BitwiseXor", [a, b])[0].tolist() == [0b0110, -6, -1]
    assert run_op("BitwiseNot", [np.array([0, 255], dtype=np.uint8)])[0].tolist() == [255, 0]


def test_bitwise_inference_broadcasts_symbols():
    (y,) = infer("BitwiseXor", [tt("int16", (N, 1)), tt("int16", (1, 4))])
    assert y == tt("int16", (N, 4))
    assert infer("BitwiseNot", [tt("uint8", (N, T))]) == [tt("uint8", (N, T))]


def test_bitwise_rejects_floats_and_mixed_dtypes():
    with pytest.raises(OpError, match=r"BitwiseAnd.*'A'.*dtype.*float32"):
        infer("BitwiseAnd", [tt("float32", (2,)), tt("float32", (2,))])
    with pytest.raises(OpError, match=r"BitwiseOr.*'B'.*same dtype.*int32.*int64"):
        infer("BitwiseOr", [tt("int32", (2,)), tt("int64", (2,))])
    with pytest.raises(OpError, match=r"BitwiseNot.*'X'.*bool"):
        infer("BitwiseNot", [tt("bool", (2,))])
    with pytest.raises(OpError, match="cannot be broadcast"):
        infer("BitwiseAnd", [tt("int8", (2, 3)), tt("int8", (4,))])


# --- CumProd ----------------------------------------------------------------------------


def loop_cum_prod(x, axis, exclusive, reverse, mul):
    """Running products of each line along `axis`, one Python list at a time."""
    moved = np.moveaxis(np.asarray(py_values(x), dtype=object), axis, -1)
    result = np.empty(moved.shape, dtype=object)
    for index in np.ndindex(*moved.shape[:-1]):
        line = list(moved[index])
        if reverse:
            line.reverse()
        if exclusive:
            line = [1] + line[:-1]
        products = list(itertools.accumulate(line, mul))
        if reverse:
            products.reverse()
        result[index] = products
    return np.moveaxis(result, -1, axis)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cum_prod_float_matches_python(rng, dtype, axis, exclusive, reverse):
    x = random_array(rng, (3, 4, 5), dtype, low=0.5, high=1.5)
    axis_input = np.array(axis, dtype=np.int64)
    (out,) = run_op("CumProd", [x, axis_input], {"exclusive": exclusive, "reverse": reverse})
    close(out, loop_cum_prod(x, axis % 3, exclusive, reverse, operator.mul).astype(float),
          dtype)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 1)])
def test_cum_prod_int_wraps_like_c(rng, dtype, exclusive, reverse):
    x = random_array(rng, (2, 40), dtype, low=-9, high=9)
    (out,) = run_op("CumProd", [x, np.array([1], dtype=np.int32)],
                    {"exclusive": exclusive, "reverse": reverse})
    expected = loop_cum_prod(x, 1, exclusive, reverse, lambda p, q: wrap(p * q, dtype))
    assert out.tolist() == expected.tolist()


def test_cum_prod_spec_example_and_zeros():
    x = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    axis = np.array(0, dtype=np.int32)
    cases = {(0, 0): [1, 2, 6], (1, 0): [1, 1, 2], (0, 1): [6, 6, 3], (1, 1): [6, 3, 1]}
    for (exclusive, reverse), expected in cases.items():
        (out,) = run_op("CumProd", [x, axis], {"exclusive": exclusive, "reverse": reverse})
        assert out.tolist() == expected
    # A zero must not turn the exclusive product into 0/0.
    (out,) = run_op("CumProd", [np.array([2.0, 0.0, 3.0]), axis], {"exclusive": 1})
    assert out.tolist() == [1.0, 2.0, 0.0]


def test_cum_prod_inference_and_errors():
    x = tt("float32", (N, 4))
    assert infer("CumProd", [x, tt("int64", ())]) == [x]
    with pytest.raises(OpError, match=r"CumProd.*'axis'.*scalar"):
        infer("CumProd", [x, tt("int64", (2,))])
    with pytest.raises(OpError, match=r"CumProd.*'axis' 2 is out of range for rank 2"):
        infer("CumProd", [x, tt("int64", ())], consts=[None, np.array(2)])
    with pytest.raises(OpError, match=r"CumProd.*'exclusive' must be 0 or 1, got 2"):
        infer("CumProd", [x, tt("int64", ())], {"exclusive": 2})
    with pytest.raises(OpError, match=r"CumProd.*'x'.*dtype.*int8"):
        infer("CumProd", [tt("int8", (3,)), tt("int64", ())])
    with pytest.raises(OpError, match=r"CumProd: input 'axis' value -3 is out of range"):
        run_op("CumProd", [np.ones((2, 2)), np.array(-3)], const_inputs=False)


# --- Hardmax ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_hardmax_marks_the_first_maximum(rng, dtype, axis):
    # Few distinct values, so that ties are common and the first must win.
    x = (random_array(rng, (3, 4, 5), "int32", low=-2, high=2)).astype(dtype)
    (out,) = run_op("Hardmax", [x], {"axis": axis})
    moved = np.moveaxis(x.astype(np.float64), axis, -1)
    expected = np.zeros(moved.shape)
    for index in np.ndindex(*moved.shape[:-1]):
        line = moved[index].tolist()
        expected[index + (line.index(max(line)),)] = 1
    assert out.dtype == x.dtype
    assert out.astype(np.float64).tolist() == np.moveaxis(expected, -1, axis).tolist()


def test_hardmax_spec_example():
    x = np.array([[3, 0, 1, 2], [2, 5, 1, 0], [0, 1, 3, 2], [0, 1, 2, 3]], dtype=np.float32)
    (out,) = run_op("Hardmax", [x])
    assert out.tolist() == np.eye(4)[[0, 1, 2, 3]].tolist()


def test_hardmax_inference_and_errors():
    x = tt("float16", (N, T))
    assert infer("Hardmax", [x], {"axis": 0}) == [x]
    with pytest.raises(OpError, match=r"Hardmax.*'axis' 2 is out of range for rank 2"):
        infer("Hardmax", [x], {"axis": 2})
    with pytest.raises(OpError, match=r"Hardmax.*'input'.*dtype.*int32"):
        infer("Hardmax", [tt("int32", (2,))])


# --- LpNormalization --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_lp_normalization_matches_python(rng, dtype, p, axis):
    x = random_array(rng, (3, 4, 5), dtype)
    (out,) = run_op("LpNormalization", [x], {"axis": axis, "p": p})
    moved = np.moveaxis(x.astype(np.float64), axis, -1)
    expected = np.zeros(moved.shape)
    for index in np.ndindex(*moved.shape[:-1]):
        line = moved[index].tolist()
        norm = math.fsum(abs(v) ** p for v in line) ** (1 / p)
        expected[index] = [v / norm for v in line]
    close(out, np.moveaxis(expected, -1, axis), dtype)


def test_lp_normalization_of_zeros_is_zero():
    x = np.array([[0.0, 0.0], [3.0, -4.0]], dtype=np.float32)
    (l2,) = run_op("LpNormalization", [x], {"p": 2})
    assert l2.tolist() == [[0.0, 0.0], [0.6000000238418579, -0.800000011920929]]
    (l1,) = run_op("LpNormalization", [x], {"p": 1, "axis": 0})
    close(l1, [[0.0, 0.0], [1.0, -1.0]])


def test_lp_normalization_errors():
    with pytest.raises(OpError, match=r"LpNormalization.*'p' must be 1 or 2, got 3"):
        infer("LpNormalization", [tt("float32", (2, 3))], {"p": 3})
    with pytest.raises(OpError, match=r"LpNormalization.*'axis' -3 is out of range"):
        infer("LpNormalization", [tt("float32", (2, 3))], {"axis": -3})
    with pytest.raises(OpError, match=r"LpNormalization: attribute 'p' must be 1 or 2"):
        get_schema("LpNormalization")(np.ones(3, dtype=np.float32), p=0)


# --- EyeLike ----------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (5, 2)])
@pytest.mark.parametrize("k", [0, 1, -2, 6])
def test_eye_like_puts_ones_on_diagonal_k(rng, shape, k):
    x = random_array(rng, shape, "int32")
    (out,) = run_op("EyeLike", [x], {"k": k})
    expected = [[1 if j - i == k else 0 for j in range(shape[1])] for i in range(shape[0])]
    assert out.dtype == np.int32 and out.tolist() == expected


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "bool", "uint8", "int64"])
def test_eye_like_dtype_attribute(rng, dtype):
    x = random_array(rng, (3, 3), "float32")
    (out,) = run_op("EyeLike", [x], {"dtype": dtype, "k": -1})
    assert out.dtype == DType.parse(dtype).numpy
    assert out.astype(np.float64).tolist() == [[0, 0, 0], [1, 0, 0], [0, 1, 0]]


def test_eye_like_inference_and_errors():
    assert infer("EyeLike", [tt("bool", (N, M))], {"dtype": "float16"}) == \
        [tt("float16", (N, M))]
    (y,) = infer("EyeLike", [tt("int8", None)])
    assert y.dtype == DType.INT8 and y.rank == 2
    with pytest.raises(OpError, match=r"EyeLike.*'input' must have rank 2.*rank 3"):
        infer("EyeLike", [tt("float32", (2, 2, 2))])
    with pytest.raises(OpError, match=r"EyeLike.*'dtype' must be a dtype name"):
        infer("EyeLike", [tt("float32", (2, 2))], {"dtype": "complex64"})


# --- ReverseSequence --------------------------------------------------------------------


def test_reverse_sequence_spec_examples():
    grid = np.arange(16, dtype=np.float32)
    (out,) = run_op("ReverseSequence", [grid.reshape(4, 4).T.copy(),
                                        np.array([4, 3, 2, 1], dtype=np.int64)],
                    {"time_axis": 0, "batch_axis": 1})
    assert out.tolist() == [[3, 6, 9, 12], [2, 5, 8, 13], [1, 4, 10, 14], [0, 7, 11, 15]]
    (out,) = run_op("ReverseSequence", [grid.reshape(4, 4),
                                        np.array([1, 2, 3, 4], dtype=np.int64)],
                    {"time_axis": 1, "batch_axis": 0})
    assert out.tolist() == [[0, 1, 2, 3], [5, 4, 6, 7], [10, 9, 8, 11], [15, 14, 13, 12]]


@pytest.mark.parametrize("time_axis,batch_axis", [(0, 1), (1, 0)])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "bool"])
def test_reverse_sequence_matches_loop(rng, time_axis, batch_axis, dtype):
    shape = [0, 0, 3]
    shape[time_axis], shape[batch_axis] = 6, 4
    x = random_array(rng, tuple(shape), dtype)
    lens = np.array([6, 0, 3, 1], dtype=np.int64)
    (out,) = run_op("ReverseSequence", [x, lens],
                    {"time_axis": time_axis, "batch_axis": batch_axis})
    expected = x.copy()
    for b, length in enumerate(lens.tolist()):
        for t in range(length):
            dst, src = [0, 0], [0, 0]
            dst[time_axis], dst[batch_axis] = t, b
            src[time_axis], src[batch_axis] = length - 1 - t, b
            expected[tuple(dst)] = x[tuple(src)]
    assert out.dtype == x.dtype
    assert py_values(out) == py_values(expected)


def test_reverse_sequence_inference_and_errors():
    x = tt("float32", (T, N, 3))
    assert infer("ReverseSequence", [x, tt("int64", (N,))]) == [x]
    with pytest.raises(OpError, match=r"ReverseSequence.*'sequence_lens'.*one length per "
                                      r"batch entry.*5"):
        infer("ReverseSequence", [tt("float32", (2, 5)), tt("int64", (4,))])
    with pytest.raises(OpError, match=r"ReverseSequence.*'batch_axis'.*0 and 1.*got "
                                      r"batch_axis=2, time_axis=0"):
        infer("ReverseSequence", [tt("float32", (2, 5, 3)), tt("int64", (3,))],
              {"batch_axis": 2})
    with pytest.raises(OpError, match=r"ReverseSequence.*'input' must have rank >= 2"):
        infer("ReverseSequence", [tt("float32", (5,)), tt("int64", (5,))])
    with pytest.raises(OpError, match=r"ReverseSequence.*'sequence_lens'.*dtype.*int32"):
        infer("ReverseSequence", [tt("float32", (2, 2)), tt("int32", (2,))])
    with pytest.raises(OpError, match=r"ReverseSequence: input 'sequence_lens' values must "
                                      r"be in 0\.\.2.*\[3, 1\]"):
        run_op("ReverseSequence", [np.ones((2, 2)), np.array([3, 1])], const_inputs=False)


# --- Det --------------------------------------------------------------------------------


def laplace_det(matrix):
    """Determinant by cofactor expansion along the first row."""
    if len(matrix) == 1:
        return matrix[0][0]
    return math.fsum((-1) ** j * matrix[0][j]
                     * laplace_det([row[:j] + row[j + 1:] for row in matrix[1:]])
                     for j in range(len(matrix)))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (2, 1, 2, 2), (1, 1)])
def test_det_matches_cofactor_expansion(rng, dtype, shape):
    x = random_array(rng, shape, dtype, low=-2, high=2)
    (out,) = run_op("Det", [x])
    wide = x.astype(np.float64)
    expected = np.zeros(shape[:-2])
    for index in np.ndindex(*shape[:-2]):
        expected[index] = laplace_det(wide[index].tolist())
    close(out, expected, dtype if dtype != "float16" else "bfloat16")


def test_det_hand_case():
    x = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    (out,) = run_op("Det", [x])
    assert out.shape == () and math.isclose(float(out), -2.0, rel_tol=1e-6)


def test_det_inference_and_errors():
    assert infer("Det", [tt("float32", (N, M, M))]) == [tt("float32", (N,))]
    assert infer("Det", [tt("float64", None)]) == [tt("float64", None)]
    with pytest.raises(OpError, match=r"Det.*'X'.*square matrices.*2 x 3"):
        infer("Det", [tt("float32", (4, 2, 3))])
    with pytest.raises(OpError, match=r"Det.*'X' must have rank >= 2"):
        infer("Det", [tt("float32", (4,))])
    with pytest.raises(OpError, match=r"Det.*'X'.*dtype.*int32"):
        infer("Det", [tt("int32", (2, 2))])


# --- Shrink -----------------------------------------------------------------------------


def loop_shrink(x, lambd, bias):
    return [v + bias if v < -lambd else v - bias if v > lambd else 0 for v in x]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("lambd,bias", [(0.5, 0.0), (1.5, 0.25), (0.0, -1.0)])
def test_shrink_float_matches_formula(rng, dtype, lambd, bias):
    x = random_array(rng, (4, 6), dtype)
    (out,) = run_op("Shrink", [x], {"lambd": lambd, "bias": bias})
    expected = loop_shrink(x.astype(np.float64).ravel().tolist(), lambd, bias)
    close(out.ravel(), expected, dtype)


@pytest.mark.parametrize("dtype", ["int8", "int32", "uint8"])
def test_shrink_integers_cast_lambd_and_bias_first(rng, dtype):
    x = random_array(rng, (20,), dtype, low=-4, high=4)
    (out,) = run_op("Shrink", [x], {"lambd": 1.7, "bias": 2.9})
    # lambd and bias truncate to 1 and 2 in an integer dtype.
    expected = [wrap(v, dtype) for v in loop_shrink([int(v) for v in x], 1, 2)]
    assert out.tolist() == expected


def test_shrink_spec_example_and_errors():
    x = np.arange(-2.0, 3.0, dtype=np.float32)
    assert run_op("Shrink", [x], {"lambd": 1.5})[0].tolist() == [-2, 0, 0, 0, 2]
    assert run_op("Shrink", [x], {"lambd": 1.5, "bias": 1.5})[0].tolist() == \
        [-0.5, 0, 0, 0, 0.5]
    assert infer("Shrink", [tt("int16", (N,))]) == [tt("int16", (N,))]
    with pytest.raises(OpError, match=r"Shrink.*'input'.*dtype.*bool"):
        infer("Shrink", [tt("bool", (2,))])
    with pytest.raises(OpError, match=r"Shrink.*'lambd' must be a float"):
        infer("Shrink", [tt("float32", (2,))], {"lambd": "big"})


# --- MeanVarianceNormalization ----------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("axes", [None, [1], [0, -1], [1, 2, 3]])
def test_mvn_matches_python(rng, dtype, axes):
    x = random_array(rng, (2, 3, 4, 5), dtype)
    attrs = {} if axes is None else {"axes": axes}
    (out,) = run_op("MeanVarianceNormalization", [x], attrs)
    reduced = sorted(a % 4 for a in (axes or [0, 2, 3]))
    kept = [a for a in range(4) if a not in reduced]
    wide = x.astype(np.float64)
    expected = np.zeros(x.shape)
    for kept_index in np.ndindex(*[x.shape[a] for a in kept]):
        group = []
        for reduced_index in np.ndindex(*[x.shape[a] for a in reduced]):
            full = [0] * 4
            for a, i in zip(kept + reduced, kept_index + reduced_index):
                full[a] = i
            group.append(tuple(full))
        values = [wide[i] for i in group]
        mean = math.fsum(values) / len(values)
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))
        for i, v in zip(group, values):
            expected[i] = (v - mean) / (std + 1e-9)
    close(out, expected, dtype)


def test_mvn_inference_and_errors():
    x = tt("float32", (N, 3, T, M))
    assert infer("MeanVarianceNormalization", [x]) == [x]
    with pytest.raises(OpError, match=r"MeanVarianceNormalization.*'axes' 3 is out of range "
                                      r"for rank 3"):
        infer("MeanVarianceNormalization", [tt("float32", (2, 3, 4))])
    with pytest.raises(OpError, match=r"MeanVarianceNormalization.*repeats an axis"):
        infer("MeanVarianceNormalization", [x], {"axes": [1, -3]})


# --- LpPool -----------------------------------------------------------------------------


def same_pads(in_dims, kernel, strides, dilations, upper):
    """ONNX SAME padding: begin and end pads per axis (the odd cell at the end if upper)."""
    begins, ends = [], []
    for size, k, s, d in zip(in_dims, kernel, strides, dilations):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, large = total // 2, total - total // 2
        begins.append(small if upper else large)
        ends.append(large if upper else small)
    return begins + ends


def loop_lp_pool(x, kernel, strides, pads, dilations, p, ceil_mode=False):
    """(sum |x|^p)^(1/p) over each window, one window at a time; padding contributes 0."""
    n, c, *in_dims = x.shape
    r = len(in_dims)
    out_dims = []
    for i in range(r):
        span = in_dims[i] + pads[i] + pads[i + r] - dilations[i] * (kernel[i] - 1) - 1
        out = (math.ceil if ceil_mode else math.floor)(span / strides[i]) + 1
        if ceil_mode and (out - 1) * strides[i] >= in_dims[i] + pads[i]:
            out -= 1
        out_dims.append(out)
    wide = x.astype(np.float64)
    y = np.zeros((n, c, *out_dims))
    for index in itertools.product(range(n), range(c), *map(range, out_dims)):
        batch, channel, *out = index
        total = []
        for tap in itertools.product(*map(range, kernel)):
            pos = [out[i] * strides[i] - pads[i] + tap[i] * dilations[i] for i in range(r)]
            if all(0 <= pos[i] < in_dims[i] for i in range(r)):
                total.append(abs(float(wide[(batch, channel, *pos)])) ** p)
        y[index] = math.fsum(total) ** (1 / p)
    return y


LP_POOL_CASES = [
    # shape, kernel, strides, pads, dilations, ceil_mode
    ((1, 2, 9), [3], [1], [0, 0], [1], 0),
    ((2, 3, 7, 6), [2, 3], [2, 1], [1, 0, 0, 2], [1, 1], 0),
    ((1, 2, 8, 7), [3, 2], [1, 2], [0, 0, 0, 0], [2, 2], 0),
    ((1, 1, 7, 8), [3, 3], [2, 3], [1, 1, 1, 1], [1, 1], 1),
    ((1, 2, 4, 5, 3), [2, 2, 2], [1, 2, 1], [0, 1, 0, 1, 0, 1], [1, 1, 2], 0),
]


@pytest.mark.parametrize("case", LP_POOL_CASES)
@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool_matches_loop(rng, case, p):
    shape, kernel, strides, pads, dilations, ceil_mode = case
    x = random_array(rng, shape, "float64")
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads,
             "dilations": dilations, "ceil_mode": ceil_mode, "p": p}
    (out,) = run_op("LpPool", [x], attrs)
    close(out, loop_lp_pool(x, kernel, strides, pads, dilations, p, ceil_mode), "float64")


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_lp_pool_auto_pad(rng, auto_pad, dtype):
    x = random_array(rng, (1, 2, 6, 5), dtype)
    kernel, strides, dilations = [3, 2], [2, 1], [1, 2]
    attrs = {"kernel_shape": kernel, "strides": strides, "dilations": dilations,
             "auto_pad": auto_pad}
    (out,) = run_op("LpPool", [x], attrs)
    if auto_pad == "VALID":
        pads = [0, 0, 0, 0]
    else:
        pads = same_pads([6, 5], kernel, strides, dilations, auto_pad == "SAME_UPPER")
    close(out, loop_lp_pool(x, kernel, strides, pads, dilations, 2), dtype)


def test_lp_pool_inference():
    (y,) = infer("LpPool", [tt("float32", (N, 3, T, 8))],
                 {"kernel_shape": [1, 3], "strides": [1, 2]})
    assert y == tt("float32", (N, 3, T, 3))
    (y,) = infer("LpPool", [tt("float16", (N, 3, T))],
                 {"kernel_shape": [2], "auto_pad": "SAME_UPPER"})
    assert y == tt("float16", (N, 3, T))


def test_lp_pool_errors():
    x = tt("float32", (1, 3, 5, 5))
    with pytest.raises(OpError, match=r"LpPool.*'kernel_shape' \[2\] has 1 values but input "
                                      r"'X'.*2 spatial dims"):
        infer("LpPool", [x], {"kernel_shape": [2]})
    with pytest.raises(OpError, match=r"LpPool.*'p' must be >= 1, got 0"):
        infer("LpPool", [x], {"kernel_shape": [2, 2], "p": 0})
    with pytest.raises(OpError, match=r"LpPool.*'kernel_shape' \(ints\) is required"):
        infer("LpPool", [x], {})
    with pytest.raises(OpError, match=r"LpPool.*too small"):
        infer("LpPool", [x], {"kernel_shape": [6, 2]})
    with pytest.raises(OpError, match=r"LpPool.*'strides' must have 2 values"):
        infer("LpPool", [x], {"kernel_shape": [2, 2], "strides": [1]})
    with pytest.raises(OpError, match=r"LpPool.*'X'.*dtype.*int32"):
        infer("LpPool", [tt("int32", (1, 3, 5, 5))], {"kernel_shape": [2, 2]})


# --- GridSample -------------------------------------------------------------------------


def reflect_scalar(c, low, high):
    """Mirror c at the nearer border until it lies within [low, high] (the spec's words)."""
    if high == low:
        return low
    while c < low or c > high:
        c = 2 * low - c if c < low else 2 * high - c
    return c


def keys_weight(distance, a=-0.75):
    d = abs(distance)
    if d <= 1:
        return (a + 2) * d**3 - (a + 3) * d**2 + 1
    if d < 2:
        return a * d**3 - 5 * a * d**2 + 8 * a * d - 4 * a
    return 0.0


def loop_grid_sample(x, grid, mode, padding_mode, align_corners):
    """GridSample one output point at a time, from the formulas of the ONNX spec."""
    n_batch, channels, *sizes = x.shape
    r = len(sizes)
    out_dims = grid.shape[1:-1]
    y = np.zeros((n_batch, channels, *out_dims))
    wide = x.astype(np.float64)
    for n, *point in itertools.product(range(n_batch), *map(range, out_dims)):
        axis_taps = []
        for axis, size in enumerate(sizes):
            g = float(grid[(n, *point, r - 1 - axis)])  # innermost dim first
            if align_corners:
                low, high, c = 0.0, size - 1.0, (g + 1) / 2 * (size - 1)
            else:
                low, high, c = -0.5, size - 0.5, ((g + 1) * size - 1) / 2
            if mode == "nearest":
                c = float(round(c))  # Python rounds half to even
            if not low <= c <= high:
                if padding_mode == "border":
                    c = min(max(c, 0.0), size - 1.0)
                elif padding_mode == "reflection":
                    c = reflect_scalar(c, low, high)
            if mode == "nearest":
                taps = [(int(c), 1.0)]
            elif mode == "linear":
                f = math.floor(c)
                taps = [(f, 1 - (c - f)), (f + 1, c - f)]
            else:
                f = math.floor(c)
                taps = [(f + k, keys_weight(c - (f + k))) for k in (-1, 0, 1, 2)]
            resolved = []
            for index, weight in taps:
                if padding_mode == "zeros" and not 0 <= index < size:
                    index = None
                elif padding_mode == "border":
                    index = min(max(index, 0), size - 1)
                elif padding_mode == "reflection":
                    index = int(reflect_scalar(float(index), low, high))
                resolved.append((index, weight))
            axis_taps.append(resolved)
        for channel in range(channels):
            total = 0.0
            for combo in itertools.product(*axis_taps):
                if any(index is None for index, _ in combo):
                    continue
                total += math.prod(w for _, w in combo) * wide[(n, channel,
                                                                *(i for i, _ in combo))]
            y[(n, channel, *point)] = total
    return y


GRID_CASES = [((2, 2, 5), (2, 4, 1)), ((2, 2, 3, 4), (2, 3, 2, 2)),
              ((1, 2, 3, 2, 4), (1, 2, 2, 3, 3))]


@pytest.mark.parametrize("shapes", GRID_CASES, ids=["1d", "2d", "3d"])
@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_matches_loop(rng, shapes, mode, padding_mode, align_corners):
    x_shape, grid_shape = shapes
    x = random_array(rng, x_shape, "float64")
    # Reaching past [-1, 1] exercises the padding, reflecting more than once.
    grid = random_array(rng, grid_shape, "float64", low=-3.2, high=3.2)
    (out,) = run_op("GridSample", [x, grid], {"mode": mode, "padding_mode": padding_mode,
                                              "align_corners": align_corners})
    close(out, loop_grid_sample(x, grid, mode, padding_mode, align_corners), "float64")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_grid_sample_dtypes(rng, dtype):
    x = random_array(rng, (1, 3, 4, 5), dtype)
    grid = random_array(rng, (1, 2, 6, 2), dtype, low=-1.1, high=1.1)
    (out,) = run_op("GridSample", [x, grid])
    close(out, loop_grid_sample(x, grid, "linear", "zeros", 0), dtype)


def test_grid_sample_identity_grids_return_the_input(rng):
    x = random_array(rng, (2, 3, 4, 5), "float64")
    rows, cols = np.meshgrid(np.arange(4), np.arange(5), indexing="ij")
    corners = np.stack([cols / 4 * 2 - 1, rows / 3 * 2 - 1], axis=-1)  # (x, y) order
    centers = np.stack([(2 * cols + 1) / 5 - 1, (2 * rows + 1) / 4 - 1], axis=-1)
    for mode in ("linear", "nearest", "cubic"):
        for align_corners, grid in ((1, corners), (0, centers)):
            batch_grid = np.broadcast_to(grid, (2, 4, 5, 2)).copy()
            (out,) = run_op("GridSample", [x, batch_grid],
                            {"mode": mode, "align_corners": align_corners})
            close(out, x, "float64")


def test_grid_sample_hand_cases():
    x = np.arange(1.0, 5.0, dtype=np.float32).reshape(1, 1, 2, 2)  # [[1, 2], [3, 4]]
    grid = np.array([[[[-1.0, -1.0], [0.0, 0.0], [1.0, -1.0]]]], dtype=np.float32)
    # align_corners=0: (-1, -1) is the outer corner of pixel (0, 0), a quarter inside X.
    (out,) = run_op("GridSample", [x, grid])
    close(out.ravel(), [0.25, 2.5, 0.5])
    (out,) = run_op("GridSample", [x, grid], {"padding_mode": "border"})
    close(out.ravel(), [1.0, 2.5, 2.0])
    (out,) = run_op("GridSample", [x, grid], {"align_corners": 1})
    close(out.ravel(), [1.0, 2.5, 2.0])
    # The spec's reflection example: -3.5 in units of the [-1, 1] range lands on 0.5.
    line = np.array([[[10.0, 20.0, 30.0]]], dtype=np.float32)
    far = np.array([[[-3.5], [0.5]]], dtype=np.float32)
    (out,) = run_op("GridSample", [line, far],
                    {"padding_mode": "reflection", "align_corners": 1})
    close(out.ravel(), [25.0, 25.0])
    # nearest: a half-way position rounds to the even index.
    half = np.array([[[-0.5], [0.5]]], dtype=np.float32)  # positions 0.5 and 1.5
    (out,) = run_op("GridSample", [line, half], {"mode": "nearest", "align_corners": 1})
    assert out.ravel().tolist() == [10.0, 30.0]


def test_grid_sample_integer_input_is_cast_at_the_end(rng):
    x = random_array(rng, (1, 2, 4, 4), "int32", low=-50, high=50)
    grid = random_array(rng, (1, 3, 3, 2), "float32", low=-1, high=1)
    (nearest,) = run_op("GridSample", [x, grid], {"mode": "nearest"})
    assert nearest.tolist() == loop_grid_sample(x, grid, "nearest", "zeros", 0).tolist()
    (linear,) = run_op("GridSample", [x, grid])
    expected = np.trunc(loop_grid_sample(x, grid, "linear", "zeros", 0))
    assert np.abs(linear - expected).max() <= 1  # float rounding may cross an integer


def test_grid_sample_inference():
    (y,) = infer("GridSample", [tt("float32", (N, 3, 8, 8)), tt("float32", (N, T, M, 2))])
    assert y == tt("float32", (N, 3, T, M))
    (y,) = infer("GridSample", [tt("int8", (2, 3, 8, 8, 8)), tt("float16", (2, 4, 5, 6, 3))],
                 {"mode": "nearest"})
    assert y == tt("int8", (2, 3, 4, 5, 6))
    (y,) = infer("GridSample", [tt("float32", (N, 3, 8, 8)), tt("float32", None)])
    assert y.rank == 4 and y.shape[:2] == (N, 3)


def test_grid_sample_errors():
    x = tt("float32", (2, 3, 8, 8))
    with pytest.raises(OpError, match=r"GridSample.*'grid'.*must end in a dim of 2.*got 3"):
        infer("GridSample", [x, tt("float32", (2, 4, 4, 3))])
    with pytest.raises(OpError, match=r"GridSample.*'grid'.*must have the rank of 'X'"):
        infer("GridSample", [x, tt("float32", (2, 4, 4, 4, 3))])
    with pytest.raises(OpError, match=r"GridSample.*same batch size, got 1 and 2"):
        infer("GridSample", [x, tt("float32", (1, 4, 4, 2))])
    with pytest.raises(OpError, match=r"GridSample.*'mode' must be one of linear, nearest, "
                                      r"cubic, got 'bilinear'"):
        infer("GridSample", [x, tt("float32", (2, 4, 4, 2))], {"mode": "bilinear"})
    with pytest.raises(OpError, match=r"GridSample.*'padding_mode'.*got 'wrap'"):
        infer("GridSample", [x, tt("float32", (2, 4, 4, 2))], {"padding_mode": "wrap"})
    with pytest.raises(OpError, match=r"GridSample.*'grid'.*dtype.*int64"):
        infer("GridSample", [x, tt("int64", (2, 4, 4, 2))])
    with pytest.raises(OpError, match=r"GridSample: input 'grid' of shape \(2, 4, 4, 3\)"):
        get_schema("GridSample")(np.ones((2, 3, 8, 8)), np.zeros((2, 4, 4, 3)))
