"""If, Loop and Scan as C control steps: each body compiled into a sub-plan that the
executor runs inside the same C run (`ge_hub.kernels.closure`,
core/kernels/closure.c). Every model is checked against the NumPy reference and runs
with no Python step."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.executor import Executor, KernelError
from ge_hub.kernels import closure as closure_kernel
from ge_hub.reference import evaluate


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def check(model, graph, feed):
    got = model.run(feed)
    want = evaluate(graph, feed)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    return got


def in_c(model, count=1):
    """The plan's control flow runs as `count` C control steps and nothing in Python."""
    steps = [s for s in model.plan.steps if s.op == "Closure"]
    assert [s.kernel for s in steps] == ["control"] * count
    summary = model.summary()
    assert summary["python_steps"] == 0, summary["python_ops"]
    return steps


def counting_loop(m_value=None):
    """Carried a [4] and b [3], one scan output; the body reads a captured constant
    (compiled into the body) and a captured intermediate (read in place)."""
    w = np.linspace(-1, 1, 4).astype(np.float32)
    with es.GraphBuilder("main") as main:
        x = es.input("x", "float32", [4])
        y = es.input("y", "float32", [3])
        h = es.tanh(x)
        with es.GraphBuilder("body") as body:
            i = es.input("i", "int64", [])
            c = es.input("c", "bool", [])
            a = es.input("a", "float32", [4])
            b = es.input("b", "float32", [3])
            a2 = es.add(es.mul(a, np.float32(0.9)), es.mul(h, es.const(w)))
            b2 = es.add(b, es.reduce_sum(a2, keepdims=1))
            body.output(c, "keep")
            body.output(a2, "a_next")
            body.output(b2, "b_next")
            body.output(es.mul(a2, es.cast(i, to="float32")), "scanned")
        m = es.const(np.array(m_value, np.int64))
        a, b, scanned = es.loop(m, None, x, y, body=body)
        main.output(a, "a")
        main.output(b, "b")
        main.output(scanned, "scanned")
    return main.graph


@pytest.mark.parametrize("trips", [5, 4, 1, 0])
def test_loop_with_carried_values_and_scan_outputs(rng, trips):
    graph = counting_loop(trips)
    model = ge_hub.compile(graph, options={"verify": True})
    feed = {"x": rng.standard_normal(4).astype(np.float32),
            "y": rng.standard_normal(3).astype(np.float32)}
    got = check(model, graph, feed)
    assert got[2].shape == (trips, 4)
    (step,) = in_c(model)
    body = model.plan.subplans[step.subplans[0]]
    # The captured constant w became a constant of the body, tanh(x) one of its inputs.
    assert len(body.inputs) == 2 + 2 + 1
    assert step.scratch_bytes >= 4 * 4 + 3 * 4  # one ping-pong buffer per carried value


def early_exit_loop():
    """A while loop: M from an input, the condition from the body (sum below a limit)."""
    with es.GraphBuilder("main") as main:
        x = es.input("x", "float32", [5])
        m = es.input("m", "int64", [])
        go = es.input("go", "bool", [])
        limit = es.input("limit", "float32", [])
        with es.GraphBuilder("body") as body:
            es.input("i", "int64", [])
            es.input("c", "bool", [])
            s = es.input("s", "float32", [5])
            n = es.input("n", "int64", [])
            # (no Mul+Add: the example plugin would fuse it into a Python kernel)
            nxt = es.add(es.add(s, es.abs(s)), np.float32(0.25))
            body.output(es.less(es.reduce_sum(nxt, keepdims=0), limit), "keep")
            body.output(nxt, "s_next")
            body.output(es.add(n, np.int64(1)), "n_next")
        final, count = es.loop(m, go, es.abs(x), es.const(np.array(0, np.int64)), body=body)
        main.output(final, "final")
        main.output(count, "count")
    return main.graph


def test_loop_early_exit_through_the_condition_with_one_plan(rng):
    graph = early_exit_loop()
    model = ge_hub.compile(graph)
    x = rng.standard_normal(5).astype(np.float32)
    counts = []
    for m, go, limit in [(100, True, 50.0), (100, True, 1e4), (3, True, 1e9), (100, False, 1.0),
                         (0, True, 1.0), (100, True, -1.0)]:
        feed = {"x": x, "m": np.array(m, np.int64), "go": np.array(go),
                "limit": np.float32(limit)}
        counts.append(int(check(model, graph, feed)[1]))
    assert counts[2] == 3 and counts[3] == 0 and counts[4] == 0 and counts[5] == 1
    assert counts[0] < counts[1] < 100
    in_c(model)
    summary = model.summary()
    assert summary["cached_plans"] == 1 and summary["specialized_on"] == []


def branches_graph(same_shapes: bool):
    with es.GraphBuilder("main") as main:
        x = es.input("x", "float32", [4])
        scale = es.input("scale", "float32", [4])
        if same_shapes:
            cond = es.greater(es.reduce_sum(x, keepdims=0), np.float32(0))
        else:
            cond = es.input("cond", "bool", [])
        with es.GraphBuilder("then") as then_b:
            then_b.output(es.concat(x, es.mul(x, scale), axis=0)
                          if not same_shapes else es.mul(es.relu(x), scale), "t")
        with es.GraphBuilder("else") as else_b:
            else_b.output(es.sub(x, scale), "e")
        (out,) = es.if_(cond, then_branch=then_b, else_branch=else_b)
        main.output(es.exp(out), "out")
    return main.graph


def test_if_runs_the_branch_its_condition_picks(rng):
    graph = branches_graph(same_shapes=True)
    model = ge_hub.compile(graph)
    for sign in (1, -1, 1):
        feed = {"x": sign * np.abs(rng.standard_normal(4)).astype(np.float32),
                "scale": rng.standard_normal(4).astype(np.float32)}
        check(model, graph, feed)
    (step,) = in_c(model)
    assert len(step.subplans) == 2
    assert model.summary()["cached_plans"] == 1


def test_if_branches_of_different_output_shapes_get_a_plan_per_branch(rng):
    graph = branches_graph(same_shapes=False)
    model = ge_hub.compile(graph)
    shapes = []
    for cond in (True, False, True, False):
        feed = {"x": rng.standard_normal(4).astype(np.float32),
                "scale": rng.standard_normal(4).astype(np.float32), "cond": np.array(cond)}
        shapes.append(check(model, graph, feed)[0].shape)
        # With its condition a constant of the plan, the If is a control step running
        # the taken branch, or that branch inlined: never Python.
        assert model.summary()["python_steps"] == 0
        assert {s.kernel for s in model.plan.steps if s.op == "Closure"} <= {"control"}
    assert shapes == [(8,), (4,), (8,), (4,)]
    summary = model.summary()
    assert summary["specialized_on"] == ["cond"] and summary["cached_plans"] == 2


def scan_graph(directions=(0, 1), out_directions=(1,), with_if=False):
    """Two scanned inputs (one read backwards), a state, one scan output (written
    backwards); with_if puts an If inside the body."""
    with es.GraphBuilder("main") as main:
        x = es.input("x", "float32", [6, 3])
        z = es.input("z", "float32", [6, 3])
        bias = es.sigmoid(es.input("bias", "float32", [3]))
        with es.GraphBuilder("step") as step:
            s = es.input("s", "float32", [3])
            row = es.input("row", "float32", [3])
            other = es.input("other", "float32", [3])
            mixed = es.add(es.mul(s, np.float32(0.5)), es.mul(row, other))
            if with_if:
                with es.GraphBuilder("then") as then_b:
                    then_b.output(es.add(mixed, bias), "t")
                with es.GraphBuilder("else") as else_b:
                    else_b.output(es.sub(mixed, s), "e")
                positive = es.greater(es.reduce_sum(row, keepdims=0), np.float32(0))
                (mixed,) = es.if_(positive, then_branch=then_b, else_branch=else_b)
            else:
                mixed = es.add(mixed, bias)
            step.output(mixed, "s_next")
            step.output(es.tanh(mixed), "out")
        final, outs = es.scan(es.const(np.zeros(3, np.float32)), x, z, body=step,
                              num_scan_inputs=2, scan_input_directions=list(directions),
                              scan_output_directions=list(out_directions))
        main.output(final, "final")
        main.output(outs, "outs")
    return main.graph


@pytest.mark.parametrize("directions,out_directions", [((0, 0), (0,)), ((0, 1), (1,)),
                                                       ((1, 1), (0,))])
def test_scan_reads_and_writes_slices_in_place(rng, directions, out_directions):
    graph = scan_graph(directions, out_directions)
    model = ge_hub.compile(graph, options={"verify": True})
    for _ in range(2):
        feed = {"x": rng.standard_normal((6, 3)).astype(np.float32),
                "z": rng.standard_normal((6, 3)).astype(np.float32),
                "bias": rng.standard_normal(3).astype(np.float32)}
        check(model, graph, feed)
    in_c(model)


def test_nested_if_inside_scan(rng):
    graph = scan_graph(with_if=True)
    model = ge_hub.compile(graph, options={"verify": True})
    for _ in range(3):
        feed = {"x": rng.standard_normal((6, 3)).astype(np.float32),
                "z": rng.standard_normal((6, 3)).astype(np.float32),
                "bias": rng.standard_normal(3).astype(np.float32)}
        check(model, graph, feed)
    in_c(model)
    (body,) = model.plan.subplans
    inner = [s for s in body.steps if s.op == "Closure"]
    assert [s.kernel for s in inner] == ["control"] and len(body.subplans) == 2


def test_nested_loops(rng):
    """An outer Loop whose body runs an inner Loop (3 x 4 iterations) over carried
    values, the inner one reading the outer body's iteration number by capture."""
    with es.GraphBuilder("main") as main:
        x = es.input("x", "float32", [2])
        with es.GraphBuilder("outer") as outer:
            i = es.input("i", "int64", [])
            c = es.input("c", "bool", [])
            s = es.input("s", "float32", [2])
            fi = es.cast(i, to="float32")
            with es.GraphBuilder("inner") as inner:
                j = es.input("j", "int64", [])
                d = es.input("d", "bool", [])
                t = es.input("t", "float32", [2])
                inner.output(d, "keep")
                inner.output(es.add(es.mul(t, np.float32(0.5)),
                                    es.add(fi, es.cast(j, to="float32"))), "t_next")
            (inner_final,) = es.loop(es.const(np.array(4, np.int64)), None, s, body=inner)
            outer.output(c, "keep")
            outer.output(inner_final, "s_next")
            outer.output(es.reduce_sum(inner_final, keepdims=0), "total")
        final, totals = es.loop(es.const(np.array(3, np.int64)), None, x, body=outer)
        main.output(final, "final")
        main.output(totals, "totals")
    graph = main.graph
    model = ge_hub.compile(graph, options={"verify": True})
    check(model, graph, {"x": rng.standard_normal(2).astype(np.float32)})
    in_c(model)
    assert len(model.plan.subplans[0].subplans) == 1


def test_body_with_a_python_step_stays_on_the_counted_closure(rng):
    with es.GraphBuilder("main") as main:
        x = es.input("x", "float32", [2, 3])
        with es.GraphBuilder("body") as body:
            es.input("i", "int64", [])
            c = es.input("c", "bool", [])
            s = es.input("s", "float32", [2, 3])
            body.output(c, "keep")
            body.output(es.add(es.hardmax(s), s), "s_next")  # Hardmax: reference only
        (final,) = es.loop(es.const(np.array(3, np.int64)), None, x, body=body)
        main.output(final, "final")
    graph = main.graph
    model = ge_hub.compile(graph)
    check(model, graph, {"x": rng.standard_normal((2, 3)).astype(np.float32)})
    (step,) = [s for s in model.plan.steps if s.op == "Closure"]
    assert step.kernel == "closure"
    assert model.summary()["python_ops"] == {"Closure": 1}
    node = [n for n in ge_hub.compiler.optimize(graph, {}).nodes if n.op == "Closure"][0]
    assert "Python steps (Hardmax)" in closure_kernel.refusal(node)


def test_concurrent_runs_use_their_own_body_runs(rng):
    graph = counting_loop(6)
    model = ge_hub.compile(graph)
    feeds = [{"x": rng.standard_normal(4).astype(np.float32),
              "y": rng.standard_normal(3).astype(np.float32)} for _ in range(4)]
    want = [evaluate(graph, f) for f in feeds]
    errors = []

    def work(k):
        for _ in range(20):
            got = model.run(feeds[k])
            if not all(np.allclose(g, w, rtol=1e-5, atol=1e-6) for g, w in zip(got, want[k])):
                errors.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_control_step_without_its_sub_plans_fails_cleanly(rng):
    graph = counting_loop(3)
    model = ge_hub.compile(graph)
    plan = model.plan
    steps = tuple(dataclasses.replace(s, subplans=()) for s in plan.steps)
    broken = Executor(dataclasses.replace(plan, steps=steps, subplans=()))
    feed = [rng.standard_normal(4).astype(np.float32), rng.standard_normal(3).astype(np.float32)]
    with pytest.raises(KernelError, match="malformed control attributes"):
        broken.run(feed)
    # Sub-plans handed to any other kernel are refused when the plan is built.
    other = tuple(dataclasses.replace(s, subplans=(0,)) if s.op != "Closure" else s
                  for s in plan.steps)
    with pytest.raises(ValueError, match="only the control kernel takes sub-plans"):
        Executor(dataclasses.replace(plan, steps=other))


def test_offline_plan_json_with_a_bad_sub_plan_index_is_refused():
    from ge_hub.errors import OfflineModelError
    from ge_hub.offline.plans import decode_plan, encode_plan

    model = ge_hub.compile(counting_loop(3))
    key = tuple(model.plan.signature)
    constants = []

    def refs(plan):
        first = len(constants)
        constants.extend(plan.constants)
        return [{"section": "data", "offset": first + i, "dtype": "float32", "shape": [0],
                 "nbytes": 0} for i in range(len(plan.constants))]

    def resolve(dtype, shape, ref, nbytes, where):
        return np.ascontiguousarray(constants[ref["offset"]])

    doc = encode_plan(model.plan, key, "p", {}, refs)
    for ref in [r for plan_doc in (doc, *doc["subplans"]) for r in plan_doc["constants"]]:
        array = constants[ref["offset"]]
        ref.update(dtype=str(array.dtype), shape=list(array.shape), nbytes=array.nbytes)
    _, _, plan, _ = decode_plan(doc, "file", resolve)
    (step,) = [s for s in plan.steps if s.op == "Closure"]
    assert len(plan.subplans) == 1 and step.subplans == (0,)
    row = next(r for r in doc["steps"] if len(r) == 11)
    row[10] = [1]
    with pytest.raises(OfflineModelError, match="sub-plans 1 is out of range"):
        decode_plan(doc, "file", resolve)
