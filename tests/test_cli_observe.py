"""`ge-hub profile`, `ge-hub run --profile/--dump`, `ge-hub compare` and `ge-hub bench` on a
.gehub model: their outputs, files, JSON and one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_profiling import check_trace_events, conv_mlp_graph

from ge_hub.cli import main
from ge_hub.ir import serialize

KEEP_CHAIN = ["--disable-pass", "fuse_elementwise"]


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
    # (fuse_elementwise off in these tests: they count and dump the Tanh/Add/Mul steps)
    assert main(["profile", model_path, "--runs", "2", "--json", *KEEP_CHAIN]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["runs"] == 2 and summary["steps"] == 5 and summary["lanes"] == [0]
    assert summary["gflop"] > 0
    assert sum(op["steps"] for op in summary["top_ops"]) == 5


def test_run_profile_and_dump(model_path, tmp_path, capsys):
    trace, dump = tmp_path / "t.json", tmp_path / "dump"
    assert main(["run", model_path, "--profile", str(trace), "--dump", str(dump),
                 "--dump-filter", "tanh*", "--dump-filter", "out", "--json", *KEEP_CHAIN]) == 0
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


# -- ge-hub bench ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def batch_model_path(tmp_path_factory):
    from ge_hub import es

    with es.GraphBuilder("batched") as gb:
        x = es.input("x", "float32", ["N", 16])
        w = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)
        gb.output(es.relu(x @ w), "y")
    path = tmp_path_factory.mktemp("batched") / "batched.gehub"
    serialize.save(gb.graph, path)
    return str(path)


def test_bench_json_has_latency_throughput_and_environment(model_path, capsys):
    from ge_hub import _core

    threads = _core.num_threads()
    assert main(["bench", model_path, "--iterations", "7", "--warmup", "2", "--threads",
                 str(threads), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    latency = result["latency"]
    assert latency["iterations"] == 7
    assert latency["min_ms"] <= latency["median_ms"] <= latency["p90_ms"] \
        <= latency["p99_ms"] <= latency["max_ms"]
    assert latency["throughput_per_s"] == pytest.approx(1e3 / latency["mean_ms"])
    env = result["environment"]
    assert env["threads"] == threads and "ge-hub" in env["versions"] and env["cpu"]
    assert result["inputs"] == {"x": {"shape": [1, 3, 8, 8], "dtype": "float32"}}


def test_bench_batch_sets_the_symbolic_dim_and_writes_a_file(batch_model_path, tmp_path,
                                                             capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", batch_model_path, "--batch", "8", "--time", "0.05", "--warmup",
                 "1", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "throughput:" in text and "(batch 8)" in text and "latency ms: min" in text
    result = json.loads(out.read_text())
    assert result["inputs"]["x"]["shape"] == [8, 16] and result["batch"] == 8
    assert result["latency"]["throughput_per_s"] == pytest.approx(
        8e3 / result["latency"]["mean_ms"])


@pytest.mark.parametrize("argv, message", [
    (["--batch", "4"], "--batch: no input has a symbolic leading (batch) dim"),
    (["--iterations", "0"], "--iterations must be at least 1"),
    (["--threads", "0"], "--threads must be at least 1"),
    (["--streams", "x"], "--streams: expected auto or a count >= 1"),
])
def test_bench_errors_are_one_line(model_path, capsys, argv, message):
    assert main(["bench", model_path, *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"ge-hub bench: error: {message}") and err.count("\n") == 1


def test_bench_threads_cannot_change_a_running_pool(model_path, capsys):
    from ge_hub import _core

    other = _core.num_threads() + 1
    assert main(["bench", model_path, "--iterations", "1", "--threads", str(other)]) == 1
    assert "the thread pool already runs" in capsys.readouterr().err


# -- the command line as one tool -----------------------------------------------------


def test_help_lists_every_command_with_an_example(capsys):
    from ge_hub.registry import get_registry

    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    examples = out[out.index("examples"):]
    for command in get_registry().commands():
        assert f"    {command.name}" in out  # listed with its help line
        line = command.example or f"ge-hub {command.name} --help"
        assert f"\n  {line}" in examples
    for name in ("run", "profile", "compare", "bench", "compile", "inspect"):
        assert f"\n  ge-hub {name} " in examples


@pytest.fixture
def failing_command():
    from ge_hub import plugins
    from ge_hub.registry import Command

    plugins.reset()
    registry = plugins.get_registry()
    registry.add_command(Command("boom", "always fails", lambda args: 1 // 0))
    yield
    plugins.reset()


def test_any_commands_unexpected_error_is_one_line(failing_command, capsys):
    assert main(["boom"]) == 1
    err = capsys.readouterr().err
    assert err == "ge-hub boom: error: ZeroDivisionError: integer division or modulo by zero\n"
    assert main(["-v", "boom"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and err.endswith("integer division or modulo by zero\n")


def test_offline_models_are_profiled_dumped_and_compared(model_path, tmp_path, capsys):
    ghm = str(tmp_path / "model.ghm")
    assert main(["compile", model_path, "-o", ghm, *KEEP_CHAIN]) == 0
    capsys.readouterr()
    assert main(["run", ghm, "--profile", str(tmp_path / "t.json"), "--dump",
                 str(tmp_path / "d"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dump"]["values"] == 6 and report["profile"]["lanes"] == [0]
    assert main(["compare", ghm]) == 0
    assert "outputs: within tolerance" in capsys.readouterr().out
