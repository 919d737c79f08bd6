"""The importer on hand-built models: constants in every form, external data, symbolic
dims, names, inference from ge-hub's own schemas, and function expansion."""

from __future__ import annotations

import ge_hub
import numpy as np
import onnx
import pytest
from ge_hub.ir import Sym
from ge_hub.reference import evaluate
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import ge_onnx
from ge_onnx.tensors import UnsupportedTypeError

from .conftest import assert_matches_onnxruntime, make_model, random_array

F = T.FLOAT


# --- constants -------------------------------------------------------------------------


def test_initializers_become_constants(rng):
    weight = random_array(rng, (3, 2))
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                       [("x", F, [4, 3])], [("y", F, None)], opset=17,
                       initializers=[numpy_helper.from_array(weight, "w")])
    graph = assert_matches_onnxruntime(model, {"x": random_array(rng, (4, 3))})
    assert graph.input_names == ["x"]
    (constant,) = graph.constants
    assert constant.name == "w"
    np.testing.assert_array_equal(constant.const, weight)


def test_scalar_initializer_stays_a_scalar_both_ways(rng):
    scale = numpy_helper.from_array(np.array(2.5, dtype=np.float32), "scale")
    model = make_model([helper.make_node("Mul", ["x", "scale"], ["y"])],
                       [("x", F, [])], [("y", F, None)], opset=17, initializers=[scale])
    graph = assert_matches_onnxruntime(model, {"x": np.array(1.5, dtype=np.float32)})
    assert graph.find_value("scale").const.shape == ()
    assert graph.outputs[0].type.shape == ()
    (exported,) = ge_onnx.export(graph).graph.initializer
    assert list(exported.dims) == []


def test_graph_inputs_that_are_initializers_are_constants(rng):
    # IR version 3 (opset < 9) models list every initializer among the graph inputs too.
    bias = random_array(rng, (3,))
    model = make_model([helper.make_node("Add", ["x", "b"], ["y"])],
                       [("x", F, [2, 3]), ("b", F, [3])], [("y", F, None)], opset=8,
                       initializers=[numpy_helper.from_array(bias, "b")])
    graph = ge_onnx.load(model)
    assert graph.input_names == ["x"]
    assert [c.name for c in graph.constants] == ["b"]
    x = random_array(rng, (2, 3))
    np.testing.assert_allclose(evaluate(graph, {"x": x})[0], x + bias)


def test_sparse_initializer_becomes_a_dense_constant():
    values = numpy_helper.from_array(np.array([5.0, -2.0], dtype=np.float32), "s")
    indices = numpy_helper.from_array(np.array([1, 6], dtype=np.int64), "s_idx")
    sparse = helper.make_sparse_tensor(values, indices, [2, 4])
    model = make_model([helper.make_node("Identity", ["s"], ["y"])], [], [("y", F, None)],
                       opset=17, sparse_initializer=[sparse])
    graph = ge_onnx.load(model)
    expected = np.zeros((2, 4), dtype=np.float32)
    expected[0, 1], expected[1, 2] = 5.0, -2.0
    np.testing.assert_array_equal(evaluate(graph, {})[0], expected)


CONSTANT_FORMS = [
    ("value", numpy_helper.from_array(np.array([[1.5, -2.0]], dtype=np.float32)),
     np.array([[1.5, -2.0]], dtype=np.float32)),
    ("value", numpy_helper.from_array(np.array([3, -4], dtype=np.int32)),
     np.array([3, -4], dtype=np.int32)),
    ("value_float", 2.5, np.array(2.5, dtype=np.float32)),
    ("value_floats", [1.0, -0.5, 3.0], np.array([1.0, -0.5, 3.0], dtype=np.float32)),
    ("value_int", 7, np.array(7, dtype=np.int64)),
    ("value_ints", [2, -3], np.array([2, -3], dtype=np.int64)),
    ("sparse_value", helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([9.0], dtype=np.float32)),
        numpy_helper.from_array(np.array([[0, 2]], dtype=np.int64)), [2, 3]),
     np.array([[0, 0, 9.0], [0, 0, 0]], dtype=np.float32)),
]


@pytest.mark.parametrize("attr, value, expected", CONSTANT_FORMS,
                         ids=[f"{a}-{i}" for i, (a, _, _) in enumerate(CONSTANT_FORMS)])
def test_constant_node_forms_become_constants(attr, value, expected):
    node = helper.make_node("Constant", [], ["c"], **{attr: value})
    model = make_model([node, helper.make_node("Identity", ["c"], ["y"])], [],
                       [("y", helper.np_dtype_to_tensor_dtype(expected.dtype), None)], opset=17)
    graph = ge_onnx.load(model)
    assert [n.op for n in graph.nodes] == ["Identity"]  # no Constant node: a constant value
    (constant,) = graph.constants
    assert constant.name == "c" and constant.const.dtype == expected.dtype
    np.testing.assert_array_equal(constant.const, expected)
    np.testing.assert_array_equal(evaluate(graph, {})[0], expected)


def test_string_constant_is_refused_clearly():
    node = helper.make_node("Constant", [], ["c"], value_string="hello")
    model = make_model([node], [], [("c", T.STRING, None)], opset=17)
    with pytest.raises(UnsupportedTypeError, match="value_string.*Constant"):
        ge_onnx.load(model)


def test_constant_inputs_reach_inference(rng):
    # Reshape's output shape is only known because its shape input is a constant.
    nodes = [helper.make_node("Constant", [], ["shape"], value_ints=[0, -1]),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    model = make_model(nodes, [("x", F, [2, 3, 4])], [("y", F, None)], opset=14)
    graph = assert_matches_onnxruntime(model, {"x": random_array(rng, (2, 3, 4))})
    assert graph.outputs[0].type.shape == (2, 12)


def test_value_info_is_ignored_in_favour_of_inference(rng):
    # A wrong value_info (dtype and shape) must not leak into the graph.
    model = make_model([helper.make_node("Relu", ["x"], ["r"]),
                        helper.make_node("Neg", ["r"], ["y"])],
                       [("x", F, [2, 3])], [("y", F, None)], opset=14,
                       value_info=[helper.make_tensor_value_info("r", T.INT64, [7])])
    graph = ge_onnx.load(model)
    relu = graph.nodes[0]
    assert str(relu.outputs[0].type) == "float32[2,3]"


# --- external data -----------------------------------------------------------------------


def test_external_data_loads_from_beside_the_file(tmp_path, rng):
    weight = random_array(rng, (64, 32))
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                       [("x", F, [2, 64])], [("y", F, None)], opset=17,
                       initializers=[numpy_helper.from_array(weight, "w")])
    path = tmp_path / "nested" / "model.onnx"
    path.parent.mkdir()
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    assert (path.parent / "weights.bin").stat().st_size == weight.nbytes
    graph = ge_hub.load(str(path))
    np.testing.assert_array_equal(graph.find_value("w").const, weight)
    x = random_array(rng, (2, 64))
    np.testing.assert_allclose(evaluate(graph, {"x": x})[0], x @ weight, rtol=1e-5)


def test_external_data_of_a_model_proto_uses_base_dir(tmp_path, rng):
    weight = random_array(rng, (8,))
    model = make_model([helper.make_node("Add", ["x", "w"], ["y"])],
                       [("x", F, [8])], [("y", F, None)], opset=17,
                       initializers=[numpy_helper.from_array(weight, "w")])
    path = tmp_path / "model.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="w.bin",
                    size_threshold=0)
    proto = onnx.load(str(path), load_external_data=False)
    graph = ge_onnx.load(proto, base_dir=str(tmp_path))
    np.testing.assert_array_equal(graph.find_value("w").const, weight)


def test_missing_external_data_names_tensor_and_file(tmp_path, rng):
    model = make_model([helper.make_node("Identity", ["w"], ["y"])], [], [("y", F, None)],
                       opset=17,
                       initializers=[numpy_helper.from_array(random_array(rng, (16,)), "w")])
    path = tmp_path / "model.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="gone.bin",
                    size_threshold=0)
    (tmp_path / "gone.bin").unlink()
    with pytest.raises(ge_hub.GeHubError, match=r"initializer 'w'.*'gone\.bin'"):
        ge_hub.load(str(path))


# --- symbolic dims ------------------------------------------------------------------------


def test_named_dims_become_shared_symbols(rng):
    model = make_model([helper.make_node("Add", ["a", "b"], ["y"])],
                       [("a", F, ["batch", 3]), ("b", F, ["batch", 3])], [("y", F, None)],
                       opset=17)
    graph = ge_onnx.load(model)
    assert graph.inputs[0].type.shape == (Sym("batch"), 3)
    assert graph.outputs[0].type.shape == (Sym("batch"), 3)
    feeds = {"a": random_array(rng, (5, 3)), "b": random_array(rng, (5, 3))}
    assert evaluate(graph, feeds)[0].shape == (5, 3)


def test_a_dim_param_with_operators_is_one_symbol_both_ways(rng):
    # HuggingFace exports name dims "past_sequence_length + 1": a name, not arithmetic.
    name = "past_sequence_length + 1"
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [name, 3])],
                       [("y", F, None)], opset=17)
    graph = ge_onnx.load(model)
    (dim, _) = graph.inputs[0].type.shape
    assert dim == Sym.named(name) and dim.is_symbol and dim != Sym("past_sequence_length") + 1
    assert evaluate(graph, {"x": random_array(rng, (7, 3))})[0].shape == (7, 3)
    exported = ge_onnx.export(graph)
    assert exported.graph.input[0].type.tensor_type.shape.dim[0].dim_param == name


def test_unknown_dims_become_fresh_symbols():
    x = helper.make_tensor_value_info("x", F, [None, 4, None])
    y = helper.make_tensor_value_info("y", F, [None])
    model = make_model([helper.make_node("Relu", ["x"], ["r"]),
                        helper.make_node("Relu", ["y"], ["s"])], [x, y],
                       [("r", F, None), ("s", F, None)], opset=17)
    graph = ge_onnx.load(model)
    first, _, third = graph.inputs[0].type.shape
    (other,) = graph.inputs[1].type.shape
    assert all(isinstance(d, Sym) for d in (first, third, other))
    assert len({first, third, other}) == 3  # unknown dims are not assumed equal


def test_missing_shape_means_unknown_rank():
    x = helper.make_tensor_value_info("x", F, None)
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [x], [("y", F, None)],
                       opset=17)
    graph = ge_onnx.load(model)
    assert graph.inputs[0].type.rank is None
    data = np.array([[-1.0, 2.0]], dtype=np.float32)
    np.testing.assert_array_equal(evaluate(graph, {"x": data})[0], [[0.0, 2.0]])


# --- names ------------------------------------------------------------------------------


def test_node_named_like_a_value_and_nameless_nodes_import(rng):
    # Caffe2-era models name a node after its output; many models leave names empty.
    nodes = [helper.make_node("Relu", ["x"], ["relu"], name="relu"),
             helper.make_node("Neg", ["relu"], ["n"]),
             helper.make_node("Neg", ["n"], ["y"])]
    model = make_model(nodes, [("x", F, [3])], [("y", F, None)], opset=17)
    graph = assert_matches_onnxruntime(model, {"x": random_array(rng, (3,))})
    assert graph.output_names == ["y"]
    assert len({n.name for n in graph.nodes}) == 3


def test_graph_output_that_is_a_graph_input(rng):
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2])],
                       [("y", F, None), ("x", F, None)], opset=17)
    graph = ge_onnx.load(model)
    assert graph.outputs[1] is graph.inputs[0]


# --- functions ------------------------------------------------------------------------


def test_op_missing_from_core_expands_to_its_onnx_function(rng):
    model = make_model([helper.make_node("ReduceLogSum", ["x"], ["y"], keepdims=0)],
                       [("x", F, [3, 4])], [("y", F, None)], opset=18)
    graph = assert_matches_onnxruntime(model, {"x": random_array(rng, (3, 4), low=0.5)})
    assert "ReduceLogSum" not in {n.op for n in graph.nodes}
    assert all(n.name.startswith("reducelogsum/") for n in graph.nodes)


def test_context_dependent_function_expands(rng):
    # GroupNormalization's body depends on the input's type and the node's attributes.
    scale = numpy_helper.from_array(random_array(rng, (4,)), "scale")
    bias = numpy_helper.from_array(random_array(rng, (4,)), "bias")
    node = helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], num_groups=2,
                            epsilon=1e-3)
    model = make_model([node], [("x", F, [2, 4, 3])], [("y", F, None)], opset=21,
                       initializers=[scale, bias])
    graph = assert_matches_onnxruntime(model, {"x": random_array(rng, (2, 4, 3))}, rtol=1e-4,
                                       atol=1e-5)
    assert "GroupNormalization" not in {n.op for n in graph.nodes}


def test_model_local_function_is_inlined(rng):
    body = [helper.make_node("Mul", ["a", "b"], ["ab"]),
            helper.make_node("Add", ["ab", "a"], ["out"])]
    function = helper.make_function("local.fns", "MulAdd", ["a", "b"], ["out"], body,
                                    [helper.make_opsetid("", 17)])
    nodes = [helper.make_node("MulAdd", ["x", "y"], ["z"], domain="local.fns", name="fused"),
             helper.make_node("MulAdd", ["z", "y"], ["w"], domain="local.fns")]
    model = make_model(nodes, [("x", F, [3]), ("y", F, [3])], [("w", F, None)], opset=17,
                       domains={"local.fns": 1})
    model.functions.append(function)
    x, y = random_array(rng, (3,)), random_array(rng, (3,))
    graph = assert_matches_onnxruntime(model, {"x": x, "y": y})
    assert [n.op for n in graph.nodes] == ["Mul", "Add", "Mul", "Add"]
    z = x * y + x
    np.testing.assert_allclose(evaluate(graph, {"x": x, "y": y})[0], z * y + z, rtol=1e-6)
