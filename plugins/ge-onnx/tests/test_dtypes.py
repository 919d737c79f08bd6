"""The ONNX element types ge-hub added beyond the original ten (unsigned 16/32/64-bit ints,
float8, the 4- and 2-bit ints and float4): graph inputs, outputs and initializers of each
survive import, export and re-import bit for bit (4- and 2-bit ones packed in the file,
one per byte in memory), and run through the compiled engine."""

from __future__ import annotations

import ge_hub
import ml_dtypes
import numpy as np
import onnx
import pytest
from ge_hub.ir import DType
from ge_hub.reference import evaluate
from onnx import helper, numpy_helper

import ge_onnx
from ge_onnx.tensors import TO_ONNX
from ge_onnx.versions import NEWEST_OPSET

from .conftest import make_model

NEW_DTYPES = ["uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
              "float8_e5m2fnuz", "float8_e8m0fnu", "int4", "uint4", "int2", "uint2",
              "float4_e2m1fn"]
BITS = {"int4": 4, "uint4": 4, "float4_e2m1fn": 4, "int2": 2, "uint2": 2}


def sample(rng, dtype: str, shape) -> np.ndarray:
    numpy_type = DType(dtype).numpy
    if DType(dtype).is_narrow and DType(dtype).is_integer:
        info = ml_dtypes.iinfo(numpy_type)
        return rng.integers(int(info.min), int(info.max), size=shape,
                            endpoint=True).astype(numpy_type)
    if DType(dtype).is_integer:
        info = np.iinfo(numpy_type)
        return rng.integers(info.min, info.max, size=shape, dtype=numpy_type, endpoint=True)
    return rng.uniform(0.1, 100, size=shape).astype(numpy_type)


def identity_model(dtype: str, constant: np.ndarray) -> onnx.ModelProto:
    code = TO_ONNX[DType(dtype)]
    nodes = [helper.make_node("Identity", ["x"], ["y"]),
             helper.make_node("Identity", ["c"], ["z"])]
    return make_model(nodes, [("x", code, list(constant.shape))],
                      [("y", code, list(constant.shape)), ("z", code, list(constant.shape))],
                      opset=NEWEST_OPSET,
                      initializers=[numpy_helper.from_array(constant, "c")])


@pytest.mark.parametrize("dtype", NEW_DTYPES)
def test_values_and_initializers_round_trip(rng, dtype):
    x, constant = sample(rng, dtype, (3, 5)), sample(rng, dtype, (3, 5))
    model = identity_model(dtype, constant)
    onnx.checker.check_model(model, full_check=True)
    graph = ge_onnx.load(model)
    assert graph.inputs[0].type.dtype is DType(dtype)
    exported = ge_onnx.export(graph)
    onnx.checker.check_model(exported, full_check=True)
    (initializer,) = exported.graph.initializer
    assert initializer.data_type == TO_ONNX[DType(dtype)]
    assert numpy_helper.to_array(initializer).tobytes() == constant.tobytes()
    if dtype in BITS:  # packed in the file: 15 elements in 8 (4-bit) or 4 (2-bit) bytes
        assert len(initializer.raw_data) == -(-15 * BITS[dtype] // 8)
    again = ge_onnx.load(exported)
    for g in (graph, again):
        y, z = evaluate(g, {"x": x})
        assert y.dtype == x.dtype and y.tobytes() == x.tobytes()
        assert z.dtype == constant.dtype and z.tobytes() == constant.tobytes()


@pytest.mark.parametrize("dtype", NEW_DTYPES)
def test_the_compiled_engine_carries_them(rng, dtype):
    x, constant = sample(rng, dtype, (3, 5)), sample(rng, dtype, (3, 5))
    model = ge_hub.compile(ge_onnx.load(identity_model(dtype, constant)))
    y, z = model.run({"x": x})
    assert y.tobytes() == x.tobytes() and z.tobytes() == constant.tobytes()
