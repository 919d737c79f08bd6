"""The hand-made hostile models of issue 11, written into the corpus beside the fuzzer's
findings: `python -m tests.fuzz.handmade` (from plugins/ge-onnx) rewrites them.

Each is tiny and aims at one piece of index arithmetic: pool pads and strides near
2**63, a Conv stride and dilation of 2**31, a shape input declared with 2**40
elements feeding ConstantOfShape and Reshape, and a 3-D MaxPool window lying wholly
in the padding.
"""

from __future__ import annotations

from onnx import TensorProto as T
from onnx import helper

from .corpus_files import CORPUS_DIR, record_finding


def _model(nodes, inputs, outputs, initializers=()) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def models() -> dict[str, tuple[bytes, str]]:
    """File name -> (model bytes, what it aims at)."""
    y = helper.make_tensor_value_info("y", T.FLOAT, None)
    x3 = helper.make_tensor_value_info("x", T.FLOAT, [1, 1, 8])
    x4 = helper.make_tensor_value_info("x", T.FLOAT, [1, 1, 8, 8])
    x5 = helper.make_tensor_value_info("x", T.FLOAT, [1, 1, 2, 4, 4])
    shape = helper.make_tensor_value_info("s", T.INT64, [2**40])
    found = {}
    for op in ("MaxPool", "AveragePool"):
        node = helper.make_node(op, ["x"], ["y"], kernel_shape=[2], pads=[2**63 - 1, 1],
                                strides=[2**40])
        found[f"handmade-{op.lower()}-huge-pads.onnx"] = (
            _model([node], [x3], [y]), f"{op} pads [2**63-1, 1], strides [2**40] (segfault)")
    weight = helper.make_tensor("w", T.FLOAT, [1, 1, 2, 2], [1.0] * 4)
    conv = helper.make_node("Conv", ["x", "w"], ["y"], strides=[2**31, 1],
                            dilations=[2**31, 1])
    found["handmade-conv-huge-stride.onnx"] = (
        _model([conv], [x4], [y], [weight]), "Conv stride and dilation 2**31 (wrong results)")
    found["handmade-constantofshape-huge-shape-input.onnx"] = (
        _model([helper.make_node("ConstantOfShape", ["s"], ["y"])], [shape], [y]),
        "ConstantOfShape of an input declared int64[2**40] (endless load)")
    found["handmade-reshape-huge-shape-input.onnx"] = (
        _model([helper.make_node("Reshape", ["x", "s"], ["y"])], [x3, shape], [y]),
        "Reshape to an input declared int64[2**40] (endless load)")
    pool3d = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[1, 2, 2],
                              pads=[3, 0, 0, 3, 0, 0])
    found["handmade-maxpool3d-window-in-padding.onnx"] = (
        _model([pool3d], [x5], [y]), "3-D MaxPool, depth window wholly in the padding")
    return found


def main() -> None:
    for name, (data, what) in models().items():
        if not (CORPUS_DIR / name).exists():
            print(record_finding(name, data, f"handmade ({what})"))
        else:
            (CORPUS_DIR / name).write_bytes(data)


if __name__ == "__main__":
    main()
