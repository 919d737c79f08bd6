"""Cast from float to the 4- and 2-bit integers, out of range: ONNX leaves it undefined,
so ge-hub follows ONNX Runtime (wraparound), whatever ml_dtypes version is installed."""

from __future__ import annotations

import ge_hub
import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

TARGETS = {"int4": TensorProto.INT4, "uint4": TensorProto.UINT4,
           "int2": TensorProto.INT2, "uint2": TensorProto.UINT2}


def _cast_there_and_back(to: int, source: int) -> onnx.ModelProto:
    # ORT has no NumPy type for the packed types: widen back to float inside the graph.
    nodes = [helper.make_node("Cast", ["x"], ["narrow"], to=to),
             helper.make_node("Cast", ["narrow"], ["y"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "cast_oor",
                              [helper.make_tensor_value_info("x", source, [25])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [25])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])
    model.ir_version = 11
    return model


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("source", [np.float32, np.float16])
def test_out_of_range_float_wraps_like_onnxruntime(target, source):
    model = _cast_there_and_back(TARGETS[target], helper.np_dtype_to_tensor_dtype(
        np.dtype(source)))
    x = np.arange(-9, 16).astype(source)
    expected = onnxruntime.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    (got,) = ge_hub.compile(ge_hub.load(model)).run({"x": x})
    np.testing.assert_array_equal(got, expected)
    assert not np.all(got == 0)
