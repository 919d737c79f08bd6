"""Streams: the schedule pass's stream assignment and events, the concurrency-aware memory
planner, and outputs that are the same bit for bit whatever the stream count."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ge_hub
from ge_hub import es
from ge_hub.compiler import optimize
from ge_hub.passes import cost
from ge_hub.passes.schedule import ancestors, is_step, step_preds, stream_preds, streams_option
from ge_hub.plan import KernelKind, Storage

SHAPE = [4, 8]


def feeds_for(graph, seed=0):
    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal([int(d) for d in v.type.shape]).astype(np.float32)
            for v in graph.inputs}


# The test graphs are branches of elementwise ops; fused, a branch would be one step.
KEEP_BRANCHES = {"disable_passes": ["fuse_elementwise"]}


def scheduled(graph, streams):
    """The optimized graph's steps with their streams, waits and run-order ancestors."""
    shapes = {v.name: [int(d) for d in v.type.shape] for v in graph.inputs}
    g = optimize(graph.copy(), shapes, {"streams": streams, **KEEP_BRANCHES})
    steps = [n for n in g.nodes if is_step(n)]
    position = {id(n): i for i, n in enumerate(steps)}
    stream = [n.meta["stream"] for n in steps]
    waits = [[position[id(w)] for w in n.meta["wait"]] for n in steps]
    return steps, stream, waits


def check_events(steps, stream, waits):
    """No missing wait (every data edge ordered at run time) and no redundant one
    (dropping any event loses an ordering)."""
    data = step_preds(steps)
    run = ancestors(stream_preds(stream, waits))
    for v, preds in enumerate(data):
        for u in preds:
            assert (run[v] >> u) & 1, f"{steps[v].name} may start before {steps[u].name}"
    for v, ws in enumerate(waits):
        for u in ws:
            assert stream[u] != stream[v], "an event between steps of one stream"
            fewer = [list(w) for w in waits]
            fewer[v].remove(u)
            reduced = ancestors(stream_preds(stream, fewer))
            assert not (reduced[v] >> u) & 1, f"the event {steps[u].name} -> {steps[v].name} " \
                                               "is redundant"


def by_name(steps, stream):
    return {n.name: s for n, s in zip(steps, stream)}


# -- graphs ------------------------------------------------------------------------------

def chain():
    with es.GraphBuilder("chain") as gb:
        x = es.input("x", "float32", SHAPE)
        y = es.neg(es.tanh(es.relu(x, name="a"), name="b"), name="c")
        gb.output(es.sigmoid(y, name="d"), "y")
    return gb.graph


def fork_join():
    with es.GraphBuilder("fork_join") as gb:
        x = es.input("x", "float32", SHAPE)
        a = es.tanh(es.relu(x, name="a1"), name="a2")
        b = es.neg(es.sigmoid(x, name="b1"), name="b2")
        gb.output(es.add(a, b, name="join"), "y")
    return gb.graph


def diamond():
    with es.GraphBuilder("diamond") as gb:
        x = es.input("x", "float32", SHAPE)
        top = es.relu(x, name="top")
        left = es.tanh(top, name="left")
        right = es.sigmoid(top, name="right")
        gb.output(es.add(left, right, name="bottom"), "y")
    return gb.graph


def nested():
    with es.GraphBuilder("nested") as gb:
        x = es.input("x", "float32", SHAPE)
        top = es.relu(x, name="top")
        inner = es.tanh(top, name="inner")
        p = es.sigmoid(inner, name="p")
        q = es.neg(inner, name="q")
        left = es.add(p, q, name="inner_join")
        right = es.abs(es.exp(top, name="r1"), name="r2")
        gb.output(es.mul(left, right, name="join"), "y")
    return gb.graph


GRAPHS = [chain, fork_join, diamond, nested]


def test_streams_option_is_checked(monkeypatch):
    monkeypatch.delenv("GE_HUB_STREAMS", raising=False)
    assert streams_option({}) == "auto"
    assert streams_option({"streams": "3"}) == 3
    monkeypatch.setenv("GE_HUB_STREAMS", "2")  # the default, not an override
    assert streams_option({}) == 2 and streams_option({"streams": 1}) == 1
    for bad in (0, -1, "two", 1.5, True):
        with pytest.raises(ValueError, match="'streams'"):
            streams_option({"streams": bad})
    with pytest.raises(ValueError, match="'streams'"):
        ge_hub.compile(chain(), {"x": SHAPE}, options={**KEEP_BRANCHES, "streams": 0})


def test_chain_stays_on_one_stream():
    steps, stream, waits = scheduled(chain(), 4)
    assert stream == [0] * len(steps)
    assert waits == [[] for _ in steps]


def test_fork_join_gives_each_branch_a_stream():
    steps, stream, waits = scheduled(fork_join(), 4)
    s = by_name(steps, stream)
    assert s["a1"] == s["a2"] and s["b1"] == s["b2"] and s["a1"] != s["b1"]
    assert s["join"] in (s["a1"], s["b1"])
    assert sum(map(len, waits)) == 1  # the join waits for the other branch, nothing else
    check_events(steps, stream, waits)


def test_diamond_forks_after_and_joins_before_the_cuts():
    steps, stream, waits = scheduled(diamond(), 4)
    s = by_name(steps, stream)
    assert s["left"] != s["right"] and s["top"] == s["bottom"] == 0
    # the branch off stream 0 waits for top, and bottom waits for it: two events
    assert sum(map(len, waits)) == 2
    check_events(steps, stream, waits)


def test_nested_branches_get_three_streams():
    steps, stream, waits = scheduled(nested(), 4)
    s = by_name(steps, stream)
    assert len({s["p"], s["q"], s["r1"]}) == 3
    assert s["r1"] == s["r2"]
    check_events(steps, stream, waits)
    # Two streams: the three chains share them, still ordered correctly.
    steps, stream, waits = scheduled(nested(), 2)
    assert set(stream) == {0, 1}
    check_events(steps, stream, waits)


def test_one_stream_means_no_events():
    for build in GRAPHS:
        steps, stream, waits = scheduled(build(), 1)
        assert set(stream) == {0} and not any(waits)


def test_tiny_steps_run_on_the_calling_thread():
    model = ge_hub.compile(chain(), {"x": SHAPE}, options={**KEEP_BRANCHES, "streams": 1})
    assert all(s.threads == 1 for s in model.plan.steps)  # [4, 8] floats: far below
    big = [2048, 2048]
    with es.GraphBuilder("big") as gb:
        x = es.input("x", "float32", big)
        gb.output(es.tanh(x), "y")
    model = ge_hub.compile(gb.graph, {"x": big}, options={**KEEP_BRANCHES, "streams": 1})
    assert model.plan.steps[0].threads == 0
    assert cost.runs_inline(gb.graph.nodes[0]) is False


def test_auto_never_picks_a_schedule_its_model_says_is_slower(monkeypatch):
    from test_executor_streams import towers

    def streams_of(graph):
        g = optimize(graph.copy(), {"x": [8, 32]}, {"streams": "auto"})
        return {n.meta["stream"] for n in g.nodes if is_step(n)}

    graph = towers()  # six chains of small products: worth streams when threads are free
    monkeypatch.setattr(cost, "threads_available", lambda: 4)
    assert len(streams_of(graph)) > 1
    # The model now says starting a concurrent region costs a second: never worth it.
    monkeypatch.setattr(cost, "REGION_LAUNCH", 1.0)
    assert streams_of(graph) == {0}
    monkeypatch.undo()
    monkeypatch.setattr(cost, "threads_available", lambda: 1)  # no second thread at all
    assert streams_of(graph) == {0}


# -- outputs -------------------------------------------------------------------------------

def graph_with_branches():
    rng = np.random.default_rng(1)

    def conv(x, cin, cout, k):
        w = (rng.standard_normal((cout, cin, k, k)) * 0.2).astype(np.float32)
        return es.relu(es.conv(x, w, pads=[k // 2] * 4))

    with es.GraphBuilder("branches") as gb:
        x = es.input("x", "float32", [1, 8, 12, 12])
        a = conv(x, 8, 8, 1)
        b = conv(conv(x, 8, 4, 1), 4, 8, 3)
        c = conv(es.max_pool(x, kernel_shape=[3, 3], pads=[1, 1, 1, 1]), 8, 4, 1)
        y = es.concat([a, b, c], axis=1)
        gb.output(es.reduce_mean(y, axes=np.array([2, 3], np.int64)), "pooled")
        gb.output(y, "features")
    return gb.graph


def test_outputs_identical_whatever_the_stream_count():
    from test_executor_streams import towers

    for graph in [build() for build in GRAPHS] + [graph_with_branches(), towers()]:
        feeds = feeds_for(graph)
        shapes = {k: v.shape for k, v in feeds.items()}
        reference = ge_hub.compile(graph, shapes,
                                   options={**KEEP_BRANCHES, "streams": 1}).run(feeds)
        for streams in (2, 3, 8, "auto"):
            model = ge_hub.compile(graph, shapes, options={**KEEP_BRANCHES, "streams": streams})
            for _ in range(3):
                for got, want in zip(model.run(feeds), reference):
                    np.testing.assert_array_equal(got, want)


def test_summary_reports_streams_events_and_both_arenas():
    graph = graph_with_branches()
    model = ge_hub.compile(graph, {"x": [1, 8, 12, 12]}, options={**KEEP_BRANCHES, "streams": 3})
    summary = model.summary()
    assert summary["streams"] == 3 and summary["events"] == len(model.plan.events) > 0
    assert summary["serial_arena_bytes"] <= summary["arena_bytes"]
    assert summary["lower_bound_bytes"] <= summary["arena_bytes"]
    one = ge_hub.compile(graph, {"x": [1, 8, 12, 12]},
                         options={**KEEP_BRANCHES, "streams": 1}).summary()
    assert one["streams"] == 1 and one["events"] == 0
    assert one["serial_arena_bytes"] == one["arena_bytes"] == summary["serial_arena_bytes"]


def test_offline_file_carries_streams(tmp_path):
    graph = graph_with_branches()
    feeds = feeds_for(graph)
    model = ge_hub.compile(graph, {"x": [1, 8, 12, 12]}, options={**KEEP_BRANCHES, "streams": 3})
    path = tmp_path / "branches.ghm"
    model.save(path)
    loaded = ge_hub.load_compiled(path)
    assert loaded.plan.events == model.plan.events
    assert [s.stream for s in loaded.plan.steps] == [s.stream for s in model.plan.steps]
    assert [s.threads for s in loaded.plan.steps] == [s.threads for s in model.plan.steps]
    assert loaded.plan.memory == model.plan.memory
    for got, want in zip(loaded.run(feeds), model.run(feeds)):
        np.testing.assert_array_equal(got, want)


def test_cli_run_takes_streams(tmp_path, capsys):
    from ge_hub import cli

    path = tmp_path / "branches.gehub"
    from ge_hub.ir.serialize import save

    save(graph_with_branches(), str(path))
    assert cli.main(["run", str(path), "--streams", "3"]) == 0
    out = capsys.readouterr().out
    assert "3 streams" in out and "events" in out
    with pytest.raises(SystemExit):
        cli.main(["run", str(path), "--streams", "none"])


# -- the memory planner against every interleaving -------------------------------------------

def run_order(plan):
    """ancestors[i]: bit mask of the steps that finish before step i starts, at run time:
    the stream's order, the events, and the steps that run alone (threads 0, Python
    steps: the executor overlaps only threads-1 C steps), after all earlier steps and
    before all later ones."""
    preds = [[] for _ in plan.steps]
    for e in plan.events:
        preds[e.wait].append(e.signal)
    last, lone = {}, None
    for i, step in enumerate(plan.steps):
        if step.stream in last:
            preds[i].append(last[step.stream])
        last[step.stream] = i
        if step.threads == 0 or step.kind is KernelKind.PYTHON:
            preds[i].extend(range(i))
            lone = i
        elif lone is not None:
            preds[i].append(lone)
    return ancestors(preds)


def arena_ranges(plan, step, writes):
    tensors = step.outputs if writes else step.inputs
    ranges = [(plan.tensors[t].offset, plan.tensors[t].nbytes) for t in tensors
              if t >= 0 and plan.tensors[t].storage is Storage.ARENA]
    if writes and step.scratch_bytes:
        ranges.append((step.scratch_offset, step.scratch_bytes))
    return [(o, o + n) for o, n in ranges if n > 0]


def assert_no_concurrent_overlap(plan):
    """Every two steps that may overlap in time in some interleaving the streams and
    events allow (neither finishes before the other starts) touch disjoint arena bytes
    wherever one of them writes; so every interleaving computes what plan order does
    (each run-time ordering also goes forward in plan order)."""
    anc = run_order(plan)
    touch = [(arena_ranges(plan, s, True), arena_ranges(plan, s, False)) for s in plan.steps]
    for i in range(len(plan.steps)):
        for j in range(i):
            if (anc[i] >> j) & 1:
                continue  # j always finishes before i starts
            writes_i, reads_i = touch[i]
            writes_j, reads_j = touch[j]
            for a0, a1 in writes_i:
                for b0, b1 in writes_j + reads_j:
                    assert a1 <= b0 or b1 <= a0, (plan.steps[i].node, plan.steps[j].node)
            for a0, a1 in writes_j:
                for b0, b1 in reads_i:
                    assert a1 <= b0 or b1 <= a0, (plan.steps[j].node, plan.steps[i].node)


UNARY = ("relu", "tanh", "neg", "sigmoid", "abs")
BINARY = ("add", "mul", "sub")


@st.composite
def random_dags(draw):
    n = draw(st.integers(3, 14))
    nodes = []
    for i in range(n):
        binary = i > 0 and draw(st.booleans())
        op = draw(st.sampled_from(BINARY if binary else UNARY))
        sources = [draw(st.integers(-1, i - 1)) for _ in range(2 if binary else 1)]
        nodes.append((op, sources))
    outputs = draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=3))
    width = draw(st.sampled_from([8, 64, 1024]))
    return nodes, sorted(outputs), width


def build_dag(spec, rows=4, ops=None):
    """The graph of a random_dags spec over an input [rows, width]; `ops` builds the ops
    named there (arguments -> value) in place of the es function of that name."""
    nodes, outputs, width = spec
    ops = ops or {}
    with es.GraphBuilder("dag") as gb:
        x = es.input("x", "float32", [rows, width])
        values = []
        for op, sources in nodes:
            args = [x if s < 0 else values[s] for s in sources]
            values.append(ops[op](*args) if op in ops else getattr(es, op)(*args))
        for k in outputs:
            gb.output(values[k], f"y{k}")
    return gb.graph


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_dags(), st.sampled_from([2, 3, 5]))
def test_planner_never_overlaps_concurrently_live_memory(spec, streams):
    graph = build_dag(spec)
    shapes = {"x": [4, spec[2]]}
    model = ge_hub.compile(graph, shapes, options={**KEEP_BRANCHES, "streams": streams})
    plan = model.plan
    assert_no_concurrent_overlap(plan)
    assert plan.memory.lower_bound_bytes <= plan.memory.arena_bytes
    feeds = feeds_for(graph)
    want = ge_hub.compile(graph, shapes, options={**KEEP_BRANCHES, "streams": 1}).run(feeds)
    for got, expected in zip(model.run(feeds), want):
        np.testing.assert_array_equal(got, expected)


def test_the_overlap_check_catches_a_racy_plan():
    import dataclasses

    graph = fork_join()
    plan = ge_hub.compile(graph, {"x": SHAPE}, options={**KEEP_BRANCHES, "streams": 2}).plan
    assert_no_concurrent_overlap(plan)
    # Put every arena tensor at offset 0: the two branches now race on the same bytes.
    racy = dataclasses.replace(plan, tensors=tuple(
        dataclasses.replace(t, offset=0) if t.storage is Storage.ARENA else t
        for t in plan.tensors))
    with pytest.raises(AssertionError):
        assert_no_concurrent_overlap(racy)
