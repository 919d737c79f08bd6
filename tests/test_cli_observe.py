"""`ge-hub profile`, `ge-hub run --profile/--dump`, `ge-hub compare` and `ge-hub bench` on a
.gehub model: their outputs, files, JSON and one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_profiling import check_trace_events, conv_mlp_graph

from ge_hub.cli import main
from ge_hub.ir import serialize


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "conv_mlp.gehub"
    serialize.save(conv_mlp_graph(), path)
    return str(path)


def test_profile_prints_top_steps_and_ops_and_writes_a_trace(model_path, tmp_path, capsys):
    trace = tmp_path / "trace.json"
    assert main(["profile", model_path, "--runs", "3", "--top", "3", "--trace",
                 str(trace)]) == 0
    out = capsys.readouterr().out
    assert "top 3 steps by time" in out and "top 3 ops by time" in out
    assert "ge_hub.FusedConv" in out and "GFLOP/s" in out
    check_trace_events(json.loads(trace.read_text()))


def test_profile_json(model_path, capsys):
    assert main(["profile", model_path, "--runs", "2", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["runs"] == 2 and summary["steps"] == 5 and summary["lanes"] == [0]
    assert summary["gflop"] > 0
    assert sum(op["steps"] for op in summary["top_ops"]) == 5


def test_run_profile_and_dump(model_path, tmp_path, capsys):
    trace, dump = tmp_path / "t.json", tmp_path / "dump"
    assert main(["run", model_path, "--profile", str(trace), "--dump", str(dump),
                 "--dump-filter", "tanh*", "--dump-filter", "out", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["profile"]["trace"] == str(trace) and report["profile"]["lanes"] == [0]
    check_trace_events(json.loads(trace.read_text()))
    manifest = json.loads((dump / "manifest.json").read_text())
    assert [v["value"] for v in manifest["values"]] == ["tanh_6", "out"]
    assert report["dump"]["values"] == 2
    out = np.load(dump / manifest["values"][1]["file"])
    np.testing.assert_allclose(out, np.load(dump / "tanh_6.npy") * 6, rtol=1e-6)


@pytest.mark.parametrize("argv, message", [
    (["profile", "missing.gehub"], "ge-hub profile: error: model file 'missing.gehub' does "
                                   "not exist"),
    (["run", "{model}", "--dump-filter", "x"], "ge-hub run: error: --dump-filter needs --dump"),
    (["profile", "{model}", "--runs", "0"], "ge-hub profile: error: runs must be at least 1"),
])
def test_errors_are_one_line(model_path, capsys, argv, message):
    assert main([a.format(model=model_path) for a in argv]) == 1
    err = capsys.readouterr().err
    assert err.strip().startswith(message) and err.count("\n") == 1
