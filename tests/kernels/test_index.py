"""The index C kernels (core/kernels/index.c) against their ops' NumPy references.

Gathers with every axis, negative and int32 indices, scalar and batched indices;
scatters with every reduction, repeated targets (in index order: 'none' keeps the last
update, float32 sums are rounded once) and NaN; Trilu with every k, given at run time
too; Range; OneHot; every element size for the kernels that only move elements;
indices out of range failing with the op named; scatters and Trilu writing in place.
"""

from __future__ import annotations

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.executor import KernelError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Graph
from ge_hub.ir.types import TensorType
from ge_hub.ops import get_schema
from ge_hub.plan import Storage
from ge_hub.reference import evaluate

from .test_shape import ALL_DTYPES, check, random_array, run_plan_of, with_specials

REDUCING = ["float32", "float64", "int32", "int64"]


@pytest.fixture
def rng():
    return np.random.default_rng(1)


def indices_for(rng, shape, size, dtype="int64"):
    """Random indices into an axis of `size`, negative ones included."""
    return rng.integers(-size, size, size=shape).astype(dtype)


def compile_one(build, arrays):
    with es.GraphBuilder("g") as gb:
        inputs = [es.input(f"x{i}", str(a.dtype), list(a.shape)) for i, a in enumerate(arrays)]
        gb.output(build(*inputs), "y")
    return ge_hub.compile(gb.graph)


def run_bad_indices(build, arrays, match):
    model = compile_one(build, arrays)
    assert model.summary()["fallback_steps"] == 0
    with pytest.raises(KernelError, match=match):
        model.run({f"x{i}": a for i, a in enumerate(arrays)})


# -- Gather ------------------------------------------------------------------------------


@pytest.mark.parametrize("shape, axis, index_shape", [
    ((5, 7), 0, (3,)),
    ((5, 7), 1, (4, 2)),
    ((5, 7), -1, ()),                  # a scalar index drops the axis
    ((3, 4, 5), 1, (2, 3)),
    ((3, 4, 5), 2, (6,)),              # one element per index
    ((301, 65), 0, (513,)),            # past the parallel grain
    ((7, 1001), 1, (67,)),
])
@pytest.mark.parametrize("index_dtype", ["int64", "int32"])
def test_gather_matches_reference(shape, axis, index_shape, index_dtype, rng):
    x = random_array(rng, shape)
    idx = indices_for(rng, index_shape, shape[axis], index_dtype)
    check(lambda x, i: es.gather(x, i, axis=axis), [x, idx], kernels=["index_gather"])


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_gather_every_dtype(dtype, rng):
    x = with_specials(random_array(rng, (6, 5), dtype))
    idx = indices_for(rng, (4,), 6)
    check(lambda x, i: [es.gather(x, i, axis=0), es.gather(x, i, axis=1)],
          [x, np.clip(idx, -5, 4)])


def test_gather_of_a_constant_table():
    rng = np.random.default_rng(3)
    table = random_array(rng, (50, 16))
    idx = indices_for(rng, (2, 9), 50)
    check(lambda i: es.gather(es.const(table), i), [idx])


@pytest.mark.parametrize("bad", [5, -6])
def test_gather_index_out_of_range_is_an_error(bad, rng):
    x = random_array(rng, (5, 3))
    idx = np.array([0, bad, 1], np.int64)
    run_bad_indices(lambda x, i: es.gather(x, i), [x, idx],
                    rf"Gather: input 'indices' has value {bad}, out of range \[-5, 4\]")


# -- GatherElements ----------------------------------------------------------------------


@pytest.mark.parametrize("shape, index_shape, axis", [
    ((4, 5), (3, 5), 0),
    ((4, 5), (4, 7), 1),
    ((4, 5), (2, 3), -1),               # smaller than data in the other dim
    ((3, 4, 5), (3, 6, 5), 1),
    ((3, 4, 5), (2, 4, 3), 0),
    ((2, 3, 4, 5), (2, 3, 4, 2), 3),
    ((64, 33, 17), (64, 33, 17), 1),    # past the parallel grain
])
@pytest.mark.parametrize("index_dtype", ["int64", "int32"])
def test_gather_elements_matches_reference(shape, index_shape, axis, index_dtype, rng):
    x = random_array(rng, shape)
    idx = indices_for(rng, index_shape, shape[axis], index_dtype)
    check(lambda x, i: es.gather_elements(x, i, axis=axis), [x, idx],
          kernels=["index_gather_elements"])


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_gather_elements_every_dtype(dtype, rng):
    x = with_specials(random_array(rng, (4, 6), dtype))
    check(lambda x, i: es.gather_elements(x, i, axis=1), [x, indices_for(rng, (4, 3), 6)])


def test_gather_elements_index_out_of_range_is_an_error(rng):
    x = random_array(rng, (3, 4))
    idx = np.array([[0, 1], [2, 4], [1, 1]], np.int32)
    run_bad_indices(lambda x, i: es.gather_elements(x, i, axis=1), [x, idx],
                    r"GatherElements: input 'indices' has value 4, out of range \[-4, 3\]")


# -- GatherND ----------------------------------------------------------------------------


@pytest.mark.parametrize("shape, index_shape, batch_dims", [
    ((4, 5, 6), (3, 1), 0),
    ((4, 5, 6), (2, 3, 2), 0),
    ((4, 5, 6), (7, 3), 0),             # full depth: single elements
    ((4, 5, 6), (4, 2, 1), 1),
    ((2, 3, 4, 5), (2, 3, 2), 2),
    ((33, 40, 50), (2, 2, 1), 0),
])
def test_gather_nd_matches_reference(shape, index_shape, batch_dims, rng):
    x = random_array(rng, shape)
    sizes = shape[batch_dims:batch_dims + index_shape[-1]]
    idx = np.stack([indices_for(rng, index_shape[:-1], s) for s in sizes], axis=-1)
    check(lambda x, i: es.gather_nd(x, i, batch_dims=batch_dims), [x, idx],
          kernels=["index_gather_nd"])


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_gather_nd_every_dtype(dtype, rng):
    x = with_specials(random_array(rng, (3, 4, 2), dtype))
    idx = np.stack([indices_for(rng, (5,), 3), indices_for(rng, (5,), 4)], axis=-1)
    check(lambda x, i: es.gather_nd(x, i), [x, idx])


def test_gather_nd_index_out_of_range_is_an_error(rng):
    x = random_array(rng, (3, 4))
    idx = np.array([[0, 1], [-4, 0]], np.int64)
    run_bad_indices(lambda x, i: es.gather_nd(x, i), [x, idx],
                    r"GatherND: input 'indices' has value -4, out of range \[-3, 2\]")


# -- ScatterElements ---------------------------------------------------------------------


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", REDUCING)
@pytest.mark.parametrize("shape, index_shape, axis", [
    ((4, 5), (6, 5), 0),               # more updates than rows: repeated targets
    ((4, 5), (4, 9), -1),
    ((3, 4, 5), (2, 3, 5), 1),
])
def test_scatter_elements_matches_reference(reduction, dtype, shape, index_shape, axis, rng):
    data = random_array(rng, shape, dtype)
    idx = indices_for(rng, index_shape, shape[axis])
    updates = random_array(rng, index_shape, dtype)
    check(lambda d, i, u: es.scatter_elements(d, i, u, axis=axis, reduction=reduction),
          [data, idx, updates], kernels=["index_scatter_elements"])


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_scatter_elements_none_every_dtype(dtype, rng):
    data = with_specials(random_array(rng, (5, 3), dtype))
    updates = random_array(rng, (7, 3), dtype)
    check(lambda d, i, u: es.scatter_elements(d, i, u),
          [data, indices_for(rng, (7, 3), 5, "int32"), updates])


def test_scatter_float32_sums_are_rounded_once():
    # 1 + 2**-24 twice: float32 steps would round each time (to even) and stay at 1.
    data = np.ones((1, 1), np.float32)
    updates = np.full((2, 1), 2.0**-24, np.float32)
    idx = np.zeros((2, 1), np.int64)
    model = check(lambda d, i, u: es.scatter_elements(d, i, u, reduction="add"),
                  [data, idx, updates])
    (got,) = model.run([data, idx, updates])
    assert got[0, 0] == np.float32(1 + 2.0**-23)


@pytest.mark.parametrize("reduction", ["max", "min", "add", "mul"])
def test_scatter_reductions_carry_nan_and_inf(reduction, rng):
    data = random_array(rng, (4, 3))
    data[0, 0], data[1, 1] = np.nan, np.inf
    updates = random_array(rng, (6, 3))
    updates[2, 2], updates[3, 0] = np.nan, -np.inf
    idx = indices_for(rng, (6, 3), 4)
    check(lambda d, i, u: es.scatter_elements(d, i, u, reduction=reduction),
          [data, idx, updates])


def test_scatter_elements_index_out_of_range_is_an_error(rng):
    data = random_array(rng, (3, 4))
    idx = np.array([[0, 3, 1]], np.int64)
    run_bad_indices(lambda d, i, u: es.scatter_elements(d, i, u),
                    [data, idx, random_array(rng, (1, 3))],
                    r"ScatterElements: input 'indices' has value 3, out of range \[-3, 2\]")


@pytest.mark.parametrize("reduction, fallbacks", [("add", 1), ("none", 0)])
def test_scatter_reduction_on_an_unclaimed_dtype_is_left_to_the_reference(
        reduction, fallbacks, rng):
    data, updates = random_array(rng, (3, 4), "int8"), random_array(rng, (2, 4), "int8")
    idx = indices_for(rng, (2, 4), 4)
    with es.GraphBuilder("g") as gb:
        inputs = [es.input(n, str(a.dtype), list(a.shape))
                  for n, a in (("d", data), ("i", idx), ("u", updates))]
        gb.output(es.scatter_elements(*inputs, axis=1, reduction=reduction), "y")
    model = ge_hub.compile(gb.graph)
    assert model.summary()["fallback_steps"] == fallbacks
    (got,) = model.run([data, idx, updates])
    np.testing.assert_array_equal(got, evaluate(gb.graph, [data, idx, updates])[0])


# -- ScatterND ---------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", REDUCING)
@pytest.mark.parametrize("shape, index_shape", [
    ((6, 4), (9, 1)),                  # rows, repeated
    ((4, 5, 3), (2, 3, 2)),
    ((4, 5), (11, 2)),                 # single elements
])
def test_scatter_nd_matches_reference(reduction, dtype, shape, index_shape, rng):
    data = random_array(rng, shape, dtype)
    depth = index_shape[-1]
    idx = np.stack([indices_for(rng, index_shape[:-1], s) for s in shape[:depth]], axis=-1)
    updates = random_array(rng, index_shape[:-1] + shape[depth:], dtype)
    check(lambda d, i, u: es.scatter_nd(d, i, u, reduction=reduction), [data, idx, updates],
          kernels=["index_scatter_nd"])


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_scatter_nd_none_every_dtype(dtype, rng):
    data = with_specials(random_array(rng, (5, 3), dtype))
    idx = indices_for(rng, (4, 1), 5)
    check(lambda d, i, u: es.scatter_nd(d, i, u), [data, idx, random_array(rng, (4, 3), dtype)])


def test_scatter_nd_index_out_of_range_is_an_error(rng):
    data = random_array(rng, (3, 4))
    idx = np.array([[1, 2], [0, -5]], np.int64)
    run_bad_indices(lambda d, i, u: es.scatter_nd(d, i, u),
                    [data, idx, random_array(rng, (2,))],
                    r"ScatterND: input 'indices' has value -5, out of range \[-4, 3\]")


# -- Trilu -------------------------------------------------------------------------------


@pytest.mark.parametrize("upper", [1, 0])
@pytest.mark.parametrize("shape, k", [
    ((5, 5), None),
    ((4, 7), 2),
    ((7, 4), -2),
    ((2, 3, 5, 6), 1),
    ((3, 4), 100),
    ((3, 4), -100),
    ((129, 300), -7),
])
def test_trilu_matches_reference(upper, shape, k, rng):
    x = random_array(rng, shape)
    check(lambda x: es.trilu(x, None if k is None else np.array(k, np.int64), upper=upper),
          [x], kernels=["index_trilu"])


@pytest.mark.parametrize("k", [0, 3, -2, 2**62, -(2**62)])
def test_trilu_with_k_given_at_run_time(k, rng):
    x = random_array(rng, (3, 5, 4))
    check(lambda x, k: [es.trilu(x, k), es.trilu(x, k, upper=0)], [x, np.array(k, np.int64)])


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_trilu_every_dtype(dtype, rng):
    x = with_specials(random_array(rng, (2, 4, 5), dtype))
    check(lambda x: [es.trilu(x), es.trilu(x, upper=0)], [x])


# -- Range: folded at compile time when its inputs are constants, so run it from a plan --


@pytest.mark.parametrize("dtype, start, limit, delta", [
    ("float32", 0.5, 10.3, 0.7),
    ("float32", 3.0, -4.0, -0.3),
    ("float64", -1.25, 2.5, 0.125),
    ("int32", -7, 40, 3),
    ("int32", 10, -10, -4),
    ("int64", 5, 2**40, 2**35),
])
def test_range_matches_reference(dtype, start, limit, delta):
    numpy_dtype = DType.parse(dtype).numpy
    scalars = [np.array(v, numpy_dtype) for v in (start, limit, delta)]
    want = get_schema("Range").run_reference(scalars, {"stash_type": 1})[0]
    graph = Graph("g")
    inputs = [graph.add_input(n, TensorType(DType.parse(dtype), ()))
              for n in ("start", "limit", "delta")]
    node = graph.add_node("Range", inputs, [TensorType(DType.parse(dtype), want.shape)])
    graph.set_outputs(node.outputs)
    (got,), plan = run_plan_of(graph, scalars)
    assert [s.kernel for s in plan.steps] == ["index_range"]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


# -- OneHot ------------------------------------------------------------------------------


@pytest.mark.parametrize("index_shape, axis", [((7,), -1), ((3, 4), 0), ((3, 4), 1),
                                               ((2, 3, 5), -2), ((), 0)])
@pytest.mark.parametrize("index_dtype", ["int64", "int32", "float32"])
def test_one_hot_matches_reference(index_shape, axis, index_dtype, rng):
    depth = 5
    # Out of range on both sides (all off), negative (from the end), fractional floats.
    indices = rng.integers(-depth - 2, depth + 2, size=index_shape).astype(index_dtype)
    if index_dtype == "float32":
        indices = indices + rng.uniform(-0.9, 0.9, size=index_shape).astype(np.float32)
    values = np.array([-1.5, 2.5], np.float32)
    check(lambda i: es.one_hot(i, np.array(depth, np.int64), values, axis=axis), [indices],
          kernels=["index_one_hot"])


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast")  # the reference's NaN
def test_one_hot_float_indices_at_the_edges():
    indices = np.array([np.nan, np.inf, -np.inf, -4.5, -3.5, -3.0, 2.999, 3.0, -0.5],
                       np.float32)
    check(lambda i, v: es.one_hot(i, np.array(3, np.int64), v),
          [indices, np.array([0, 1], np.int64)])


# OneHot's schema takes values of every dtype; the kernel copies them by element size.
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_one_hot_values_of_every_dtype(dtype, rng):
    values = random_array(rng, (2,), dtype)
    check(lambda i, v: es.one_hot(i, np.array(4, np.int64), v),
          [indices_for(rng, (3, 2), 4), values])


# -- in place ----------------------------------------------------------------------------


def _writes_in_place(model) -> set[str]:
    """Nodes whose output shares the arena bytes of their first input."""
    plan = model.plan
    shared = set()
    for step in plan.steps:
        out, first = plan.tensors[step.outputs[0]], plan.tensors[step.inputs[0]]
        if (out.storage is first.storage is Storage.ARENA and out.offset == first.offset):
            shared.add(step.node)
    return shared


def test_scatters_and_trilu_write_in_place_only_over_dead_values(rng):
    x = random_array(rng, (6, 5))
    idx = indices_for(rng, (3, 1), 6)
    updates = random_array(rng, (3, 5))
    element_idx = indices_for(rng, (2, 5), 6)
    element_updates = random_array(rng, (2, 5))

    def build(x, i, u, j, v):
        a = es.mul(x, x)                                 # dead after the scatter
        s = es.scatter_nd(a, i, u, reduction="add", name="scatter_dead")
        b = es.add(s, x)                                 # read again after each user
        t = es.trilu(b, name="trilu_live")
        e = es.scatter_elements(b, j, v, name="scatter_live")
        d = es.trilu(es.mul(t, t), upper=0, name="trilu_dead")
        return es.add(es.add(e, b), es.add(d, t))

    model = check(build, [x, idx, updates, element_idx, element_updates])
    in_place = _writes_in_place(model)
    assert {"scatter_dead", "trilu_dead"} <= in_place
    assert not {"trilu_live", "scatter_live"} & in_place
