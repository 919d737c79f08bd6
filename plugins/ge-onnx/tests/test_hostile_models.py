"""Hostile ONNX files (issue 11): each is refused with a ge-hub error naming the culprit,
never an AttributeError/IndexError from inside the importer, a file read outside the
model's directory, or work quadratic in the number of nodes."""

from __future__ import annotations

import os
import pathlib

import ge_hub
import numpy as np
import onnx
import pytest
from ge_hub.errors import GeHubError, GraphError, OpError, SerializationError
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import ge_onnx.importer as importer
from ge_onnx.adapters import ADAPTERS, ALL_VERSIONS

from .conftest import make_model

F = T.FLOAT


# --- adapters: a missing node input is named, not an AttributeError/IndexError ----------

# Attributes that take each adapter past its early exits to where it reads inputs.
ADAPTER_ATTRS = {
    "Add": {"broadcast": 1, "axis": 0}, "Mul": {"broadcast": 1, "axis": 1},
    "GroupNormalization": {"num_groups": 1}, "Clip": {"min": -1.0, "max": 1.0},
    "Pad": {"pads": [0, 0, 0, 0, 0, 0], "value": 1.0}, "Scan": {"num_scan_inputs": 1},
    "Softmax": {"axis": 0}, "Dropout": {"ratio": 0.5},
}


def _adapted_cases():
    for op, entries in sorted(ADAPTERS.items()):
        for below, _ in entries:
            yield op, 21 if below == ALL_VERSIONS else max(below - 1, 1)


@pytest.mark.parametrize(("op", "version"), sorted(set(_adapted_cases())))
def test_adapter_with_missing_inputs_names_the_node(op, version):
    """Every adapted op, at a version its adapter handles, with 0-4 inputs and each one
    left empty in turn: imported, or refused with a ge-hub error naming the node."""
    attr_sets = [{}, ADAPTER_ATTRS.get(op, {})]
    for attrs in attr_sets:
        for count in range(5):
            for omitted in [None, *range(count)]:
                names = [f"x{i}" for i in range(count)]
                if omitted is not None:
                    names[omitted] = ""
                node = helper.make_node(op, names, ["y", "mask"] if op == "Dropout" else ["y"],
                                        name="culprit", **attrs)
                model = make_model([node], [(f"x{i}", F, [2, 3, 4]) for i in range(count)],
                                   [("y", F, None)], opset=version)
                try:
                    importer.import_model(model)
                except GeHubError as exc:
                    assert "culprit" in str(exc) or "graph" in str(exc), str(exc)


def test_adapter_names_the_missing_input():
    node = helper.make_node("PRelu", ["x", ""], ["y"], name="p")
    model = make_model([node], [("x", F, [2, 3, 4])], [("y", F, None)], opset=6)
    with pytest.raises(OpError, match=r"'p'.*input 1 \(slope\) is required"):
        importer.import_model(model)


@pytest.mark.parametrize(("op", "opset", "axis"), [("Softmax", 11, [0, 1]),
                                                   ("DFT", 19, ["a"]), ("Add", 6, 1.5)])
def test_adapter_refuses_a_non_integer_axis(op, opset, axis):
    attrs = {"broadcast": 1} if op == "Add" else {}
    node = helper.make_node(op, ["x", "x"][:2 if op == "Add" else 1], ["y"], name="s",
                            axis=axis, **attrs)
    model = make_model([node], [("x", F, [2, 3, 2])], [("y", F, None)], opset=opset)
    with pytest.raises(OpError, match=r"'s'.*attribute 'axis' must be an int"):
        importer.import_model(model)


def test_attribute_that_cannot_become_an_input_is_named():
    node = helper.make_node("Squeeze", ["x"], ["y"], name="sq", axes=[0])
    model = make_model([node], [("x", F, [1, 3])], [("y", F, None)], opset=11)
    node = model.graph.node[0]
    node.attribute[0].CopyFrom(helper.make_attribute("axes", "zero"))
    with pytest.raises(OpError, match=r"'sq'.*attribute 'axes'"):
        importer.import_model(model)


# --- malformed nodes and values ---------------------------------------------------------


def test_op_type_that_is_not_utf8_is_refused():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2])],
                       [("y", F, None)], opset=17)
    data = model.SerializeToString().replace(b"Relu", b"R\xfflu")
    proto = onnx.ModelProto()
    proto.ParseFromString(data)
    with pytest.raises(SerializationError, match=r"node\[0\].*'op_type' is not UTF-8"):
        importer.import_model(proto)


def test_constant_without_output_or_with_a_mistyped_value_is_refused():
    node = helper.make_node("Constant", [], [], name="c", value_int=3)
    model = make_model([node], [], [], opset=17)
    with pytest.raises(OpError, match=r"'c'.*exactly one output"):
        importer.import_model(model)
    node = helper.make_node("Constant", [], ["k"], name="c")
    node.attribute.append(helper.make_attribute("value_float", "text"))
    model = make_model([node], [], [("k", F, None)], opset=17)
    with pytest.raises(OpError, match=r"'value_float'.*must be of ONNX attribute type FLOAT"):
        importer.import_model(model)


def test_negative_declared_dim_is_refused():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [3, -2])],
                       [("y", F, None)], opset=17)
    with pytest.raises(SerializationError, match=r"graph input 'x'.*dim 1 is -2"):
        importer.import_model(model)


def test_value_name_given_twice_is_a_graph_error():
    model = make_model([helper.make_node("Relu", ["x"], ["x"], name="again")],
                       [("x", F, [3])], [("x", F, None)], opset=17)
    with pytest.raises(GraphError, match=r"'again'.*'x'"):
        importer.import_model(model)


def test_sparse_indices_out_of_range_are_refused():
    values = numpy_helper.from_array(np.ones(2, np.float32), "s")
    indices = numpy_helper.from_array(np.array([1, 99], np.int64), "i")
    sparse = helper.make_sparse_tensor(values, indices, [4])
    model = make_model([helper.make_node("Identity", ["s"], ["y"])], [], [("y", F, None)],
                       opset=17, sparse_initializer=[sparse])
    with pytest.raises(SerializationError, match=r"sparse initializer 's'.*out of range"):
        importer.import_model(model)


# --- external data stays inside the model's directory -----------------------------------


def _model_with_external(location: str) -> onnx.ModelProto:
    tensor = numpy_helper.from_array(np.zeros(4, np.uint8), "w")
    tensor.ClearField("raw_data")
    tensor.data_location = T.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "4")):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return make_model([helper.make_node("Identity", ["w"], ["y"])], [], [("y", T.UINT8, None)],
                      opset=17, initializers=[tensor])


@pytest.mark.parametrize("location", ["../../etc/passwd", "/etc/passwd",
                                      "sub/../../outside.bin"])
def test_external_data_cannot_leave_the_model_directory(tmp_path, location):
    inside = tmp_path / "models"
    inside.mkdir()
    (tmp_path / "outside.bin").write_bytes(b"secret")
    path = inside / "model.onnx"
    onnx.save_model(_model_with_external(location), str(path))
    with pytest.raises(SerializationError, match=r"initializer 'w'.*external data location"):
        ge_hub.load(str(path))
    with pytest.raises(SerializationError, match="external data location"):
        ge_onnx_load(_model_with_external(location), inside)


def test_external_data_through_a_symlink_out_is_refused(tmp_path):
    inside = tmp_path / "models"
    inside.mkdir()
    (tmp_path / "outside.bin").write_bytes(b"secret")
    os.symlink(tmp_path / "outside.bin", inside / "link.bin")
    path = inside / "model.onnx"
    onnx.save_model(_model_with_external("link.bin"), str(path))
    with pytest.raises(SerializationError, match=r"'link\.bin' leads out"):
        ge_hub.load(str(path))


def test_external_data_inside_the_directory_still_loads(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "w.bin").write_bytes(bytes([1, 2, 3, 4]))
    path = tmp_path / "model.onnx"
    onnx.save_model(_model_with_external("sub/w.bin"), str(path))
    graph = ge_hub.load(str(path))
    np.testing.assert_array_equal(graph.find_value("w").const, [1, 2, 3, 4])


def ge_onnx_load(model, base_dir):
    import ge_onnx

    return ge_onnx.load(model, base_dir=str(base_dir))


def test_onnx_floor_excludes_the_external_data_traversal_bug():
    # onnx < 1.16 followed "../" and absolute locations in external data (CVE-2024-27318).
    pyproject = pathlib.Path(__file__).parents[1] / "pyproject.toml"
    assert '"onnx>=1.16"' in pyproject.read_text()


# --- naming is linear in the number of nodes --------------------------------------------


class CountingSet(set):
    """A set that counts membership tests: the work fresh_name does."""

    probes = 0

    def __contains__(self, item):
        CountingSet.probes += 1
        return super().__contains__(item)


def test_unnamed_nodes_of_one_op_are_named_in_linear_work(monkeypatch):
    count = 3000
    nodes = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"]) for i in range(count)]
    model = make_model(nodes, [("v0", F, [2])], [(f"v{count}", F, None)], opset=17)
    original_init = importer.GraphBuilder.__init__

    def counting_init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        self.used = CountingSet(self.used)

    monkeypatch.setattr(importer.GraphBuilder, "__init__", counting_init)
    CountingSet.probes = 0
    graph = importer.import_model(model)
    names = [node.name for node in graph.nodes]
    assert len(set(names)) == count and names[:3] == ["relu", "relu_1", "relu_2"]
    # One probe per name given out (plus a few for collisions); quadratic naming made
    # count**2 / 2 = 4.5 million.
    assert CountingSet.probes <= 2 * count


@pytest.mark.parametrize("count", [["a"], 2**40, -1])
def test_scan_with_a_malformed_num_scan_inputs_is_refused(count):
    body = helper.make_graph([helper.make_node("Identity", ["s"], ["o"])], "body",
                             [helper.make_tensor_value_info("s", F, [])],
                             [helper.make_tensor_value_info("o", F, [])])
    node = helper.make_node("Scan", ["x"], ["y"], name="scan", body=body, num_scan_inputs=1)
    node.attribute[1].CopyFrom(helper.make_attribute("num_scan_inputs", count))
    model = make_model([node], [("x", F, [3])], [("y", F, None)], opset=17)
    with pytest.raises(GeHubError, match="num_scan_inputs"):
        importer.import_model(model)
