"""Control flow (If, Loop, Scan): references against plain NumPy loops, bodies built with ES
that capture outer values, nested control flow, inference of the outputs from the
bodies, and bad bodies reported by name."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import random_array

from ge_hub import es
from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import Sym, TensorType
from ge_hub.ops import get_schema
from ge_hub.reference import evaluate

F32 = DType.FLOAT32


def body(name, inputs, make_outputs):
    """A body builder: `inputs` is [(name, dtype, shape)], `make_outputs(*tensors)` gives
    the list of output tensors. Must be called inside the enclosing builder."""
    with es.GraphBuilder(name) as gb:
        tensors = [es.input(n, d, s) for n, d, s in inputs]
        for k, out in enumerate(make_outputs(*tensors)):
            gb.output(out, f"{name}_out{k}")
    return gb


# --- If --------------------------------------------------------------------------------------


def if_graph(then_make, else_make, shape=(3,)):
    with es.GraphBuilder("main") as main:
        cond = es.input("cond", "bool", [])
        x = es.input("x", "float32", list(shape))
        then_b = body("then", [], lambda: then_make(x))
        else_b = body("else", [], lambda: else_make(x))
        for k, y in enumerate(es.if_(cond, then_branch=then_b, else_branch=else_b)):
            main.output(y, f"y{k}")
    return main.graph


def test_if_runs_the_branch_cond_picks_with_captured_values(rng):
    graph = if_graph(lambda x: [es.mul(x, x), es.neg(x)], lambda x: [es.add(x, x), es.abs(x)])
    x = random_array(rng, (3,))
    for cond, want in ((True, [x * x, -x]), (False, [x + x, np.abs(x)])):
        got = evaluate(graph, {"cond": np.array(cond), "x": x})
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6)


def test_if_branch_shapes_that_differ_become_a_fresh_symbol():
    graph = if_graph(lambda x: [x], lambda x: [es.concat(x, x, axis=0)])
    (out,) = graph.outputs
    assert out.type.dtype == F32 and isinstance(out.type.shape[0], Sym)


def test_if_with_constant_cond_takes_its_branch_types():
    with es.GraphBuilder("main") as main:
        x = es.input("x", "float32", [3])
        then_b = body("then", [], lambda: [x])
        else_b = body("else", [], lambda: [es.concat(x, x, axis=0)])
        (y,) = es.if_(np.array(False), then_branch=then_b, else_branch=else_b)
        main.output(y, "y")
    assert main.graph.outputs[0].type == TensorType(F32, [6])


def test_if_branches_of_different_dtypes_are_refused():
    with pytest.raises(OpError, match=r"If.*output 0 \(then_branch vs else_branch\).*dtypes"):
        if_graph(lambda x: [x], lambda x: [es.cast(x, to="int64")])


def test_if_branches_with_different_output_counts_are_refused():
    with pytest.raises(OpError, match="then_branch gives 2 outputs, else_branch 1"):
        if_graph(lambda x: [x, x], lambda x: [x])


def test_if_branch_with_inputs_is_refused():
    with pytest.raises(OpError, match=r"then_branch must take 0 inputs, it takes 1 \(a\)"):
        with es.GraphBuilder("main") as main:
            cond = es.input("cond", "bool", [])
            then_b = body("then", [("a", "float32", [2])], lambda a: [a])
            else_b = body("else", [("b", "float32", [2])], lambda b: [b])
            main.output(es.if_(cond, then_branch=then_b, else_branch=else_b)[0], "y")


def test_if_cond_must_hold_one_element():
    with pytest.raises(OpError, match="input 'cond' must hold one element"):
        with es.GraphBuilder("main") as main:
            cond = es.input("cond", "bool", [2])
            x = es.input("x", "float32", [2])
            then_b = body("then", [], lambda: [x])
            else_b = body("else", [], lambda: [x])
            main.output(es.if_(cond, then_branch=then_b, else_branch=else_b)[0], "y")


# --- Loop ------------------------------------------------------------------------------------


def accumulate_loop(m=None, with_cond=False):
    """s += x * w per iteration (x, w captured), scan output s * i; with_cond stops once
    the sum of s exceeds `limit`."""
    with es.GraphBuilder("main") as main:
        x = es.input("x", "float32", ["N"])
        s0 = es.input("s0", "float32", ["N"])
        trips = es.input("m", "int64", []) if m is None else np.array(m, np.int64)
        limit = es.input("limit", "float32", [])
        w = es.const(np.float32(0.5), name="w")

        def step(i, cond, s):
            s = es.add(s, es.mul(x, w))
            keep = es.less(es.reduce_sum(s, keepdims=0), limit) if with_cond else cond
            return [keep, s, es.mul(s, es.cast(i, to="float32"))]

        loop_body = body("body", [("i", "int64", []), ("c", "bool", []),
                                  ("s", "float32", ["N"])], step)
        cond = np.array(True) if with_cond else None
        final, scanned = es.loop(trips, cond, s0, body=loop_body)
        main.output(final, "final")
        main.output(scanned, "scanned")
    return main.graph


def numpy_accumulate(x, s, m, limit=None):
    scans = []
    for i in range(m):
        s = s + x * np.float32(0.5)
        scans.append(s * np.float32(i))
        if limit is not None and not s.sum() < limit:
            break
    return s, np.stack(scans) if scans else np.zeros((0, *x.shape), np.float32)


def test_loop_for_form_carries_values_and_stacks_scan_outputs(rng):
    graph = accumulate_loop(m=4)
    final, scanned = graph.outputs
    assert scanned.type.shape == (4, Sym("N"))  # M constant, no cond: trips known
    x, s0 = random_array(rng, (5,)), random_array(rng, (5,))
    got = evaluate(graph, {"x": x, "s0": s0, "limit": np.float32(0)})
    for g, w in zip(got, numpy_accumulate(x, s0, 4)):
        np.testing.assert_allclose(g, w, rtol=1e-5)


def test_loop_while_form_stops_when_the_body_says(rng):
    graph = accumulate_loop(m=None, with_cond=True)
    assert isinstance(graph.outputs[1].type.shape[0], Sym)  # the trip count is data
    x = np.abs(random_array(rng, (3,)))
    s0 = np.zeros(3, np.float32)
    limit = np.float32(x.sum() * 0.5 * 2.5)  # ends during the third iteration
    got = evaluate(graph, {"x": x, "s0": s0, "m": np.array(10), "limit": limit})
    want = numpy_accumulate(x, s0, 10, limit)
    assert got[1].shape == (3, 3)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5)


def test_loop_with_zero_trips_gives_its_initial_values_and_empty_scans(rng):
    graph = accumulate_loop(m=None)
    x, s0 = random_array(rng, (2,)), random_array(rng, (2,))
    final, scanned = evaluate(graph, {"x": x, "s0": s0, "m": np.array(0),
                                      "limit": np.float32(0)})
    np.testing.assert_array_equal(final, s0)
    assert scanned.shape == (0, 2) and scanned.dtype == np.float32


def test_loop_carried_value_that_grows_gets_a_fresh_symbol(rng):
    with es.GraphBuilder("main") as main:
        x = es.input("x", "float32", [2])
        grow = body("grow", [("i", "int64", []), ("c", "bool", []), ("s", "float32", ["L"])],
                    lambda i, c, s: [c, es.concat(s, x, axis=0)])
        (y,) = es.loop(np.array(3, np.int64), None, x, body=grow)
        main.output(y, "y")
    assert isinstance(main.graph.outputs[0].type.shape[0], Sym)
    x = random_array(rng, (2,))
    (got,) = evaluate(main.graph, [x])
    np.testing.assert_array_equal(got, np.tile(x, 4))


def test_loop_body_with_the_wrong_number_of_inputs_is_refused():
    with pytest.raises(OpError, match=r"Loop.*body must take 3 inputs, it takes 2"):
        with es.GraphBuilder("main") as main:
            x = es.input("x", "float32", [2])
            bad = body("bad", [("i", "int64", []), ("c", "bool", [])], lambda i, c: [c, x])
            main.output(es.loop(np.array(2, np.int64), None, x, body=bad)[0], "y")


def test_loop_body_returning_another_dtype_is_refused():
    with pytest.raises(OpError, match=r"loop-carried value 0 \(body output 1\).*dtypes"):
        with es.GraphBuilder("main") as main:
            x = es.input("x", "float32", [2])
            bad = body("bad", [("i", "int64", []), ("c", "bool", []), ("s", "float32", [2])],
                       lambda i, c, s: [c, es.cast(s, to="int64")])
            main.output(es.loop(np.array(2, np.int64), None, x, body=bad)[0], "y")


def test_loop_without_m_or_cond_is_refused():
    with pytest.raises(OpError, match="neither M nor cond"):
        with es.GraphBuilder("main") as main:
            x = es.input("x", "float32", [2])
            ok = body("ok", [("i", "int64", []), ("c", "bool", []), ("s", "float32", [2])],
                      lambda i, c, s: [c, s])
            main.output(es.loop(None, None, x, body=ok)[0], "y")


# --- Scan ------------------------------------------------------------------------------------


def cumulative_scan(in_axes=None, in_dirs=None, out_axes=None, out_dirs=None):
    """Scan over x [4, 3] along `in_axes[0]`: state += slice * w; outputs the state and
    the slice + y (y captured)."""
    with es.GraphBuilder("main") as main:
        x = es.input("x", "float32", [4, 3])
        s0 = es.input("s0", "float32", ["S"])
        y = es.input("y", "float32", ["S"])
        w = es.const(np.float32(2.0), name="w")
        step = body("step", [("s", "float32", ["S"]), ("row", "float32", ["S"])],
                    lambda s, row: [es.add(s, es.mul(row, w)), es.add(row, y)])
        attrs = {k: v for k, v in (("scan_input_axes", in_axes),
                                   ("scan_input_directions", in_dirs),
                                   ("scan_output_axes", out_axes),
                                   ("scan_output_directions", out_dirs)) if v is not None}
        final, stacked = es.scan(s0, x, body=step, num_scan_inputs=1, **attrs)
        main.output(final, "final")
        main.output(stacked, "stacked")
    return main.graph


def numpy_scan(x, s, y, axis, reverse, out_axis, out_reverse):
    rows = list(np.moveaxis(x, axis, 0))
    if reverse:
        rows = rows[::-1]
    outs = []
    for row in rows:
        s = s + row * np.float32(2)
        outs.append(row + y)
    if out_reverse:
        outs = outs[::-1]
    return s, np.stack(outs, axis=out_axis)


@pytest.mark.parametrize("axis, reverse, out_axis, out_reverse",
                         [(0, 0, 0, 0), (1, 1, 1, 0), (-1, 0, -1, 1), (0, 1, 1, 1)])
def test_scan_slices_along_axes_in_both_directions(rng, axis, reverse, out_axis, out_reverse):
    graph = cumulative_scan([axis], [reverse], [out_axis], [out_reverse])
    size, length = (3, 4) if axis == 0 else (4, 3)  # x is [4, 3]
    x = random_array(rng, (4, 3))
    s0, y = random_array(rng, (size,)), random_array(rng, (size,))
    got = evaluate(graph, {"x": x, "s0": s0, "y": y})
    want = numpy_scan(x, s0, y, axis, reverse, out_axis, out_reverse)
    assert graph.outputs[1].type.shape is not None
    assert length in graph.outputs[1].type.shape
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5)


def test_scan_inputs_of_different_lengths_are_refused():
    with pytest.raises(OpError, match="has 5 items along axis 0, an earlier one 4"):
        with es.GraphBuilder("main") as main:
            a = es.input("a", "float32", [4, 2])
            b = es.input("b", "float32", [5, 2])
            pair = body("pair", [("p", "float32", [2]), ("q", "float32", [2])],
                        lambda p, q: [es.add(p, q)])
            main.output(es.scan(a, b, body=pair, num_scan_inputs=2)[0], "y")


def test_scan_body_with_the_wrong_number_of_inputs_is_refused():
    with pytest.raises(OpError, match=r"Scan.*body must take 2 inputs, it takes 1"):
        with es.GraphBuilder("main") as main:
            s0 = es.input("s0", "float32", [2])
            x = es.input("x", "float32", [4, 2])
            bad = body("bad", [("s", "float32", [2])], lambda s: [s])
            main.output(es.scan(s0, x, body=bad, num_scan_inputs=1)[0], "y")


def test_scan_direction_attribute_must_fit():
    schema = get_schema("Scan")
    with es.GraphBuilder("b") as gb:
        gb.output(es.input("r", "float32", [2]), "r")
    with pytest.raises(OpError, match=r"'scan_input_directions' must have 1 values"):
        schema.infer_types([TensorType(F32, [4, 2])], {"body": gb.graph, "num_scan_inputs": 1,
                                                       "scan_input_directions": [0, 1]})


# --- nesting ---------------------------------------------------------------------------------


def nested_graph():
    """A Scan whose body holds an If that reads the Scan body's own value and an outer
    input; the If's branches themselves hold a Loop."""
    with es.GraphBuilder("main") as main:
        x = es.input("x", "float32", [4, 2])
        bias = es.input("bias", "float32", [2])

        def step(s, row):
            positive = es.greater(es.reduce_sum(row, keepdims=0), np.float32(0))
            twice = body("twice", [("i", "int64", []), ("c", "bool", []),
                                   ("v", "float32", [2])],
                         lambda i, c, v: [c, es.add(v, row)])
            then_b = body("then", [], lambda: es.loop(np.array(2, np.int64), None, s,
                                                      body=twice))
            else_b = body("else", [], lambda: [es.sub(s, bias)])
            (picked,) = es.if_(positive, then_branch=then_b, else_branch=else_b)
            return [picked, es.mul(picked, bias)]

        scan_body = body("step", [("s", "float32", [2]), ("row", "float32", [2])], step)
        final, stacked = es.scan(es.const(np.zeros(2, np.float32)), x, body=scan_body,
                                 num_scan_inputs=1)
        main.output(final, "final")
        main.output(stacked, "stacked")
    return main.graph


def numpy_nested(x, bias):
    s, outs = np.zeros(2, np.float32), []
    for row in x:
        s = s + row + row if row.sum() > 0 else s - bias
        outs.append(s * bias)
    return s, np.stack(outs)


def test_nested_control_flow_reads_every_enclosing_scope(rng):
    graph = nested_graph()
    graph.verify()
    x, bias = random_array(rng, (4, 2)), random_array(rng, (2,))
    got = evaluate(graph, {"x": x, "bias": bias})
    for g, w in zip(got, numpy_nested(x, bias)):
        np.testing.assert_allclose(g, w, rtol=1e-5)
