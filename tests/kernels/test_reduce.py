"""The reduction and scan C kernels (core/kernels/reduce*.c) against their references.

Every case compiles an ES graph, checks that no step fell back to Python, and compares
the C results with the reference evaluator on the same random non-zero inputs: every
dtype a kernel claims, axes sets that fold to rows, columns and strided walks, keepdims
and noop_with_empty_axes, odd and large sizes (past the parallel grain, and a single run
long enough to be split), NaN and inf where the op defines them, integer wraparound,
empty dims, and Einsum equations of both lowerings (batched GEMM and the generic loop).
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.executor import Executor, KernelError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import TensorType
from ge_hub.kernels.base import pack_values
from ge_hub.kernels.reduce import reduce_layout, supports_reduce, supports_topk
from ge_hub.kernels.reduce_einsum import GEMM, GENERIC
from ge_hub.plan import Storage
from ge_hub.reference import evaluate


def random_array(rng, shape, dtype, low=-3.0, high=3.0):
    """Random non-zero data; integers in [low, high]."""
    dtype = np.dtype(dtype)
    if dtype.kind == "i":
        data = rng.integers(int(low), int(high) + 1, size=shape)
        data[data == 0] = 1
        return data.astype(dtype)
    data = rng.uniform(low, high, size=shape)
    data[data == 0] = 0.5
    return data.astype(dtype)


def check_graph(graph, feeds, rtol=1e-5, atol=1e-6, labels=None):
    """Run the compiled graph and the reference; every output must agree, in C only."""
    model = ge_hub.compile(graph)
    got = model.run(feeds)
    want = evaluate(graph, feeds)
    assert model.summary()["fallback_steps"] == 0, model.summary()["fallback_ops"]
    for i, (g, w) in enumerate(zip(got, want)):
        label = labels[i] if labels else graph.output_names[i]
        assert g.dtype == w.dtype and g.shape == w.shape, (label, g.dtype, g.shape, w.shape)
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True, err_msg=label)
        else:
            np.testing.assert_array_equal(g, w, err_msg=label)
    return model


def build_cases(cases, make, dtype):
    """One graph with an input and an output per case; `make(x, case)` adds the op."""
    with es.GraphBuilder("cases") as gb:
        for i, case in enumerate(cases):
            x = es.input(f"x{i}", dtype, list(case[0]))
            result = make(x, case)
            for j, out in enumerate(result if isinstance(result, tuple) else (result,)):
                gb.output(out, f"y{i}_{j}")
    return gb.graph


def axes_const(axes):
    return None if axes is None else es.const(np.array(axes, np.int64))


# -- Reduce* --------------------------------------------------------------------------------

REDUCE_OPS = {
    "ReduceSum": ("float32", "int32", "int64"),
    "ReduceMean": ("float32",),
    "ReduceMax": ("float32", "int32", "int64"),
    "ReduceMin": ("float32", "int32", "int64"),
    "ReduceProd": ("float32", "int32", "int64"),
    "ReduceL1": ("float32",),
    "ReduceL2": ("float32",),
    "ReduceLogSumExp": ("float32",),
    "ReduceSumSquare": ("float32",),
}
REDUCE_PARAMS = [(op, dtype) for op, dtypes in REDUCE_OPS.items() for dtype in dtypes]

# (shape, axes, keepdims): rows, columns, a middle axis, both ends (strided), unsorted and
# negative axes, all axes, size-1 dims, a scalar, and sizes past the parallel grain.
REDUCE_CASES = [
    ((3, 5, 7), [0], 1), ((3, 5, 7), [1], 0), ((3, 5, 7), [2], 1), ((3, 5, 7), [-1], 0),
    ((3, 5, 7), [0, 2], 0), ((3, 5, 7), [2, 0], 1), ((3, 5, 7), [0, 1], 0),
    ((3, 5, 7), [1, -1], 1), ((3, 5, 7), None, 0), ((3, 5, 7), None, 1),
    ((2, 3, 4, 5), [1, 3], 0), ((2, 3, 4, 5), [0, 2], 1), ((1, 5, 1, 7), [0, 2], 0),
    ((1, 5, 1, 7), [1], 1), ((11,), [0], 0), ((), None, 0), ((301, 257), [0], 0),
    ((301, 257), [1], 1), ((3, 300, 5), [1], 0), ((40, 30, 20), [0, 2], 0),
]


def reduce_input(rng, op, shape, dtype):
    if op == "ReduceProd":
        if dtype != "float32":
            return random_array(rng, shape, dtype, -3, 3)
        # Magnitudes near 1, so that long products neither overflow nor vanish.
        sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
        return (sign * rng.uniform(0.7, 1.4, shape)).astype(np.float32)
    if dtype == "float32":
        return random_array(rng, shape, dtype)
    return random_array(rng, shape, dtype, -1000, 1000)


@pytest.mark.parametrize("op,dtype", REDUCE_PARAMS)
def test_reduce_matches_reference(op, dtype, rng):
    fn = getattr(es, op)
    graph = build_cases(REDUCE_CASES, lambda x, c: fn(x, axes_const(c[1]), keepdims=c[2]), dtype)
    feeds = {f"x{i}": reduce_input(rng, op, case[0], dtype) for i, case in enumerate(REDUCE_CASES)}
    # Sums, means and L1 norms add up to 16 values in float before going on in double:
    # a sum that cancels to near 0 keeps an absolute error of float rounding.
    check_graph(graph, feeds, atol=2e-5, labels=[str(c) for c in REDUCE_CASES])


@pytest.mark.parametrize("op", list(REDUCE_OPS))
def test_reduce_over_no_axes_applies_only_the_elementwise_step(op, rng):
    # noop_with_empty_axes: omitted or empty axes reduce nothing (L1 still takes |x|,
    # SumSquare squares); without it, empty axes reduce everything.
    shape = (4, 5)
    with es.GraphBuilder("noop") as gb:
        x = es.input("x", "float32", list(shape))
        empty = es.const(np.zeros(0, np.int64))
        gb.output(getattr(es, op)(x, noop_with_empty_axes=1), "omitted")
        gb.output(getattr(es, op)(x, empty, noop_with_empty_axes=1, keepdims=0), "empty")
        gb.output(getattr(es, op)(x, empty, keepdims=0), "empty_reduces_all")
    check_graph(gb.graph, {"x": reduce_input(rng, op, shape, "float32")})


def test_reduce_float_special_values():
    nan, inf = np.nan, np.inf
    rows = np.array([[1.0, nan, 2.0, -3.0, 0.5], [inf, 1.0, -2.0, 4.0, 0.5],
                     [-inf, -inf, -inf, -inf, -inf], [inf, -inf, 1.0, 2.0, 3.0],
                     [-2.0, 5.0, nan, inf, -inf], [1.5, -2.5, 3.5, -4.5, 5.5]], np.float32)
    # 20 ordinary values, then each row four times: the special values reach both the
    # vectorized lanes and the scalar tail of a run.
    data = np.concatenate([np.full((6, 20), 0.25, np.float32), np.tile(rows, (1, 4))], axis=1)
    ops = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
           "ReduceL2", "ReduceLogSumExp", "ReduceSumSquare"]
    with es.GraphBuilder("special") as gb:
        x = es.input("x", "float32", list(data.shape))
        for op in ops:
            for axis in (0, 1):  # column mode and row mode
                gb.output(getattr(es, op)(x, axes_const([axis])), f"{op}_{axis}")
    check_graph(gb.graph, {"x": data})


def test_long_float_sums_match_the_float64_reference(rng):
    # 100k+ values around 1000: a float32 running sum would be off by far more than 1e-6.
    # The flat input is one run long enough to be split over threads; the tall one
    # reduces columns.
    n = 200_003
    with es.GraphBuilder("long") as gb:
        flat = es.input("flat", "float32", [n])
        tall = es.input("tall", "float32", [n // 2, 3])
        for op in ("ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL1", "ReduceL2",
                   "ReduceLogSumExp"):
            gb.output(getattr(es, op)(flat, keepdims=0), f"{op}_split")
            gb.output(getattr(es, op)(tall, axes_const([0])), f"{op}_columns")
        gb.output(es.reduce_sum(es.reshape(flat, es.const(np.array([1, n], np.int64))),
                                axes_const([1])), "row")
    feeds = {"flat": (1000 + rng.uniform(0, 1, n)).astype(np.float32),
             "tall": (1000 + rng.uniform(0, 1, (n // 2, 3))).astype(np.float32)}
    check_graph(gb.graph, feeds, rtol=1e-6, atol=0)


def test_cancelling_float_sums_stay_within_float_rounding_of_the_magnitudes(rng):
    # Values of both signs: the sum is small beside the magnitudes summed, and the error
    # of float partials (at most 16 values each) must stay around 1e-6 of the latter.
    n = 100_003
    data = rng.uniform(-1, 1, (3, n)).astype(np.float32)
    with es.GraphBuilder("cancel") as gb:
        x = es.input("x", "float32", [3, n])
        gb.output(es.reduce_sum(x, axes_const([1]), keepdims=0), "rows")
        gb.output(es.reduce_sum(es.transpose(x), axes_const([0]), keepdims=0), "columns")
        gb.output(es.reduce_l1(x, axes_const([1]), keepdims=0), "l1")
    model = ge_hub.compile(gb.graph)
    rows, columns, l1 = model.run({"x": data})
    assert model.summary()["fallback_steps"] == 0
    exact = data.astype(np.float64).sum(axis=1)
    magnitude = np.abs(data.astype(np.float64)).sum(axis=1)
    assert np.all(np.abs(rows - exact) <= 1e-6 * magnitude)
    assert np.all(np.abs(columns - exact) <= 1e-6 * magnitude)
    np.testing.assert_allclose(l1, magnitude, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_reductions_wrap_around(dtype, rng):
    info = np.iinfo(dtype)
    data = np.array([[info.max, info.max, 5, 7], [info.min, -1, -1, 3],
                     [info.max // 3, 7, 11, -13]], dtype)
    data = np.concatenate([data, random_array(rng, (3, 17), dtype, -50, 50)], axis=1)
    with es.GraphBuilder("wrap") as gb:
        x = es.input("x", dtype, list(data.shape))
        for op in ("ReduceSum", "ReduceProd", "ReduceMax", "ReduceMin"):
            for axis in (0, 1):
                gb.output(getattr(es, op)(x, axes_const([axis])), f"{op}_{axis}")
    check_graph(gb.graph, {"x": data})


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
def test_reductions_over_empty_dims_give_the_identity(dtype):
    ops = [op for op, dtypes in REDUCE_OPS.items() if dtype in dtypes]
    with es.GraphBuilder("empty") as gb:
        x = es.input("x", dtype, [3, 0, 4])
        for op in ops:
            gb.output(getattr(es, op)(x, axes_const([1])), f"{op}_reduced_empty")
            gb.output(getattr(es, op)(x, axes_const([2]), keepdims=0), f"{op}_kept_empty")
    model = check_graph(gb.graph, {"x": np.zeros((3, 0, 4), dtype)})
    assert model.run({"x": np.zeros((3, 0, 4), dtype)})[0].shape == (3, 1, 4)


def test_reduce_with_runtime_axes_is_not_claimed_unless_they_are_always_empty(rng):
    # Axes known only at run time cannot be packed: the C kernel declines the node. (The
    # compiler cannot plan such a node's output shape anyway.) An axes input of static
    # length 0 is always empty, and the C kernel takes it.
    with es.GraphBuilder("runtime_axes") as gb:
        x = es.input("x", "float32", [3, 5])
        some = es.reduce_sum(x, es.input("axes", "int64", [1]))
        none = es.reduce_sum(x, es.input("no_axes", "int64", [0]), keepdims=0)
        gb.output(some, "some")
        gb.output(none, "none")
    some_node, none_node = some.value.producer, none.value.producer
    # Even with a static output type (as if its shape were known), the axes decide.
    static_out = [TensorType(DType.FLOAT32, (3, 1))]
    assert not supports_reduce(some_node, [v.type for v in some_node.inputs], static_out)
    assert supports_reduce(none_node, [v.type for v in none_node.inputs], [none.value.type])

    with es.GraphBuilder("empty_runtime_axes") as gb:
        x = es.input("x", "float32", [3, 5])
        gb.output(es.reduce_sum(x, es.input("axes", "int64", [0]), keepdims=0), "y")
    check_graph(gb.graph, {"x": random_array(rng, (3, 5), "float32"),
                           "axes": np.zeros(0, np.int64)})


@pytest.mark.parametrize("shape,axes,want", [
    ((3, 5, 7), [1], ([(3, 35)], [(5, 7)], 7)),
    ((3, 5, 7), [2], ([(15, 7)], [(7, 1)], 1)),
    ((3, 5, 7), [0, 1], ([], [(15, 7)], 7)),
    ((2, 3, 4, 5), [1, 3], ([(2, 60), (4, 5)], [(3, 20), (5, 1)], 1)),
    ((1, 5, 1, 7), [0, 2], ([], [], 35)),
    ((3, 1, 5), [0, 2], ([], [(15, 1)], 1)),
])
def test_reduce_layout_drops_unit_dims_and_merges_neighbours(shape, axes, want):
    kept, reduced, inner = reduce_layout(shape, axes)
    assert (kept, reduced, inner) == want


# -- ArgMax, ArgMin ---------------------------------------------------------------------------

ARG_CASES = [((3, 5, 7), axis, keepdims, last) for axis in (0, 1, 2, -1)
             for keepdims, last in ((1, 0), (0, 1))]
ARG_CASES += [((301, 257), 0, 1, 0), ((301, 257), 1, 0, 1), ((6,), 0, 0, 0), ((1, 9), 1, 1, 1)]


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
def test_arg_matches_reference_with_ties(op, dtype, rng):
    fn = getattr(es, op)
    graph = build_cases(ARG_CASES, lambda x, c: fn(x, axis=c[1], keepdims=c[2],
                                                   select_last_index=c[3]), dtype)
    # Few distinct values: ties everywhere, so the first/last index rule decides.
    feeds = {f"x{i}": random_array(rng, case[0], dtype, -3, 3)
             for i, case in enumerate(ARG_CASES)}
    check_graph(graph, feeds, labels=[str(c) for c in ARG_CASES])


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_nan_and_inf_follow_the_reference(op):
    nan, inf = np.nan, np.inf
    data = np.array([[1.0, nan, 3.0, nan, -1.0], [inf, 2.0, inf, -inf, 0.5],
                     [-inf, -inf, 1.0, -inf, nan], [nan, 1.0, 2.0, 3.0, 4.0]], np.float32)
    cases = [(data.shape, axis, 1, last) for axis in (0, 1) for last in (0, 1)]
    graph = build_cases(cases, lambda x, c: getattr(es, op)(x, axis=c[1], keepdims=c[2],
                                                            select_last_index=c[3]), "float32")
    check_graph(graph, {f"x{i}": data for i in range(len(cases))}, labels=[str(c) for c in cases])


# -- CumSum -----------------------------------------------------------------------------------

CUMSUM_CASES = [((3, 5, 7), axis, exclusive, reverse) for axis in (0, 1, 2, -1)
                for exclusive in (0, 1) for reverse in (0, 1)]
CUMSUM_CASES += [((301, 257), 0, 0, 1), ((301, 257), 1, 1, 0), ((9,), 0, 1, 1),
                 ((1, 4, 1), 1, 0, 0)]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("axis_dtype", ["int64", "int32"])
def test_cumsum_matches_reference(dtype, axis_dtype, rng):
    def make(x, case):
        axis = es.const(np.array(case[1], axis_dtype))
        return es.cum_sum(x, axis, exclusive=case[2], reverse=case[3])

    graph = build_cases(CUMSUM_CASES, make, dtype)
    feeds = {f"x{i}": random_array(rng, case[0], dtype, -1000, 1000)
             for i, case in enumerate(CUMSUM_CASES)}
    check_graph(graph, feeds, labels=[str(c) for c in CUMSUM_CASES])


def test_cumsum_special_values_and_wraparound():
    floats = np.array([[1.0, np.inf, 2.0, -np.inf, 3.0], [np.nan, 1.0, 2.0, 3.0, 4.0]],
                      np.float32)
    ints = np.array([[np.iinfo(np.int32).max, 1, 2], [np.iinfo(np.int32).min, -1, -1]], np.int32)
    with es.GraphBuilder("special") as gb:
        f = es.input("f", "float32", list(floats.shape))
        i = es.input("i", "int32", list(ints.shape))
        for exclusive in (0, 1):
            for reverse in (0, 1):
                for axis in (0, 1):
                    axis_value = es.const(np.array(axis, np.int64))
                    gb.output(es.cum_sum(f, axis_value, exclusive=exclusive, reverse=reverse))
                    gb.output(es.cum_sum(i, axis_value, exclusive=exclusive, reverse=reverse))
    check_graph(gb.graph, {"f": floats, "i": ints})


def test_long_cumsum_runs_in_double(rng):
    n = 100_003
    data = (1000 + rng.uniform(0, 1, (2, n))).astype(np.float32)
    with es.GraphBuilder("long") as gb:
        x = es.input("x", "float32", [2, n])
        gb.output(es.cum_sum(x, es.const(np.array(1, np.int64))), "rows")
        gb.output(es.cum_sum(es.transpose(x), es.const(np.array(0, np.int64))), "columns")
    check_graph(gb.graph, {"x": data}, rtol=1e-6, atol=0)


# -- CumProd (CumSum's template) ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_cumprod_matches_reference(dtype, rng):
    def make(x, case):
        return es.cum_prod(x, es.const(np.array(case[1], np.int64)), exclusive=case[2],
                           reverse=case[3])

    graph = build_cases(CUMSUM_CASES, make, dtype)
    # factors near 1 keep long float products finite; integers of up to 3 wrap around
    low, high = (-3, 3) if dtype.startswith("int") else (0.9, 1.1)
    feeds = {}
    for i, case in enumerate(CUMSUM_CASES):
        data = random_array(rng, case[0], dtype, low, high)
        if not dtype.startswith("int"):  # both signs
            data = (data * rng.choice([-1, 1], case[0])).astype(dtype)
        feeds[f"x{i}"] = data
    check_graph(graph, feeds, rtol=1e-6, atol=0, labels=[str(c) for c in CUMSUM_CASES])


@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
@pytest.mark.parametrize("axis_dtype", ["int32", "int64"])
def test_scan_axis_read_at_run_time(op, axis_dtype, rng):
    """An axis that is a graph input (as in ONNX's node tests) is read by the kernel."""
    data = random_array(rng, (3, 4, 5), "float32", 0.5, 1.5)
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [3, 4, 5])
        axis = es.input("axis", axis_dtype, [])
        function = es.cum_sum if op == "CumSum" else es.cum_prod
        gb.output(function(x, axis, exclusive=1, reverse=1), "y")
    model = ge_hub.compile(gb.graph)
    assert model.summary()["python_steps"] == 0
    for value in (0, 1, 2, -1, -3):
        feeds = {"x": data, "axis": np.array(value, axis_dtype)}
        (got,) = model.run(feeds)
        np.testing.assert_allclose(got, evaluate(gb.graph, feeds)[0], rtol=1e-6)
    with pytest.raises(KernelError, match="'axis' value 3 is out of range"):
        model.run({"x": data, "axis": np.array(3, axis_dtype)})


def test_cumprod_special_values_and_wraparound():
    floats = np.array([[2.0, np.inf, 0.0, 3.0, -1.0], [np.nan, 1.0, 2.0, 3.0, 4.0]],
                      np.float32)
    ints = np.array([[65537, 65537, 3], [np.iinfo(np.int32).min, -1, 2]], np.int32)
    with es.GraphBuilder("special") as gb:
        f = es.input("f", "float32", list(floats.shape))
        i = es.input("i", "int32", list(ints.shape))
        for exclusive in (0, 1):
            for reverse in (0, 1):
                for axis in (0, 1):
                    axis_value = es.const(np.array(axis, np.int64))
                    gb.output(es.cum_prod(f, axis_value, exclusive=exclusive, reverse=reverse))
                    gb.output(es.cum_prod(i, axis_value, exclusive=exclusive, reverse=reverse))
    check_graph(gb.graph, {"f": floats, "i": ints})


# -- TopK -------------------------------------------------------------------------------------

TOPK_CASES = [((3, 5, 7), axis, k, largest) for axis, k in ((0, 2), (1, 5), (2, 1), (-1, 4))
              for largest in (0, 1)]
TOPK_CASES += [((4, 1000), -1, 7, 1), ((4, 1000), 1, 300, 0), ((300, 6), 0, 17, 1),
               ((11,), 0, 11, 1), ((11,), 0, 0, 0), ((2, 9, 3), 1, 9, 0)]


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
@pytest.mark.parametrize("spread", [3, 1000], ids=["ties", "distinct"])
def test_topk_matches_reference(dtype, spread, rng):
    graph = build_cases(TOPK_CASES, lambda x, c: tuple(es.top_k(
        x, es.const(np.array([c[2]], np.int64)), axis=c[1], largest=c[3])), dtype)
    feeds = {f"x{i}": random_array(rng, case[0], dtype, -spread, spread)
             for i, case in enumerate(TOPK_CASES)}
    check_graph(graph, feeds, labels=[f"{c} {part}" for c in TOPK_CASES
                                      for part in ("values", "indices")])


def test_topk_nan_and_inf_follow_the_reference(rng):
    data = random_array(rng, (5, 40), "float32", -3, 3)
    data[:, ::7] = np.nan
    data[1, ::5] = np.inf
    data[2, 1::6] = -np.inf
    data[3, :] = np.nan
    cases = [(data.shape, axis, k, largest) for axis, k in ((1, 10), (1, 40), (0, 3))
             for largest in (0, 1)]
    graph = build_cases(cases, lambda x, c: tuple(es.top_k(
        x, es.const(np.array([c[2]], np.int64)), axis=c[1], largest=c[3])), "float32")
    check_graph(graph, {f"x{i}": data for i in range(len(cases))})


def test_topk_with_runtime_k_is_not_claimed():
    with es.GraphBuilder("runtime_k") as gb:
        x = es.input("x", "float32", [3, 8])
        values, indices = es.top_k(x, es.input("k", "int64", [1]))
        fixed, _ = es.top_k(x, es.const(np.array([3], np.int64)))
        gb.output(values, "values")
        gb.output(indices, "indices")
        gb.output(fixed, "fixed")
    for tensor, claimed in ((values, False), (fixed, True)):
        node = tensor.value.producer
        types = [v.type for v in node.inputs]
        assert supports_topk(node, types, [v.type for v in node.outputs]) is claimed


# -- Einsum -----------------------------------------------------------------------------------

# (equation, operand shapes, the program the lowering picks)
EINSUM_CASES = [
    ("ij,jk->ik", [(17, 33), (33, 29)], GEMM),
    ("bij,bjk->bik", [(3, 17, 33), (3, 33, 29)], GEMM),
    ("ij,jk->ki", [(17, 33), (33, 29)], GEMM),                   # output transposed: C^T
    ("ji,jk->ik", [(33, 17), (33, 29)], GEMM),                   # A read transposed
    ("ij,kj->ik", [(17, 33), (29, 33)], GEMM),                   # B read transposed
    ("bij,bjk->ibk", [(3, 17, 33), (3, 33, 29)], GEMM),          # batch between M and N
    ("bij,bjk->bki", [(3, 17, 33), (3, 33, 29)], GEMM),
    ("ijb,jkb->bik", [(17, 33, 3), (33, 29, 3)], GEMM),          # operands copied to scratch
    ("bhqd,bhkd->bhqk", [(2, 3, 17, 16), (2, 3, 19, 16)], GEMM),  # attention scores
    ("bqhd,bkhd->bhqk", [(2, 17, 3, 16), (2, 19, 3, 16)], GEMM),
    ("...ij,...jk->...ik", [(2, 1, 17, 33), (1, 3, 33, 29)], GEMM),  # broadcast batch
    ("iab,bjc->ijac", [(9, 5, 7), (7, 11, 6)], GEMM),            # M and N of two labels
    ("ik,kj", [(17, 33), (33, 29)], GEMM),                       # implicit output
    ("i,j->ij", [(70,), (50,)], GEMM),                           # outer product, k = 1
    ("ij,jk->ik", [(3, 4), (4, 5)], GENERIC),                    # too small for BLAS
    ("i,i->", [(101,), (101,)], GENERIC),             # a dot: too small for BLAS
    ("ii->i", [(7, 7)], GENERIC),
    ("ii->", [(7, 7)], GENERIC),
    ("ij->ji", [(5, 6)], GENERIC),
    ("ij->", [(5, 6)], GENERIC),
    ("ijk->kji", [(3, 4, 5)], GENERIC),
    ("ij,jk->k", [(17, 33), (33, 29)], GENERIC),                 # i summed from A alone
    ("ij,jk,kl->il", [(5, 6), (6, 7), (7, 8)], GENERIC),
    ("bii,bj->bij", [(3, 4, 4), (3, 5)], GENERIC),
    ("i,i->i", [(9,), (9,)], GENERIC),
    ("...i,...i->...", [(3, 1, 6), (1, 4, 6)], GENERIC),
    # Past the parallel grain: chunks start in the middle of output rows.
    ("ijk->kji", [(30, 40, 50)], GENERIC),
    ("ij,ij->ji", [(301, 257), (301, 257)], GENERIC),
    ("bi,bi->b", [(40_000, 3), (40_000, 3)], GENERIC),
]


def einsum_graph(equation, shapes):
    with es.GraphBuilder("einsum") as gb:
        inputs = [es.input(f"x{i}", "float32", list(s)) for i, s in enumerate(shapes)]
        gb.output(es.einsum(*inputs, equation=equation), "y")
    return gb.graph


@pytest.mark.parametrize("equation,shapes,program", EINSUM_CASES,
                         ids=[c[0] for c in EINSUM_CASES])
def test_einsum_matches_reference(equation, shapes, program, rng):
    graph = einsum_graph(equation, shapes)
    feeds = {f"x{i}": random_array(rng, s, "float32") for i, s in enumerate(shapes)}
    # BLAS sums in float32; the reference in float64.
    model = check_graph(graph, feeds, rtol=1e-4, atol=1e-4)
    (step,) = model.plan.steps
    assert struct.unpack_from("=q", step.attrs)[0] == program


def test_einsum_propagates_nan_and_inf(rng):
    a = random_array(rng, (17, 33), "float32")
    b = random_array(rng, (33, 29), "float32")
    a[3, 5] = np.nan
    b[7, 2] = np.inf
    for equation in ("ij,jk->ik", "ij,jk->k"):
        check_graph(einsum_graph(equation, [a.shape, b.shape]), {"x0": a, "x1": b}, rtol=1e-4,
                    atol=1e-4)


def test_bfloat16_einsum_falls_back_to_the_reference(rng):
    # The C kernel is float32 only; bfloat16 runs the reference, counted as a fallback.
    with es.GraphBuilder("einsum") as gb:
        a, b = es.input("a", "bfloat16", [2, 3, 4]), es.input("b", "bfloat16", [2, 4, 5])
        gb.output(es.einsum(a, b, equation="bij,bjk->bik"), "y")
    feeds = {"a": random_array(rng, (2, 3, 4), "float32").astype(DType.BFLOAT16.numpy),
             "b": random_array(rng, (2, 4, 5), "float32").astype(DType.BFLOAT16.numpy)}
    model = ge_hub.compile(gb.graph)
    (got,) = model.run(feeds)
    assert model.summary()["fallback_steps"] == 1
    (want,) = evaluate(gb.graph, feeds)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


# -- bad blobs are refused, never read past -------------------------------------------------


def _single_step(model):
    (step,) = model.plan.steps
    return model.plan, step


def test_a_reduce_blob_that_reads_past_the_input_is_rejected(rng):
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [4, 6])
        gb.output(es.reduce_sum(x, axes_const([1])), "y")
    plan, step = _single_step(ge_hub.compile(gb.graph))
    data = random_array(rng, (4, 6), "float32")
    # Rows 4 apart by 7 elements walk past the end of a 24-element input.
    bad = dataclasses.replace(step, attrs=pack_values([1, 4, 7, 1, 6, 1, 1]))
    with pytest.raises(KernelError, match="compiled layout"):
        Executor(dataclasses.replace(plan, steps=(bad,))).run([data])
    truncated = dataclasses.replace(step, attrs=step.attrs[:-8])
    with pytest.raises(KernelError, match="attribute blob"):
        Executor(dataclasses.replace(plan, steps=(truncated,))).run([data])


@pytest.mark.parametrize("op", ["ArgMax", "CumSum", "CumProd", "TopK"])
def test_one_axis_blobs_are_checked(op, rng):
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [4, 6])
        if op == "ArgMax":
            out = es.arg_max(x, axis=1)
        elif op == "CumSum":
            out = es.cum_sum(x, es.const(np.array(1, np.int64)))
        elif op == "CumProd":
            out = es.cum_prod(x, es.const(np.array(1, np.int64)))
        else:
            out = es.top_k(x, es.const(np.array([2], np.int64)))[0]
        gb.output(out, "y")
    plan, step = _single_step(ge_hub.compile(gb.graph))
    data = random_array(rng, (4, 6), "float32")
    ints = list(struct.unpack(f"={len(step.attrs) // 8}q", step.attrs))
    ints[0] += 1  # one more outer slice than the tensors hold
    with pytest.raises(KernelError, match="elements"):
        Executor(dataclasses.replace(plan, steps=(dataclasses.replace(
            step, attrs=pack_values(ints)),))).run([data])
    with pytest.raises(KernelError, match="attribute blob"):
        Executor(dataclasses.replace(plan, steps=(dataclasses.replace(
            step, attrs=step.attrs + b"\0" * 8),))).run([data])


@pytest.mark.parametrize("equation,shapes", [("ij,jk->ik", [(17, 33), (33, 29)]),
                                             ("ij->ji", [(5, 6)])])
def test_an_einsum_blob_that_reads_past_its_buffers_is_rejected(equation, shapes, rng):
    plan, step = _single_step(ge_hub.compile(einsum_graph(equation, shapes)))
    feeds = [random_array(rng, s, "float32") for s in shapes]
    ints = list(struct.unpack(f"={len(step.attrs) // 8}q", step.attrs))
    if ints[0] == GEMM:
        at = ints.index(29, 2)  # n, after nb = 0 and m
        ints[at] = 40
    else:
        ints[-1] = 9  # a stride that walks past the input
    with pytest.raises(KernelError, match="reaches past|reads up to"):
        Executor(dataclasses.replace(plan, steps=(dataclasses.replace(
            step, attrs=pack_values(ints)),))).run(feeds)
    with pytest.raises(KernelError, match="attribute blob"):
        Executor(dataclasses.replace(plan, steps=(dataclasses.replace(
            step, attrs=step.attrs[:-8]),))).run(feeds)


# -- graphs that tempt the memory planner ---------------------------------------------------


def _arena_offsets(model):
    return {model.plan.tensors[t].offset for step in model.plan.steps for t in step.outputs
            if model.plan.tensors[t].storage is Storage.ARENA}


def test_reductions_read_values_that_later_inplace_ops_overwrite(rng):
    # h is read by the reductions and again after Relu/Add may have reused its memory.
    with es.GraphBuilder("chain") as gb:
        x = es.input("x", "float32", [33, 65])
        h = es.exp(x * 0.5)
        total = es.reduce_sum(h, axes_const([1]))
        peak = es.reduce_max(h, axes_const([0]))
        running = es.cum_sum(h, es.const(np.array(1, np.int64)), exclusive=1)
        relu = es.relu(h - 1.0)
        shifted = relu + total
        normalized = shifted / peak
        top_values, top_indices = es.top_k(running - relu, es.const(np.array([3], np.int64)))
        gb.output(es.reduce_log_sum_exp(normalized, axes_const([1]), keepdims=0), "lse")
        gb.output(es.arg_max(normalized + h, axis=0), "argmax")
        gb.output(top_values, "top_values")
        gb.output(top_indices, "top_indices")
        gb.output(es.reduce_mean(h, keepdims=0), "mean")
    model = check_graph(gb.graph, {"x": random_array(rng, (33, 65), "float32")})
    assert len(_arena_offsets(model)) < len(model.plan.steps)  # memory really was reused


def test_einsum_in_a_chain_with_reuse(rng):
    with es.GraphBuilder("attention") as gb:
        q = es.input("q", "float32", [2, 3, 17, 16])
        k = es.input("k", "float32", [2, 3, 19, 16])
        v = es.input("v", "float32", [2, 3, 19, 16])
        scores = es.einsum(q * 0.25, k, equation="bhqd,bhkd->bhqk")
        weights = es.softmax(scores, axis=-1)
        context = es.einsum(weights, v, equation="bhqk,bhkd->bhqd")
        gb.output(es.reduce_sum(context + es.reduce_max(scores, axes_const([-1])),
                                axes_const([-1])), "y")
        gb.output(es.einsum(context, equation="bhqd->bqhd"), "context")
    feeds = {name: random_array(rng, shape, "float32") for name, shape in
             (("q", (2, 3, 17, 16)), ("k", (2, 3, 19, 16)), ("v", (2, 3, 19, 16)))}
    check_graph(gb.graph, feeds, rtol=1e-4, atol=1e-5)


@pytest.fixture
def rng():
    return np.random.default_rng(0)
