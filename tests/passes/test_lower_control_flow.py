"""Control flow through the compiler: If/Loop/Scan become Closure steps whose bodies travel
in the plan as data and whose captured values are step inputs; bodies that compile to C
run as sub-plans of the C control kernel (tests/test_control_flow_c.py has the rest), the
others in the Python closure, which runs bodies with stable shapes compiled; trip counts
that depend on data specialize the plan."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.kernels import closure as closure_kernel
from ge_hub.kernels import control as control_kernel
from ge_hub.ops.closure import decode_frame
from ge_hub.passes.eliminate_dead_code import eliminate_dead_code
from ge_hub.reference import evaluate


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def python_closure(monkeypatch):
    """Control flow on the Python closure: no plan compiler for the C control kernel."""
    monkeypatch.setattr(closure_kernel, "_plan_compiler", None)
    monkeypatch.setattr(closure_kernel, "_cache", type(closure_kernel._cache)())


def loop_graph(*, with_cond=False, grow=False):
    """h = relu(x) * 3 is computed before the loop and read only by its body (a capture);
    after the loop, more intermediates are made, so a wrongly freed h would be
    overwritten before the loop reads it."""
    with es.GraphBuilder("main") as main:
        x = es.input("x", "float32", [6])
        m = es.input("m", "int64", [])
        limit = es.input("limit", "float32", [])
        h = es.mul(es.relu(x), np.float32(3))
        with es.GraphBuilder("body") as body:
            i = es.input("i", "int64", [])
            c = es.input("c", "bool", [])
            s = es.input("s", "float32", ["L"] if grow else [6])
            nxt = es.concat(s, h, axis=0) if grow else es.add(es.mul(s, np.float32(0.5)), h)
            keep = es.less(es.reduce_sum(nxt, keepdims=0), limit) if with_cond else c
            body.output(keep, "keep")
            body.output(nxt, "next")
            per_step = es.reduce_sum(nxt, keepdims=1) if grow else nxt  # one shape each time
            body.output(es.mul(per_step, es.cast(i, to="float32")), "scanned")
        cond = np.array(True) if with_cond else None
        final, scanned = es.loop(m, cond, es.neg(x), body=body)
        main.output(es.add(es.exp(final), np.float32(1)), "final")
        main.output(es.tanh(scanned), "scanned")
    return main.graph


def feeds(rng, m, limit=100.0):
    return {"x": rng.standard_normal(6).astype(np.float32), "m": np.array(m, np.int64),
            "limit": np.float32(limit)}


def check_against_reference(model, graph, feed):
    got = model.run(feed)
    want = evaluate(graph, feed)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_loop_becomes_a_closure_step_reading_its_captured_value(rng, python_closure):
    graph = loop_graph()
    model = ge_hub.compile(graph, options={"verify": True})
    check_against_reference(model, graph, feeds(rng, 4))
    (step,) = [s for s in model.plan.steps if s.op == "Closure"]
    assert step.kernel == "closure"
    # The Closure drives the loop from Python: counted as a Python step, not a fallback.
    summary = model.summary()
    assert summary["python_steps"] == 1 and summary["python_ops"] == {"Closure": 1}
    assert summary["fallback_steps"] == 0
    names = [model.plan.tensors[t].name for t in step.inputs]
    assert any(name.startswith("mul") for name in names)  # h, the captured intermediate
    frame = decode_frame(json.loads(step.attrs)["graph"])  # plain JSON text, no objects
    assert [n.op for n in frame.nodes] == ["Loop"]
    assert len(frame.inputs) == len(step.inputs)


def test_loop_whose_body_compiles_runs_in_the_c_control_kernel(rng):
    graph = loop_graph()
    model = ge_hub.compile(graph, options={"verify": True})
    check_against_reference(model, graph, feeds(rng, 4))
    (step,) = [s for s in model.plan.steps if s.op == "Closure"]
    assert step.kernel == "control" and step.subplans == (0,)
    assert model.summary()["python_steps"] == 0
    body = model.plan.subplans[0]
    assert body.input_names[:2] == ("i", "c") and len(body.outputs) == 3


def test_trip_count_from_data_specializes_the_plan_per_value(rng):
    graph = loop_graph()
    model = ge_hub.compile(graph)
    for m in (3, 0, 5, 3):
        feed = feeds(rng, m)
        check_against_reference(model, graph, feed)
        assert model.run(feed)[1].shape == (m, 6)


def test_while_loop_whose_body_decides_the_trip_count(rng):
    graph = loop_graph(with_cond=True)
    model = ge_hub.compile(graph)
    for limit in (-100.0, 4.0, 30.0):
        check_against_reference(model, graph, feeds(rng, 8, limit))


def test_body_with_stable_shapes_runs_compiled(rng, monkeypatch, python_closure):
    interpreted = []
    original = control_kernel.run_subgraph
    monkeypatch.setattr(control_kernel, "run_subgraph",
                        lambda body, inputs: interpreted.append(body.name) or
                        original(body, inputs))
    graph = loop_graph()
    model = ge_hub.compile(graph, input_shapes={"x": [6], "m": [], "limit": []})
    check_against_reference(model, graph, feeds(rng, 7))
    # The first iteration runs the body's reference; the same shapes again compile it.
    assert interpreted == ["body"] * (control_kernel.COMPILE_AFTER_RUNS - 1)


def test_loop_whose_carried_shape_grows_is_evaluated_at_compile_time(rng):
    # Its output shapes depend on every value it reads: the plan is specialized on the
    # inputs those come from, and the loop folds into constants of that plan.
    graph = loop_graph(grow=True)
    model = ge_hub.compile(graph)
    for m in (3, 1):
        feed = feeds(rng, m)
        got = model.run(feed)
        assert got[0].shape == (6 * (m + 1),) and got[1].shape == (m, 1)
        check_against_reference(model, graph, feed)
        assert "Closure" not in [s.op for s in model.plan.steps]


def scan_if_graph():
    """A Scan whose body holds an If; the branches read the scan body's row and an outer
    intermediate."""
    with es.GraphBuilder("main") as main:
        x = es.input("x", "float32", [5, 4])
        scale = es.abs(es.input("scale", "float32", [4]))
        with es.GraphBuilder("step") as step:
            s = es.input("s", "float32", [4])
            row = es.input("row", "float32", [4])
            with es.GraphBuilder("then") as then_b:
                then_b.output(es.add(s, es.mul(row, scale)), "t")
            with es.GraphBuilder("else") as else_b:
                else_b.output(es.sub(s, scale), "e")
            positive = es.greater(es.reduce_sum(row, keepdims=0), np.float32(0))
            (picked,) = es.if_(positive, then_branch=then_b, else_branch=else_b)
            step.output(picked, "next")
            step.output(es.sigmoid(picked), "out")
        final, outs = es.scan(es.const(np.zeros(4, np.float32)), x, body=step,
                              num_scan_inputs=1, scan_input_directions=[1])
        main.output(final, "final")
        main.output(outs, "outs")
    return main.graph


def test_nested_scan_and_if_compile_and_match_the_reference(rng):
    graph = scan_if_graph()
    model = ge_hub.compile(graph, options={"verify": True})
    for _ in range(2):
        feed = {"x": rng.standard_normal((5, 4)).astype(np.float32),
                "scale": rng.standard_normal(4).astype(np.float32)}
        check_against_reference(model, graph, feed)
    assert [s.op for s in model.plan.steps].count("Closure") == 1


def test_dead_loop_is_removed_with_its_captured_reads(rng):
    graph = loop_graph()
    graph.set_outputs([graph.outputs[0].producer.inputs[0].producer.inputs[0]
                       .producer.inputs[2]])  # keep only neg(x), the loop's initial value
    result = eliminate_dead_code(graph)
    assert result.changed
    result.graph.verify()
    assert [n.op for n in result.graph.nodes] == ["Neg"]
    assert not result.graph.inputs[0].uses[1:]  # x: read by Neg alone now


def test_lower_control_flow_cannot_be_disabled():
    with pytest.raises(ValueError, match="lower_control_flow.*cannot be disabled"):
        ge_hub.compile(loop_graph(), input_shapes={"m": []},
                       options={"disable_passes": ["lower_control_flow"]})
