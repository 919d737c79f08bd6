"""Tests of the reduction ops: Reduce*, ArgMax/ArgMin, CumSum, CumProd, TopK, Einsum.

Each reference is checked against an independent computation: plain Python over the
rows being reduced (math.fsum, math.prod, sorted, itertools.accumulate), a brute-force
loop over every label assignment for Einsum, or hand-computed cases from the ONNX spec.
"""

from __future__ import annotations

import itertools
import math
import operator

import ml_dtypes
import numpy as np
import pytest
from conftest import close, random_array, run_op, tt

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import Sym, TensorType
from ge_hub.ops import get_schema

FLOAT_DTYPES = ["float32", "float64", "float16", "bfloat16"]
TOLERANCE = {"float32": 1e-5, "float64": 1e-12, "float16": 2e-3, "bfloat16": 1.6e-2}


def infer(op, types, attrs=None, consts=None):
    """Inferred output types for input types given as TensorType or (dtype, shape)."""
    types = [t if t is None or isinstance(t, TensorType) else TensorType(*t) for t in types]
    return get_schema(op).infer_types(types, attrs or {}, consts=consts)


def as_float64(x):
    return np.asarray(x).astype(np.float64)


def assert_close(out, expected, dtype):
    """Compare with an exact result rounded once to `dtype` (so both overflow alike)."""
    with np.errstate(over="ignore"):
        rounded = as_float64(np.asarray(expected, dtype=np.float64).astype(dtype))
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(as_float64(out), rounded, rtol=tol, atol=tol * 4)


def wrap(value: int, dtype) -> int:
    """A Python int wrapped to a two's-complement integer dtype, as C overflow does."""
    bits = np.dtype(dtype).itemsize * 8
    value %= 1 << bits
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def rows(x: np.ndarray, axes):
    """The data as (kept positions) x (reduced values): one Python list per output element,
    with the shape of the output without kept dims."""
    kept = [a for a in range(x.ndim) if a not in axes]
    moved = np.transpose(x, kept + list(axes))
    kept_shape = tuple(x.shape[a] for a in kept)
    flat = moved.reshape(math.prod(kept_shape), -1)
    return [list(r) for r in flat], kept_shape


def expected_reduction(row_fn, x, axes, keepdims, cast):
    axes = sorted(a % x.ndim for a in axes) if axes is not None else list(range(x.ndim))
    values, kept_shape = rows(x, axes)
    result = np.array([cast(row_fn(r)) for r in values], dtype=object).reshape(kept_shape)
    if keepdims:
        result = result.reshape([1 if a in axes else d for a, d in enumerate(x.shape)])
    return result


def _lse(row):
    return math.log(math.fsum(math.exp(v) for v in row))


# For each op: the row function on Python floats, and on Python ints (exact, before the
# wrap or truncation to the integer dtype).
FLOAT_ROW = {
    "ReduceSum": math.fsum,
    "ReduceMean": lambda r: math.fsum(r) / len(r),
    "ReduceMax": max,
    "ReduceMin": min,
    "ReduceProd": math.prod,
    "ReduceL1": lambda r: math.fsum(abs(v) for v in r),
    "ReduceL2": lambda r: math.sqrt(math.fsum(v * v for v in r)),
    "ReduceSumSquare": lambda r: math.fsum(v * v for v in r),
    "ReduceLogSumExp": _lse,
}
INT_ROW = {
    "ReduceSum": sum,
    "ReduceMean": lambda r: (1 if sum(r) >= 0 else -1) * (abs(sum(r)) // len(r)),
    "ReduceMax": max,
    "ReduceMin": min,
    "ReduceProd": math.prod,
    "ReduceL1": lambda r: sum(abs(v) for v in r),
    "ReduceL2": lambda r: int(math.sqrt(sum(v * v for v in r))),
    "ReduceSumSquare": lambda r: sum(v * v for v in r),
    "ReduceLogSumExp": lambda r: int(_lse(r)),
}
REDUCE_OPS = list(FLOAT_ROW)
AXES_CASES = [([1], 1), ([0, 2], 0), ([-1], 1), ([2, -3], 1), (None, 1), (None, 0)]


# --- Reduce* --------------------------------------------------------------------------


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("axes,keepdims", AXES_CASES)
def test_reduce_float_matches_python(rng, op, dtype, axes, keepdims):
    x = random_array(rng, (3, 5, 7), dtype)
    inputs = [x] if axes is None else [x, np.array(axes, dtype=np.int64)]
    (out,) = run_op(op, inputs, {"keepdims": keepdims})
    data = [float(v) for v in as_float64(x).reshape(-1)]
    expected = expected_reduction(FLOAT_ROW[op], np.array(data).reshape(x.shape), axes,
                                  keepdims, float)
    assert_close(out, expected, dtype)


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("axes,keepdims", AXES_CASES)
def test_reduce_int_matches_python(rng, op, dtype, axes, keepdims):
    x = random_array(rng, (3, 5, 7), dtype, low=-4, high=4)
    inputs = [x] if axes is None else [x, np.array(axes, dtype=np.int64)]
    (out,) = run_op(op, inputs, {"keepdims": keepdims})
    as_ints = np.array([int(v) for v in x.reshape(-1)], dtype=object).reshape(x.shape)
    expected = expected_reduction(INT_ROW[op], as_ints, axes, keepdims,
                                  lambda v: wrap(v, dtype))
    assert out.tolist() == expected.tolist()


def test_reduce_prod_wraps_like_c():
    x = np.full((40,), 3, dtype=np.int32)
    (out,) = run_op("ReduceProd", [x], {"keepdims": 0})
    assert int(out) == wrap(3**40, "int32")


def test_reduce_mean_of_ints_truncates_toward_zero():
    x = np.array([[-7, 2], [7, 2]], dtype=np.int32)
    (out,) = run_op("ReduceMean", [x, np.array([1], dtype=np.int64)], {"keepdims": 0})
    assert out.tolist() == [-2, 4]  # -5/2 -> -2 (not -3), 9/2 -> 4


@pytest.mark.parametrize("op,elementwise", [
    ("ReduceSum", lambda x: x), ("ReduceMean", lambda x: x), ("ReduceMax", lambda x: x),
    ("ReduceMin", lambda x: x), ("ReduceProd", lambda x: x), ("ReduceL1", np.abs),
    ("ReduceL2", np.abs), ("ReduceSumSquare", np.square), ("ReduceLogSumExp", lambda x: x),
])
@pytest.mark.parametrize("omit_axes", [True, False])
def test_noop_with_empty_axes_applies_only_the_elementwise_step(rng, op, elementwise, omit_axes):
    x = random_array(rng, (2, 3, 5), "float64")
    inputs = [x] if omit_axes else [x, np.zeros((0,), dtype=np.int64)]
    (out,) = run_op(op, inputs, {"noop_with_empty_axes": 1, "keepdims": 0})
    np.testing.assert_allclose(out, elementwise(x), rtol=1e-12)


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_empty_axes_without_noop_reduces_everything(rng, op):
    x = random_array(rng, (2, 3, 5), "float64")
    (every,) = run_op(op, [x, np.zeros((0,), dtype=np.int64)], {"keepdims": 0})
    (listed,) = run_op(op, [x, np.array([0, 1, 2], dtype=np.int64)], {"keepdims": 0})
    assert every.shape == ()
    np.testing.assert_allclose(every, listed, rtol=1e-12)


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_of_a_scalar(op):
    x = np.array(-2.5, dtype=np.float32)
    (out,) = run_op(op, [x], {"keepdims": 1})
    expected = {"ReduceL1": 2.5, "ReduceL2": 2.5, "ReduceSumSquare": 6.25}.get(op, -2.5)
    assert out.shape == () and out.dtype == np.float32
    assert math.isclose(float(out), expected, rel_tol=1e-6)


@pytest.mark.parametrize("op,float_value,int_value", [
    ("ReduceSum", 0.0, 0), ("ReduceProd", 1.0, 1), ("ReduceL1", 0.0, 0), ("ReduceL2", 0.0, 0),
    ("ReduceSumSquare", 0.0, 0), ("ReduceMax", -math.inf, np.iinfo(np.int32).min),
    ("ReduceMin", math.inf, np.iinfo(np.int32).max), ("ReduceLogSumExp", -math.inf, None),
    ("ReduceMean", math.nan, None),
])
def test_reduction_over_an_empty_set_gives_the_onnx_identity(op, float_value, int_value):
    axes = np.array([0], dtype=np.int64)
    (out,) = run_op(op, [np.zeros((0, 3), dtype=np.float32), axes], {"keepdims": 0})
    assert out.shape == (3,)
    np.testing.assert_array_equal(out, np.full(3, float_value, dtype=np.float32))
    if int_value is not None:
        (out,) = run_op(op, [np.zeros((0, 3), dtype=np.int32), axes], {"keepdims": 0})
        assert out.tolist() == [int_value] * 3


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean",
                                "ReduceLogSumExp", "ReduceL2", "ReduceProd"])
def test_nan_propagates(rng, op):
    x = random_array(rng, (3, 4), "float32")
    x[1, 2] = np.nan
    (out,) = run_op(op, [x, np.array([1], dtype=np.int64)], {"keepdims": 0})
    assert np.isnan(out[1]) and not np.isnan(out[0]) and not np.isnan(out[2])


def test_reduce_log_sum_exp_does_not_overflow():
    x = np.array([[1000.0, 1000.0], [-np.inf, -np.inf]], dtype=np.float32)
    (out,) = run_op("ReduceLogSumExp", [x, np.array([1], dtype=np.int64)], {"keepdims": 0})
    assert out[0] == pytest.approx(1000 + math.log(2))
    assert out[1] == -np.inf


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint8"])
def test_reduce_max_min_small_types(rng, dtype):
    x = random_array(rng, (4, 7), dtype, low=-9, high=9)
    axes = np.array([1], dtype=np.int64)
    (high,) = run_op("ReduceMax", [x, axes], {"keepdims": 0})
    (low,) = run_op("ReduceMin", [x, axes], {"keepdims": 0})
    assert high.tolist() == [max(r) for r in x.tolist()]
    assert low.tolist() == [min(r) for r in x.tolist()]


def test_reduce_infer_symbolic_shapes():
    n, m = Sym("N"), Sym("M")
    axes = np.array([1], dtype=np.int64)
    data = ("float32", (n, 3, m))
    assert infer("ReduceSum", [data, ("int64", (1,))], {}, [None, axes])[0].shape == (n, 1, m)
    assert infer("ReduceSum", [data, ("int64", (1,))], {"keepdims": 0},
                 [None, axes])[0].shape == (n, m)
    assert infer("ReduceMax", [data, ("int64", (2,))], {"keepdims": 0},
                 [None, np.array([-1, 0])])[0].shape == (3,)
    assert infer("ReduceMean", [data])[0].shape == (1, 1, 1)
    assert infer("ReduceMean", [data], {"keepdims": 0})[0].shape == ()
    assert infer("ReduceL2", [data], {"noop_with_empty_axes": 1})[0] == TensorType(*data)
    assert infer("ReduceL1", [("float32", None)], {"keepdims": 0})[0].shape == ()


def test_reduce_infer_with_axes_known_only_at_run_time():
    n = Sym("N")
    data = ("float16", (n, 1, 7))
    kept = infer("ReduceSum", [data, ("int64", (2,))])[0]
    assert kept.dtype == "float16" and kept.rank == 3
    assert kept.shape[1] == 1 and all(isinstance(d, Sym) for d in kept.shape[::2])
    dropped = infer("ReduceSum", [data, ("int64", (2,))], {"keepdims": 0})[0]
    assert dropped.rank == 1 and isinstance(dropped.shape[0], Sym)
    assert infer("ReduceSum", [data, ("int64", (Sym("A"),))], {"keepdims": 0})[0].shape is None
    # A statically empty axes input is known to be empty without its value.
    assert infer("ReduceSum", [data, ("int64", (0,))], {"keepdims": 0})[0].shape == ()
    assert infer("ReduceSum", [("float32", None), ("int64", (1,))])[0].shape is None
    # Fuzz finding: an axes input of unknown rank (no shape at all) raised a TypeError.
    assert infer("ReduceSum", [data, ("int64", None)], {"keepdims": 0})[0].shape is None
    assert infer("ReduceSum", [data, ("int64", None)])[0].rank == 3


@pytest.mark.parametrize("types,attrs,consts,match", [
    ([("bool", (3,))], {}, None, "input 'data' must have dtype"),
    ([("int8", (3,))], {}, None, "input 'data' must have dtype"),
    ([("float32", (3, 4)), ("int32", (1,))], {}, None, "input 'axes' must have dtype"),
    ([("float32", (3, 4)), ("int64", (1, 1))], {}, None, "input 'axes' must have rank 1"),
    ([("float32", (3, 4)), ("int64", (1,))], {}, [None, np.array([2])],
     "input 'axes' 2 is out of range for rank 2"),
    ([("float32", (3, 4)), ("int64", (2,))], {}, [None, np.array([1, -1])],
     r"input 'axes' \[1, -1\] repeats an axis"),
    ([("float32", (3, 4))], {"keepdims": 2}, None, "'keepdims' must be 0 or 1, got 2"),
    ([("float32", (3, 4))], {"noop_with_empty_axes": -1}, None, "'noop_with_empty_axes'"),
    ([("float32", (3, 4)), ("int64", (3,))], {"keepdims": 0}, None, "'axes' has 3 entries"),
    ([("float32", (3,))], {"axis": 0}, None, "unknown attribute 'axis'"),
])
def test_reduce_bad_input(types, attrs, consts, match):
    with pytest.raises(OpError, match=match):
        infer("ReduceSum", types, attrs, consts)


def test_reduce_reference_rejects_bad_axes():
    with pytest.raises(OpError, match="ReduceMin: input 'axes' value 3 is out of range"):
        get_schema("ReduceMin").run_reference([np.ones((2, 2)), np.array([3])], {})


# --- ArgMax, ArgMin -------------------------------------------------------------------


def expected_arg(x, axis, find_max, last):
    moved = np.moveaxis(x, axis, -1)
    result = []
    for row in moved.reshape(-1, x.shape[axis]).tolist():
        best = max(row) if find_max else min(row)
        hits = [i for i, v in enumerate(row) if v == best]
        result.append(hits[-1] if last else hits[0])
    return np.array(result, dtype=np.int64).reshape(moved.shape[:-1])


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int8",
                                   "uint8", "int32", "int64"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_matches_python(rng, op, dtype, axis, keepdims, last):
    # Few distinct values, so that ties (and select_last_index) matter.
    x = random_array(rng, (3, 5, 7), dtype, low=0, high=4)
    if np.dtype(dtype).kind != "u":
        x = np.round(x)
    attrs = {"axis": axis, "keepdims": keepdims, "select_last_index": last}
    (out,) = run_op(op, [x], attrs)
    expected = expected_arg(as_float64(x), axis % 3, op == "ArgMax", last)
    if keepdims:
        expected = np.expand_dims(expected, axis)
    np.testing.assert_array_equal(out, expected)


def test_arg_max_points_at_nan():
    x = np.array([[1.0, np.nan, 3.0], [2.0, 5.0, 1.0]], dtype=np.float32)
    (out,) = run_op("ArgMax", [x], {"axis": 1, "keepdims": 0})
    assert out.tolist() == [1, 1]


def test_arg_infer_symbolic():
    n = Sym("N")
    t = infer("ArgMin", [("float16", (n, 4, 5))], {"axis": -2})[0]
    assert t == TensorType("int64", (n, 1, 5))
    assert infer("ArgMax", [("int32", (n, 4))], {"axis": 0, "keepdims": 0})[0].shape == (4,)
    assert infer("ArgMax", [("int32", None)])[0] == TensorType("int64", None)


@pytest.mark.parametrize("types,attrs,match", [
    ([("bool", (3,))], {}, "input 'data' must have dtype"),
    ([("float32", (3, 4))], {"axis": 2}, "attribute 'axis' 2 is out of range for rank 2"),
    ([("float32", ())], {}, "out of range for rank 0"),
    ([("float32", (0, 4))], {}, "empty along axis 0"),
    ([("float32", (3, 4))], {"select_last_index": 3}, "'select_last_index' must be 0 or 1"),
])
def test_arg_bad_input(types, attrs, match):
    with pytest.raises(OpError, match=match):
        infer("ArgMax", types, attrs)


# --- CumSum ---------------------------------------------------------------------------


def expected_cumsum(x, axis, exclusive, reverse, cast):
    moved = np.moveaxis(x, axis, -1)
    result = []
    for row in moved.reshape(-1, x.shape[axis]).tolist():
        row = row[::-1] if reverse else row
        sums = [cast(s) for s in itertools.accumulate(row)]
        if exclusive:
            sums = [cast(0)] + sums[:-1]
        result.append(sums[::-1] if reverse else sums)
    return np.moveaxis(np.array(result, dtype=object).reshape(moved.shape), -1, axis)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("axis", [0, 2, -2])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_cumsum_float_matches_python(rng, dtype, axis, exclusive, reverse):
    x = random_array(rng, (3, 5, 7), dtype)
    (out,) = run_op("CumSum", [x, np.array(axis, dtype=np.int64)],
                    {"exclusive": exclusive, "reverse": reverse})
    expected = expected_cumsum(as_float64(x), axis, exclusive, reverse, float)
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(as_float64(out), expected.astype(np.float64), rtol=tol,
                               atol=tol * 4)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum_int_matches_python(rng, dtype, exclusive, reverse):
    x = random_array(rng, (4, 9), dtype, low=-50, high=50)
    (out,) = run_op("CumSum", [x, np.array([1], dtype=np.int32)],
                    {"exclusive": exclusive, "reverse": reverse})
    expected = expected_cumsum(x, 1, exclusive, reverse, lambda v: wrap(int(v), dtype))
    assert out.tolist() == expected.tolist()


def test_cumsum_onnx_example():
    x = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    axis = np.array(0, dtype=np.int32)
    results = {(e, r): run_op("CumSum", [x, axis], {"exclusive": e, "reverse": r})[0].tolist()
               for e in (0, 1) for r in (0, 1)}
    assert results == {(0, 0): [1, 3, 6], (1, 0): [0, 1, 3], (0, 1): [6, 5, 3], (1, 1): [5, 3, 0]}


def test_cumsum_exclusive_keeps_infinity():
    x = np.array([np.inf, 1.0, 2.0], dtype=np.float32)
    (out,) = run_op("CumSum", [x, np.array(0)], {"exclusive": 1})
    assert out.tolist() == [0.0, np.inf, np.inf]


def test_cumsum_infer_symbolic():
    n = Sym("N")
    assert infer("CumSum", [("float32", (n, 3)), ("int64", ())])[0] == TensorType("float32",
                                                                                   (n, 3))
    assert infer("CumSum", [("int32", None), ("int32", (1,))])[0].shape is None


@pytest.mark.parametrize("types,consts,attrs,match", [
    ([("bool", (3,)), ("int64", ())], None, {}, "input 'x' must have dtype"),
    ([("float32", (3,)), ("float32", ())], None, {}, "input 'axis' must have dtype"),
    ([("float32", (3,)), ("int64", (2,))], None, {}, "'axis' must be a scalar"),
    ([("float32", (3,)), ("int64", ())], [None, np.array(1)], {}, "'axis' 1 is out of range"),
    ([("float32", (3,)), ("int64", ())], None, {"reverse": 5}, "'reverse' must be 0 or 1"),
])
def test_cumsum_bad_input(types, consts, attrs, match):
    with pytest.raises(OpError, match=match):
        infer("CumSum", types, attrs, consts)


# --- TopK -----------------------------------------------------------------------------


def expected_topk(x, k, axis, largest):
    moved = np.moveaxis(x, axis, -1)
    values, indices = [], []
    for row in moved.reshape(-1, x.shape[axis]).tolist():
        sign = -1 if largest else 1
        order = sorted(range(len(row)), key=lambda i, row=row: (sign * row[i], i))[:k]
        indices.append(order)
        values.append([row[i] for i in order])
    shape = moved.shape[:-1] + (k,)
    return (np.moveaxis(np.array(values).reshape(shape), -1, axis),
            np.moveaxis(np.array(indices, dtype=np.int64).reshape(shape), -1, axis))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int8",
                                   "uint8", "int32", "int64"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("k", [1, 3])
def test_topk_matches_python(rng, dtype, axis, largest, k):
    x = random_array(rng, (3, 5, 7), dtype, low=0, high=5)
    if np.dtype(dtype).kind != "u":
        x = np.round(x)  # ties
    values, indices = run_op("TopK", [x, np.array([k], dtype=np.int64)],
                             {"axis": axis, "largest": largest})
    want_values, want_indices = expected_topk(as_float64(x), k, axis % 3, largest)
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_array_equal(as_float64(values), want_values)


def test_topk_ties_prefer_the_lower_index_and_nan_is_largest():
    x = np.array([2.0, np.nan, 5.0, 2.0, 5.0], dtype=np.float32)
    values, indices = run_op("TopK", [x, np.array([4])])
    assert indices.tolist() == [1, 2, 4, 0]
    values, indices = run_op("TopK", [x, np.array([3])], {"largest": 0})
    assert indices.tolist() == [0, 3, 2]
    assert values.tolist() == [2.0, 2.0, 5.0]


def test_topk_k_zero_and_whole_axis(rng):
    x = random_array(rng, (2, 5), "float32")
    values, indices = run_op("TopK", [x, np.array([0])])
    assert values.shape == (2, 0) and indices.shape == (2, 0)
    values, _ = run_op("TopK", [x, np.array([5])], {"largest": 0})
    np.testing.assert_array_equal(values, np.sort(x, axis=1))


def test_topk_infer_symbolic():
    n = Sym("N")
    values, indices = infer("TopK", [("float32", (n, 9)), ("int64", (1,))], {},
                            [None, np.array([4])])
    assert values == TensorType("float32", (n, 4)) and indices == TensorType("int64", (n, 4))
    values, indices = infer("TopK", [("float32", (n, 9)), ("int64", (1,))], {"axis": 0})
    assert values.shape[1] == 9 and isinstance(values.shape[0], Sym)
    assert indices.shape == values.shape
    assert infer("TopK", [("int8", None), ("int64", (1,))])[1] == TensorType("int64", None)


@pytest.mark.parametrize("types,consts,attrs,match", [
    ([("bool", (3,)), ("int64", (1,))], None, {}, "input 'X' must have dtype"),
    ([("float32", (3,)), ("int32", (1,))], None, {}, "input 'K' must have dtype"),
    ([("float32", (3,)), ("int64", (1, 1))], None, {}, "input 'K' must have rank 1"),
    ([("float32", (3,)), ("int64", (2,))], None, {}, "'K' must hold exactly one element"),
    ([("float32", (3,)), ("int64", (1,))], [None, np.array([4])], {}, r"'K' \(4\) is larger"),
    ([("float32", (3,)), ("int64", (1,))], [None, np.array([-1])], {}, "'K' must be >= 0"),
    ([("float32", (3,)), ("int64", (1,))], None, {"axis": 1}, "'axis' 1 is out of range"),
    ([("float32", (3,)), ("int64", (1,))], None, {"largest": 2}, "'largest' must be 0 or 1"),
])
def test_topk_bad_input(types, consts, attrs, match):
    with pytest.raises(OpError, match=match):
        infer("TopK", types, attrs, consts)


# --- Einsum ---------------------------------------------------------------------------


def brute_force_einsum(spec: str, *operands):
    """Loop over every assignment of the labels (letters only, explicit output)."""
    lhs, out = spec.replace(" ", "").split("->")
    terms = lhs.split(",")
    sizes: dict[str, int] = {}
    for term, x in zip(terms, operands):
        for label, size in zip(term, x.shape):
            sizes[label] = max(sizes.get(label, 1), size)
    labels = sorted(sizes)
    result = np.zeros([sizes[c] for c in out], dtype=object)
    for values in itertools.product(*(range(sizes[c]) for c in labels)):
        at = dict(zip(labels, values))
        term_product = 1
        for term, x in zip(terms, operands):
            # A size-1 dim broadcasts against the label's size.
            term_product *= x[tuple(at[c] if d > 1 else 0 for c, d in zip(term, x.shape))]
        result[tuple(at[c] for c in out)] += term_product
    return result


EINSUM_CASES = [
    ("ij,jk->ik", [(3, 5), (5, 4)]),
    ("ij,jk", [(3, 5), (5, 4)]),  # implicit: ik
    ("ba", [(3, 5)]),  # implicit: ab, a transpose
    ("ii", [(4, 4)]),  # implicit: trace
    ("ii->i", [(5, 5)]),
    ("i,j->ij", [(3,), (4,)]),
    ("bij,bjk->bik", [(2, 3, 5), (2, 5, 3)]),
    ("ij->", [(3, 7)]),
    (" ij , jk -> ki ", [(3, 5), (5, 2)]),
    ("Ab,bC", [(3, 5), (5, 2)]),  # implicit: AC (ASCII order)
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ij,jk->ik", [(3, 1), (5, 4)]),  # a size-1 label broadcasts
    ("bij,bj->bi", [(1, 3, 4), (2, 4)]),
]
IMPLICIT_OUTPUT = {"ij,jk": "ik", "ba": "ab", "ii": "", "Ab,bC": "AC"}


@pytest.mark.parametrize("equation,shapes", EINSUM_CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int32", "int8"])
def test_einsum_matches_brute_force(rng, equation, shapes, dtype):
    operands = [random_array(rng, s, dtype, low=-3, high=3) for s in shapes]
    (out,) = run_op("Einsum", operands, {"equation": equation})
    assert out.dtype == operands[0].dtype
    spec = equation if "->" in equation else f"{equation}->{IMPLICIT_OUTPUT[equation]}"
    if dtype in FLOAT_DTYPES:
        exact = [np.array(as_float64(x).tolist(), dtype=object) for x in operands]
        expected = brute_force_einsum(spec, *exact).astype(np.float64)
        np.testing.assert_allclose(as_float64(out), expected, rtol=TOLERANCE[dtype],
                                   atol=TOLERANCE[dtype] * 8)
    else:
        exact = [np.array(x.tolist(), dtype=object) for x in operands]
        expected = brute_force_einsum(spec, *exact)
        assert out.tolist() == np.vectorize(lambda v: wrap(v, dtype))(expected).tolist()


@pytest.mark.parametrize("a_shape,b_shape", [((2, 3, 4), (2, 4, 5)), ((1, 3, 4), (6, 4, 5)),
                                             ((6, 3, 4), (1, 4, 5)), ((3, 4), (4, 5))])
def test_einsum_ellipsis_broadcasts_like_matmul(rng, a_shape, b_shape):
    a = random_array(rng, a_shape, "float64")
    b = random_array(rng, b_shape, "float64")
    (out,) = run_op("Einsum", [a, b], {"equation": "...ij,...jk->...ik"})
    np.testing.assert_allclose(out, np.matmul(a, b), rtol=1e-12)
    (implicit,) = run_op("Einsum", [a, b], {"equation": "...ij,...jk"})  # ...ik
    np.testing.assert_allclose(implicit, np.matmul(a, b), rtol=1e-12)


def test_einsum_ellipsis_in_the_middle(rng):
    x = random_array(rng, (2, 3, 4, 5), "float32")
    (out,) = run_op("Einsum", [x], {"equation": "a...b->b...a"})
    np.testing.assert_array_equal(out, np.transpose(x, (3, 1, 2, 0)))


def test_einsum_infer_symbolic():
    n, m, k = Sym("N"), Sym("M"), Sym("K")
    (t,) = infer("Einsum", [("float32", (n, k)), ("float32", (k, m))], {"equation": "ij,jk->ik"})
    assert t == TensorType("float32", (n, m))
    (t,) = infer("Einsum", [("float32", (n, 3, 4)), ("float32", (1, 4, m))],
                 {"equation": "...ij,...jk->...ik"})
    assert t == TensorType("float32", (n, 3, m))
    # An operand of unknown rank still has its labels' count; sizes come from the others.
    (t,) = infer("Einsum", [("float32", None), ("float32", (5, 6))], {"equation": "ij,jk->ki"})
    assert t.shape[0] == 6 and isinstance(t.shape[1], Sym)
    (t,) = infer("Einsum", [("float32", None), ("float32", (5, 6))],
                 {"equation": "...j,jk->...k"})
    assert t.shape is None


@pytest.mark.parametrize("types,equation,match", [
    ([("float32", (3, 4))], "ijk->i", r"has rank 2, but its term 'ijk' has 3 labels"),
    ([("float32", (3, 4))], "ij,jk->ik", "has 2 input terms, but the node has 1 inputs"),
    ([("float32", (3, 4)), ("float32", (5, 6))], "ij,jk->ik", "label 'j' has incompatible"),
    ([("float32", (3, 4))], "ij->z", "output label 'z' is in no input"),
    ([("float32", (3, 4))], "ij->ii", "output label 'i' repeats"),
    ([("float32", (3, 4))], "i1->i", "has '1'; expected letters"),
    ([("float32", (3, 4))], "ij->i->j", "more than one '->'"),
    ([("float32", (3, 4))], "i.j->i", "expected letters and at most one '...'"),
    ([("float32", (3, 4))], "...i...->i", "more than one ellipsis"),
    ([("float32", (3, 4))], "ii->i", "label 'i' repeats with sizes 3 and 4"),
    ([("float32", (3, 4, 5)), ("float32", (4, 5))], "...ij,...jk->...ik", "same number of dims"),
    ([("float32", (3, 4, 5))], "...ij->ij", "the output has no '...'"),
    ([("float32", (3,))], "...ij->ij", r"needs at least 2"),
    ([("bool", (3,))], "i->i", "input 'Inputs' must have dtype"),
    ([("float32", (3,)), ("int32", (3,))], "i,i->", "must have the same dtype"),
])
def test_einsum_bad_input(types, equation, match):
    with pytest.raises(OpError, match=match):
        infer("Einsum", types, {"equation": equation})


def test_einsum_requires_an_equation():
    with pytest.raises(OpError, match="attribute 'equation' .* is required"):
        infer("Einsum", [("float32", (3,))])
    with pytest.raises(OpError, match="Einsum: attribute 'equation' 'ij->i' has 1 input terms"):
        get_schema("Einsum").run_reference([np.ones((2, 2)), np.ones((2, 2))],
                                           {"equation": "ij->i"})


def test_bfloat16_inputs_exist_for_reductions():
    # bfloat16 comes from ml_dtypes; make sure the float tests really ran it.
    x = np.ones((2, 3), dtype=ml_dtypes.bfloat16)
    (out,) = run_op("ReduceSum", [x], {"keepdims": 0})
    assert out.dtype == ml_dtypes.bfloat16 and float(out) == 6.0


# --- CumProd ----------------------------------------------------------------------------

N = Sym("N")


def py_values(x):
    """Nested Python numbers (floats as float64) of an array of any dtype."""
    if DType.from_numpy(x.dtype).is_float:
        return x.astype(np.float64).tolist()
    return x.tolist()


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
