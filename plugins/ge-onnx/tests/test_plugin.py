"""ge-onnx as a ge-hub plugin: found through its entry point, cheap to load, dispatched to."""

from __future__ import annotations

import json
import subprocess
import sys

import ge_hub
import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper

from ge_onnx import frontend

from .conftest import make_model, random_array


def relu_model():
    return make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", T.FLOAT, [3])],
                      [("y", T.FLOAT, None)], opset=17)


def test_entry_point_plugin_is_listed():
    result = subprocess.run([sys.executable, "-m", "ge_hub", "plugins", "--json"],
                            capture_output=True, text=True, check=True)
    plugins = {p["name"]: p for p in json.loads(result.stdout)}
    assert "onnx" in plugins
    assert plugins["onnx"]["hooks"] == ["register_frontends"]
    assert plugins["onnx"]["registered"] == {"frontends": 1}


def test_loading_the_plugin_and_probing_paths_do_not_import_onnx(tmp_path):
    probe = tmp_path / "notes.txt"
    probe.write_text("hello")
    code = ("import sys, ge_hub.plugins as p\n"
            "p.get_registry()\n"
            "from ge_onnx.frontend import accepts\n"
            f"accepts({str(probe)!r}); accepts('model.onnx'); accepts(object())\n"
            "print('onnx' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "False"


def test_accepts_paths_by_suffix_and_by_content(tmp_path):
    assert frontend.accepts("some/where/model.ONNX")
    unnamed = tmp_path / "model.bin"
    onnx.save_model(relu_model(), str(unnamed))
    assert frontend.accepts(str(unnamed))
    other = tmp_path / "weights.bin"
    other.write_bytes(np.arange(16, dtype=np.float32).tobytes())
    assert not frontend.accepts(str(other))
    assert not frontend.accepts(str(tmp_path / "absent.bin"))


def test_accepts_model_protos_only():
    assert frontend.accepts(relu_model())
    assert not frontend.accepts(relu_model().graph)
    assert not frontend.accepts(np.zeros(3))


def test_ge_hub_load_dispatches_paths_and_protos(tmp_path, rng):
    path = tmp_path / "relu.onnx"
    onnx.save_model(relu_model(), str(path))
    x = random_array(rng, (3,))
    from ge_hub.reference import evaluate

    for model in (str(path), path, relu_model()):
        graph = ge_hub.load(model)
        assert [n.op for n in graph.nodes] == ["Relu"]
        np.testing.assert_array_equal(evaluate(graph, {"x": x})[0], np.maximum(x, 0))
