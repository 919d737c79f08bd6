"""Tests of the indexing ops: Gather*, Scatter*, TensorScatter, Range, ConstantOfShape,
EyeLike, Trilu, OneHot, NonZero.

Each reference is checked against an independent computation: Python loops over
`np.ndindex` that follow the ONNX formulas element by element, or the worked examples
of the ONNX spec.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from conftest import random_array, run_op, tt

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import Sym, TensorType
from ge_hub.ops import get_schema

DATA_DTYPES = ["float32", "float16", "bfloat16", "float64", "int8", "uint8", "int32", "int64",
               "bool"]


def infer(op, types, attrs=None, consts=None):
    """Inferred output types for input types given as TensorType or (dtype, shape)."""
    types = [t if t is None or isinstance(t, TensorType) else TensorType(*t) for t in types]
    return get_schema(op).infer_types(types, attrs or {}, consts=consts)


def random_indices(rng, shape, size, dtype="int64"):
    """Indices in [-size, size - 1]: negative ones count from the end."""
    return rng.integers(-size, size, size=shape).astype(dtype)


# --- Gather ---------------------------------------------------------------------------


def expected_gather(data, indices, axis):
    out_shape = data.shape[:axis] + indices.shape + data.shape[axis + 1:]
    out = np.empty(out_shape, dtype=data.dtype)
    q = indices.ndim
    for at in np.ndindex(*out_shape):
        i = int(indices[at[axis:axis + q]])
        i = i + data.shape[axis] if i < 0 else i
        out[at] = data[at[:axis] + (i,) + at[axis + q:]]
    return out


@pytest.mark.parametrize("dtype", DATA_DTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("indices_shape", [(), (4,), (2, 3)])
def test_gather_matches_loop(rng, dtype, axis, indices_shape):
    data = random_array(rng, (3, 5, 7), dtype)
    indices = random_indices(rng, indices_shape, data.shape[axis], "int32")
    (out,) = run_op("Gather", [data, indices], {"axis": axis})
    np.testing.assert_array_equal(out, expected_gather(data, indices, axis % 3))


def test_gather_infer_symbolic():
    n, b = Sym("N"), Sym("B")
    (t,) = infer("Gather", [("float16", (n, 7, 3)), ("int64", (b, 2))], {"axis": 1})
    assert t == TensorType("float16", (n, b, 2, 3))
    (t,) = infer("Gather", [("bool", (n, 7)), ("int32", ())], {"axis": -1})
    assert t == TensorType("bool", (n,))
    assert infer("Gather", [("int8", (n, 7)), ("int64", None)])[0].shape is None


@pytest.mark.parametrize("types,attrs,consts,match", [
    ([("float32", (3,)), ("float32", (2,))], {}, None, "input 'indices' must have dtype"),
    ([("float32", ()), ("int64", (2,))], {}, None, "input 'data' must have rank >= 1"),
    ([("float32", (3, 4)), ("int64", (2,))], {"axis": 2}, None, "'axis' 2 is out of range"),
    ([("float32", (3, 4)), ("int64", (2,))], {"axis": 1}, [None, np.array([1, -5])],
     r"input 'indices' has value -5, out of range \[-4, 3\]"),
])
def test_gather_bad_input(types, attrs, consts, match):
    with pytest.raises(OpError, match=match):
        infer("Gather", types, attrs, consts)


def test_gather_reference_rejects_out_of_range_indices():
    with pytest.raises(OpError, match=r"Gather: input 'indices' has value 3, out of range"):
        get_schema("Gather").run_reference([np.ones((3, 2)), np.array([0, 3])], {})


# --- GatherElements -------------------------------------------------------------------


def expected_gather_elements(data, indices, axis):
    out = np.empty(indices.shape, dtype=data.dtype)
    for at in np.ndindex(*indices.shape):
        i = int(indices[at])
        i = i + data.shape[axis] if i < 0 else i
        out[at] = data[at[:axis] + (i,) + at[axis + 1:]]
    return out


@pytest.mark.parametrize("dtype", DATA_DTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements_matches_loop(rng, dtype, axis):
    data = random_array(rng, (3, 5, 7), dtype)
    # indices may be smaller than data away from the axis, and longer along it
    shape = [2, 4, 5]
    shape[axis] = 9
    indices = random_indices(rng, shape, data.shape[axis])
    (out,) = run_op("GatherElements", [data, indices], {"axis": axis})
    np.testing.assert_array_equal(out, expected_gather_elements(data, indices, axis % 3))


def test_gather_elements_onnx_examples():
    data = np.array([[1, 2], [3, 4]], dtype=np.float32)
    (out,) = run_op("GatherElements", [data, np.array([[0, 0], [1, 0]])], {"axis": 1})
    assert out.tolist() == [[1, 1], [4, 3]]
    data = np.arange(1, 10, dtype=np.int32).reshape(3, 3)
    (out,) = run_op("GatherElements", [data, np.array([[1, 2, 0], [2, 0, 0]], np.int32)])
    assert out.tolist() == [[4, 8, 3], [7, 2, 3]]
    (out,) = run_op("GatherElements", [data, np.array([[-1, -2, 0], [-3, 0, 0]])])
    assert out.tolist() == [[7, 5, 3], [1, 2, 3]]  # -1 is row 2, -2 row 1, -3 row 0


def test_gather_elements_infer_symbolic():
    n = Sym("N")
    (t,) = infer("GatherElements", [("float32", (n, 5)), ("int64", (n, 9))], {"axis": 1})
    assert t == TensorType("float32", (n, 9))


@pytest.mark.parametrize("types,attrs,match", [
    ([("float32", (3, 4)), ("int64", (3,))], {}, "must have the rank of 'data'"),
    ([("float32", (3, 4)), ("int64", (3, 5))], {}, "larger than 'data' .* along axis 1"),
    ([("float32", (3, 4)), ("int64", (3, 4))], {"axis": -3}, "'axis' -3 is out of range"),
    ([("float32", (3, 4)), ("uint8", (3, 4))], {}, "input 'indices' must have dtype"),
])
def test_gather_elements_bad_input(types, attrs, match):
    with pytest.raises(OpError, match=match):
        infer("GatherElements", types, attrs)


# --- GatherND -------------------------------------------------------------------------


@pytest.mark.parametrize("data,indices,batch_dims,expected", [
    ([[0, 1], [2, 3]], [[0, 0], [1, 1]], 0, [0, 3]),
    ([[0, 1], [2, 3]], [[1], [0]], 0, [[2, 3], [0, 1]]),
    ([[[0, 1], [2, 3]], [[4, 5], [6, 7]]], [[0, 1], [1, 0]], 0, [[2, 3], [4, 5]]),
    ([[[0, 1], [2, 3]], [[4, 5], [6, 7]]], [[[0, 1]], [[1, 0]]], 0, [[[2, 3]], [[4, 5]]]),
    ([[[0, 1], [2, 3]], [[4, 5], [6, 7]]], [[1], [0]], 1, [[2, 3], [4, 5]]),
    ([[0, 1], [2, 3]], [[-1, -2], [0, -1]], 0, [2, 1]),
])
def test_gather_nd_onnx_examples(data, indices, batch_dims, expected):
    (out,) = run_op("GatherND", [np.array(data, np.float32), np.array(indices, np.int64)],
                    {"batch_dims": batch_dims})
    assert out.tolist() == expected


def expected_gather_nd(data, indices, batch_dims):
    depth = indices.shape[-1]
    out = np.empty(indices.shape[:-1] + data.shape[batch_dims + depth:], dtype=data.dtype)
    for at in np.ndindex(*indices.shape[:-1]):
        batch = at[:batch_dims]
        index = tuple(int(i) + (data.shape[batch_dims + j] if i < 0 else 0)
                      for j, i in enumerate(indices[at]))
        out[at] = data[batch + index]
    return out


@pytest.mark.parametrize("dtype", DATA_DTYPES)
@pytest.mark.parametrize("batch_dims,depth", [(0, 1), (0, 3), (1, 1), (1, 2), (2, 1)])
def test_gather_nd_matches_loop(rng, dtype, batch_dims, depth):
    data = random_array(rng, (3, 5, 7), dtype)
    shape = data.shape[:batch_dims] + (2, 3, depth)
    indices = np.stack([random_indices(rng, shape[:-1], data.shape[batch_dims + j])
                        for j in range(depth)], axis=-1)
    (out,) = run_op("GatherND", [data, indices], {"batch_dims": batch_dims})
    np.testing.assert_array_equal(out, expected_gather_nd(data, indices, batch_dims))


def test_gather_nd_infer_symbolic():
    n, b = Sym("N"), Sym("B")
    (t,) = infer("GatherND", [("float32", (b, 5, 7)), ("int64", (b, n, 1))], {"batch_dims": 1})
    assert t == TensorType("float32", (b, n, 7))
    (t,) = infer("GatherND", [("float32", (b, 5, 7)), ("int64", (3, n, 2))], {"batch_dims": 1})
    assert t == TensorType("float32", (3, n))  # the concrete batch dim wins over the symbol
    assert infer("GatherND", [("float32", (5, 7)), ("int64", (3, n))])[0].shape is None


@pytest.mark.parametrize("types,attrs,match", [
    ([("float32", (3, 4)), ("int64", (2, 3))], {}, r"must be in \[1, 2\] .* got 3"),
    ([("float32", (3, 4)), ("int64", (2, 1))], {"batch_dims": 2}, "'batch_dims' \\(2\\) must"),
    ([("float32", (3, 4)), ("int64", (2, 1))], {"batch_dims": 1}, "differ in batch dim 0"),
    ([("float32", (3, 4)), ("int64", (2, 1))], {"batch_dims": -1}, "'batch_dims' must be >= 0"),
    ([("float32", (3, 4)), ("int32", (2, 1))], {}, "input 'indices' must have dtype"),
    ([("float32", (3, 4)), ("int64", ())], {}, "input 'indices' must have rank >= 1"),
])
def test_gather_nd_bad_input(types, attrs, match):
    with pytest.raises(OpError, match=match):
        infer("GatherND", types, attrs)


def test_gather_nd_reference_rejects_out_of_range_indices():
    with pytest.raises(OpError, match=r"GatherND: input 'indices' has value 2, out of range"):
        get_schema("GatherND").run_reference([np.ones((3, 2)), np.array([[0, 2]])], {})


# --- ScatterElements ------------------------------------------------------------------

COMBINE = {"none": lambda old, new: new, "add": lambda old, new: old + new,
           "mul": lambda old, new: old * new, "max": max, "min": min}


def expected_scatter_elements(data, indices, updates, axis, reduction):
    out = data.astype(object) if data.dtype != np.bool_ else data.copy().astype(object)
    for at in np.ndindex(*indices.shape):
        i = int(indices[at])
        i = i + data.shape[axis] if i < 0 else i
        target = at[:axis] + (i,) + at[axis + 1:]
        out[target] = COMBINE[reduction](out[target], updates[at])
    return out


def to_python(x):
    """Exact Python values (float or int) of an array, as an object array."""
    values = x.astype(np.float64) if x.dtype.kind in "fV" else x
    return np.array(values.tolist(), dtype=object).reshape(x.shape)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32", "int8"])
@pytest.mark.parametrize("axis", [0, 2, -2])
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements_matches_loop(rng, dtype, axis, reduction):
    data = random_array(rng, (3, 5, 7), dtype)
    shape = [2, 4, 5]
    shape[axis] = 6  # longer than a few axes: duplicate targets
    indices = random_indices(rng, shape, data.shape[axis], "int32")
    updates = random_array(rng, shape, dtype)
    (out,) = run_op("ScatterElements", [data, indices, updates],
                    {"axis": axis, "reduction": reduction})
    expected = expected_scatter_elements(to_python(data), indices, to_python(updates),
                                         axis % 3, reduction)
    with np.errstate(over="ignore"):
        rounded = np.array(expected.tolist(), dtype=np.float64 if dtype[0] in "fb" else object)
    if dtype.startswith("int"):
        rounded = np.array([wrap_int(v, dtype) for v in rounded.reshape(-1)]).reshape(out.shape)
    np.testing.assert_array_equal(out, rounded.astype(dtype))


def wrap_int(value: int, dtype) -> int:
    bits = np.dtype(dtype).itemsize * 8
    value %= 1 << bits
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def test_scatter_elements_bool_data(rng):
    data = random_array(rng, (4, 5), "bool")
    indices = random_indices(rng, (3, 5), 4)
    updates = random_array(rng, (3, 5), "bool")
    (out,) = run_op("ScatterElements", [data, indices, updates], {"reduction": "max"})
    expected = expected_scatter_elements(data, indices, updates, 0, "max")
    assert out.tolist() == expected.tolist()


def test_scatter_elements_onnx_examples():
    data = np.zeros((3, 3), dtype=np.float32)
    indices = np.array([[1, 0, 2], [0, 2, 1]])
    updates = np.array([[1.0, 1.1, 1.2], [2.0, 2.1, 2.2]], dtype=np.float32)
    (out,) = run_op("ScatterElements", [data, indices, updates])
    np.testing.assert_array_equal(out, np.array([[2.0, 1.1, 0.0], [1.0, 0.0, 2.2],
                                                 [0.0, 2.1, 1.2]], dtype=np.float32))
    data = np.array([[1.0, 2.0, 3.0, 4.0, 5.0]], dtype=np.float32)
    (out,) = run_op("ScatterElements", [data, np.array([[1, -2]]),
                                        np.array([[1.1, 2.1]], dtype=np.float32)], {"axis": 1})
    np.testing.assert_array_equal(out, np.array([[1.0, 1.1, 3.0, 2.1, 5.0]], dtype=np.float32))


def test_scatter_elements_last_duplicate_wins():
    data = np.zeros(3, dtype=np.int64)
    (out,) = run_op("ScatterElements", [data, np.array([1, 1, 1]), np.array([5, 6, 7])])
    assert out.tolist() == [0, 7, 0]
    (out,) = run_op("ScatterElements", [data, np.array([1, 1, 1]), np.array([5, 6, 7])],
                    {"reduction": "add"})
    assert out.tolist() == [0, 18, 0]


def test_scatter_elements_infer_symbolic():
    n = Sym("N")
    (t,) = infer("ScatterElements", [("float32", (n, 5)), ("int64", (n, 2)),
                                     ("float32", (n, 2))], {"axis": 1})
    assert t == TensorType("float32", (n, 5))


@pytest.mark.parametrize("types,attrs,match", [
    ([("float32", (3, 4)), ("int64", (2, 4)), ("float32", (2, 3))], {},
     "'updates' .* must have the shape of 'indices'"),
    ([("float32", (3, 4)), ("int64", (2, 4)), ("float16", (2, 4))], {},
     "'updates' must have the same dtype as 'data'"),
    ([("float32", (3, 4)), ("int64", (2, 4)), ("float32", (2, 4))], {"reduction": "sum"},
     "'reduction' must be one of none, add, mul, max, min, got 'sum'"),
    ([("float32", (3, 4)), ("int64", (2,)), ("float32", (2,))], {}, "rank of 'data'"),
])
def test_scatter_elements_bad_input(types, attrs, match):
    with pytest.raises(OpError, match=match):
        infer("ScatterElements", types, attrs)


# --- ScatterND ------------------------------------------------------------------------


def test_scatter_nd_onnx_examples():
    data = np.arange(1, 9, dtype=np.float32)
    (out,) = run_op("ScatterND", [data, np.array([[4], [3], [1], [7]]),
                                  np.array([9, 10, 11, 12], dtype=np.float32)])
    assert out.tolist() == [1, 11, 3, 10, 9, 6, 7, 12]
    block = [[1, 2, 3, 4], [5, 6, 7, 8], [8, 7, 6, 5], [4, 3, 2, 1]]
    flipped = [[8, 7, 6, 5], [4, 3, 2, 1], [1, 2, 3, 4], [5, 6, 7, 8]]
    data = np.array([block, block, flipped, flipped], dtype=np.int32)
    updates = np.array([[[v] * 4 for v in (5, 6, 7, 8)], [[v] * 4 for v in (1, 2, 3, 4)]],
                       dtype=np.int32)
    (out,) = run_op("ScatterND", [data, np.array([[0], [2]]), updates])
    assert out.tolist() == [updates[0].tolist(), block, updates[1].tolist(), flipped]


def expected_scatter_nd(data, indices, updates, reduction):
    out = data.copy()
    for at in np.ndindex(*indices.shape[:-1]):
        target = tuple(int(i) + (data.shape[j] if i < 0 else 0)
                       for j, i in enumerate(indices[at]))
        if data.ndim == indices.shape[-1]:
            out[target] = COMBINE[reduction](out[target], updates[at])
        else:
            out[target] = np.vectorize(COMBINE[reduction], otypes=[object])(out[target],
                                                                            updates[at])
    return out


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int64"])
@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_matches_loop(rng, dtype, depth, reduction):
    data = random_array(rng, (3, 5, 7), dtype)
    index_shape = (2, 3)
    indices = np.stack([random_indices(rng, index_shape, data.shape[j]) for j in range(depth)],
                       axis=-1)
    if reduction == "none":  # ONNX leaves duplicates with 'none' undefined
        flat = np.ravel_multi_index(tuple(np.moveaxis(indices % data.shape[:depth], -1, 0)),
                                    data.shape[:depth])
        if len(set(flat.reshape(-1).tolist())) != flat.size:
            indices = indices[:1, :1]
    updates = random_array(rng, indices.shape[:-1] + data.shape[depth:], dtype)
    (out,) = run_op("ScatterND", [data, indices, updates], {"reduction": reduction})
    expected = expected_scatter_nd(to_python(data), indices, to_python(updates), reduction)
    if dtype.startswith("int"):
        expected = np.array([wrap_int(v, dtype) for v in expected.reshape(-1)]).reshape(out.shape)
        assert out.tolist() == expected.tolist()
    else:
        rounded = np.array(expected.tolist(), dtype=np.float64).astype(dtype)
        np.testing.assert_array_equal(out, rounded)


def test_scatter_nd_infer_symbolic():
    n, m = Sym("N"), Sym("M")
    types = [("float32", (n, 5, 7)), ("int64", (m, 2)), ("float32", (m, 7))]
    assert infer("ScatterND", types)[0] == TensorType("float32", (n, 5, 7))
    assert infer("ScatterND", [("bool", None), ("int64", (m, 2)), ("bool", (m,))])[0].shape \
        is None


@pytest.mark.parametrize("types,attrs,match", [
    ([("float32", (3, 4)), ("int64", (2, 3)), ("float32", (2,))], {}, r"must be in \[1, 2\]"),
    ([("float32", (3, 4)), ("int64", (2, 1)), ("float32", (2, 5))], {},
     r"must have shape indices.shape\[:-1\] \+ data.shape\[1:\] = \[2, 4\]"),
    ([("float32", (3, 4)), ("int64", (2, 1)), ("float32", (2,))], {}, r"= \[2, 4\]"),
    ([("float32", (3, 4)), ("int32", (2, 1)), ("float32", (2, 4))], {}, "'indices' must have"),
    ([("float32", (3, 4)), ("int64", (2, 1)), ("float32", (2, 4))], {"reduction": "avg"},
     "'reduction' must be one of"),
])
def test_scatter_nd_bad_input(types, attrs, match):
    with pytest.raises(OpError, match=match):
        infer("ScatterND", types, attrs)


# --- Range ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["int16", "int32", "int64", "float32", "float64"])
@pytest.mark.parametrize("start,limit,delta", [(3, 9, 3), (10, 4, -2), (-5, 7, 4), (2, 2, 1),
                                               (5, 1, 1), (0, 17, 5)])
def test_range_matches_formula(dtype, start, limit, delta):
    scalars = [np.array(v, dtype=dtype) for v in (start, limit, delta)]
    (out,) = run_op("Range", scalars)
    count = max(math.ceil((limit - start) / delta), 0)
    assert out.tolist() == [start + i * delta for i in range(count)]


def test_range_onnx_examples():
    assert run_op("Range", [np.array(3), np.array(9), np.array(3)])[0].tolist() == [3, 6]
    assert run_op("Range", [np.array(10), np.array(4), np.array(-2)])[0].tolist() == [10, 8, 6]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_range_fractional_steps(rng, dtype):
    start, limit, delta = (np.array(v, dtype=dtype) for v in (0.25, 3.1, 0.375))
    (out,) = run_op("Range", [start, limit, delta])
    first, last, step = (float(v) for v in (start, limit, delta))
    count = math.ceil((last - first) / step)
    expected = np.array([first + i * step for i in range(count)]).astype(dtype)
    np.testing.assert_array_equal(out, expected)


def test_range_stash_type_keeps_half_precision_steps_exact():
    start, limit, delta = (np.array(v, dtype=np.float16) for v in (2048, 2060, 1))
    # Counting in float16 would stick at 2048 (2048 + 1 rounds back to 2048); with a float32
    # (or float64) stash each value is exact and rounded once, to even.
    expected = np.arange(2048, 2060, dtype=np.float64).astype(np.float16)
    assert len(set(expected.tolist())) == 7
    for stash_type in (1, 11):
        (out,) = run_op("Range", [start, limit, delta], {"stash_type": stash_type})
        np.testing.assert_array_equal(out, expected)


def test_range_infer_symbolic():
    (t,) = infer("Range", [("int64", ()), ("int64", ()), ("int64", ())])
    assert t.dtype == "int64" and t.rank == 1 and isinstance(t.shape[0], Sym)
    (t,) = infer("Range", [("float32", ()), ("float32", ()), ("float32", ())], {},
                 [np.array(1.0, np.float32), np.array(2.0, np.float32),
                  np.array(0.25, np.float32)])
    assert t == TensorType("float32", (4,))


@pytest.mark.parametrize("types,consts,attrs,match", [
    ([("int64", ()), ("int32", ()), ("int64", ())], None, {}, "same dtype as 'start'"),
    ([("int8", ()), ("int8", ()), ("int8", ())], None, {}, "input 'start' must have dtype"),
    ([("int64", (2,)), ("int64", ()), ("int64", ())], None, {}, "'start' must be a scalar"),
    ([("int64", ()), ("int64", ()), ("int64", ())], [None, None, np.array(0)], {},
     "input 'delta' must not be zero"),
    ([("int64", ()), ("int64", ()), ("int64", ())], None, {"stash_type": 10},
     "'stash_type' must be 1 .* or 11"),
    ([("float32", ()), ("float32", ()), ("float32", ())],
     [np.array(0.0, np.float32), np.array(np.inf, np.float32), np.array(1.0, np.float32)], {},
     "must be finite"),
])
def test_range_bad_input(types, consts, attrs, match):
    with pytest.raises(OpError, match=match):
        infer("Range", types, attrs, consts)


# --- ConstantOfShape ------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(2, 3), (5,), (), (1, 0, 3)])
def test_constant_of_shape_default_is_float32_zero(shape):
    (out,) = run_op("ConstantOfShape", [np.array(shape, dtype=np.int64)])
    assert out.dtype == np.float32 and out.shape == shape
    assert all(v == 0 for v in out.reshape(-1).tolist())


@pytest.mark.parametrize("value", [np.array([7], np.int8), np.array([True]),
                                   np.array([-1.5], ml_dtypes.bfloat16),
                                   np.array(2.5, np.float64), np.array([9], np.int64)])
def test_constant_of_shape_value(value):
    (out,) = run_op("ConstantOfShape", [np.array([3, 1, 5], dtype=np.int64)], {"value": value})
    assert out.dtype == value.dtype and out.shape == (3, 1, 5)
    assert {v for v in out.reshape(-1).tolist()} == {value.reshape(-1)[0].item()}


def test_constant_of_shape_infer_symbolic():
    (t,) = infer("ConstantOfShape", [("int64", (3,))], {"value": np.array([1], np.int32)})
    assert t.dtype == "int32" and t.rank == 3 and all(isinstance(d, Sym) for d in t.shape)
    assert infer("ConstantOfShape", [("int64", (Sym("R"),))])[0] == TensorType("float32", None)


@pytest.mark.parametrize("types,attrs,consts,match", [
    ([("int32", (2,))], {}, None, "input 'input' must have dtype"),
    ([("int64", (2, 1))], {}, None, "input 'input' must have rank 1"),
    ([("int64", (2,))], {}, [np.array([2, -1])], r"dims >= 0, got \[2, -1\]"),
    ([("int64", (2,))], {"value": np.array([1.0, 2.0])}, None, "exactly one element"),
])
def test_constant_of_shape_bad_input(types, attrs, consts, match):
    with pytest.raises(OpError, match=match):
        infer("ConstantOfShape", types, attrs, consts)


# --- Trilu ----------------------------------------------------------------------------


def expected_trilu(x, k, upper):
    out = np.zeros_like(x)
    for at in np.ndindex(*x.shape):
        row, col = at[-2:]
        if (col - row >= k) if upper else (col - row <= k):
            out[at] = x[at]
    return out


@pytest.mark.parametrize("dtype", DATA_DTYPES)
@pytest.mark.parametrize("shape", [(4, 4), (3, 7), (2, 5, 3)])
@pytest.mark.parametrize("k", [None, 0, 2, -1, 9, -9])
@pytest.mark.parametrize("upper", [0, 1])
def test_trilu_matches_loop(rng, dtype, shape, k, upper):
    x = random_array(rng, shape, dtype)
    inputs = [x] if k is None else [x, np.array(k, dtype=np.int64)]
    (out,) = run_op("Trilu", inputs, {"upper": upper})
    np.testing.assert_array_equal(out, expected_trilu(x, k or 0, upper))
    if dtype == "float64":  # and against NumPy's own formulation
        reference = np.triu(x, k or 0) if upper else np.tril(x, k or 0)
        np.testing.assert_array_equal(out, reference)


def test_trilu_infer_symbolic():
    n, m = Sym("N"), Sym("M")
    assert infer("Trilu", [("float16", (n, m))])[0] == TensorType("float16", (n, m))
    assert infer("Trilu", [("bool", None), ("int64", ())], {"upper": 0})[0].shape is None


@pytest.mark.parametrize("types,attrs,match", [
    ([("float32", (4,))], {}, "input 'input' must have rank >= 2"),
    ([("float32", (4, 4)), ("int64", (1,))], {}, "input 'k' must have rank 0"),
    ([("float32", (4, 4)), ("int32", ())], {}, "input 'k' must have dtype"),
    ([("float32", (4, 4))], {"upper": 2}, "'upper' must be 0 or 1"),
])
def test_trilu_bad_input(types, attrs, match):
    with pytest.raises(OpError, match=match):
        infer("Trilu", types, attrs)


# --- OneHot ---------------------------------------------------------------------------


def expected_one_hot(indices, depth, values, axis):
    axis %= indices.ndim + 1
    out_shape = indices.shape[:axis] + (depth,) + indices.shape[axis:]
    out = np.full(out_shape, values[0], dtype=values.dtype)
    for at in np.ndindex(*indices.shape):
        i = int(indices[at])
        if -depth <= i < depth:
            out[at[:axis] + (i % depth,) + at[axis:]] = values[1]
    return out


@pytest.mark.parametrize("index_dtype", ["int64", "int32", "int8", "float32"])
@pytest.mark.parametrize("value_dtype", ["float32", "int64", "bool", "float16", "bfloat16"])
@pytest.mark.parametrize("axis", [-1, 0, 1, -2])
def test_one_hot_matches_loop(rng, index_dtype, value_dtype, axis):
    depth = 5
    indices = rng.integers(-7, 8, size=(3, 4)).astype(index_dtype)  # some out of range
    values = random_array(rng, (2,), value_dtype)
    if value_dtype == "bool":
        values = np.array([False, True])
    (out,) = run_op("OneHot", [indices, np.array(depth, np.int64), values], {"axis": axis})
    assert out.dtype == values.dtype
    np.testing.assert_array_equal(out, expected_one_hot(indices, depth, values, axis))


def test_one_hot_float_depth_and_indices_truncate():
    indices = np.array([1.7, -0.5, 2.2], dtype=np.float32)  # -> 1, 0, 2
    (out,) = run_op("OneHot", [indices, np.array([3.9], np.float32), np.array([0, 1])])
    assert out.tolist() == [[0, 1, 0], [1, 0, 0], [0, 0, 1]]


def test_one_hot_infer_symbolic():
    n = Sym("N")
    (t,) = infer("OneHot", [("int64", (n, 4)), ("int64", ()), ("float32", (2,))], {"axis": 1})
    assert t.dtype == "float32" and t.shape[0] == n and t.shape[2] == 4
    assert isinstance(t.shape[1], Sym)
    (t,) = infer("OneHot", [("int64", (n,)), ("int32", (1,)), ("bool", (2,))], {},
                 [None, np.array([6], np.int32), None])
    assert t == TensorType("bool", (n, 6))


@pytest.mark.parametrize("types,attrs,consts,match", [
    ([("int64", (3,)), ("int64", ()), ("float32", (3,))], {}, None, "two elements"),
    ([("int64", (3,)), ("int64", (2,)), ("float32", (2,))], {}, None, "'depth' must be a scalar"),
    ([("int64", (3,)), ("int64", ()), ("float32", (2,))], {"axis": 2}, None,
     "'axis' 2 is out of range for rank 2"),
    ([("int64", (3,)), ("int64", ()), ("float32", (2,))], {}, [None, np.array(0), None],
     "'depth' must be >= 1"),
    ([("bool", (3,)), ("int64", ()), ("float32", (2,))], {}, None, "'indices' must have dtype"),
    ([("bfloat16", (3,)), ("int64", ()), ("bfloat16", (2,))], {}, None,
     "'indices' must have dtype .*, got bfloat16"),
])
def test_one_hot_bad_input(types, attrs, consts, match):
    with pytest.raises(OpError, match=match):
        infer("OneHot", types, attrs, consts)


# --- NonZero --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DATA_DTYPES)
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 5), (0, 3)])
def test_non_zero_matches_loop(rng, dtype, shape):
    x = random_array(rng, shape, dtype)
    x[rng.random(shape) < 0.4] = 0
    (out,) = run_op("NonZero", [x])
    coordinates = [at for at in np.ndindex(*shape) if x[at] != 0]
    assert out.shape == (len(shape), len(coordinates))
    assert [tuple(c) for c in out.T.tolist()] == coordinates


def test_non_zero_scalar_and_nan():
    assert run_op("NonZero", [np.array(3.0)])[0].shape == (0, 1)
    assert run_op("NonZero", [np.array(0)])[0].shape == (0, 0)
    (out,) = run_op("NonZero", [np.array([0.0, np.nan, -0.0])])
    assert out.tolist() == [[1]]


def test_non_zero_infer_symbolic():
    (t,) = infer("NonZero", [("float32", (Sym("N"), 4))])
    assert t.dtype == "int64" and t.shape[0] == 2 and isinstance(t.shape[1], Sym)
    (t,) = infer("NonZero", [("bool", None)])
    assert t.rank == 2 and all(isinstance(d, Sym) for d in t.shape)


def test_range_accepts_one_element_tensors():
    one = [np.array([2], np.int64), np.array([11], np.int64), np.array([3], np.int64)]
    (out,) = run_op("Range", one)
    np.testing.assert_array_equal(out, [2, 5, 8])


# --- EyeLike ----------------------------------------------------------------------------

M = Sym("M")
N = Sym("N")


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


# --- TensorScatter ------------------------------------------------------------------------

F32 = DType.FLOAT32


def tensor_scatter_by_loops(past, update, write_indices, axis, mode):
    """The pseudocode of the ONNX spec."""
    present = past.copy()
    capacity, length = past.shape[axis], update.shape[axis]
    for prefix in np.ndindex(*past.shape[:axis]):
        for s in range(length):
            position = write_indices[prefix[0]] + s
            if mode == "circular":
                position %= capacity
            present[(*prefix, position)] = update[(*prefix, s)]
    return present


@pytest.mark.parametrize("axis,mode", [(-2, "linear"), (1, "linear"), (2, "circular"),
                                       (-1, "circular")])
def test_tensor_scatter_matches_spec_loops(rng, axis, mode):
    past = random_array(rng, (3, 4, 6, 5))
    shape = list(past.shape)
    shape[axis] = 3
    update = random_array(rng, shape)
    capacity = past.shape[axis]
    starts = np.array([0, capacity - 3, 1] if mode == "linear" else [2, capacity - 1, 5],
                      np.int64)
    (y,) = run_op("TensorScatter", [past, update, starts], {"axis": axis, "mode": mode})
    np.testing.assert_array_equal(y, tensor_scatter_by_loops(past, update, starts,
                                                             axis % 4, mode))


def test_tensor_scatter_without_indices_writes_at_zero(rng):
    past = random_array(rng, (2, 7, 3), "int64")
    update = random_array(rng, (2, 2, 3), "int64")
    (y,) = run_op("TensorScatter", [past, update], {"axis": 1})
    np.testing.assert_array_equal(y, tensor_scatter_by_loops(past, update, [0, 0], 1,
                                                             "linear"))


def test_tensor_scatter_inference_and_bad_inputs(rng):
    b, s = Sym("b"), Sym("s")
    past = tt(F32, (b, 4, 16, 8))
    assert infer("TensorScatter", [past, tt(F32, (b, 4, s, 8))]) == [past]
    with pytest.raises(OpError, match="TensorScatter.*'update'.*dim 3: 9 vs 8"):
        infer("TensorScatter", [past, tt(F32, (b, 4, 2, 9))])
    with pytest.raises(OpError, match="TensorScatter.*'update'.*dim 2: 17 vs 16"):
        infer("TensorScatter", [past, tt(F32, (b, 4, 17, 8))])
    with pytest.raises(OpError, match="TensorScatter.*'axis' must not be the batch axis"):
        infer("TensorScatter", [past, past], {"axis": 0})
    with pytest.raises(OpError, match="TensorScatter.*'write_indices'.*one index per batch"):
        infer("TensorScatter", [tt(F32, (2, 5, 3)), tt(F32, (2, 1, 3)),
                                tt(DType.INT64, (3,))])
    with pytest.raises(OpError, match="TensorScatter.*'mode' must be one of"):
        infer("TensorScatter", [past, past], {"mode": "ring"})
    with pytest.raises(OpError, match="TensorScatter: batch entry 1 writes positions 4..5 "
                                      "beyond the cache length 5"):
        get_schema("TensorScatter").run_reference(
            [random_array(rng, (2, 5, 3)), random_array(rng, (2, 2, 3)),
             np.array([0, 4], np.int64)], {"axis": 1})
