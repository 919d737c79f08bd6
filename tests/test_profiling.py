"""Profiles (ge_hub.profiling) and dumps (ge_hub.dump) of compiled models: the trace is
valid trace-event JSON with one event per step, FLOPs are counted, dumps hold values as
their step produced them."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.reference import evaluate


def conv_mlp_graph(seed=0):
    """conv -> relu -> flatten -> matmul -> add (-> an in-place chain of adds)."""
    rng = np.random.default_rng(seed)
    with es.GraphBuilder("conv_mlp") as gb:
        x = es.input("x", "float32", [1, 3, 8, 8])
        w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
        y = es.relu(es.conv(x, w, pads=[1, 1, 1, 1]))
        y = es.reshape(y, np.array([1, 256], np.int64))
        y = y @ rng.standard_normal((256, 10)).astype(np.float32)
        z = es.tanh(y)
        z = z + z
        gb.output(z * np.float32(3.0), "out")
    return gb.graph


@pytest.fixture(scope="module")
def model():
    # fuse_elementwise off: the tests read the Tanh/Add/Mul chain's values one by one
    return ge_hub.compile(conv_mlp_graph(), options={"disable_passes": ["fuse_elementwise"]})


@pytest.fixture
def x():
    return np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)


def check_trace_events(trace):
    """The trace-event format (JSON object form) as Perfetto and chrome://tracing read
    it: every event has a known phase and integer pid/tid; complete events have numeric
    non-negative ts and dur; metadata events name a process or thread; X events on one
    (pid, tid) nest or follow each other, never cross."""
    assert set(trace) >= {"traceEvents"}
    json.dumps(trace)  # plain JSON values only
    lanes: dict = {}
    for event in trace["traceEvents"]:
        assert event["ph"] in ("X", "M"), event
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int)
        assert isinstance(event["name"], str) and event["name"]
        if event["ph"] == "M":
            assert event["name"] in ("process_name", "thread_name")
            assert isinstance(event["args"]["name"], str)
            continue
        assert isinstance(event["ts"], (int, float)) and event["ts"] >= 0
        assert isinstance(event["dur"], (int, float)) and event["dur"] >= 0
        assert isinstance(event.get("cat", ""), str)
        lanes.setdefault((event["pid"], event["tid"]), []).append(event)
    for events in lanes.values():
        events.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_ends: list[float] = []
        for event in events:
            end = event["ts"] + event["dur"]
            while open_ends and event["ts"] >= open_ends[-1] - 1e-3:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1] + 1e-3, event
            open_ends.append(end)


def test_the_trace_is_valid_and_has_one_event_per_step_per_run(model, x, tmp_path):
    profile = model.profile({"x": x}, runs=3)
    trace = profile.trace()
    check_trace_events(trace)
    plan = model.plan
    steps = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == 2
             and e.get("cat") != "run"]
    assert len(steps) == 3 * len(plan.steps)
    assert [e["name"] for e in steps[:len(plan.steps)]] == [s.node for s in plan.steps]
    assert len([e for e in trace["traceEvents"] if e.get("cat") == "run"]) == 3
    first = steps[0]["args"]
    assert {"op", "kernel", "inputs", "outputs", "bytes"} <= set(first)
    assert profile.lanes() == [0]
    # The compile phases are there: every pass that ran, memory planning, emission.
    phases = {e["name"]: e["cat"] for e in trace["traceEvents"] if e["pid"] == 1
              and e["ph"] == "X"}
    assert phases["specialize_shapes"] == "pass" and phases["select_kernels"] == "pass"
    assert phases["plan_memory"] == "planning" and phases["emit_plan"] == "emission"
    path = tmp_path / "trace.json"
    profile.save(path)
    check_trace_events(json.loads(path.read_text()))


def test_flops_of_conv_and_matmul_are_counted(model, x):
    profile = model.profile({"x": x})
    by_op = {}
    for info in profile.steps:
        by_op.setdefault(info.op, []).append(info.flops)
    conv = [f for op, fs in by_op.items() if "Conv" in op for f in fs]
    matmul = [f for op, fs in by_op.items() if "MatMul" in op or "Gemm" in op for f in fs]
    assert conv == [2 * (4 * 8 * 8) * (3 * 3 * 3)]
    assert matmul == [2 * 10 * 256]
    summary = profile.summary()
    assert summary["gflop"] == pytest.approx((conv[0] + matmul[0]) / 1e9)
    assert sum(row["share"] for row in summary["top_ops"]) == pytest.approx(1.0)
    text = profile.format_summary()
    assert "top" in text and "GFLOP/s" in text


def test_the_profile_option_keeps_the_models_own_compile_phases(x):
    model = ge_hub.compile(conv_mlp_graph(), options={"profile": True})
    profile = model.profile({"x": x})
    names = [p.name for p in profile.phases]
    assert "compile" not in names  # no second compile was needed
    assert "emit_plan" in names and "specialize_shapes" in names
    np.testing.assert_allclose(model.run({"x": x})[0],
                               ge_hub.compile(conv_mlp_graph()).run({"x": x})[0])


def test_bad_profile_arguments_are_refused(model, x):
    with pytest.raises(ValueError, match="runs must be at least 1"):
        model.profile({"x": x}, runs=0)


def test_a_dump_holds_every_produced_value_as_produced(model, x, tmp_path):
    dump = model.dump({"x": x}, str(tmp_path))
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    values = manifest["values"]
    plan = model.plan
    produced = [plan.tensors[t].name for s in plan.steps for t in s.outputs if t >= 0]
    assert [v["value"] for v in values] == ["x", *produced]
    assert values[0]["step"] is None
    graph = conv_mlp_graph()
    known = [v["value"] for v in values[1:] if v["value"] in
             {o.name for n in graph.nodes for o in n.outputs}]
    assert len(known) >= 4  # matmul_5, tanh_6, add_7, out keep their names
    reference = dict(zip(known, evaluate(graph, {"x": x}, known)))
    for entry in values:
        array = np.load(tmp_path / entry["file"])
        assert list(array.shape) == entry["shape"] and array.dtype.name == entry["dtype"]
        if entry["step"] is not None:
            step = plan.steps[entry["step"]]
            assert (step.op, step.node) == (entry["op"], entry["node"])
        if entry["value"] in reference:
            np.testing.assert_allclose(array, reference[entry["value"]], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.load(tmp_path / values[-1]["file"]), dump.outputs[0])


def test_values_computed_in_place_are_dumped_before_they_are_overwritten(model, x):
    plan = model.plan
    spec = {plan.tensors[t].name: plan.tensors[t] for s in plan.steps for t in s.outputs}
    # matmul_5 -> tanh_6 -> add_7 run in place: all three live on the same arena bytes.
    assert len({(spec[n].storage, spec[n].offset) for n in ("matmul_5", "tanh_6", "add_7")}) == 1
    dump = model.dump({"x": x})
    matmul, tanh, add = (dump.arrays[n] for n in ("matmul_5", "tanh_6", "add_7"))
    np.testing.assert_allclose(tanh, np.tanh(matmul), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(add, tanh + tanh)
    np.testing.assert_allclose(add * 3, dump.outputs[0], rtol=1e-6)
    assert not np.array_equal(matmul, add)


def test_a_dump_filter_selects_values_by_glob(model, x, tmp_path):
    dump = model.dump({"x": x}, filter="x")
    assert list(dump.arrays) == ["x"]
    everything = model.dump({"x": x})
    name = list(everything.arrays)[2]
    assert list(model.dump({"x": x}, filter=[name[:2] + "*"]).arrays) == \
        [n for n in everything.arrays if n.startswith(name[:2])]
