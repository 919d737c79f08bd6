"""Bad input gives one clear exception: which file, op, domain, version, node, type."""

from __future__ import annotations

import ge_hub
import onnx
import pytest
from ge_hub.errors import OpError, SerializationError, UnknownOpError
from onnx import TensorProto as T
from onnx import helper

import ge_onnx
from ge_onnx.tensors import UnsupportedTypeError
from ge_onnx.versions import NEWEST_OPSET

from .conftest import make_model

F = T.FLOAT


def relu_model(opset=17):
    return make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2])],
                      [("y", F, None)], opset=opset)


# --- files ------------------------------------------------------------------------------


def test_missing_file(tmp_path):
    path = tmp_path / "absent.onnx"
    with pytest.raises(FileNotFoundError, match="absent.onnx.*does not exist"):
        ge_hub.load(str(path))


def test_truncated_file(tmp_path):
    data = relu_model().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(SerializationError, match=r"cut\.onnx.*bytes\)"):
        ge_hub.load(str(path))


def test_file_that_is_not_protobuf(tmp_path):
    path = tmp_path / "notes.onnx"
    path.write_text("this is a text file, not a model\n")
    with pytest.raises(SerializationError, match=r"notes\.onnx"):
        ge_hub.load(str(path))


def test_empty_file(tmp_path):
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(SerializationError, match="is empty"):
        ge_hub.load(str(path))


def test_directory_named_like_a_model(tmp_path):
    path = tmp_path / "model.onnx"
    path.mkdir()
    with pytest.raises(IsADirectoryError, match="is a directory"):
        ge_hub.load(str(path))


# --- ops and opsets ---------------------------------------------------------------------


def test_unsupported_op_names_op_domain_version_and_node():
    model = make_model([helper.make_node("TfIdfVectorizer", ["x"], ["y"], name="tfidf")],
                       [("x", F, [3, 3])], [("y", F, None)], opset=17)
    with pytest.raises(UnknownOpError) as info:
        ge_onnx.load(model)
    message = str(info.value)
    for part in ("'TfIdfVectorizer'", "'ai.onnx'", "version 9", "opset 17", "'tfidf'"):
        assert part in message, message


def test_op_of_an_unknown_domain():
    model = make_model([helper.make_node("Fancy", ["x"], ["y"], domain="com.acme")],
                       [("x", F, [3])], [("y", F, None)], opset=17, domains={"com.acme": 2})
    with pytest.raises(UnknownOpError, match=r"'Fancy'.*'com\.acme', version 2"):
        ge_onnx.load(model)


def test_op_that_onnx_does_not_define():
    model = make_model([helper.make_node("NoSuchOp", ["x"], ["y"])], [("x", F, [3])],
                       [("y", F, None)], opset=17)
    with pytest.raises(UnknownOpError, match="'NoSuchOp'.*ONNX defines no such op at opset 17"):
        ge_onnx.load(model)


def test_domain_the_model_does_not_import():
    model = make_model([helper.make_node("Fancy", ["x"], ["y"], domain="com.acme")],
                       [("x", F, [3])], [("y", F, None)], opset=17)
    with pytest.raises(UnknownOpError, match="does not import that domain"):
        ge_onnx.load(model)


def test_opset_newer_than_onnx_knows():
    model = relu_model()
    model.opset_import[0].version = NEWEST_OPSET + 1
    with pytest.raises(OpError, match=f"opset {NEWEST_OPSET + 1}.*reads opsets 7 to"):
        ge_onnx.load(model)


def test_attribute_the_op_does_not_have():
    model = make_model([helper.make_node("Relu", ["x"], ["y"], alpha=0.5)], [("x", F, [2])],
                       [("y", F, None)], opset=17)
    with pytest.raises(OpError, match="Relu.*unknown attribute 'alpha'"):
        ge_onnx.load(model)


def test_node_reading_an_undefined_value():
    model = make_model([helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")],
                       [("x", F, [2])], [("y", F, None)], opset=17)
    with pytest.raises(OpError, match="'adder'.*reads 'ghost'"):
        ge_onnx.load(model)


# --- types --------------------------------------------------------------------------------


def test_unsupported_input_dtype_names_input_and_type():
    model = make_model([helper.make_node("Identity", ["x"], ["y"])], [("x", T.STRING, [2])],
                       [("y", T.STRING, None)], opset=17)
    with pytest.raises(UnsupportedTypeError, match="graph input 'x'.*STRING"):
        ge_onnx.load(model)


def test_unsupported_cast_target_names_attribute():
    model = make_model([helper.make_node("Cast", ["x"], ["y"], to=T.COMPLEX64)],
                       [("x", F, [2])], [("y", T.COMPLEX64, None)], opset=17)
    with pytest.raises(UnsupportedTypeError, match="attribute 'to' of Cast.*COMPLEX64"):
        ge_onnx.load(model)


def test_sequence_input_is_refused():
    seq = helper.make_tensor_sequence_value_info("s", F, None)
    model = make_model([helper.make_node("Identity", ["s"], ["y"])], [seq], [seq], opset=17)
    with pytest.raises(UnsupportedTypeError, match="graph input 's' is a sequence_type"):
        ge_onnx.load(model)


def test_dtype_mismatch_found_by_ge_hub_inference():
    model = make_model([helper.make_node("Add", ["a", "b"], ["y"], name="mixed")],
                       [("a", F, [2]), ("b", T.INT64, [2])], [("y", F, None)], opset=17)
    with pytest.raises(OpError, match="Add.*'mixed'.*same dtype"):
        ge_onnx.load(model)


def test_load_rejects_other_objects():
    with pytest.raises(TypeError, match="path or an onnx.ModelProto"):
        ge_onnx.load(onnx.GraphProto())
