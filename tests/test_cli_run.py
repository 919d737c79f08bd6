"""`ge-hub run MODEL` on a ge-hub graph saved with `ge_hub.ir.serialize.save` (.gehub).

The model has a float, a bool and an int64 input sharing the symbolic batch dim N, and
three outputs: a Where over Relu arithmetic (named "out/y", to test file-name
sanitizing), k + 1, and Log(x) (NaN for negative x, to test the NaN count).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from ge_hub import es
from ge_hub.cli import main
from ge_hub.commands.feeds import RANDOM_INT_HIGH
from ge_hub.ir import serialize
from ge_hub.ir.graph import Graph
from ge_hub.ir.types import TensorType

ERROR_PREFIX = "ge-hub run: error: "


def build_graph() -> Graph:
    with es.GraphBuilder("cli") as gb:
        x = es.input("x", "float32", ["N", 4])
        mask = es.input("mask", "bool", ["N", 4])
        k = es.input("k", "int64", ["N"])
        gb.output(es.where(mask, es.relu(x) * 2.0 + 1.0, x), "out/y")
        gb.output(k + 1, "z")
        gb.output(es.log(x), "log_x")
    return gb.graph


def expected_outputs(x, mask, k) -> dict[str, np.ndarray]:
    with np.errstate(invalid="ignore", divide="ignore"):
        return {"out/y": np.where(mask, np.maximum(x, 0) * 2 + 1, x).astype(np.float32),
                "z": k + 1, "log_x": np.log(x)}


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "model.gehub"
    serialize.save(build_graph(), path)
    return str(path)


@pytest.fixture
def feeds(rng):
    n = 5
    return {"x": rng.standard_normal((n, 4)).astype(np.float32),
            "mask": rng.random((n, 4)) < 0.5,
            "k": rng.integers(-50, 50, size=n).astype(np.int64)}


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def run(capsys, *args):
    """Run `ge-hub run ARGS` in this process: (exit status, stdout, stderr)."""
    code = main(["run", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(capsys, *args) -> dict:
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def outputs_by_name(report: dict) -> dict[str, dict]:
    return {o["name"]: o for o in report["outputs"]}


def assert_stats_describe(stats: dict, array: np.ndarray) -> None:
    """The reported statistics are those of the array's finite elements."""
    assert stats["shape"] == list(array.shape)
    values = array.reshape(-1).astype(np.float64)
    finite = values[np.isfinite(values)]
    assert stats["nan"] == np.count_nonzero(np.isnan(values))
    assert stats["inf"] == np.count_nonzero(np.isinf(values))
    np.testing.assert_allclose([stats["min"], stats["max"], stats["mean"], stats["std"]],
                               [finite.min(), finite.max(), finite.mean(), finite.std()],
                               rtol=1e-6, atol=1e-9)


# -- inputs ----------------------------------------------------------------------------


def test_random_inputs_with_input_shape(capsys, model_path, tmp_path):
    report = run_json(capsys, model_path, "--input-shape", "x:3,4",
                      "--output-dir", tmp_path / "out")
    # x:3,4 fixes N, so the bool and int inputs sharing N get 3 rows too.
    inputs = {i["name"]: i for i in report["inputs"]}
    assert {n: (i["shape"], i["dtype"]) for n, i in inputs.items()} == {
        "x": ([3, 4], "float32"), "mask": ([3, 4], "bool"), "k": ([3], "int64")}
    assert all(i["source"].startswith("random") for i in inputs.values())
    outputs = outputs_by_name(report)
    assert [(o["shape"], o["dtype"]) for o in report["outputs"]] == [
        ([3, 4], "float32"), ([3], "int64"), ([3, 4], "float32")]
    # Random ints are small and non-negative: z = k + 1 lies in [1, RANDOM_INT_HIGH].
    z = np.load(outputs["z"]["file"])
    assert z.dtype == np.int64 and z.min() >= 1 and z.max() <= RANDOM_INT_HIGH
    assert outputs["z"]["min"] == z.min() and outputs["z"]["max"] == z.max()
    # Standard normal floats: both signs occur among 12 values (all but surely).
    y = np.load(outputs["out/y"]["file"])
    assert_stats_describe(outputs["out/y"], y)
    log_x = np.load(outputs["log_x"]["file"])
    assert outputs["log_x"]["nan"] == np.count_nonzero(np.isnan(log_x)) > 0


def test_seed_decides_random_inputs(capsys, model_path, tmp_path):
    def y_for(seed, name):
        report = run_json(capsys, model_path, "--input-shape", "x:6,4", "--seed", seed,
                          "--output-dir", tmp_path / name)
        return np.load(outputs_by_name(report)["out/y"]["file"])

    first, again, other = y_for(1, "a"), y_for(1, "b"), y_for(2, "c")
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_input_npy_files(capsys, model_path, feeds, tmp_path):
    args = []
    for name, array in feeds.items():
        np.save(tmp_path / f"{name}.npy", array)
        args += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
    report = run_json(capsys, model_path, *args, "--output-dir", tmp_path / "out")
    assert [i["source"] for i in report["inputs"]] == [
        str(tmp_path / f"{n}.npy") for n in ("x", "mask", "k")]
    for name, expected in expected_outputs(**feeds).items():
        stats = outputs_by_name(report)[name]
        saved = np.load(stats["file"])
        assert saved.dtype == expected.dtype
        np.testing.assert_allclose(saved, expected, rtol=1e-6, equal_nan=True)
        assert_stats_describe(stats, expected)


def test_input_npz_file(capsys, model_path, feeds, tmp_path):
    np.savez(tmp_path / "feeds.npz", **feeds)
    report = run_json(capsys, model_path, "--input", tmp_path / "feeds.npz",
                      "--output-dir", tmp_path / "out")
    for name, expected in expected_outputs(**feeds).items():
        saved = np.load(outputs_by_name(report)[name]["file"])
        np.testing.assert_allclose(saved, expected, rtol=1e-6, equal_nan=True)


def test_given_input_fixes_symbols_of_random_ones(capsys, model_path, feeds, tmp_path):
    np.save(tmp_path / "x.npy", feeds["x"])
    report = run_json(capsys, model_path, "--input", f"x={tmp_path / 'x.npy'}")
    shapes = {i["name"]: i["shape"] for i in report["inputs"]}
    assert shapes == {"x": [5, 4], "mask": [5, 4], "k": [5]}
    # Log(x) depends on x alone: its statistics are those of the given x.
    assert_stats_describe(outputs_by_name(report)["log_x"], expected_outputs(**feeds)["log_x"])


# -- what it prints --------------------------------------------------------------------


def test_text_report(capsys, model_path):
    code, out, err = run(capsys, model_path, "--input-shape", "x:2,4")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == f"model: {model_path}"
    y_line = next(line for line in lines if line.strip().startswith("out/y"))
    assert "float32[2,4]" in y_line and all(w in y_line for w in ("min", "max", "mean", "std"))
    log_line = next(line for line in lines if line.strip().startswith("log_x"))
    assert "NaN" in log_line  # 8 standard normal draws: some are negative
    compile_line = next(line for line in lines if line.startswith("compile:"))
    assert "steps" in compile_line and "arena" in compile_line and "lower bound" in compile_line
    assert "latency" not in out


def test_compile_line_names_python_steps_and_segments(capsys, tmp_path):
    with es.GraphBuilder("honest") as gb:
        x = es.input("x", "float64", [2, 3])  # float64 Sigmoid: the reference fallback
        gb.output(es.non_zero(es.sigmoid(x)), "where")  # NonZero decides a shape
    path = tmp_path / "honest.gehub"
    serialize.save(gb.graph, path)
    code, out, err = run(capsys, path)
    assert code == 0, err
    compile_line = next(line for line in out.splitlines() if line.startswith("compile:"))
    # NonZero's length is decided at run time: the model runs in segments, NonZero in C
    # at the end of the first; the float64 Sigmoid is still a reference step, and said.
    assert "1 run Python (Sigmoid: 1 reference)" in compile_line
    assert "1 segments cut at NonZero: 1" in compile_line
    assert "folded" not in compile_line


def test_compile_line_counts_reference_fallbacks_as_python(capsys, tmp_path):
    with es.GraphBuilder("fallback") as gb:
        x = es.input("x", "float64", [2, 3])
        gb.output(es.relu(es.sigmoid(x)), "y")
    path = tmp_path / "fallback.gehub"
    serialize.save(gb.graph, path)
    code, out, err = run(capsys, path)
    assert code == 0, err
    compile_line = next(line for line in out.splitlines() if line.startswith("compile:"))
    assert "2 run Python (Sigmoid: 1 reference, Relu: 1 reference)" in compile_line


def test_quiet_omits_compile_summary(capsys, model_path):
    code, out, _ = run(capsys, model_path, "--input-shape", "x:2,4", "--quiet")
    assert code == 0
    assert "compile:" not in out and "inputs:" not in out
    assert "out/y" in out and "float32[2,4]" in out


def test_json_report_has_compile_summary(capsys, model_path):
    report = run_json(capsys, model_path, "--input-shape", "x:2,4")
    summary = report["compile"]
    assert summary["steps"] > 0
    assert summary["fallback_steps"] == sum(summary["fallback_ops"].values())
    assert summary["lower_bound_bytes"] <= summary["arena_bytes"] <= summary["naive_bytes"]
    assert report["latency"] is None and report["seed"] == 0


def test_loop_reports_latency(capsys, model_path):
    report = run_json(capsys, model_path, "--input-shape", "x:2,4", "--loop", 4)
    latency = report["latency"]
    assert latency["runs"] == 4
    assert 0 < latency["min_ms"] <= latency["median_ms"] <= latency["p90_ms"]
    code, out, _ = run(capsys, model_path, "--input-shape", "x:2,4", "--loop", 3)
    assert code == 0 and "latency over 3 runs: median" in out


def test_output_names_become_safe_file_names(capsys, model_path, tmp_path):
    report = run_json(capsys, model_path, "--input-shape", "x:2,4",
                      "--output-dir", tmp_path / "out")
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == ["log_x.npy", "out_y.npy", "z.npy"]
    assert outputs_by_name(report)["out/y"]["file"] == str(tmp_path / "out" / "out_y.npy")


def test_bfloat16_output_saved_and_read_back(capsys, tmp_path, rng):
    with es.GraphBuilder("bf16") as gb:
        gb.output(es.neg(es.input("x", "bfloat16", [3])), "y")
    serialize.save(gb.graph, tmp_path / "neg.gehub")
    first = run_json(capsys, tmp_path / "neg.gehub", "--output-dir", tmp_path / "a")
    y_file = outputs_by_name(first)["y"]["file"]
    # The saved bfloat16 output (2-byte void in .npy) is accepted back as a bfloat16 input.
    second = run_json(capsys, tmp_path / "neg.gehub", "--input", f"x={y_file}",
                      "--output-dir", tmp_path / "b")
    y = np.load(y_file).view(np.dtype("bfloat16"))
    twice = np.load(outputs_by_name(second)["y"]["file"]).view(np.dtype("bfloat16"))
    np.testing.assert_array_equal(twice.astype(np.float32), -y.astype(np.float32))


# -- errors: one line, exit status 1, no traceback -------------------------------------


def unknown_op_model(tmp_path) -> str:
    graph = Graph("bad")
    x = graph.add_input("x", TensorType("float32", [2]))
    node = graph.add_node("NoSuchOp", [x], [TensorType("float32", [2])], {})
    graph.set_outputs(node.outputs)
    path = tmp_path / "unknown_op.gehub"
    serialize.save(graph, path)
    return str(path)


def test_missing_model_file(capsys, tmp_path):
    assert_one_line_error(run(capsys, tmp_path / "nope.gehub"), "nope.gehub", "does not exist")


def test_malformed_model_file(capsys, tmp_path):
    path = tmp_path / "broken.gehub"
    path.write_bytes(serialize.MAGIC + b"\x01\x00\x00\x00 truncated")
    assert_one_line_error(run(capsys, path), "ge-hub IR")


def test_model_format_no_frontend_accepts(capsys, tmp_path):
    path = tmp_path / "model.unknown"
    path.write_bytes(b"\x00\x01 not a model")
    assert_one_line_error(run(capsys, path), "no installed frontend accepts", "model.unknown")


def test_unsupported_op(capsys, tmp_path):
    assert_one_line_error(run(capsys, unknown_op_model(tmp_path)), "NoSuchOp", "unknown op")


def test_symbolic_dims_without_input_shape(capsys, model_path):
    assert_one_line_error(run(capsys, model_path), "input 'x'", "symbolic dims N",
                          "--input-shape x:")


def write_npy(tmp_path, name, array) -> str:
    path = tmp_path / name
    np.save(path, array)
    return str(path)


@pytest.mark.parametrize("make_args, words", [
    (lambda d: ["--input", f"y={write_npy(d, 'a.npy', np.ones((2, 4), np.float32))}"],
     ["no input 'y'", "x (float32[N,4])"]),
    (lambda d: ["--input", f"x={write_npy(d, 'a.npy', np.ones((2, 4), np.float64))}"],
     ["input 'x'", "dtype float32", "float64"]),
    (lambda d: ["--input", f"x={write_npy(d, 'a.npy', np.ones((2, 5), np.float32))}"],
     ["input 'x'", "dim 1 must be 4", "(2, 5)"]),
    (lambda d: ["--input", f"x={write_npy(d, 'a.npy', np.ones((2, 4), np.float32))}",
                "--input", f"k={write_npy(d, 'k.npy', np.ones(3, np.int64))}"],
     ["input 'k'", "symbol 'N'", "3"]),
    (lambda d: ["--input", f"x={d / 'missing.npy'}"], ["missing.npy", "does not exist"]),
    (lambda d: ["--input", f"x={d}"], ["is a directory"]),
    (lambda d: ["--input", f"x={d / 'garbage.npy'}"], ["cannot read", "garbage.npy", ".npy"]),
    (lambda d: ["--input", f"x={d / 'text.npy'}"], ["text.npy", "is not a .npy file"]),
    (lambda d: ["--input", "x"], ["expected NAME=FILE.npy or FILE.npz"]),
    (lambda d: ["--input", f"{d / 'missing.npz'}"], ["missing.npz", "does not exist"]),
    (lambda d: ["--input", f"{d / 'garbage.npz'}"], ["cannot read", "garbage.npz", ".npz"]),
    (lambda d: ["--input-shape", "x:3,4", "--input-shape", "x:3,4"], ["shaped twice"]),
    (lambda d: ["--input-shape", "x=3,4"], ["--input-shape 'x=3,4'", "NAME:D1,D2"]),
    (lambda d: ["--input-shape", "x:3,a"], ["dim 'a'", "non-negative integer"]),
    (lambda d: ["--input-shape", "x:-3,4"], ["dim '-3'"]),
    (lambda d: ["--input-shape", "w:3,4"], ["no input 'w'"]),
    (lambda d: ["--input-shape", "x:3,4,5"], ["input 'x'", "rank 2", "3 dims"]),
    (lambda d: ["--input-shape", "x:3,5"], ["input 'x'", "dim 1 is fixed at 4", "got 5"]),
    (lambda d: ["--input-shape", "x:3,4", "--input-shape", "k:2"],
     ["symbol 'N'", "sets to 3", "got 2"]),
    (lambda d: ["--input-shape", "x:3,4", "--output-dir", d / "garbage.npy"],
     ["--output-dir", "not a directory"]),
], ids=["unknown-name", "wrong-dtype", "wrong-shape", "inconsistent-symbol", "missing-npy",
        "directory", "unreadable-npy", "not-npy", "no-file", "missing-npz", "unreadable-npz",
        "shape-twice", "shape-syntax", "shape-letter", "shape-negative", "shape-unknown-name",
        "shape-rank", "shape-static-dim", "shape-symbol-conflict", "output-dir-is-file"])
def test_bad_arguments(capsys, model_path, tmp_path, make_args, words):
    (tmp_path / "garbage.npy").write_bytes(b"\x93NUMPY garbage, not an array")
    (tmp_path / "text.npy").write_text("1 2 3 4")
    (tmp_path / "garbage.npz").write_bytes(b"PK\x03\x04 garbage, not an archive")
    assert_one_line_error(run(capsys, model_path, *make_args(tmp_path)), *words)


def test_npz_given_as_one_input(capsys, model_path, feeds, tmp_path):
    np.savez(tmp_path / "feeds.npz", **feeds)
    assert_one_line_error(run(capsys, model_path, "--input", f"x={tmp_path / 'feeds.npz'}"),
                          ".npz archive", "--input")


def test_input_given_twice(capsys, model_path, feeds, tmp_path):
    np.savez(tmp_path / "feeds.npz", **feeds)
    x_file = write_npy(tmp_path, "x.npy", feeds["x"])
    assert_one_line_error(run(capsys, model_path, "--input", tmp_path / "feeds.npz",
                              "--input", f"x={x_file}"), "input 'x' is given twice")


def test_given_shape_disagrees_with_input_shape(capsys, model_path, feeds, tmp_path):
    x_file = write_npy(tmp_path, "x.npy", feeds["x"])
    assert_one_line_error(run(capsys, model_path, "--input", f"x={x_file}",
                              "--input-shape", "x:2,4"), "shape [5, 4]", "[2, 4]")


def test_bad_loop_count_is_a_usage_error(capsys, model_path):
    with pytest.raises(SystemExit) as exit_info:
        run(capsys, model_path, "--loop", "-1")
    assert exit_info.value.code == 2
    assert "--loop" in capsys.readouterr().err


def assert_one_line_error(result, *words) -> None:
    code, out, err = result
    assert code == 1
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(ERROR_PREFIX), err
    assert "Traceback" not in err
    for word in words:
        assert word in lines[0], f"{word!r} not in {lines[0]!r}"


# -- as a process ----------------------------------------------------------------------


def ge_hub_run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ge_hub", "run", *map(str, args)],
                          capture_output=True, text=True)


def test_process_exit_status_and_verbose_traceback(model_path, tmp_path):
    ok = ge_hub_run(model_path, "--input-shape", "x:2,4", "--quiet")
    assert ok.returncode == 0 and ok.stderr == "" and "out/y" in ok.stdout
    bad = unknown_op_model(tmp_path)
    quiet_failure = ge_hub_run(bad)
    assert quiet_failure.returncode == 1
    assert quiet_failure.stderr.count("\n") == 1 and "Traceback" not in quiet_failure.stderr
    verbose_failure = ge_hub_run(bad, "--verbose")
    assert verbose_failure.returncode == 1
    assert "Traceback" in verbose_failure.stderr
    assert verbose_failure.stderr.splitlines()[-1] == quiet_failure.stderr.strip()
