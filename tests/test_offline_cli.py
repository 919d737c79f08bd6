"""`ge-hub compile`, `ge-hub inspect` and `ge-hub run` on .ghm files: profiles from
--input-shape, --dynamic-batch and --shape-profile, pass options, the summary, inspect's
text and JSON, running stored profiles (and refusing others with --no-compile), and
one-line errors for bad options."""

from __future__ import annotations

import json

import numpy as np
import pytest
from offline_models import attention, conv_net

import ge_hub
from ge_hub import runtime
from ge_hub.cli import main
from ge_hub.ir import serialize
from ge_hub.offline import layout, open_file, reader


@pytest.fixture
def conv_file(tmp_path):
    graph, _ = conv_net()
    path = tmp_path / "conv.gehub"
    serialize.save(graph, path)
    return path


@pytest.fixture
def attention_file(tmp_path):
    graph, _ = attention()
    path = tmp_path / "attention.gehub"
    serialize.save(graph, path)
    return path


def test_compile_dynamic_batch_then_inspect_and_run(conv_file, tmp_path, capsys, monkeypatch):
    out = tmp_path / "conv.ghm"
    assert main(["compile", str(conv_file), "-o", str(out), "--dynamic-batch", "1,4,8"]) == 0
    text = capsys.readouterr().out
    assert f"-> {out}" in text and "portable" in text
    for batch in (1, 4, 8):
        assert f"profile batch{batch}: {batch}x3x18x18:" in text
    assert "0 in Python" in text and "arena" in text
    meta = open_file(out).meta
    assert [p["name"] for p in meta["profiles"]] == ["batch1", "batch4", "batch8"]
    assert meta["source"]["name"] == "conv.gehub"

    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"ge-hub offline model, format {layout.FORMAT_VERSION}" in text
    assert "checksum verified" in text
    assert "profile batch4: x=4x3x18x18" in text and "steps by kernel: " in text
    assert "plugins required: none" in text and "CPU features required" in text
    assert main(["inspect", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert [p["name"] for p in info["profiles"]] == ["batch1", "batch4", "batch8"]
    assert info["runs_here_as_stored"] is True and info["portable"] is True
    assert info["weights"]["data_bytes"] > 0 and info["weights"]["graph_bytes"] > 0

    def refuse(*args, **kwargs):
        raise AssertionError("ge-hub run compiled a stored profile")

    with monkeypatch.context() as patch:
        patch.setattr(runtime, "compile_plan", refuse)
        patch.setattr(reader.OfflineFile, "graph", refuse)  # nor reads the graph (the
        # loaded model is dropped with the patch: its graph reader is the patched one)
        assert main(["run", str(out), "--json", "--input-shape", "x:4,3,18,18"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["outputs"][0]["shape"] == [4, 10]
    # the same output as compiling the source
    assert main(["run", str(conv_file), "--json", "--input-shape", "x:4,3,18,18"]) == 0
    source_report = json.loads(capsys.readouterr().out)
    assert report["outputs"] == source_report["outputs"]


def test_run_defaults_to_the_first_profile_and_no_compile_refuses_others(conv_file, tmp_path,
                                                                         capsys):
    out = tmp_path / "conv.ghm"
    assert main(["compile", str(conv_file), "-o", str(out), "--input-shape",
                 "x:2,3,18,18"]) == 0
    capsys.readouterr()
    assert main(["run", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["inputs"][0]["shape"] == [2, 3, 18, 18]
    assert main(["run", str(out), "--no-compile", "--input-shape", "x:3,3,18,18"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no compiled profile matches" in err[0]
    assert main(["run", str(out), "--input-shape", "x:3,3,18,18", "-q"]) == 0  # planned
    assert main(["run", str(conv_file), "--no-compile"]) == 1
    assert "for .ghm offline models only" in capsys.readouterr().err


def test_named_shape_profiles_by_position_and_by_name(attention_file, tmp_path, capsys):
    out = tmp_path / "att.ghm"
    assert main(["compile", str(attention_file), "-o", str(out),
                 "--shape-profile", "short:1,5,16;1,1,1,5",
                 "--shape-profile", "long:mask=2,1,1,9;x=2,9,16",
                 "--disable-pass", "eliminate_common_subexpressions", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [(p["name"], p["shapes"]) for p in summary["profiles"]] == [
        ("short", [[1, 5, 16], [1, 1, 1, 5]]), ("long", [[2, 9, 16], [2, 1, 1, 9]])]
    assert open_file(out).meta["options"]["disable_passes"] == ["eliminate_common_subexpressions"]
    model = ge_hub.load_compiled(out, allow_compile=False)
    graph, _ = attention()
    rng = np.random.default_rng(0)
    x = {"x": rng.standard_normal((2, 9, 16)).astype(np.float32),
         "mask": np.zeros((2, 1, 1, 9), np.float32)}
    options = {"disable_passes": ["eliminate_common_subexpressions"]}
    want = ge_hub.compile(graph, options=options).run(x)
    assert all(np.array_equal(a, b) for a, b in zip(model.run(x), want))


def test_pass_config_and_no_portable(conv_file, tmp_path, capsys):
    config = tmp_path / "passes.json"
    config.write_text(json.dumps({"passes": {"fold_batch_norm": "off"}}))
    out = tmp_path / "conv.ghm"
    assert main(["compile", str(conv_file), "-o", str(out), "--input-shape", "x:1,3,18,18",
                 "--pass-config", str(config), "--no-portable"]) == 0
    assert "not portable" in capsys.readouterr().out
    file = open_file(out)
    assert "graph" not in file.sections
    assert "fold_batch_norm" in file.meta["options"]["disable_passes"]
    assert main(["inspect", str(out)]) == 0
    assert "not portable" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--shape-profile", "nocolon"], "expected NAME:D1,D2"),
    (["--shape-profile", "p:1,3,18,18;1,2"], "2 shapes for 1 inputs"),
    (["--shape-profile", "p:y=1,2"], "has no input 'y'"),
    (["--shape-profile", "p:1,3,17,18"], "dim 2 is fixed at 18"),
    (["--dynamic-batch", "1,x"], "dim 'x' is not a non-negative integer"),
    ([], "is symbolic; give --input-shape"),
    (["--input-shape", "x:1,3,18,18", "--disable-pass", "nope"], "unknown pass 'nope'"),
])
def test_compile_errors_are_one_line(conv_file, tmp_path, capsys, args, message):
    assert main(["compile", str(conv_file), "-o", str(tmp_path / "o.ghm"), *args]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ge-hub compile: error: "), err
    assert message in err[0]


def test_compile_wants_a_ghm_output_and_an_existing_model(conv_file, tmp_path, capsys):
    assert main(["compile", str(conv_file), "-o", str(tmp_path / "o.bin")]) == 1
    assert "ends in .ghm" in capsys.readouterr().err
    assert main(["compile", str(tmp_path / "missing.onnx"), "-o", str(tmp_path / "o.ghm")]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_inspect_any_model_a_frontend_accepts(conv_file, capsys):
    assert main(["inspect", str(conv_file)]) == 0
    text = capsys.readouterr().out
    assert "graph 'conv_net'" in text and "Conv 3" in text
    assert main(["inspect", str(conv_file), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["nodes_by_op"]["Conv"] == 3 and info["inputs"][0]["name"] == "x"


def test_inspect_a_bad_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.ghm"
    bad.write_bytes(b"GEHUBOM\0" + bytes(10))
    assert main(["inspect", str(bad)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ge-hub inspect: error: ") and "truncated" in err[0]


def test_a_model_whose_shapes_depend_on_input_values_is_refused_by_compile(tmp_path, capsys):
    from ge_hub import es

    with es.GraphBuilder("reshape_by_input") as gb:
        x = es.input("x", "float32", [2, 6])
        target = es.input("target", "int64", [2])
        gb.output(es.relu(es.reshape(x, target)), "y")
    source = tmp_path / "m.gehub"
    serialize.save(gb.graph, source)
    assert main(["compile", str(source), "-o", str(tmp_path / "m.ghm")]) == 1
    err = capsys.readouterr().err
    assert "no profile could be compiled ahead of time" in err and "default" in err
    # run once, its plan specialized on the target's value, the model saves and reloads
    model = ge_hub.compile(gb.graph)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    want = model.run({"x": x, "target": np.array([3, 4], np.int64)})
    model.save(tmp_path / "m.ghm")
    loaded = ge_hub.load_compiled(tmp_path / "m.ghm", allow_compile=False)
    got = loaded.run({"x": x, "target": np.array([3, 4], np.int64)})
    assert np.array_equal(got[0], want[0]) and got[0].shape == (3, 4)
    with pytest.raises(ge_hub.errors.ProfileNotCompiledError):
        loaded.run({"x": x, "target": np.array([4, 3], np.int64)})
