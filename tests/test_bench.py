"""The parts of the benchmark suite (bench/) that need no ML framework.

Statistics and interleaving, the output check, the pipe protocol, the memory probe,
the results document (its schema, JSON and Markdown) and model selection. The engines
themselves need onnxruntime and torch; `tox -e bench` runs them.
"""

from __future__ import annotations

import io
import json
import math
import os
import statistics
import sys

import numpy as np
import pytest

# bench/ is a top-level directory of the checkout, not an installed package. Appended,
# so that an installed ge_hub still comes before the source tree.
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import cases, memory, models, protocol, report  # noqa: E402
from bench.checks import compare_outputs  # noqa: E402
from bench.op_profile import profile_ge_hub, summarize_ort_profile  # noqa: E402
from bench.timing import interleave, percentile, summarize, time_interleaved  # noqa: E402


@pytest.fixture
def rng():
    return np.random.default_rng(20240611)


# -- statistics and interleaving --------------------------------------------------------

def test_summarize_gives_median_and_nearest_rank_percentiles(rng):
    values = list(rng.uniform(1e-4, 1e-2, size=41))
    ordered = sorted(values)
    summary = summarize(values)
    assert summary["median"] == statistics.median(values)
    assert summary["p10"] == ordered[4] and summary["p90"] == ordered[36]
    assert summary["min"] == ordered[0] and summary["samples"] == 41
    assert summary["p10"] <= summary["median"] <= summary["p90"]


def test_percentile_of_one_value_and_empty_summary(rng):
    value = float(rng.uniform(1, 2))
    assert percentile([value], 0.9) == value
    with pytest.raises(ValueError, match="empty"):
        summarize([])


class FakeRunner:
    """Stands for a worker: returns a fixed per-call time and logs who ran when."""

    def __init__(self, name, seconds, log):
        self.name, self.seconds, self.log = name, seconds, log

    def __call__(self, calls):
        self.log.append((self.name, calls))
        return self.seconds


def test_interleave_takes_turns_rotating_the_first_engine(rng):
    log = []
    seconds = {name: float(rng.uniform(1e-4, 1e-3)) for name in "abc"}
    runners = {name: FakeRunner(name, s, log) for name, s in seconds.items()}
    result = interleave(runners, rounds=6, warmup=2, min_round_seconds=0.01)
    timed = log[3 * 3:]  # after 2 warm-up calls and 1 calibration call per engine
    turns = [name for name, _ in timed]
    assert turns == list("abc" "bca" "cab" "abc" "bca" "cab")
    for name, s in seconds.items():
        assert result[name]["calls_per_round"] == int(0.01 / s)
        assert all(calls == int(0.01 / s) for n, calls in timed if n == name)
        assert result[name]["median"] == s and result[name]["samples"] == 6


def test_interleave_cuts_rounds_to_the_budget_but_not_below_the_minimum(rng):
    slow = float(rng.uniform(0.5, 1.0))
    result = interleave({"slow": FakeRunner("slow", slow, [])}, rounds=50, warmup=0,
                        min_round_seconds=0.0, budget_seconds=slow * 7.5, min_rounds=3)
    assert result["slow"]["samples"] == 7
    result = interleave({"slow": FakeRunner("slow", slow, [])}, rounds=50, warmup=0,
                        min_round_seconds=0.0, budget_seconds=slow * 0.5, min_rounds=3)
    assert result["slow"]["samples"] == 3


def test_time_interleaved_times_real_callables(rng):
    data = rng.standard_normal(1000)
    result = time_interleaved({"sum": data.sum, "sort": lambda: np.sort(data)}, rounds=3,
                              min_round_seconds=0.001, warmup=1)
    assert set(result) == {"sum", "sort"}
    assert all(r["median"] > 0 and r["samples"] == 3 for r in result.values())


# -- output agreement --------------------------------------------------------------------

def test_compare_outputs_accepts_differences_within_tolerance(rng):
    expected = [rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal(7)]
    got = [e + rng.uniform(-1, 1, e.shape) * 1e-6 for e in expected]
    check = compare_outputs(got, expected, rtol=1e-4, atol=1e-5)
    assert check["ok"] and check["reason"] == ""
    assert 0 < check["max_abs"] <= 1e-6


def test_compare_outputs_rejects_a_difference_beyond_tolerance(rng):
    expected = [rng.standard_normal((4, 4))]
    got = [expected[0].copy()]
    got[0][2, 3] += 1e-2
    check = compare_outputs(got, expected, rtol=1e-4, atol=1e-5)
    assert not check["ok"]
    assert "output 0" in check["reason"] and math.isclose(check["max_abs"], 1e-2, rel_tol=1e-6)


def test_compare_outputs_rejects_wrong_shapes_counts_and_nans(rng):
    x = rng.standard_normal((2, 3))
    assert "shape" in compare_outputs([x.T], [x], rtol=0, atol=0)["reason"]
    assert "outputs" in compare_outputs([x, x], [x], rtol=0, atol=0)["reason"]
    with_nan = x.copy()
    with_nan[1, 1] = np.nan
    assert "NaN" in compare_outputs([with_nan], [x], rtol=1, atol=1)["reason"]
    assert compare_outputs([with_nan], [with_nan.copy()], rtol=0, atol=0)["ok"]


# -- the pipe protocol and the memory probe ---------------------------------------------

def test_protocol_round_trips_messages_with_arrays(rng):
    stream = io.BytesIO()
    first = {"ok": True, "outputs": [rng.standard_normal((3, 2)).astype(np.float32)]}
    protocol.send(stream, first)
    protocol.send(stream, ("time", 17))
    stream.seek(0)
    got = protocol.receive(stream)
    np.testing.assert_array_equal(got["outputs"][0], first["outputs"][0])
    assert protocol.receive(stream) == ("time", 17)
    with pytest.raises(EOFError):
        protocol.receive(stream)


def test_protocol_reports_a_truncated_message_as_eof(rng):
    stream = io.BytesIO()
    protocol.send(stream, list(rng.integers(0, 100, 50)))
    truncated = io.BytesIO(stream.getvalue()[:-3])
    with pytest.raises(EOFError):
        protocol.receive(truncated)


def test_peak_rss_counts_memory_touched_after_a_reset(rng):
    resettable = memory.reset_peak()  # Linux; elsewhere the peak is the process's
    baseline = memory.current_rss()
    block = np.full(48 * 1024 * 1024 // 8, float(rng.uniform(1, 2)))  # 48 MiB, touched
    grown = memory.peak_rss() - baseline
    del block
    assert memory.peak_rss() >= memory.current_rss() > 0
    if resettable:
        assert grown >= 40 * 1024 * 1024
    else:
        assert grown >= 0


# -- the results document ----------------------------------------------------------------

def engine_entry(rng, median, *, ratio_base=None):
    p10, p90 = median * float(rng.uniform(0.8, 1.0)), median * float(rng.uniform(1.0, 1.3))
    return {
        "status": "ok", "import_s": float(rng.uniform(0.1, 2)),
        "prepare_s": float(rng.uniform(0.01, 1)), "first_run_s": median,
        "setup_s": float(rng.uniform(0.01, 1)),
        "peak_rss_bytes": int(rng.integers(1, 500) * report.MIB),
        "latency_s": {"median": median, "p10": p10, "p90": p90, "min": p10, "samples": 9},
        "ratio_vs": {} if ratio_base is None else {"ort-1t": median / ratio_base},
        "check": {"ok": True, "max_abs": 1e-7, "max_rel": 1e-6, "reason": ""},
    }


def results_document(rng, models=("chain-1", "chain-200")):
    doc = {
        "schema": report.SCHEMA, "created": "2024-06-11T00:00:00+00:00",
        "command": "python -m bench --quick", "mode": "quick",
        "environment": {"cpu_model": "a CPU", "usable_cpus": 2, "packages": {}},
        "settings": {"rounds": 5, "min_round_seconds": 0.01, "warmup": 2},
        "models": [],
    }
    for name in models:
        ort = float(rng.uniform(1e-5, 1e-3))
        ge = float(rng.uniform(1e-5, 1e-3))
        doc["models"].append({
            "name": name, "description": f"the {name} model",
            "tolerance": {"rtol": 1e-3, "atol": 1e-4},
            "engines": {"ge-hub": engine_entry(rng, ge, ratio_base=ort),
                        "ort-1t": engine_entry(rng, ort, ratio_base=ort),
                        "torch-eager": {"status": "error", "error": "worker exited\nmore"}},
        })
    return doc


def test_a_complete_document_follows_the_schema_and_survives_json(rng):
    doc = results_document(rng)
    assert report.validate(doc) == []
    doc["models"][0]["engines"]["ge-hub"]["check"]["max_abs"] = float("nan")
    loaded = json.loads(report.to_json(doc))
    assert loaded["models"][0]["engines"]["ge-hub"]["check"]["max_abs"] is None
    assert loaded["models"][1]["engines"]["ort-1t"]["latency_s"] == (
        doc["models"][1]["engines"]["ort-1t"]["latency_s"])


@pytest.mark.parametrize("breakage, problem", [
    (lambda d: d.pop("environment"), "'environment' missing"),
    (lambda d: d.update(schema="other/9"), "schema is 'other/9'"),
    (lambda d: d["models"][0]["engines"]["ge-hub"].update(status="fine"), "status 'fine'"),
    (lambda d: d["models"][0]["engines"]["ge-hub"]["latency_s"].update(p10=1.0), "ordered"),
    (lambda d: d["models"][1]["engines"]["ort-1t"].pop("peak_rss_bytes"), "peak_rss_bytes"),
    (lambda d: d["models"][1]["engines"]["torch-eager"].pop("error"), "without an error"),
    (lambda d: d["models"][0]["engines"]["ge-hub"]["check"].update(ok=False), "not checked"),
])
def test_validate_names_what_breaks_the_schema(rng, breakage, problem):
    doc = results_document(rng)
    breakage(doc)
    problems = report.validate(doc)
    assert any(problem in p for p in problems), problems


def test_markdown_has_a_row_per_engine_with_its_figures(rng):
    doc = results_document(rng)
    text = report.markdown(doc)
    for model in doc["models"]:
        for engine, entry in model["engines"].items():
            row = next(line for line in text.splitlines()
                       if line.startswith(f"| {model['name']} | {engine} |"))
            if entry["status"] == "ok":
                assert report.format_ms(entry["latency_s"]["median"]) in row
                assert f"{entry['ratio_vs']['ort-1t']:.2f}" in row
            else:
                assert "error: worker exited" in row and "more" not in row


def test_chain_costs_split_per_op_and_per_call_cost(rng):
    doc = results_document(rng)
    costs = report.chain_costs(doc)
    one, many = (m["engines"]["ge-hub"]["latency_s"]["median"] for m in doc["models"])
    per_op = (many - one) / 199
    assert math.isclose(costs["ge-hub"]["per_op_s"], per_op)
    assert math.isclose(costs["ge-hub"]["per_call_s"], one - per_op)
    assert "torch-eager" not in costs  # it failed: no figure to derive from
    assert f"{per_op * 1e6:.2f}" in report.markdown(doc)


def test_profile_sentence_names_the_top_ops_and_their_shares(rng):
    doc = results_document(rng, models=("resnet",))
    model = doc["models"][0]
    conv, relu = float(rng.uniform(1e-2, 2e-2)), float(rng.uniform(1e-4, 1e-3))
    total = conv + relu
    model["profile"] = {
        "ge-hub": {"total_s": total, "run_s": total * 1.1, "fallback_nodes": {"Dropout": 1},
                   "ops": [
            {"op": "Conv", "seconds": conv, "share": conv / total, "nodes": 20},
            {"op": "Relu", "seconds": relu, "share": relu / total, "nodes": 17}]},
        "ort-1t": {"total_s": conv, "ops": [
            {"op": "FusedConv", "seconds": conv, "share": 1.0, "nodes": 20}]},
    }
    sentence = report.profile_sentence(model)
    assert f"Conv {conv / total * 100:.0f}%" in sentence and "20 nodes" in sentence
    assert "FusedConv 100%" in sentence and "Dropout x1" in sentence
    assert f"beside a whole run of {report.format_ms(total * 1.1)} ms" in sentence
    assert sentence in report.markdown(doc)


def test_format_ms_keeps_about_three_significant_digits(rng):
    for seconds in rng.uniform(1e-6, 1.0, size=20):
        text = report.format_ms(float(seconds))
        assert math.isclose(float(text), seconds * 1e3, rel_tol=0.06, abs_tol=6e-4)


# -- model selection ---------------------------------------------------------------------

def test_select_quick_and_named_models():
    quick = cases.select(None, quick=True)
    assert {"mlp", "chain-1", "chain-200"} <= {c.name for c in quick}
    assert all(c.quick for c in quick)
    assert [c.name for c in cases.select(["chain-200", "mlp"], quick=False)] == [
        "chain-200", "mlp"]
    with pytest.raises(ValueError, match="unknown models \\['nope'\\]"):
        cases.select(["mlp", "nope"], quick=False)


def test_onnx_file_cases_leave_out_the_pytorch_engines():
    case = cases.OnnxFileCase("m", "a file", "/nonexistent.onnx")
    assert case.engines(["ge-hub", "torch-eager", "ort-2t", "torch-compile"]) == [
        "ge-hub", "ort-2t"]


# -- per-op profiles ---------------------------------------------------------------------

def test_ort_profile_summary_skips_warm_up_runs_and_sums_per_op(rng, tmp_path):
    events, clock, expected = [], 0, {"Conv": 0.0, "Relu": 0.0}
    for run in range(5):
        start = clock
        for op in ("Conv", "Relu", "Conv"):
            dur = int(rng.integers(10, 1000))
            events.append({"cat": "Node", "name": f"n{clock}_kernel_time", "ts": clock,
                           "dur": dur, "args": {"op_name": op}})
            events.append({"cat": "Node", "name": f"n{clock}_fence_before", "ts": clock,
                           "dur": 5, "args": {"op_name": op}})
            if run >= 2:
                expected[op] += dur * 1e-6 / 3
            clock += dur + 1
        events.append({"cat": "Session", "name": "model_run", "ts": start,
                       "dur": clock - start})
        clock += 50
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(events))
    summary = summarize_ort_profile(str(path), skip_runs=2)
    by_op = {o["op"]: o for o in summary["ops"]}
    assert math.isclose(by_op["Conv"]["seconds"], expected["Conv"])
    assert math.isclose(by_op["Relu"]["seconds"], expected["Relu"])
    assert by_op["Conv"]["nodes"] == 2 and by_op["Relu"]["nodes"] == 1
    assert math.isclose(sum(o["share"] for o in summary["ops"]), 1.0)
    with pytest.raises(ValueError, match="no profiled runs"):
        summarize_ort_profile(str(path), skip_runs=5)


def test_ge_hub_profile_times_every_node_of_the_compiled_graph(rng):
    import ge_hub
    from ge_hub.compiler import optimize

    graph = models.mlp(1, sizes=(32, 16, 16, 4), seed=int(rng.integers(1000)))
    model = ge_hub.compile(graph)
    feed = [rng.standard_normal((1, 32)).astype(np.float32)]
    profile = profile_ge_hub(graph, {"x": (1, 32)}, rounds=3,
                             whole_model=lambda: model.run(feed))
    counts = {o["op"]: o["nodes"] for o in profile["ops"]}
    compiled = {}
    for node in optimize(graph.copy(), {"x": [1, 32]}).nodes:
        compiled[node.qualified_op] = compiled.get(node.qualified_op, 0) + 1
    assert counts == compiled
    assert profile["run_s"] > 0 and profile["call_overhead_s"] > 0
    assert math.isclose(sum(o["seconds"] for o in profile["ops"]), profile["total_s"])
    assert profile["method"] == "single-op graphs" and profile["fallback_nodes"] == {}


def test_ge_hub_profile_times_no_concat_that_runs_no_step(rng):
    """A Concat whose inputs are written into their slices of it (concat_in_place) runs
    no kernel in the model, so the profile gives it no time of its own."""
    from ge_hub import es

    with es.GraphBuilder("joined") as gb:
        x = es.input("x", "float32", [1, 32])
        w = es.const(rng.standard_normal((32, 16)).astype(np.float32))
        joined = es.concat([es.relu(es.matmul(x, w)), es.tanh(es.matmul(x, w))], axis=1)
        gb.output(es.sigmoid(joined), "y")
    profile = profile_ge_hub(gb.graph, {"x": (1, 32)}, rounds=3)
    ops = {o["op"] for o in profile["ops"]}
    assert "Concat" not in ops and "MatMul" in ops


def test_markdown_gives_ge_hub_step_counts_with_and_without_fusion(rng):
    doc = results_document(rng)
    doc["models"][0]["engines"]["ge-hub"]["details"] = {
        "steps": 21, "steps_without_fusion": 49,
        "fusion_passes": ["fold_batch_norm", "fuse_conv_epilogue"],
        "rules": {"fold_batch_norm.conv": 20, "fuse_conv_epilogue.relu": 17,
                  "simplify.identity": 2}}
    text = report.markdown(doc)
    assert ("| chain-1 | 21 | 49 | fold_batch_norm.conv x20, fuse_conv_epilogue.relu x17 |"
            in text.splitlines())
    assert not any(line.startswith("| chain-200 | ") and "without" not in line
                   and line.count("|") == 5 for line in text.splitlines())
