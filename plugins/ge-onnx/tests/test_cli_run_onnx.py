"""`ge-hub run model.onnx`: a light real model from the onnx package and a hand-made model
with a symbolic dim, checked against onnxruntime; ONNX-specific errors are one line."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import onnxruntime
import pytest
from ge_hub.cli import main
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from .conftest import make_model

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
SQUEEZENET = os.path.join(LIGHT_DIR, "light_squeezenet.onnx")


def run(capsys, *args):
    code = main(["run", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(capsys, *args) -> dict:
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def onnxruntime_outputs(model_path, feeds: dict) -> list[np.ndarray]:
    session = onnxruntime.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def assert_one_line_error(result, *words) -> None:
    code, out, err = result
    assert code == 1 and out == ""
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("ge-hub run: error: ")
    for word in words:
        assert word in err, f"{word!r} not in {err!r}"


# -- a light real model ----------------------------------------------------------------


@pytest.fixture(scope="module")
def squeezenet():
    if not os.path.exists(SQUEEZENET):
        raise FileNotFoundError(f"the installed onnx ships no {SQUEEZENET}")
    return SQUEEZENET


def test_squeezenet_given_input_matches_onnxruntime(capsys, squeezenet, tmp_path):
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    report = run_json(capsys, squeezenet, "--input", f"data_0={tmp_path / 'x.npy'}",
                      "--output-dir", tmp_path / "out", "--loop", 2)
    (output,) = report["outputs"]
    assert (output["name"], output["shape"], output["dtype"]) == (
        "softmaxout_1", [1, 1000, 1, 1], "float32")
    (expected,) = onnxruntime_outputs(squeezenet, {"data_0": x})
    np.testing.assert_allclose(np.load(output["file"]), expected, rtol=1e-4, atol=1e-6)
    assert output["nan"] == 0 and output["inf"] == 0
    np.testing.assert_allclose([output["min"], output["max"], output["mean"]],
                               [expected.min(), expected.max(), expected.mean()], rtol=1e-4)
    # The whole model runs in C: 26 convolutions (each with its Relu fused), pools, concats.
    assert report["compile"]["steps"] > 30 and report["compile"]["python_steps"] == 0
    assert report["compile"]["rules"].get("fuse_conv_epilogue.relu", 0) > 0
    assert report["latency"]["runs"] == 2


def test_squeezenet_random_input_text(capsys, squeezenet):
    code, out, err = run(capsys, squeezenet)
    assert code == 0, err
    assert "data_0  float32[1,3,224,224]  random (seed 0)" in out
    assert "softmaxout_1  float32[1,1000,1,1]" in out
    assert any(line.startswith("compile: ") and "arena" in line for line in out.splitlines())


# -- a hand-made model with a symbolic dim -----------------------------------------------


@pytest.fixture
def dense_model(tmp_path):
    """y = Relu(x @ W + b) with x: float[batch, 3]; returns (path, W, b)."""
    rng = np.random.default_rng(1)
    weight = rng.standard_normal((3, 2)).astype(np.float32)
    bias = rng.standard_normal(2).astype(np.float32)
    model = make_model(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]),
         helper.make_node("Add", ["xw", "b"], ["pre"]),
         helper.make_node("Relu", ["pre"], ["y"])],
        [("x", T.FLOAT, ["batch", 3])], [("y", T.FLOAT, ["batch", 2])], opset=17,
        initializers=[numpy_helper.from_array(weight, "W"), numpy_helper.from_array(bias, "b")])
    path = tmp_path / "dense.onnx"
    onnx.save(model, path)
    return str(path), weight, bias


def test_symbolic_dim_needs_input_shape(capsys, dense_model):
    path, _, _ = dense_model
    assert_one_line_error(run(capsys, path), "input 'x'", "symbolic dims batch",
                          "--input-shape x:")


def test_input_shape_fixes_symbolic_dim(capsys, dense_model, tmp_path):
    path, _, _ = dense_model
    report = run_json(capsys, path, "--input-shape", "x:6,3", "--output-dir", tmp_path)
    assert report["inputs"][0]["shape"] == [6, 3]
    (output,) = report["outputs"]
    y = np.load(output["file"])
    assert y.shape == (6, 2) and output["shape"] == [6, 2]
    assert output["min"] == y.min() >= 0  # Relu
    assert output["max"] == pytest.approx(float(y.max()))


def test_given_input_matches_onnxruntime(capsys, dense_model, tmp_path):
    path, weight, bias = dense_model
    x = np.random.default_rng(2).standard_normal((5, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    report = run_json(capsys, path, "--input", f"x={tmp_path / 'x.npy'}",
                      "--output-dir", tmp_path / "out")
    y = np.load(report["outputs"][0]["file"])
    (expected,) = onnxruntime_outputs(path, {"x": x})
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y, np.maximum(x @ weight + bias, 0), rtol=1e-5, atol=1e-6)


# -- ONNX errors -----------------------------------------------------------------------


def test_unsupported_op_is_one_line(capsys, tmp_path):
    model = make_model([helper.make_node("NoSuchOnnxOp", ["x"], ["y"], name="mystery")],
                       [("x", T.FLOAT, [2])], [("y", T.FLOAT, [2])], opset=17)
    path = tmp_path / "unsupported.onnx"
    onnx.save(model, path)
    assert_one_line_error(run(capsys, path), "NoSuchOnnxOp", "mystery")


def test_malformed_onnx_file_is_one_line(capsys, dense_model, tmp_path):
    data = open(dense_model[0], "rb").read()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    assert_one_line_error(run(capsys, path), "cut.onnx")
