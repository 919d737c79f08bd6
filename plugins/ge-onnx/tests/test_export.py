"""The exporter: any ge-hub graph to a model onnx.checker accepts, and round trips
import -> export -> import that keep the graph's behaviour."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from ge_hub.errors import OpError
from ge_hub.ir import DType, Graph, Sym, TensorType
from ge_hub.ops import Attr, AttrKind, Input, Output, op
from ge_hub.ops.schema import ANY
from ge_hub.reference import evaluate, run_subgraph
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import ge_onnx
from ge_onnx.versions import NEWEST_OPSET

from .conftest import assert_outputs_close, make_model, random_array, run_onnxruntime

F = T.FLOAT


def round_trip(model: onnx.ModelProto, feeds: dict, **tolerances):
    """Import, export, check, re-import; both graphs and onnxruntime must agree."""
    graph = ge_onnx.load(model)
    exported = ge_onnx.export(graph)
    onnx.checker.check_model(exported, full_check=True)
    again = ge_onnx.load(exported)
    first = evaluate(graph, feeds)
    assert_outputs_close(evaluate(again, feeds), first, rtol=0, atol=0)
    assert_outputs_close(run_onnxruntime(exported, feeds), first, **tolerances)
    return graph, exported, again


def test_round_trip_of_a_small_convnet(rng):
    weights = [numpy_helper.from_array(random_array(rng, (4, 2, 3, 3), low=-0.5, high=0.5), "w"),
               numpy_helper.from_array(random_array(rng, (4,)), "b"),
               numpy_helper.from_array(random_array(rng, (4, 5), low=-0.5, high=0.5), "fc")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["p"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("MatMul", ["f", "fc"], ["m"]),
             helper.make_node("Softmax", ["m"], ["y"])]
    model = make_model(nodes, [("x", F, ["N", 2, 6, 6])], [("y", F, None)], opset=13,
                       initializers=weights)
    graph, exported, again = round_trip(model, {"x": random_array(rng, (3, 2, 6, 6))},
                                        rtol=1e-4, atol=1e-5)
    assert [n.op for n in again.nodes] == [n.op for n in graph.nodes]
    assert {t.name for t in exported.graph.initializer} == {"w", "b", "fc"}
    assert exported.opset_import[0].version == NEWEST_OPSET


def test_symbolic_dims_are_exported_as_dim_params(rng):
    model = make_model([helper.make_node("Concat", ["a", "b"], ["y"], axis=1)],
                       [("a", F, ["batch", 2]), ("b", F, ["batch", "k"])], [("y", F, None)],
                       opset=17)
    graph, exported, again = round_trip(model, {"a": random_array(rng, (3, 2)),
                                                "b": random_array(rng, (3, 4))})
    dims = exported.graph.input[1].type.tensor_type.shape.dim
    assert [d.dim_param for d in dims] == ["batch", "k"]
    assert again.inputs[1].type.shape == (Sym("batch"), Sym("k"))
    assert again.outputs[0].type.shape == graph.outputs[0].type.shape


def test_dtype_and_tensor_attributes_round_trip(rng):
    nodes = [helper.make_node("Cast", ["x"], ["i"], to=T.INT32),
             helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("ConstantOfShape", ["s"], ["z"],
                              value=numpy_helper.from_array(np.array([7], dtype=np.int32))),
             helper.make_node("Add", ["i", "z"], ["y"])]
    model = make_model(nodes, [("x", F, [2, 3])], [("y", T.INT32, None)], opset=17)
    graph, exported, again = round_trip(model, {"x": random_array(rng, (2, 3))})
    cast = next(n for n in again.nodes if n.op == "Cast")
    assert cast.attrs["to"] is DType.INT32
    fill = next(n for n in again.nodes if n.op == "ConstantOfShape").attrs["value"]
    assert fill.dtype == np.int32


def test_old_opset_model_exports_at_the_newest_opset(rng):
    model = make_model([helper.make_node("ReduceMean", ["x"], ["m"], axes=[1]),
                        helper.make_node("Unsqueeze", ["m"], ["y"], axes=[0])],
                       [("x", F, [2, 3])], [("y", F, None)], opset=9)
    graph, exported, _ = round_trip(model, {"x": random_array(rng, (2, 3))})
    for node in exported.graph.node:  # axes travel as inputs, the opset-18 form
        assert len(node.input) == 2 and "axes" not in [a.name for a in node.attribute]


def test_outputs_that_are_inputs_constants_or_repeated(rng):
    graph = Graph("odd_outputs")
    x = graph.add_input("x", TensorType("float32", [3]))
    c = graph.add_constant(np.array([1.0, 2.0, 3.0], dtype=np.float32), name="c")
    (y,) = graph.add_node("Add", [x, c], [TensorType("float32", [3])]).outputs
    graph.set_outputs([y, x, c, y])
    graph.verify()
    exported = ge_onnx.export(graph)
    onnx.checker.check_model(exported, full_check=True)
    assert len({o.name for o in exported.graph.output}) == 4
    feeds = {"x": random_array(rng, (3,))}
    assert_outputs_close(run_onnxruntime(exported, feeds), evaluate(graph, feeds))
    assert_outputs_close(evaluate(ge_onnx.load(exported), feeds), evaluate(graph, feeds))


def test_value_info_can_be_left_out(rng):
    model = make_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"],
                                                                                ["y"])],
                       [("x", F, [2])], [("y", F, None)], opset=17)
    graph = ge_onnx.load(model)
    assert len(ge_onnx.export(graph).graph.value_info) == 2
    assert len(ge_onnx.export(graph, value_info=False).graph.value_info) == 0


def test_export_rejects_an_opset_it_does_not_write():
    graph = ge_onnx.load(make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2])],
                                    [("y", F, None)], opset=17))
    with pytest.raises(ValueError, match="opset 3 is outside"):
        ge_onnx.export(graph, opset=3)


# --- subgraph attributes ----------------------------------------------------------------
# The core op set has no If/Loop/Scan yet, so a test op in its own domain carries a
# subgraph: Repeat runs `body` `times` times on its input.

TEST_DOMAIN = "test.ge_onnx"


def _infer_repeat(ctx):
    return [ctx.attrs["body"].outputs[0].type]


@op("Repeat", inputs=[Input("x", ANY)], outputs=[Output("y")], infer=_infer_repeat,
    attrs=[Attr("body", AttrKind.GRAPH), Attr("times", AttrKind.INT, 2)], domain=TEST_DOMAIN)
def repeat(x, *, body, times):
    """y = body(body(...body(x))), `times` deep."""
    for _ in range(times):
        (x,) = run_subgraph(body, [x])
    return x


@pytest.fixture
def repeat_op():
    from ge_hub import plugins

    registry = plugins.get_registry()
    registry.current_plugin = "ge-onnx-tests"
    try:
        registry.add_op(repeat)
    finally:
        registry.current_plugin = "builtin"
    yield repeat
    plugins.reset()  # forget the test op


def repeat_model(times=3):
    body = helper.make_graph(
        [helper.make_node("Mul", ["v", "scale"], ["scaled"]),
         helper.make_node("Add", ["scaled", "shift"], ["w"])],
        "body", [helper.make_tensor_value_info("v", F, [4])],
        [helper.make_tensor_value_info("w", F, [4])])
    nodes = [helper.make_node("Neg", ["x"], ["shift"]),
             helper.make_node("Repeat", ["x"], ["y"], domain=TEST_DOMAIN, body=body,
                              times=times)]
    scale = numpy_helper.from_array(np.array([0.5, 2.0, -1.0, 1.5], dtype=np.float32), "scale")
    return make_model(nodes, [("x", F, [4])], [("y", F, None)], opset=17,
                      initializers=[scale], domains={TEST_DOMAIN: 1})


def test_subgraph_attribute_reads_outer_values(repeat_op, rng):
    graph = ge_onnx.load(repeat_model(times=3))
    body = graph.nodes[1].attrs["body"]
    assert isinstance(body, Graph)
    assert {v.name for v in _outer(body)} == {"scale", "shift"}
    x = random_array(rng, (4,))
    scale = np.array([0.5, 2.0, -1.0, 1.5], dtype=np.float32)
    expected = x
    for _ in range(3):
        expected = expected * scale - x
    np.testing.assert_allclose(evaluate(graph, {"x": x})[0], expected, rtol=1e-5)


def test_subgraph_attribute_round_trips(repeat_op, rng):
    graph = ge_onnx.load(repeat_model(times=2))
    exported = ge_onnx.export(graph)
    onnx.checker.check_model(exported)
    body = next(a for a in exported.graph.node[1].attribute if a.name == "body").g
    assert {n.op_type for n in body.node} == {"Mul", "Add"}
    assert {o.domain for o in exported.opset_import} == {"", TEST_DOMAIN}
    again = ge_onnx.load(exported)
    feeds = {"x": random_array(rng, (4,))}
    assert_outputs_close(evaluate(again, feeds), evaluate(graph, feeds), rtol=0, atol=0)


def test_export_of_an_op_onnx_lacks_fails_clearly(monkeypatch):
    # Every core op is an ONNX op today; pretend ONNX lost Relu to see the message.
    graph = ge_onnx.load(make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2])],
                                    [("y", F, None)], opset=17))
    monkeypatch.setattr(onnx.defs, "has", lambda op_type, domain="": False)
    with pytest.raises(OpError, match="op 'Relu' is a ge-hub core op that ONNX does not define"):
        ge_onnx.export(graph)


def _outer(graph):
    from ge_hub.ir.graph import outer_values

    return outer_values(graph)
