"""If, Loop and Scan from ONNX: bodies become subgraph attributes that read outer names by
scope, untyped body inputs take the node's types, Scan-8's batch axis is adapted, and
the compiled model and the export agree with onnxruntime."""

from __future__ import annotations

import ge_hub
import numpy as np
import onnx
import pytest
from ge_hub.errors import OpError
from onnx import TensorProto as T
from onnx import helper

import ge_onnx

from .conftest import (
    assert_matches_onnxruntime,
    assert_outputs_close,
    make_model,
    random_array,
    run_onnxruntime,
)

F = T.FLOAT


def untyped(name: str) -> onnx.ValueInfoProto:
    info = onnx.ValueInfoProto()
    info.name = name
    return info


def loop_model(*, typed: bool) -> onnx.ModelProto:
    """s <- s * 0.5 + w (w read from the main graph by name), M times; scans s + i."""
    body_inputs = [helper.make_tensor_value_info("i", T.INT64, []),
                   helper.make_tensor_value_info("c", T.BOOL, []),
                   helper.make_tensor_value_info("s", F, [3]) if typed else untyped("s")]
    body_outputs = [untyped("c_out"), untyped("s_out"), untyped("scan")]
    body = helper.make_graph([
        helper.make_node("Identity", ["c"], ["c_out"]),
        helper.make_node("Constant", [], ["half"], value=helper.make_tensor("h", F, [], [0.5])),
        helper.make_node("Mul", ["s", "half"], ["scaled"]),
        helper.make_node("Add", ["scaled", "w"], ["s_out"]),
        helper.make_node("Cast", ["i"], ["i_f"], to=F),
        helper.make_node("Add", ["s_out", "i_f"], ["scan"]),
    ], "body", body_inputs, body_outputs)
    nodes = [helper.make_node("Neg", ["x"], ["w"]),
             helper.make_node("Loop", ["m", "", "s0"], ["s_final", "scanned"], body=body)]
    return make_model(nodes, [("x", F, [3]), ("m", T.INT64, []), ("s0", F, [3])],
                      [("s_final", F, [3]), ("scanned", F, None)], opset=21)


@pytest.mark.parametrize("typed", [True, False])
def test_loop_body_reads_outer_names_and_untyped_inputs_take_the_node_types(rng, typed):
    model = loop_model(typed=typed)
    feeds = {"x": random_array(rng, (3,)), "m": np.array(4, np.int64),
             "s0": random_array(rng, (3,))}
    graph = assert_matches_onnxruntime(model, feeds)
    (loop,) = [n for n in graph.nodes if n.op == "Loop"]
    body = loop.attrs["body"]
    assert body.inputs[2].type.dtype == ge_hub.ir.DType.FLOAT32
    assert [v.name for v in ge_hub.ir.graph.outer_values(body)] == ["w"]
    compiled = ge_hub.compile(graph)
    assert_outputs_close(compiled.run(feeds), run_onnxruntime(model, feeds))


def if_model() -> onnx.ModelProto:
    then_body = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["t"])], "then", [],
                                  [helper.make_tensor_value_info("t", F, [2, 3])])
    else_body = helper.make_graph([helper.make_node("Sub", ["x", "y"], ["e"])], "else", [],
                                  [helper.make_tensor_value_info("e", F, [2, 3])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
             helper.make_node("Greater", ["total", "zero"], ["positive"]),
             helper.make_node("If", ["positive"], ["z"], then_branch=then_body,
                              else_branch=else_body)]
    zero = helper.make_tensor("zero", F, [], [0.0])
    return make_model(nodes, [("x", F, [2, 3]), ("y", F, [2, 3])], [("z", F, [2, 3])],
                      opset=21, initializers=[zero])


def test_if_compiles_and_exports_with_the_meaning_onnxruntime_gives(rng):
    model = if_model()
    graph = ge_onnx.load(model)
    compiled = ge_hub.compile(graph)
    for sign in (1, -1):
        feeds = {"x": np.abs(random_array(rng, (2, 3))) * sign, "y": random_array(rng, (2, 3))}
        want = run_onnxruntime(model, feeds)
        assert_outputs_close(compiled.run(feeds), want)
        exported = ge_onnx.export(graph)
        onnx.checker.check_model(exported, full_check=True)
        assert_outputs_close(run_onnxruntime(exported, feeds), want)


def scan8_model(sequence_lens: bool = False) -> onnx.ModelProto:
    body = helper.make_graph(
        [helper.make_node("Add", ["acc", "item"], ["acc_out"]),
         helper.make_node("Mul", ["acc_out", "item"], ["out"])], "scan_body",
        [helper.make_tensor_value_info("acc", F, [2]),
         helper.make_tensor_value_info("item", F, [2])],
        [helper.make_tensor_value_info("acc_out", F, [2]),
         helper.make_tensor_value_info("out", F, [2])])
    node = helper.make_node("Scan", ["lens" if sequence_lens else "", "init", "xs"],
                            ["final", "outs"], body=body, num_scan_inputs=1, directions=[1])
    inputs = [("init", F, [3, 2]), ("xs", F, [3, 4, 2])]
    if sequence_lens:
        inputs.insert(0, ("lens", T.INT32, [3]))
    return make_model([node], inputs, [("final", F, [3, 2]), ("outs", F, [3, 4, 2])],
                      opset=8)


def test_scan8_batch_axis_becomes_an_outer_scan(rng):
    model = scan8_model()
    feeds = {"init": random_array(rng, (3, 2)), "xs": random_array(rng, (3, 4, 2))}
    graph = assert_matches_onnxruntime(model, feeds)
    (outer,) = graph.nodes
    assert outer.op == "Scan" and outer.attrs["num_scan_inputs"] == 2
    (inner,) = outer.attrs["body"].nodes
    assert inner.op == "Scan" and inner.attrs["scan_input_directions"] == [1]
    assert [v.type.shape for v in graph.outputs] == [(3, 2), (3, 4, 2)]


def test_scan8_sequence_lens_is_refused_by_name():
    with pytest.raises(OpError, match="Scan.*sequence_lens"):
        ge_onnx.load(scan8_model(sequence_lens=True))
