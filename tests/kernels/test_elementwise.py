"""The elementwise C kernels (core/kernels/elementwise.c) against their ops' NumPy references.

Each case builds a one-op graph with ES, compiles it, checks that no step fell back to
Python, and compares the C result with the op's reference on the same inputs: random
non-zero data of odd sizes, broadcast in every position, every dtype a kernel claims,
IEEE special values, integer edge cases, and small graphs whose memory plan writes in
place.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.executor import Executor, KernelError
from ge_hub.kernels.base import pack_values
from ge_hub.kernels.elementwise import broadcast_layout
from ge_hub.ops import get_schema
from ge_hub.plan import Storage
from ge_hub.reference import evaluate

# Two-input shapes: broadcasting in every position. The large ones exceed the kernels'
# parallel grain, so that chunks start in the middle of rows.
BINARY_SHAPES = {
    "same": [(3, 5, 7), (3, 5, 7)],
    "scalar_right": [(3, 5, 7), ()],
    "scalar_left": [(), (4, 7)],
    "row": [(5, 7), (7,)],
    "column": [(5, 7), (5, 1)],
    "middle": [(2, 3, 4), (1, 3, 1)],
    "both_sides": [(3, 1), (1, 4)],
    "rank_mismatch": [(2, 3, 4, 5), (4, 1)],
    "left_broadcast": [(1, 5, 1), (3, 5, 7)],
    "large_column": [(301, 257), (301, 1)],
    "large_general": [(33, 41, 61), (33, 1, 61)],
}
# Shapes where the second input broadcasts to the first (PRelu's slope).
ONE_WAY = ("same", "scalar_right", "row", "column", "rank_mismatch", "large_column",
           "large_general")

FLOAT_INT = ("float32", "int32", "int64")


def random_array(rng, shape, dtype, low=-3.0, high=3.0):
    """Random non-zero data; integers in [-50, 50]."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        lo = 0 if dtype.kind == "u" else -50
        data = rng.integers(lo, 51, size=shape)
        data[data == 0] = 7
        return data.astype(dtype)
    data = rng.uniform(low, high, size=shape)
    data[data == 0] = 0.5
    return data.astype(dtype)


def compile_op(op: str, arrays, attrs=None):
    """A compiled one-op graph whose inputs have the arrays' dtypes and shapes."""
    with es.GraphBuilder("g") as gb:
        inputs = [es.input(f"x{i}", str(a.dtype), list(a.shape)) for i, a in enumerate(arrays)]
        out = es.op(op, *inputs, **(attrs or {}))
        gb.output(out[0] if isinstance(out, tuple) else out, "y")
    return ge_hub.compile(gb.graph)


def run_c(op: str, arrays, attrs=None) -> np.ndarray:
    """Run op in C (asserting it really ran in C) and return its output."""
    model = compile_op(op, arrays, attrs)
    (result,) = model.run({f"x{i}": a for i, a in enumerate(arrays)})
    assert model.summary()["fallback_steps"] == 0, model.summary()
    return result


def reference(op: str, arrays, attrs=None) -> np.ndarray:
    return get_schema(op).run_reference(list(arrays), dict(attrs or {}))[0]


def check(op: str, arrays, attrs=None, rtol=1e-6, atol=0.0):
    got = run_c(op, arrays, attrs)
    want = reference(op, arrays, attrs)
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


# -- binary ops on random inputs -----------------------------------------------------------

BINARY_CASES = [
    *((op, dt, {}) for op in ("Add", "Sub", "Mul", "Div", "Max", "Min") for dt in FLOAT_INT),
    *((op, "float64", {}) for op in ("Add", "Sub", "Mul", "Div")),
    ("Mod", "float32", {"fmod": 1}),
    *(("Mod", dt, {"fmod": fmod}) for dt in ("int32", "int64") for fmod in (0, 1)),
    *((op, dt, {}) for op in ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual")
      for dt in (*FLOAT_INT, "float64")),
    *((op, "bool", {}) for op in ("Equal", "And", "Or", "Xor")),
    ("BitShift", "uint8", {"direction": "LEFT"}),
    ("BitShift", "uint8", {"direction": "RIGHT"}),
]


@pytest.mark.parametrize("shapes", BINARY_SHAPES.values(), ids=BINARY_SHAPES.keys())
@pytest.mark.parametrize("op,dtype,attrs", BINARY_CASES,
                         ids=[f"{op}-{dt}-{attrs}" for op, dt, attrs in BINARY_CASES])
def test_binary_matches_reference(op, dtype, attrs, shapes, rng):
    arrays = [random_array(rng, s, dtype) for s in shapes]
    if op == "BitShift":
        arrays[1] = rng.integers(0, 11, size=shapes[1]).astype(np.uint8)  # some >= 8
    if dtype in ("int32", "int64") and op in ("Equal", "Less", "LessOrEqual", "Greater",
                                               "GreaterOrEqual"):
        arrays = [a % 4 for a in arrays]  # many equal pairs
    check(op, arrays, attrs)


@pytest.mark.parametrize("exponent", ["float32", "int32", "int64"])
@pytest.mark.parametrize("shapes", BINARY_SHAPES.values(), ids=BINARY_SHAPES.keys())
def test_pow_matches_reference(exponent, shapes, rng):
    base = random_array(rng, shapes[0], "float32")
    power = (random_array(rng, shapes[1], "float32") if exponent == "float32"
             else rng.integers(-4, 5, size=shapes[1]).astype(exponent))
    check("Pow", [base, power])


@pytest.mark.parametrize("exponent", [2.0, 1.0, 0.5, -1.0, 3.0, -0.5, 0.0])
def test_pow_by_a_fixed_exponent(exponent, rng):
    base = np.concatenate([random_array(rng, (37,), "float32"),
                           np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, 3e38],
                                    np.float32)])
    check("Pow", [base, np.array(exponent, np.float32)])


@pytest.mark.parametrize("dtype", FLOAT_INT)
@pytest.mark.parametrize("shape", ONE_WAY)
def test_prelu_matches_reference(dtype, shape, rng):
    x_shape, slope_shape = BINARY_SHAPES[shape]
    check("PRelu", [random_array(rng, x_shape, dtype), random_array(rng, slope_shape, dtype)])


# -- cases no C kernel claims: the reference runs as a counted fallback ---------------------

FALLBACK_CASES = [
    ("Mod", [np.array([0.0, -0.0, -3.0, 3.0, np.inf, 1.0, np.nan, 4.5], np.float32),
             np.array([-2.0, 2.0, np.inf, -np.inf, 2.0, 0.0, 2.0, -2.0], np.float32)],
     {"fmod": 0}),
    ("BitShift", [np.array([-8, 4, -1, 64, -128], np.int8),
                  np.array([1, -2, 9, 1, 7], np.int8)], {"direction": "RIGHT"}),
    ("BitShift", [np.array([-8, 4, -1, 1 << 30, 5], np.int32),
                  np.array([1, -2, 40, 1, 31], np.int32)], {"direction": "LEFT"}),
]


@pytest.mark.parametrize("op,arrays,attrs", FALLBACK_CASES,
                         ids=[f"{op}-{a[0].dtype}-{attrs}" for op, a, attrs in FALLBACK_CASES])
def test_unclaimed_cases_fall_back_to_the_reference(op, arrays, attrs):
    model = compile_op(op, arrays, attrs)
    (got,) = model.run({f"x{i}": a for i, a in enumerate(arrays)})
    assert model.summary()["fallback_steps"] == 1, model.summary()
    want = reference(op, arrays, attrs)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


# -- IEEE special values and integer edge cases ----------------------------------------------

SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.5, -3e38, 1e-40],
                    np.float32)


@pytest.mark.parametrize("op,attrs", [
    ("Add", {}), ("Sub", {}), ("Mul", {}), ("Div", {}), ("Mod", {"fmod": 1}), ("Pow", {}),
    ("Max", {}), ("Min", {}), ("PRelu", {}), ("Equal", {}), ("Less", {}),
    ("LessOrEqual", {}), ("Greater", {}), ("GreaterOrEqual", {}), ("Sum", {}), ("Mean", {}),
])
def test_float_special_values(op, attrs):
    # Every pair of special values, through an outer broadcast.
    x = SPECIALS.reshape(-1, 1)
    y = SPECIALS.reshape(1, -1)
    if op == "PRelu":
        x = np.broadcast_to(x, (len(SPECIALS), len(SPECIALS))).copy()
    check(op, [x, y], attrs)


INT_EDGES = {
    "int32": np.array([-2**31, 2**31 - 1, -1, 1, 7, -7, 2, 123456789], np.int32),
    "int64": np.array([-2**63, 2**63 - 1, -1, 1, 7, -7, 2, 1234567890123], np.int64),
}


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("op,attrs", [("Add", {}), ("Sub", {}), ("Mul", {}), ("Div", {}),
                                      ("Mod", {"fmod": 0}), ("Mod", {"fmod": 1}),
                                      ("Max", {}), ("Min", {}), ("PRelu", {})])
def test_integer_wraparound_and_extremes(op, attrs, dtype):
    # Overflow wraps; INT_MIN / -1 wraps to INT_MIN and INT_MIN % -1 is 0, without a trap.
    edges = INT_EDGES[dtype]
    x = np.broadcast_to(edges.reshape(-1, 1), (len(edges), len(edges))).copy()
    check(op, [x, edges.reshape(1, -1)], attrs)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("op,attrs", [("Div", {}), ("Mod", {"fmod": 0}), ("Mod", {"fmod": 1})])
@pytest.mark.parametrize("divisor_shape", [(4, 5), (5,), ()], ids=["full", "row", "scalar"])
def test_integer_zero_divisor_is_an_error(op, attrs, dtype, divisor_shape, rng):
    x = random_array(rng, (4, 5), dtype)
    divisor = random_array(rng, divisor_shape, dtype)
    divisor.reshape(-1)[-1] = 0
    with pytest.raises(ZeroDivisionError):
        reference(op, [x, divisor], attrs)
    model = compile_op(op, [x, divisor], attrs)
    with pytest.raises(KernelError, match=f"{op}: integer input 'B' contains a zero divisor"):
        model.run({"x0": x, "x1": divisor})


def test_integer_zero_dividend_broadcast_to_a_zero_divisor_is_an_error(rng):
    # A fixed dividend over a row of divisors (the `sv` loop).
    divisor = random_array(rng, (3, 6), "int32")
    divisor[2, 4] = 0
    model = compile_op("Div", [np.array(5, np.int32), divisor])
    with pytest.raises(KernelError, match="zero divisor"):
        model.run({"x0": np.array(5, np.int32), "x1": divisor})


# -- variadic ops ---------------------------------------------------------------------------

VARIADIC_SHAPES = {
    "one": [(3, 5)],
    "two_same": [(3, 5), (3, 5)],
    "two_row": [(4, 7), (7,)],
    "three": [(3, 1, 5), (4, 5), ()],
    "four": [(3, 1, 5), (4, 1), (1,), (3, 4, 5)],
    "large": [(70, 1001), (1001,), (70, 1)],
}
VARIADIC_CASES = [("Max", dt) for dt in FLOAT_INT] + [("Min", dt) for dt in FLOAT_INT] + [
    ("Sum", "float32"), ("Mean", "float32")]


@pytest.mark.parametrize("shapes", VARIADIC_SHAPES.values(), ids=VARIADIC_SHAPES.keys())
@pytest.mark.parametrize("op,dtype", VARIADIC_CASES)
def test_variadic_matches_reference(op, dtype, shapes, rng):
    arrays = [random_array(rng, s, dtype) for s in shapes]
    if dtype == "float32" and arrays[0].size > 4:
        arrays[0].reshape(-1)[:3] = [np.nan, np.inf, -np.inf]
    check(op, arrays)


def test_mean_divides_in_double(rng):
    # Sum then divide once, in double: differs from float32 steps for these inputs.
    arrays = [np.full((5,), v, np.float32) for v in (1e8, 3.0, -1e8, 1.0 / 3.0)]
    check("Mean", arrays, rtol=0)
    check("Sum", arrays, rtol=0)


# -- Not and Where -----------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(), (7,), (3, 5, 7), (301, 257)])
def test_not_matches_reference(shape, rng):
    check("Not", [random_array(rng, shape, "bool")])


WHERE_SHAPES = {
    "same": [(3, 5), (3, 5), (3, 5)],
    "condition_scalar": [(), (3, 5), (3, 5)],
    "x_scalar": [(3, 5), (), (3, 5)],
    "y_row": [(3, 5), (3, 5), (5,)],
    "three_ways": [(3, 1, 1), (1, 4, 1), (1, 1, 5)],
    "rank_mismatch": [(4, 1), (2, 1, 6), (6,)],
    "large": [(301, 257), (301, 1), (257,)],
}


@pytest.mark.parametrize("shapes", WHERE_SHAPES.values(), ids=WHERE_SHAPES.keys())
@pytest.mark.parametrize("dtype", ["float32", "int32", "int64", "bool", "float16", "int8",
                                   "float64"])
def test_where_matches_reference(dtype, shapes, rng):
    condition = random_array(rng, shapes[0], "bool")
    x, y = (random_array(rng, s, dtype) for s in shapes[1:])
    if dtype == "float32" and x.size > 2:
        x.reshape(-1)[:2] = [np.nan, -np.inf]
    check("Where", [condition, x, y])


# -- layouts and bad blobs -------------------------------------------------------------------


@pytest.mark.parametrize("shapes,out,want", [
    ([(3, 5), (3, 5)], (3, 5), ([15], [[1], [1]])),
    ([(3, 5), ()], (3, 5), ([15], [[1], [0]])),
    ([(2, 3, 5), (3, 5)], (2, 3, 5), ([2, 15], [[15, 1], [0, 1]])),
    ([(2, 1, 5), (2, 3, 1)], (2, 3, 5), ([2, 3, 5], [[5, 0, 1], [3, 1, 0]])),
    ([(1, 1), (1,)], (1, 1), ([1], [[0], [0]])),
    ([(4, 1, 3), (4, 1, 3)], (4, 1, 3), ([12], [[1], [1]])),
    ([(0, 3), (3,)], (0, 3), ([0], [[0], [0]])),
])
def test_broadcast_layout_collapses_dims(shapes, out, want):
    assert broadcast_layout(shapes, out) == want


def test_broadcast_layout_rejects_shapes_that_do_not_broadcast():
    with pytest.raises(ValueError, match="does not broadcast"):
        broadcast_layout([(3, 4), (3,)], (3, 4))


def test_a_blob_reading_outside_an_input_is_rejected(rng):
    x, y = random_array(rng, (4, 6), "float32"), random_array(rng, (6,), "float32")
    model = compile_op("Add", [x, y])
    plan = model.plan
    (step,) = plan.steps
    # Claim the row input is full-size: the C kernel must refuse, not read past it.
    bad = dataclasses.replace(step, attrs=pack_values([2, 1, 24, 1, 1]))
    executor = Executor(dataclasses.replace(plan, steps=(bad,)))
    with pytest.raises(KernelError, match="input 1 has 6 elements"):
        executor.run([x, y])
    truncated = dataclasses.replace(step, attrs=step.attrs[:-8])
    with pytest.raises(KernelError, match="attribute blob"):
        Executor(dataclasses.replace(plan, steps=(truncated,))).run([x, y])


# -- chains with in-place reuse ----------------------------------------------------------------


def _shared_inputs(plan) -> dict[str, list[int]]:
    """For each step that writes in place, by node: the inputs its output overwrites."""
    def place(t):
        spec = plan.tensors[t]
        return (spec.storage, spec.offset) if spec.storage is Storage.ARENA else None
    shared = {}
    for step in plan.steps:
        out = place(step.outputs[0])
        hits = [i for i, t in enumerate(step.inputs) if out is not None and place(t) == out]
        if hits:
            shared[step.node] = hits
    return shared


def _check_graph(graph, inputs) -> dict[str, list[int]]:
    """Compare the compiled graph with the reference; return its in-place steps."""
    model = ge_hub.compile(graph)
    got = model.run(inputs)
    want = evaluate(graph, inputs)
    assert model.summary()["fallback_steps"] == 0
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-6, equal_nan=True)
    return _shared_inputs(model.plan)


def test_arithmetic_chain_reads_values_after_later_inplace_ops(rng):
    with es.GraphBuilder("chain") as gb:
        x = es.input("x", "float32", [5, 9])
        y = es.input("y", "float32", [9])
        a = es.op("Add", x, y)
        b = es.op("Mul", a, a)          # a is still needed: b must not overwrite it
        c = es.op("Sub", b, y)          # b dies here: c may take its place
        d = es.op("Div", c, a)          # a and c die here
        e = es.op("Max", d, x, a)       # three inputs, read after in-place writes
        f = es.op("PRelu", e, y)
        gb.output(es.op("Pow", f, es.const(np.float32(2.0))), "out")
        gb.output(a, "a")
    x_data, y_data = random_array(rng, (5, 9), "float32"), random_array(rng, (9,), "float32")
    shared = _check_graph(gb.graph, {"x": x_data, "y": y_data})
    assert len(shared) >= 2, shared


def test_variadic_writes_over_a_later_input(rng):
    with es.GraphBuilder("sum") as gb:
        x = es.input("x", "float32", [6, 7])
        a = es.op("Add", x, es.const(np.float32(1.0)))
        b = es.op("Mul", x, es.const(np.float32(2.0)))
        c = es.op("Sub", x, es.const(np.float32(3.0)))
        s = es.op("Sum", a, b, c, name="sum")  # only c dies here: the sum goes over c
        gb.output(es.op("Mean", s, a, b), "out")
    shared = _check_graph(gb.graph, {"x": random_array(rng, (6, 7), "float32")})
    assert shared.get("sum") == [2], shared


def test_logic_chain_with_where(rng):
    with es.GraphBuilder("logic") as gb:
        x = es.input("x", "float32", [4, 11])
        y = es.input("y", "float32", [11])
        less = es.op("Less", x, y)
        positive = es.op("Greater", x, es.const(np.float32(0.0)))
        both = es.op("And", less, positive)
        neither = es.op("Not", es.op("Or", less, positive))
        mixed = es.op("Xor", both, less)                 # less read after And and Or
        same = es.op("Equal", mixed, neither)
        picked = es.op("Where", same, x, y)
        gb.output(es.op("Where", mixed, picked, es.op("Sub", y, x)), "out")
        gb.output(es.op("Where", both, less, neither), "mask")
    data = {"x": random_array(rng, (4, 11), "float32"), "y": random_array(rng, (11,), "float32")}
    shared = _check_graph(gb.graph, data)
    assert len(shared) >= 1, shared


@pytest.fixture
def rng():
    return np.random.default_rng(0)
