"""Profiles, dumps and comparisons of a model that runs in segments (a NonZero cuts it):
every segment's plan is observed, its steps numbered over the whole run and labelled
with their segment, and a cut's value is dumped at its real shape."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ge_hub
from ge_hub import es, testing
from ge_hub.compare import compare_model
from ge_hub.reference import evaluate

# fuse_elementwise off where every graph value is dumped or compared: it would fuse the
# tail's Mul and Tanh into one step, and the Mul's value would no longer exist.
KEEP_VALUES = {"disable_passes": ["fuse_elementwise"]}


def nonzero_graph():
    """relu -> NonZero (the cut) -> Cast -> Mul -> Tanh: the Tanh runs in the tail."""
    with es.GraphBuilder("cut_by_nonzero") as gb:
        x = es.input("x", "float32", ["N", 3])
        positive = es.relu(x)
        where = es.non_zero(positive)
        scaled = es.mul(es.cast(where, to="float32"), np.array(0.25, np.float32))
        gb.output(es.tanh(scaled), "out")
        gb.output(positive, "positive")
    return gb.graph


def feed(n=5):
    return {"x": np.random.default_rng(1).standard_normal((n, 3)).astype(np.float32)}


def names_of(graph):
    return [v.name for n in graph.nodes for v in n.outputs if v is not None]


@pytest.fixture
def wrong_tanh():
    """A plugin's Tanh kernel that is off by 1% (and wins kernel selection)."""
    with testing.wrong_kernel("Tanh", lambda x: np.tanh(x) * np.float32(1.01),
                              plugin="test-wrong-tanh", name="test_wrong_tanh"):
        yield


def test_a_dump_covers_every_segment_with_cut_values_at_their_real_shape(tmp_path):
    graph = nonzero_graph()
    model = ge_hub.compile(graph, options=KEEP_VALUES)
    dump = model.dump(feed(), str(tmp_path / "dump"), keep=True)
    assert model.summary()["segments"] == 2
    reference = dict(zip(names_of(graph), evaluate(graph, feed(), names_of(graph))))
    entries = {e["value"]: e for e in dump.entries}
    for name in names_of(graph):  # every graph value, each as the reference computes it
        assert name in entries, name
        np.testing.assert_allclose(dump.arrays[name], reference[name], rtol=1e-6)
        assert entries[name]["shape"] == list(reference[name].shape)
    where = next(n.outputs[0].name for n in graph.nodes if n.op == "NonZero")
    assert entries[where]["segment"] == 0 and entries[where]["op"] == "ge_hub.NonZeroBounded"
    tanh = next(n.outputs[0].name for n in graph.nodes if n.op == "Tanh")
    assert entries[tanh]["segment"] == 1
    steps = [e["step"] for e in dump.entries if e["step"] is not None]
    assert steps == sorted(steps) and len(set(steps)) >= 4  # numbered over the whole run
    assert [e["value"] for e in dump.entries if e["step"] is None] == ["x"]  # inputs once
    manifest = json.loads((tmp_path / "dump" / "manifest.json").read_text())
    assert manifest["outputs"] == ["out", "positive"]
    saved = {v["value"]: v for v in manifest["values"]}
    on_disk = np.load(tmp_path / "dump" / saved[where]["file"])
    np.testing.assert_array_equal(on_disk, reference[where])  # the file too, cut to size
    outputs = model.run(feed())
    for ours, theirs in zip(dump.outputs, outputs):
        np.testing.assert_array_equal(ours, theirs)


def test_a_dump_filter_applies_across_segments():
    graph = nonzero_graph()
    cast = next(n.outputs[0].name for n in graph.nodes if n.op == "Cast")
    dump = ge_hub.compile(graph).dump(feed(), filter=["cast*", "out"])
    assert [e["value"] for e in dump.entries] == [cast, "out"]  # tail values only


def test_a_profile_has_each_segment_and_its_steps_in_the_trace(tmp_path):
    model = ge_hub.compile(nonzero_graph())
    profile = model.profile(feed(), runs=3)
    plans = model.segment_plans
    assert len(plans) == 2
    assert len(profile.steps) == sum(len(p.steps) for p in plans)
    assert [s.segment for s in profile.steps] == [
        i for i, p in enumerate(plans) for _ in p.steps]
    assert [s.index for s in profile.steps] == list(range(len(profile.steps)))
    assert all(r.shape == (len(profile.steps), 3) for r in profile.records)
    path = tmp_path / "trace.json"
    profile.save(path)
    trace = json.loads(path.read_text())
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    segments = [e for e in complete if e["cat"] == "segment"]
    assert [e["name"] for e in segments] == ["segment 0", "segment 1"] * 3
    runs = [e for e in complete if e["cat"] == "run"]
    steps = [e for e in complete if e["cat"] not in ("run", "segment")]
    assert len(runs) == 3 and len(steps) == 3 * len(profile.steps)
    for event in steps:  # a step lies inside the event of its own segment
        seg = [s for s in segments if s["name"] == f"segment {event['args']['segment']}"
               and s["ts"] <= event["ts"] and event["ts"] + event["dur"] <= s["ts"] + s["dur"]
               + 1e-3]
        assert len(seg) == 1
        assert {"op", "kernel", "inputs", "outputs", "bytes"} <= set(event["args"])
    assert trace["otherData"]["segments"] == 2
    summary = profile.summary()
    assert summary["segments"] == 2 and summary["steps"] == len(profile.steps)
    assert "in 2 segments" in profile.format_summary()


def test_compare_matches_the_values_of_every_segment():
    graph = nonzero_graph()
    result = compare_model(ge_hub.compile(graph, options=KEEP_VALUES), graph, feed())
    assert result.outputs_ok and result.first_divergence is None
    assert set(names_of(graph)) <= {v.value for v in result.values}


def test_compare_finds_a_wrong_kernel_in_the_tail_segment(wrong_tanh):
    graph = nonzero_graph()
    model = ge_hub.compile(graph)
    result = compare_model(model, graph, feed())
    assert any(s.kernel == "test_wrong_tanh" for s in model.segment_plans[1].steps)
    first = result.first_divergence
    assert first.op == "Tanh" and first.value == next(
        n.outputs[0].name for n in graph.nodes if n.op == "Tanh")
    assert all(v.ok for v in result.values[:result.values.index(first)])
    assert not result.outputs_ok
