"""Shape ops: inference (concrete, symbolic, unknown rank, non-constant shape inputs),
references checked against element-by-element index arithmetic in Python, every dtype
family, and bad input (ReverseSequence: against a per-batch Python loop).

The oracles never call the NumPy function the reference uses: they build each output
element from the input element the ONNX spec says it comes from (`gather`), or use
Python's own list slicing, whose clamping rules are the ones ONNX Slice and Shape adopt.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from conftest import random_array, run_op, tt

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import Sym, TensorType
from ge_hub.ops import get_schema

# One float of each width class, an int, a narrow unsigned int and bool: every op here
# claims every dtype, and data movement must keep each one bit for bit.
DTYPES = ["float32", "float16", "bfloat16", "float64", "int64", "int8", "uint8", "bool"]
INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min
INT32_MAX = np.iinfo(np.int32).max


def rand(rng, shape, dtype="float32"):
    return random_array(rng, shape, DType(dtype).numpy)


def ints(*values, dtype=np.int64):
    return np.array(values, dtype=dtype)


def gather(x: np.ndarray, out_shape, source) -> np.ndarray:
    """An array of out_shape whose element at index i is x[source(i)], or source(i) itself
    when that is not a tuple (a fill value)."""
    out = np.empty(out_shape, dtype=x.dtype)
    for index in itertools.product(*(range(d) for d in out_shape)):
        src = source(index)
        out[index] = x[src] if isinstance(src, tuple) else src
    return out


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape,
                                                                 want.dtype, want.shape)
    np.testing.assert_array_equal(got.astype(np.float64) if got.dtype.kind == "V" else got,
                                  want.astype(np.float64) if want.dtype.kind == "V" else want)


def infer(op, types, attrs=None, consts=None, num_outputs=None):
    """Inference only: for inputs whose data is not known (symbolic or non-constant)."""
    types = [None if t is None else t if isinstance(t, TensorType) else TensorType(*t)
             for t in types]
    return get_schema(op).infer_types(types, attrs or {}, consts=consts,
                                      num_outputs=num_outputs)


def shape_of(types):
    return [t.shape for t in types]


N, C, H, W = Sym("N"), Sym("C"), Sym("H"), Sym("W")


def fresh(dim) -> bool:
    """A symbol made by inference for a dim it cannot know."""
    return isinstance(dim, Sym) and "." in dim.name


# --- Reshape ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("in_shape, target, want", [
    ((2, 3, 4), (4, 6), (4, 6)),
    ((2, 3, 4), (0, -1), (2, 12)),
    ((2, 3, 4), (-1,), (24,)),
    ((2, 3, 4), (4, 0, 2), (4, 3, 2)),
    ((5, 7), (7, 1, 5), (7, 1, 5)),
    ((3, 1, 5), (-1, 3), (5, 3)),
    ((), (1, 1), (1, 1)),
    ((1, 1), (), ()),
])
def test_reshape_keeps_row_major_order(rng, dtype, in_shape, target, want):
    x = rand(rng, in_shape, dtype)
    (out,) = run_op("Reshape", [x, ints(*target)])
    assert out.shape == want
    assert_same(out.reshape(-1), x.reshape(-1))


def test_reshape_allowzero_makes_zero_dims(rng):
    x = rand(rng, (0, 3))
    (out,) = run_op("Reshape", [x, ints(3, 0)], {"allowzero": 1})
    assert out.shape == (3, 0)
    (out,) = run_op("Reshape", [rand(rng, (2, 3)), ints(0, 3)], {"allowzero": 0})
    assert out.shape == (2, 3)


def test_reshape_symbolic():
    assert shape_of(infer("Reshape", [("float32", (N, 3, 4)), ("int64", (2,))],
                          consts=[None, ints(0, -1)])) == [(N, 12)]
    assert shape_of(infer("Reshape", [("float32", (N, C, H, W)), ("int64", (3,))],
                          consts=[None, ints(0, 0, -1)])) == [(N, C, Sym("H*W"))]
    assert shape_of(infer("Reshape", [("float32", (N, 3, 4)), ("int64", (2,))],
                          consts=[None, ints(-1, 4)])) == [(Sym("3*N"), 4)]
    # Reshape to [0, -1] builds the same product as Flatten, so the two compare equal.
    (flat,) = infer("Flatten", [("float32", (N, C, H, W))], {"axis": 1})
    assert infer("Reshape", [("float32", (N, C, H, W)), ("int64", (2,))],
                 consts=[None, ints(0, -1)]) == [flat]


def test_reshape_minus_one_cancels_symbols():
    # N*((C*H)*W) / N: the nested product is taken apart and N cancelled.
    (t,) = infer("Reshape", [("float32", (N, Sym("C*H*W"))), ("int64", (2,))],
                 consts=[None, ints(0, -1)])
    assert t.shape == (N, Sym("C*H*W"))
    # A repeated symbol cancels once: (N*(C*H)*C) / (N*C) = H*C.
    (t,) = infer("Reshape", [("float32", (N, Sym("C*H"), C)), ("int64", (3,))],
                 consts=[None, ints(0, -1, 0)])
    assert t.shape == (N, Sym("C*H"), C)
    # An int factor equal to the known part cancels where it stands: (2*N*5) / 5 = 2*N.
    (t,) = infer("Reshape", [("float32", (2, N, 5)), ("int64", (2,))],
                 consts=[None, ints(-1, 5)])
    assert t.shape == (Sym("2*N"), 5)
    # What cannot be cancelled is divided symbolically.
    (t,) = infer("Reshape", [("float32", (N, C, 3)), ("int64", (2,))],
                 consts=[None, ints(2, -1)])
    assert t.shape == (2, Sym("(3*C*N)/2"))
    (t,) = infer("Reshape", [("float32", (N, 4)), ("int64", (2,))], consts=[None, ints(-1, 0)])
    assert t.shape == (N, 4)


def test_reshape_non_constant_shape_gives_fresh_dims_of_known_rank():
    (t,) = infer("Reshape", [("float32", (N, 3)), ("int64", (3,))])
    assert len(t.shape) == 3 and all(fresh(d) for d in t.shape)
    (t,) = infer("Reshape", [("float32", (N, 3)), ("int64", (Sym("K"),))])
    assert t.shape is None
    (t,) = infer("Reshape", [("float32", None), ("int64", (2,))], consts=[None, ints(5, -1)])
    assert t.shape[0] == 5 and fresh(t.shape[1])


@pytest.mark.parametrize("in_shape, target, allowzero, match", [
    ((2, 3), (4, -1), 0, r"Reshape.*'data'.*6 elements.*multiple of 4"),
    ((2, 3), (4, 2), 0, r"Reshape.*6 elements.*'shape'.*8 elements"),
    ((2, 3), (-1, -1), 0, r"'shape'.*more than one -1"),
    ((2, 3), (-2, 3), 0, r"'shape'.*-2"),
    ((2, 3), (0, -1), 1, r"'shape'.*both 0 and -1.*allowzero"),
    ((2, 3), (2, 3, 0), 0, r"'shape'.*copies dim 2.*rank 2"),
])
def test_reshape_bad_shape(rng, in_shape, target, allowzero, match):
    with pytest.raises(OpError, match=match):
        run_op("Reshape", [rand(rng, in_shape), ints(*target)], {"allowzero": allowzero})


def test_reshape_bad_dtype_and_attr(rng):
    with pytest.raises(OpError, match=r"Reshape.*'shape'.*int64.*got int32"):
        run_op("Reshape", [rand(rng, (2, 3)), ints(3, 2, dtype=np.int32)])
    with pytest.raises(OpError, match=r"'allowzero' must be 0 or 1, got 2"):
        run_op("Reshape", [rand(rng, (2, 3)), ints(3, 2)], {"allowzero": 2})
    with pytest.raises(OpError, match=r"'shape' must have rank 1"):
        run_op("Reshape", [rand(rng, (2, 3)), np.array([[3, 2]])])


# --- Transpose ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, perm", [
    ((2, 3, 5), (2, 0, 1)),
    ((2, 3, 5), None),
    ((3, 1, 4, 5), (1, 3, 0, 2)),
    ((7,), (0,)),
])
def test_transpose_moves_each_element(rng, dtype, shape, perm):
    x = rand(rng, shape, dtype)
    attrs = {} if perm is None else {"perm": list(perm)}
    (out,) = run_op("Transpose", [x], attrs)
    perm = perm or tuple(reversed(range(len(shape))))
    want_shape = tuple(shape[p] for p in perm)

    def source(index):
        src = [0] * len(shape)
        for out_axis, in_axis in enumerate(perm):
            src[in_axis] = index[out_axis]
        return tuple(src)

    assert_same(out, gather(x, want_shape, source))


def test_transpose_inference_symbolic_and_unknown_rank():
    assert shape_of(infer("Transpose", [("float32", (N, C, 5))], {"perm": [2, 0, 1]})) == \
        [(5, N, C)]
    assert shape_of(infer("Transpose", [("float32", (N, C))])) == [(C, N)]
    (t,) = infer("Transpose", [("float32", None)], {"perm": [1, 0, 2]})
    assert len(t.shape) == 3 and all(fresh(d) for d in t.shape)
    assert shape_of(infer("Transpose", [("float32", None)])) == [None]
    with pytest.raises(OpError, match=r"Transpose.*'perm' must be a permutation of 0\.\.1"):
        infer("Transpose", [("float32", None)], {"perm": [1, 1]})


@pytest.mark.parametrize("perm", [[0, 0, 1], [0, 1], [0, 1, 3], [-1, 0, 1]])
def test_transpose_bad_perm(rng, perm):
    with pytest.raises(OpError, match=r"Transpose.*'perm' must be a permutation of 0\.\.2"):
        run_op("Transpose", [rand(rng, (2, 3, 4))], {"perm": perm})


# --- Flatten ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int16", "bool"])
@pytest.mark.parametrize("axis, want", [(0, (1, 105)), (1, (3, 35)), (2, (15, 7)),
                                        (3, (105, 1)), (-1, (15, 7)), (-3, (1, 105))])
def test_flatten(rng, dtype, axis, want):
    x = rand(rng, (3, 5, 7), dtype)
    (out,) = run_op("Flatten", [x], {"axis": axis})
    assert out.shape == want
    assert_same(out.reshape(-1), x.reshape(-1))


def test_flatten_inference():
    assert shape_of(infer("Flatten", [("float32", (N, C, H, W))])) == \
        [(N, Sym("C*H*W"))]
    assert shape_of(infer("Flatten", [("float32", (N, 3, 4))], {"axis": 2})) == \
        [(Sym("3*N"), 4)]
    assert shape_of(infer("Flatten", [("float32", (N, 3, 4))], {"axis": 0})) == \
        [(1, Sym("12*N"))]
    (t,) = infer("Flatten", [("float32", None)])
    assert len(t.shape) == 2 and all(fresh(d) for d in t.shape)
    with pytest.raises(OpError, match=r"Flatten.*'axis' must be in \[-3, 3\].*got 4"):
        infer("Flatten", [("float32", (2, 3, 4))], {"axis": 4})


# --- Squeeze, Unsqueeze --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "bool"])
@pytest.mark.parametrize("shape, axes, want", [
    ((1, 3, 1, 5), (0, 2), (3, 5)),
    ((1, 3, 1, 5), (-2,), (1, 3, 5)),
    ((1, 3, 1, 5), None, (3, 5)),
    ((1, 1), None, ()),
    ((3, 5), (), (3, 5)),
])
def test_squeeze(rng, dtype, shape, axes, want):
    x = rand(rng, shape, dtype)
    inputs = [x] if axes is None else [x, ints(*axes)]
    (out,) = run_op("Squeeze", inputs)
    assert out.shape == want
    assert_same(out.reshape(-1), x.reshape(-1))


def test_squeeze_inference():
    assert shape_of(infer("Squeeze", [("float32", (N, 1, C)), ("int64", (1,))],
                          consts=[None, ints(1)])) == [(N, C)]
    # A symbolic dim named in axes must be 1 at run time.
    assert shape_of(infer("Squeeze", [("float32", (N, 1, C)), ("int64", (1,))],
                          consts=[None, ints(-1)])) == [(N, 1)]
    # Without axes, whether a symbol is squeezed is unknown; so is the rank.
    assert shape_of(infer("Squeeze", [("float32", (N, 1))])) == [None]
    assert shape_of(infer("Squeeze", [("float32", (4, 1, 2))])) == [(4, 2)]
    (t,) = infer("Squeeze", [("float32", (N, 1, C)), ("int64", (2,))])
    assert len(t.shape) == 1 and fresh(t.shape[0])
    assert shape_of(infer("Squeeze", [("float32", None), ("int64", (1,))],
                          consts=[None, ints(0)])) == [None]


def test_squeeze_bad_input(rng):
    with pytest.raises(OpError, match=r"Squeeze.*'axes' names dim 1.*which is 3, not 1"):
        run_op("Squeeze", [rand(rng, (1, 3)), ints(1)])
    with pytest.raises(OpError, match=r"Squeeze.*'axes' 2 is out of range for rank 2"):
        run_op("Squeeze", [rand(rng, (1, 3)), ints(2)])
    with pytest.raises(OpError, match=r"Squeeze.*'axes'.*repeats"):
        run_op("Squeeze", [rand(rng, (1, 3)), ints(0, -2)])


@pytest.mark.parametrize("dtype", ["float64", "bfloat16", "uint8", "bool"])
@pytest.mark.parametrize("shape, axes, want", [
    ((3, 5), (0,), (1, 3, 5)),
    ((3, 5), (2, 0), (1, 3, 1, 5)),
    ((3, 5), (-1,), (3, 5, 1)),
    ((3, 5), (1, -1), (3, 1, 5, 1)),
    ((), (0, 1), (1, 1)),
])
def test_unsqueeze(rng, dtype, shape, axes, want):
    x = rand(rng, shape, dtype)
    (out,) = run_op("Unsqueeze", [x, ints(*axes)])
    assert out.shape == want
    assert_same(out.reshape(-1), x.reshape(-1))


def test_unsqueeze_inference_and_bad_axes(rng):
    assert shape_of(infer("Unsqueeze", [("float32", (N, C)), ("int64", (2,))],
                          consts=[None, ints(0, 3)])) == [(1, N, C, 1)]
    (t,) = infer("Unsqueeze", [("float32", (N, C)), ("int64", (1,))])
    assert len(t.shape) == 3 and all(fresh(d) for d in t.shape)
    assert shape_of(infer("Unsqueeze", [("float32", None), ("int64", (1,))],
                          consts=[None, ints(0)])) == [None]
    with pytest.raises(OpError, match=r"Unsqueeze.*'axes' 3 is out of range for rank 3"):
        run_op("Unsqueeze", [rand(rng, (2, 3)), ints(3)])
    with pytest.raises(OpError, match=r"Unsqueeze.*'axes'.*repeats"):
        run_op("Unsqueeze", [rand(rng, (2, 3)), ints(1, -3)])
    with pytest.raises(OpError, match=r"Unsqueeze.*'axes' must have dtype in \{int64\}"):
        run_op("Unsqueeze", [rand(rng, (2, 3)), ints(0, dtype=np.int32)])


# --- Concat ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes, axis", [
    ([(2, 3), (2, 5)], 1),
    ([(2, 3), (4, 3), (1, 3)], 0),
    ([(3, 1, 5), (3, 2, 5), (3, 0, 5), (3, 4, 5)], -2),
    ([(7,)], 0),
])
def test_concat(rng, dtype, shapes, axis):
    xs = [rand(rng, s, dtype) for s in shapes]
    (out,) = run_op("Concat", xs, {"axis": axis})
    axis %= len(shapes[0])
    offsets = list(itertools.accumulate(s[axis] for s in shapes))
    want_shape = list(shapes[0])
    want_shape[axis] = offsets[-1]
    out_want = np.empty(want_shape, dtype=xs[0].dtype)
    for index in itertools.product(*(range(d) for d in want_shape)):
        which = next(k for k, end in enumerate(offsets) if index[axis] < end)
        local = list(index)
        local[axis] -= offsets[which] - shapes[which][axis]
        out_want[index] = xs[which][tuple(local)]
    assert_same(out, out_want)


def test_concat_inference():
    assert shape_of(infer("Concat", [("float32", (N, 3)), ("float32", (N, C))],
                          {"axis": 1})) == [(N, Sym("3+C"))]
    # A concrete dim elsewhere pins down the symbol it meets.
    assert shape_of(infer("Concat", [("float32", (N, 3)), ("float32", (4, 5))],
                          {"axis": 1})) == [(4, 8)]
    (t,) = infer("Concat", [("float32", (N, 3)), ("float32", None)], {"axis": 0})
    assert fresh(t.shape[0]) and t.shape[1] == 3
    assert shape_of(infer("Concat", [("int8", None), ("int8", None)], {"axis": 0})) == [None]


def test_concat_bad_input(rng):
    a, b = rand(rng, (2, 3)), rand(rng, (2, 4))
    with pytest.raises(OpError, match=r"Concat.*'inputs\[1\]'.*dim 1 \(4 vs 3\)"):
        run_op("Concat", [a, b], {"axis": 0})
    with pytest.raises(OpError, match=r"Concat.*'inputs\[1\]'.*must have rank 2"):
        run_op("Concat", [a, rand(rng, (2, 3, 1))], {"axis": 0})
    with pytest.raises(OpError, match=r"Concat.*'axis' 2 is out of range for rank 2"):
        run_op("Concat", [a, a], {"axis": 2})
    with pytest.raises(OpError, match=r"Concat.*'axis'.*required"):
        run_op("Concat", [a, a])
    with pytest.raises(OpError, match=r"Concat.*same dtype"):
        run_op("Concat", [a, a.astype(np.float64)], {"axis": 0})
    with pytest.raises(OpError, match=r"Concat.*scalar"):
        run_op("Concat", [np.float32(1.5), np.float32(2.5)], {"axis": 0})


# --- Split ------------------------------------------------------------------------------


def check_split(x, outs, axis, sizes):
    assert [o.shape[axis] for o in outs] == list(sizes)
    start = 0
    for out, size in zip(outs, sizes):
        index = [slice(None)] * x.ndim
        index[axis] = slice(start, start + size)
        # Python list slicing along the axis, element by element.
        want = gather(x, out.shape, lambda i, s=start: tuple(
            v + s if k == axis else v for k, v in enumerate(i)))
        assert_same(out, want)
        start += size
    assert start == x.shape[axis]


@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "bool"])
@pytest.mark.parametrize("shape, axis, sizes", [
    ((7, 3), 0, (2, 0, 5)),
    ((3, 8), -1, (3, 5)),
    ((2, 5, 3), 1, (1, 1, 1, 2)),
])
def test_split_by_sizes(rng, dtype, shape, axis, sizes):
    x = rand(rng, shape, dtype)
    outs = run_op("Split", [x, ints(*sizes)], {"axis": axis})
    check_split(x, outs, axis % x.ndim, sizes)


@pytest.mark.parametrize("dim, count, sizes", [
    (10, 3, (4, 4, 2)),
    (9, 3, (3, 3, 3)),
    (7, 2, (4, 3)),
    (4, 3, (2, 2, 0)),
    (5, 1, (5,)),
])
def test_split_num_outputs_uneven_last_chunk(rng, dim, count, sizes):
    x = rand(rng, (3, dim), "bfloat16")
    outs = run_op("Split", [x], {"axis": 1, "num_outputs": count})
    check_split(x, outs, 1, sizes)


def test_split_inference():
    types = infer("Split", [("float32", (N, 10))], {"axis": 1, "num_outputs": 3})
    assert shape_of(types) == [(N, 4), (N, 4), (N, 2)]
    # The node's output count stands in for num_outputs when neither is given.
    types = infer("Split", [("float32", (N, 6))], {"axis": -1}, num_outputs=2)
    assert shape_of(types) == [(N, 3), (N, 3)]
    first, second, last = shape_of(infer("Split", [("float32", (N, 2))],
                                         {"num_outputs": 3}))
    assert first[0] == second[0] and fresh(first[0]) and fresh(last[0])
    assert first[0] != last[0] and first[1] == 2
    types = infer("Split", [("float32", (N, 2)), ("int64", (2,))], consts=[None, ints(1, 3)])
    assert shape_of(types) == [(1, 2), (3, 2)]
    types = infer("Split", [("float32", (N, 2)), ("int64", (2,))])
    assert len(types) == 2 and all(fresh(t.shape[0]) and t.shape[1] == 2 for t in types)
    assert shape_of(infer("Split", [("float32", None)], {"num_outputs": 2})) == [None, None]


def test_split_bad_input(rng):
    x = rand(rng, (5, 3))
    with pytest.raises(OpError, match=r"Split.*'split' \[2, 2\] sums to 4.*is 5"):
        run_op("Split", [x, ints(2, 2)])
    with pytest.raises(OpError, match=r"Split.*either input 'split' or attribute"):
        run_op("Split", [x, ints(2, 3)], {"num_outputs": 2})
    with pytest.raises(OpError, match=r"Split.*'num_outputs' must be >= 1, got 0"):
        run_op("Split", [x], {"num_outputs": 0})
    with pytest.raises(OpError, match=r"Split.*\(5\) cannot be split into 4 parts"):
        run_op("Split", [x], {"num_outputs": 4})
    with pytest.raises(OpError, match=r"Split.*'split' \[6, -1\] must hold sizes >= 0"):
        run_op("Split", [x, ints(6, -1)])
    with pytest.raises(OpError, match=r"Split.*'num_outputs' is 2 but the node has 3"):
        run_op("Split", [x], {"num_outputs": 2}, num_outputs=3)
    with pytest.raises(OpError, match=r"Split.*number of outputs"):
        infer("Split", [("float32", (5, 3))])
    with pytest.raises(OpError, match=r"Split.*'axis' 2 is out of range for rank 2"):
        run_op("Split", [x], {"num_outputs": 2, "axis": 2})
    # The node's output count never reaches the reference, so it needs one of the two.
    with pytest.raises(OpError, match=r"Split.*needs input 'split' or attribute 'num_outputs'"):
        get_schema("Split").run_reference([x], {})


# --- Slice --------------------------------------------------------------------------------


def python_slice(x: np.ndarray, axes, starts, ends, steps) -> np.ndarray:
    """Slice with Python's own list slicing, one axis at a time (ONNX Slice clamps as Python
    does), on nested lists so NumPy indexing plays no part."""
    values = x.tolist()

    def cut(nested, depth, axis, sl):
        if depth == axis:
            return nested[sl]
        return [cut(item, depth + 1, axis, sl) for item in nested]

    shape = list(x.shape)
    for axis, start, end, step in zip(axes, starts, ends, steps):
        axis %= x.ndim
        values = cut(values, 0, axis, slice(start, end, step))
        shape[axis] = len(range(*slice(start, end, step).indices(shape[axis])))
    return np.array(values, dtype=x.dtype).reshape(shape)


SLICE_CASES = [
    # starts, ends, axes, steps
    ((1,), (3,), None, None),
    ((0, 1), (2, -1), None, None),
    ((-3,), (INT64_MAX,), (1,), None),
    ((INT64_MAX,), (INT64_MIN,), (0,), (-1,)),
    ((-1, 5), (-100, 0), (-2, 2), (-2, -3)),
    ((1, 0, 2), (4, 5, 7), (2, 0, 1), (2, 3, 1)),
    ((10,), (20,), (1,), (1,)),  # past the end: empty
    ((2,), (2,), (0,), None),  # empty
    ((-100,), (100,), (2,), (4,)),
    ((INT32_MAX,), (-INT32_MAX - 1,), (1,), (-2,)),
]


@pytest.mark.parametrize("starts, ends, axes, steps", SLICE_CASES)
def test_slice_against_python_slicing(rng, starts, ends, axes, steps):
    x = rand(rng, (5, 6, 7), "float32")
    inputs = [x, ints(*starts), ints(*ends)]
    inputs += [None if axes is None else ints(*axes)] if steps is not None or axes else []
    inputs += [ints(*steps)] if steps is not None else []
    (out,) = run_op("Slice", inputs)
    axes = axes or tuple(range(len(starts)))
    steps = steps or (1,) * len(starts)
    assert_same(out, python_slice(x, axes, starts, ends, steps))


@pytest.mark.parametrize("dtype", DTYPES)
def test_slice_dtypes_and_int32_indices(rng, dtype):
    x = rand(rng, (4, 9), dtype)
    idx = np.int32
    (out,) = run_op("Slice", [x, ints(-1, 1, dtype=idx), ints(-5, 8, dtype=idx),
                              ints(1, 0, dtype=idx), ints(-2, 2, dtype=idx)])
    assert_same(out, python_slice(x, (1, 0), (-1, 1), (-5, 8), (-2, 2)))


def test_slice_inference_symbolic():
    t = ("float32", (N, C, 7))
    i = ("int64", (1,))
    assert shape_of(infer("Slice", [t, i, i, i], consts=[None, ints(1), ints(5), ints(2)])) \
        == [(N, C, 4)]
    # Whole or whole-reversed slices of a symbol keep it.
    assert shape_of(infer("Slice", [t, i, i, i], consts=[None, ints(0), ints(INT64_MAX),
                                                          ints(0)])) == [(N, C, 7)]
    assert shape_of(infer("Slice", [t, i, i, i, i],
                          consts=[None, ints(-1), ints(INT64_MIN), ints(1), ints(-1)])) \
        == [(N, C, 7)]
    (s,) = infer("Slice", [t, i, i, i], consts=[None, ints(1), ints(3), ints(0)])
    assert fresh(s.shape[0]) and s.shape[1:] == (C, 7)
    # Non-constant starts: the sliced axis gets a fresh symbol, the others stay.
    (s,) = infer("Slice", [t, i, i, i], consts=[None, None, ints(3), ints(2)])
    assert s.shape[:2] == (N, C) and fresh(s.shape[2])
    # Non-constant axes: any dim may be sliced.
    (s,) = infer("Slice", [t, i, i, i], consts=[None, ints(1), ints(3), None])
    assert len(s.shape) == 3 and all(fresh(d) for d in s.shape)
    assert shape_of(infer("Slice", [("float32", None), i, i],
                          consts=[None, ints(0), ints(1)])) == [None]


def test_slice_bad_input(rng):
    x = rand(rng, (4, 5))
    with pytest.raises(OpError, match=r"Slice.*'steps' \[0\] must not contain 0"):
        run_op("Slice", [x, ints(0), ints(2), ints(0), ints(0)])
    with pytest.raises(OpError, match=r"Slice.*'starts', 'ends'.*same length, got \[2, 1\]"):
        run_op("Slice", [x, ints(0, 1), ints(2)])
    with pytest.raises(OpError, match=r"Slice.*'axes' 2 is out of range for rank 2"):
        run_op("Slice", [x, ints(0), ints(2), ints(2)])
    with pytest.raises(OpError, match=r"Slice.*'axes'.*repeats"):
        run_op("Slice", [x, ints(0, 0), ints(2, 2), ints(1, -1)])
    with pytest.raises(OpError, match=r"Slice.*'ends' must have the same dtype as 'starts'"):
        run_op("Slice", [x, ints(0), ints(2, dtype=np.int32)])
    with pytest.raises(OpError, match=r"Slice.*3 entries.*rank 2"):
        run_op("Slice", [x, ints(0, 0, 0), ints(1, 1, 1)])


# --- Expand -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("in_shape, target, want", [
    ((3, 1), (2, 1, 6), (2, 3, 6)),  # input broadcast in two dims, rank grows
    ((1, 5), (4, 1), (4, 5)),  # shape's 1 keeps the input dim: bidirectional
    ((2, 3), (3,), (2, 3)),  # shorter shape
    ((), (2, 3), (2, 3)),
    ((7, 1), (7, 0), (7, 0)),
])
def test_expand(rng, dtype, in_shape, target, want):
    x = rand(rng, in_shape, dtype)
    (out,) = run_op("Expand", [x, ints(*target)])
    offset = len(want) - len(in_shape)
    want_array = gather(x, want, lambda i: tuple(
        0 if d == 1 else i[k + offset] for k, d in enumerate(in_shape)))
    assert_same(out, want_array)


def test_expand_inference():
    assert shape_of(infer("Expand", [("float32", (N, 1)), ("int64", (3,))],
                          consts=[None, ints(2, 1, 5)])) == [(2, N, 5)]
    (t,) = infer("Expand", [("float32", (N, 1, 4)), ("int64", (4,))])
    assert len(t.shape) == 4 and t.shape[3] == 4
    assert all(fresh(d) for d in t.shape[:3])
    assert shape_of(infer("Expand", [("float32", (N, 1)), ("int64", (Sym("K"),))])) == [None]
    with pytest.raises(OpError, match=r"Expand.*'input'.*does not broadcast.*'shape'.*3 vs 4"):
        infer("Expand", [("float32", (2, 3)), ("int64", (2,))], consts=[None, ints(2, 4)])
    with pytest.raises(OpError, match=r"Expand.*'shape' \[2, -1\] must hold dims >= 0"):
        infer("Expand", [("float32", (2, 3)), ("int64", (2,))], consts=[None, ints(2, -1)])


# --- Tile ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, repeats", [((2, 3), (3, 2)), ((5,), (1,)), ((2, 1, 3), (1, 4, 0))])
def test_tile(rng, dtype, shape, repeats):
    x = rand(rng, shape, dtype)
    (out,) = run_op("Tile", [x, ints(*repeats)])
    want = tuple(d * r for d, r in zip(shape, repeats))
    assert_same(out, gather(x, want, lambda i: tuple(v % d for v, d in zip(i, shape))))


def test_tile_inference_and_bad_input(rng):
    assert shape_of(infer("Tile", [("float32", (N, 3)), ("int64", (2,))],
                          consts=[None, ints(2, 1)])) == [(Sym("2*N"), 3)]
    (t,) = infer("Tile", [("float32", (N, 3)), ("int64", (2,))])
    assert all(fresh(d) for d in t.shape)
    (t,) = infer("Tile", [("float32", None), ("int64", (3,))])
    assert len(t.shape) == 3
    with pytest.raises(OpError, match=r"Tile.*'repeats' must have one entry per dim.*\(2\), got 3"):
        run_op("Tile", [rand(rng, (2, 3)), ints(1, 1, 1)])
    with pytest.raises(OpError, match=r"Tile.*'repeats' \[1, -1\] must hold counts >= 0"):
        run_op("Tile", [rand(rng, (2, 3)), ints(1, -1)])


# --- Pad ----------------------------------------------------------------------------------


def reflect_index(i: int, n: int) -> int:
    if n == 1:
        return 0
    period = 2 * (n - 1)
    i %= period
    return period - i if i >= n else i


def pad_oracle(x, pads, mode, value=0, axes=None):
    """Crop by the negative pads, then map every output index to its source by mode."""
    axes = list(range(x.ndim)) if axes is None else [a % x.ndim for a in axes]
    begins, ends = [0] * x.ndim, [0] * x.ndim
    for k, axis in enumerate(axes):
        begins[axis], ends[axis] = pads[k], pads[k + len(axes)]
    cropped = x[tuple(slice(max(-b, 0), x.shape[a] - max(-e, 0))
                      for a, (b, e) in enumerate(zip(begins, ends)))]
    lead = [max(b, 0) for b in begins]
    out_shape = [d + max(b, 0) + max(e, 0) for d, b, e in zip(cropped.shape, begins, ends)]

    def source(index):
        src = []
        for i, n, before in zip(index, cropped.shape, lead):
            j = i - before
            if 0 <= j < n:
                src.append(j)
            elif mode == "constant":
                return value
            elif mode == "edge":
                src.append(min(max(j, 0), n - 1))
            elif mode == "reflect":
                src.append(reflect_index(j, n))
            else:
                src.append(j % n)
        return tuple(src)

    return gather(cropped, out_shape, source)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads, axes", [
    ((1, 2, 3, 0), None),
    ((0, 0, 2, 1), None),
    ((2, -1, 1, 2), None),  # negative: crop first
    ((3, 1), (-1,)),
    ((1, 2, 2, 1), (1, 0)),
    ((6, 5, 7, 9), None),  # wider than the dims: reflect and wrap repeat
])
def test_pad_modes(rng, mode, pads, axes):
    x = rand(rng, (3, 4), "float32")
    inputs = [x, ints(*pads)]
    if axes is not None:
        inputs += [None, ints(*axes)]
    (out,) = run_op("Pad", inputs, {"mode": mode})
    assert_same(out, pad_oracle(x, pads, mode, 0, axes))


@pytest.mark.parametrize("dtype", DTYPES)
def test_pad_constant_value_every_dtype(rng, dtype):
    x = rand(rng, (2, 3), dtype)
    value = rand(rng, (), dtype)
    (out,) = run_op("Pad", [x, ints(1, 0, 2, 3), value])
    assert_same(out, pad_oracle(x, (1, 0, 2, 3), "constant", value))
    (out,) = run_op("Pad", [x, ints(1, 1, 1, 1)], {"mode": "edge"})
    assert_same(out, pad_oracle(x, (1, 1, 1, 1), "edge"))


def test_pad_inference():
    t, p = ("float32", (N, C, 5)), ("int64", (6,))
    assert shape_of(infer("Pad", [t, p], consts=[None, ints(0, 1, 2, 0, 1, -3)])) == \
        [(N, Sym("C+2"), 4)]
    (s,) = infer("Pad", [t, ("int64", (2,)), None, ("int64", (1,))],
                 consts=[None, ints(-1, 0), None, ints(1)])
    assert s.shape == (N, Sym("C-1"), 5)
    (s,) = infer("Pad", [t, ("int64", (2,)), None, ("int64", (1,))],
                 consts=[None, None, None, ints(2)])
    assert s.shape[:2] == (N, C) and fresh(s.shape[2])
    (s,) = infer("Pad", [t, p])
    assert all(fresh(d) for d in s.shape)
    assert shape_of(infer("Pad", [("float32", None), p])) == [None]


def test_pad_bad_input(rng):
    x = rand(rng, (2, 3))
    with pytest.raises(OpError, match=r"Pad.*'mode' must be one of.*got 'mirror'"):
        run_op("Pad", [x, ints(1, 1, 1, 1)], {"mode": "mirror"})
    with pytest.raises(OpError, match=r"Pad.*'pads' must have 2 entries per padded axis \(4\)"):
        run_op("Pad", [x, ints(1, 1)])
    with pytest.raises(OpError, match=r"Pad.*'pads'.*removes more than dim 1 \(3\)"):
        run_op("Pad", [x, ints(0, -2, 0, -2)])
    with pytest.raises(OpError, match=r"Pad.*'constant_value' must be a scalar"):
        run_op("Pad", [x, ints(1, 1, 1, 1), rand(rng, (2,))])
    with pytest.raises(OpError, match=r"Pad.*'constant_value' must have the same dtype"):
        run_op("Pad", [x, ints(1, 1, 1, 1), np.float64(2.5)])
    with pytest.raises(OpError, match=r"Pad.*mode 'reflect' cannot pad dim 0.*empty"):
        run_op("Pad", [rand(rng, (0, 3)), ints(1, 0, 0, 0)], {"mode": "reflect"})


# --- Shape, Size --------------------------------------------------------------------------


@pytest.mark.parametrize("start, end", [(0, None), (1, None), (-2, None), (0, -1), (1, 3),
                                        (-10, 10), (3, 1), (4, None)])
def test_shape_slices_like_python(rng, start, end):
    x = rand(rng, (2, 3, 5, 7), "int8")
    attrs = {"start": start} if end is None else {"start": start, "end": end}
    (out,) = run_op("Shape", [x], attrs)
    assert out.dtype == np.int64
    assert out.tolist() == list(x.shape)[start:end]


def test_shape_and_size_inference():
    assert shape_of(infer("Shape", [("bool", (N, 3, C))], {"start": 1})) == [(2,)]
    assert infer("Shape", [("bool", (N, 3))])[0].dtype is DType.INT64
    (t,) = infer("Shape", [("float32", None)])
    assert t.dtype is DType.INT64 and len(t.shape) == 1 and fresh(t.shape[0])
    assert infer("Size", [("float16", (N, 3))]) == [TensorType("int64", ())]
    assert infer("Size", [("float16", None)]) == [TensorType("int64", ())]
    with pytest.raises(OpError, match=r"Shape.*'start' must be an int, got 1.5"):
        infer("Shape", [("float32", (2,))], {"start": 1.5})


@pytest.mark.parametrize("shape", [(), (3,), (2, 0, 4), (3, 5, 7)])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "uint8", "bool"])
def test_size(rng, shape, dtype):
    (out,) = run_op("Size", [rand(rng, shape, dtype)])
    assert out.dtype == np.int64 and out.shape == ()
    assert int(out) == math.prod(shape)


# --- DepthToSpace, SpaceToDepth -----------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "bool"])
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("shape, b", [((2, 8, 3, 5), 2), ((1, 9, 2, 3), 3), ((1, 3, 2, 2), 1)])
def test_depth_to_space(rng, dtype, mode, shape, b):
    x = rand(rng, shape, dtype)
    (out,) = run_op("DepthToSpace", [x], {"blocksize": b, "mode": mode})
    n, c, h, w = shape
    channels = c // (b * b)

    def source(index):
        i_n, i_c, i_h, i_w = index
        bi, bj = i_h % b, i_w % b
        if mode == "DCR":
            depth = (bi * b + bj) * channels + i_c
        else:
            depth = i_c * b * b + bi * b + bj
        return (i_n, depth, i_h // b, i_w // b)

    assert_same(out, gather(x, (n, channels, h * b, w * b), source))


@pytest.mark.parametrize("dtype", ["float64", "bfloat16", "int8", "bool"])
@pytest.mark.parametrize("mode", ["DCR", "CRD", None])
@pytest.mark.parametrize("shape, b", [((2, 3, 4, 6), 2), ((1, 1, 3, 9), 3)])
def test_space_to_depth(rng, dtype, mode, shape, b):
    x = rand(rng, shape, dtype)
    attrs = {"blocksize": b} if mode is None else {"blocksize": b, "mode": mode}
    (out,) = run_op("SpaceToDepth", [x], attrs)
    n, c, h, w = shape

    def source(index):
        i_n, depth, i_h, i_w = index
        if mode == "CRD":  # channel outermost, then the block row and column
            i_c, block = divmod(depth, b * b)
        else:  # DCR, the default: block row and column outermost
            block, i_c = divmod(depth, c)
        bi, bj = divmod(block, b)
        return (i_n, i_c, i_h * b + bi, i_w * b + bj)

    assert_same(out, gather(x, (n, c * b * b, h // b, w // b), source))
    # SpaceToDepth undoes DepthToSpace in the same mode.
    (back,) = run_op("DepthToSpace", [out], {"blocksize": b, "mode": mode or "DCR"})
    assert_same(back, x)


def test_space_to_depth_crd_hand_case_from_onnx_spec():
    # Input values are the output's flat positions, so the output must count 0, 1, 2, ...
    y = np.arange(48, dtype=np.float32).reshape(1, 8, 2, 3)
    x = np.empty((1, 2, 4, 6), np.float32)
    for c in range(2):
        for bi in range(2):
            for bj in range(2):
                x[0, c, bi::2, bj::2] = y[0, c * 4 + bi * 2 + bj]
    np.testing.assert_array_equal(x[0, 0, :2], [[0, 6, 1, 7, 2, 8], [12, 18, 13, 19, 14, 20]])
    (out,) = run_op("SpaceToDepth", [x], {"blocksize": 2, "mode": "CRD"})
    np.testing.assert_array_equal(out, y)


def test_block_ops_inference_and_bad_input(rng):
    assert shape_of(infer("DepthToSpace", [("float32", (N, 12, H, 5))], {"blocksize": 2})) == \
        [(N, 3, Sym("2*H"), 10)]
    assert shape_of(infer("DepthToSpace", [("float32", (N, C, 2, 2))], {"blocksize": 2})) == \
        [(N, Sym("C/4"), 4, 4)]
    assert shape_of(infer("SpaceToDepth", [("float32", (N, C, H, 6))], {"blocksize": 3})) == \
        [(N, Sym("9*C"), Sym("H/3"), 2)]
    (t,) = infer("SpaceToDepth", [("float32", None)], {"blocksize": 2})
    assert len(t.shape) == 4
    with pytest.raises(OpError, match=r"DepthToSpace.*channel dim \(6\).*divisible by 4"):
        run_op("DepthToSpace", [rand(rng, (1, 6, 2, 2))], {"blocksize": 2})
    with pytest.raises(OpError, match=r"DepthToSpace.*'mode' must be 'DCR' or 'CRD'.*'RCD'"):
        run_op("DepthToSpace", [rand(rng, (1, 4, 2, 2))], {"blocksize": 2, "mode": "RCD"})
    with pytest.raises(OpError, match=r"DepthToSpace.*'input' must have rank 4"):
        run_op("DepthToSpace", [rand(rng, (4, 2, 2))], {"blocksize": 2})
    with pytest.raises(OpError, match=r"SpaceToDepth.*'blocksize' must be >= 1, got 0"):
        run_op("SpaceToDepth", [rand(rng, (1, 4, 2, 2))], {"blocksize": 0})
    with pytest.raises(OpError, match=r"SpaceToDepth.*width dim \(5\).*divisible by 2"):
        run_op("SpaceToDepth", [rand(rng, (1, 1, 4, 5))], {"blocksize": 2})
    with pytest.raises(OpError, match=r"SpaceToDepth.*'blocksize'.*required"):
        run_op("SpaceToDepth", [rand(rng, (1, 1, 4, 4))])
    with pytest.raises(OpError, match=r"SpaceToDepth.*'mode' must be 'DCR' or 'CRD'.*'DRC'"):
        run_op("SpaceToDepth", [rand(rng, (1, 1, 4, 4))], {"blocksize": 2, "mode": "DRC"})


# --- ReverseSequence --------------------------------------------------------------------

T = Sym("T")


def py_values(x):
    """Nested Python numbers (floats as float64) of an array of any dtype."""
    if DType.from_numpy(x.dtype).is_float:
        return x.astype(np.float64).tolist()
    return x.tolist()


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
