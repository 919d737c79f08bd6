"""The readers: saved models open without importing paddle; the legacy decoder agrees
with Paddle's own framework_pb2; parameters come back exactly; every way of naming a
saved model works; broken files fail with errors that say what is wrong and where."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import ge_hub
import numpy as np
import paddle
import pytest
from conftest import paddle_inference, run_ge, save_legacy, save_pir
from ge_hub.plugin import SerializationError

from ge_paddle import legacy, pir
from ge_paddle.convert import UnsupportedPaddleOpError
from ge_paddle.frontend import read_saved


class Small(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.conv = paddle.nn.Conv2D(3, 4, 3, padding=1)
        self.norm = paddle.nn.BatchNorm2D(4)
        self.fc = paddle.nn.Linear(4, 5)

    def forward(self, x):
        y = paddle.nn.functional.relu(self.norm(self.conv(x)))
        return self.fc(paddle.flatten(paddle.nn.functional.adaptive_avg_pool2d(y, 1), 1))


SHAPE = (-1, 3, 8, 8)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The same small model in both formats: {"pir": prefix, "legacy": prefix}."""
    directory = tmp_path_factory.mktemp("saved")
    paddle.seed(0)
    layer = Small()
    layer.eval()
    prefixes = {"pir": save_pir(layer, str(directory / "pir" / "model"), SHAPE)}
    prefixes["legacy"] = save_legacy("LeNet", str(directory / "legacy" / "model"))
    return prefixes


@pytest.mark.parametrize("suffix", [".json", ".pdmodel"])
def test_saved_models_load_without_paddle(saved, suffix):
    prefix = saved["pir" if suffix == ".json" else "legacy"]
    script = textwrap.dedent(f"""
        import sys, ge_hub
        graph = ge_hub.load({prefix + suffix!r})
        assert graph.nodes, "empty graph"
        heavy = sorted(m for m in ("paddle", "google.protobuf") if m in sys.modules)
        assert not heavy, f"imported {{heavy}}"
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-2000:]


def _framework_pb2():
    path = os.path.join(os.path.dirname(paddle.__file__), "base", "proto", "framework_pb2.py")
    spec = importlib.util.spec_from_file_location("ge_paddle_test_framework_pb2", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_legacy_decoder_agrees_with_framework_pb2(saved):
    path = saved["legacy"] + ".pdmodel"
    reference = _framework_pb2().ProgramDesc()
    with open(path, "rb") as stream:
        reference.ParseFromString(stream.read())
    block = reference.blocks[0]
    ours = legacy.read_program(path)
    assert sorted(p.name for p in ours.parameters) == sorted(
        v.name for v in block.vars if v.persistable and v.type.type == 7)
    by_name = {v.name: v for v in block.vars}
    for parameter in ours.parameters:
        assert list(parameter.type.shape) == list(by_name[parameter.name].type.dense_tensor
                                                  .tensor.dims)
    types = [op.type for op in block.ops]
    conv = next(op for op in block.ops if op.type == "conv2d")
    ours_conv = next(op for op in ours.ops if op.name == "pd_op.conv2d")
    assert ours_conv.attrs["strides"] == list(next(a.ints for a in conv.attrs
                                                   if a.name == "strides"))
    assert ours_conv.inputs == [conv.inputs[[v.parameter for v in conv.inputs].index(s)]
                                .arguments[0] for s in ("Input", "Filter")]
    assert len([o for o in ours.ops if not o.name.startswith("builtin.")]) == len(types)


def test_parameters_match_the_layer(tmp_path):
    paddle.seed(1)
    layer = Small()
    layer.eval()
    prefix = save_pir(layer, str(tmp_path / "model"), SHAPE)
    loaded = read_saved(prefix)
    tensors = {p.name: p.numpy() for p in layer.parameters()}
    tensors.update({b.name: b.numpy() for b in layer.buffers()})
    assert set(loaded.params) == set(tensors)
    for name, array in loaded.params.items():
        np.testing.assert_array_equal(array, tensors[name])


@pytest.mark.parametrize("form", ["prefix", "program", "params", "directory"])
@pytest.mark.parametrize("fmt", ["pir", "legacy"])
def test_every_way_of_naming_a_saved_model(saved, form, fmt):
    from ge_paddle.frontend import load_saved

    prefix = saved[fmt]
    name = {"prefix": prefix, "program": prefix + (".json" if fmt == "pir" else ".pdmodel"),
            "params": prefix + ".pdiparams", "directory": os.path.dirname(prefix)}[form]
    program = prefix + (".json" if fmt == "pir" else ".pdmodel")
    shape = (2, 3, 8, 8) if fmt == "pir" else (2, 1, 28, 28)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got, _ = run_ge(load_saved(name), [x])
    want = paddle_inference(program, prefix + ".pdiparams", [x])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)


def test_ge_hub_load_picks_paddle_by_suffix_content_and_type(saved, tmp_path):
    frontend = ge_hub.frontend.choose_frontend
    frontends = ge_hub.plugins.get_registry().frontends()
    assert frontend(saved["pir"] + ".json", frontends).name == "paddle"
    assert frontend(saved["legacy"] + ".pdmodel", frontends).name == "paddle"
    assert frontend(Small(), frontends).name == "paddle"
    other = tmp_path / "config.json"
    other.write_text(json.dumps({"model": "not a program"}))
    with pytest.raises(ge_hub.FrontendNotFoundError):
        frontend(str(other), frontends)


@pytest.mark.parametrize("form", ["prefix", "directory"])
def test_ge_hub_load_takes_a_prefix_or_a_directory(saved, form):
    prefix = saved["pir"]
    graph = ge_hub.load(prefix if form == "prefix" else os.path.dirname(prefix))
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    got, _ = run_ge(graph, [x])
    want = paddle_inference(prefix + ".json", prefix + ".pdiparams", [x])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)


def test_a_missing_pdmodel_suggests_the_paddle_extra(tmp_path):
    message = ge_hub.frontend._not_found_message(str(tmp_path / "absent.pdmodel"), [])
    assert "pip install ge-hub[paddle]" in message


def _edit_pir(saved, tmp_path, edit):
    with open(saved["pir"] + ".json") as stream:
        document = json.load(stream)
    edit(document["program"]["regions"][0]["blocks"][0]["ops"])
    prefix = tmp_path / "edited"
    (tmp_path / "edited.json").write_text(json.dumps(document, separators=(",", ":")))
    (tmp_path / "edited.pdiparams").write_bytes(open(saved["pir"] + ".pdiparams", "rb").read())
    return str(prefix)


def test_unsupported_op_names_op_attributes_and_location(saved, tmp_path):
    def rename_relu(ops):
        relu = next(op for op in ops if op["#"] == "1.relu")
        relu["#"] = "1.frobnicate"
        relu["A"] = [{"AT": {"#": "0.a_i32", "D": 7}, "N": "strength"}]

    prefix = _edit_pir(saved, tmp_path, rename_relu)
    with pytest.raises(UnsupportedPaddleOpError) as error:
        ge_hub.load(prefix + ".json")
    message = str(error.value)
    assert "pd_op.frobnicate" in message and "'strength': 7" in message
    assert "edited.json: block 0, op" in message


def test_debugging_attributes_are_ignored(saved, tmp_path):
    def add_callstack(ops):
        for op in ops:
            if op["#"] != "p":
                op.setdefault("A", []).append({"AT": {"#": "0.a_array", "D": [
                    {"#": "0.a_str", "D": "File x.py, line 1"}]}, "N": "op_callstack"})

    prefix = _edit_pir(saved, tmp_path, add_callstack)
    assert ge_hub.load(prefix + ".json").nodes


def test_truncated_parameters_are_a_serialization_error(saved, tmp_path):
    (tmp_path / "m.json").write_bytes(open(saved["pir"] + ".json", "rb").read())
    data = open(saved["pir"] + ".pdiparams", "rb").read()
    (tmp_path / "m.pdiparams").write_bytes(data[: len(data) // 2])
    with pytest.raises(SerializationError, match="parameter"):
        ge_hub.load(str(tmp_path / "m.json"))


def test_parameters_of_another_program_are_refused(saved, tmp_path):
    (tmp_path / "m.json").write_bytes(open(saved["pir"] + ".json", "rb").read())
    (tmp_path / "m.pdiparams").write_bytes(open(saved["legacy"] + ".pdiparams", "rb").read())
    with pytest.raises(SerializationError, match="does not belong to this program"):
        ge_hub.load(str(tmp_path / "m.json"))


def test_garbage_program_files(tmp_path):
    bad = tmp_path / "bad.pdmodel"
    bad.write_bytes(b"\x0a\xff\xff\xff\xff\x0f")
    with pytest.raises(SerializationError):
        legacy.read_program(str(bad))
    not_json = tmp_path / "bad.json"
    not_json.write_text('{"base_code":{"magic":"pir"')
    with pytest.raises(SerializationError, match="not valid JSON"):
        pir.read_program(str(not_json))


def test_missing_files_say_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="no Paddle model"):
        read_saved(str(tmp_path / "nothing"))
