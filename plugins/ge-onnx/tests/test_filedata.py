"""Loading an ONNX file reads its large initializers straight into NumPy
(`ge_onnx.filedata`): the graph is the same as from `onnx.load`, each weight is in
memory once, and a compiled model lets the prepacked ones go."""

from __future__ import annotations

import gc
import weakref

import ge_hub
import numpy as np
import onnx
import pytest
from ge_hub import frontend as frontend_module
from ge_hub.plugin import SerializationError
from onnx import TensorProto, helper, numpy_helper

from ge_onnx import filedata
from ge_onnx.importer import import_model

# (element type, numpy dtype) of every type the reader defers, and one it leaves alone
PLAIN = [(TensorProto.FLOAT, np.float32), (TensorProto.DOUBLE, np.float64),
         (TensorProto.FLOAT16, np.float16), (TensorProto.INT8, np.int8),
         (TensorProto.INT16, np.int16), (TensorProto.INT32, np.int32),
         (TensorProto.INT64, np.int64), (TensorProto.UINT8, np.uint8),
         (TensorProto.UINT16, np.uint16), (TensorProto.UINT32, np.uint32),
         (TensorProto.UINT64, np.uint64), (TensorProto.BOOL, np.bool_)]


def identity_model(arrays: dict[str, np.ndarray], extra_inits=()) -> onnx.ModelProto:
    """A model whose outputs are its initializers (each through Identity)."""
    nodes, outputs, inits = [], [], list(extra_inits)
    for name, array in arrays.items():
        inits.append(numpy_helper.from_array(array, name))
        nodes.append(helper.make_node("Identity", [name], [f"{name}_out"]))
        outputs.append(helper.make_tensor_value_info(f"{name}_out",
                                                     helper.np_dtype_to_tensor_dtype(
                                                         array.dtype), array.shape))
    graph = helper.make_graph(nodes, "g", [], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def arrays_of(rng):
    out = {}
    for code, dtype in PLAIN:
        shape = (7, 601) if code != TensorProto.BOOL else (4099,)
        if dtype == np.bool_:
            out[f"t{code}"] = rng.random(shape) > 0.5
        elif np.issubdtype(dtype, np.floating):
            out[f"t{code}"] = rng.standard_normal(shape).astype(dtype)
        else:
            info = np.iinfo(dtype)
            out[f"t{code}"] = rng.integers(info.min, info.max, shape, dtype=dtype,
                                           endpoint=True)
    out["small"] = np.arange(5, dtype=np.float32)  # below DEFER_BYTES: stays in the proto
    out["scalar"] = np.array(2.5, np.float32)
    return out


def test_the_graph_is_the_one_onnx_load_gives(tmp_path, rng):
    arrays = arrays_of(rng)
    path = tmp_path / "m.onnx"
    onnx.save(identity_model(arrays), path)
    stripped = filedata.read_stripped(str(path))
    assert stripped is not None
    data, where = stripped
    assert len(where.spans) == len(PLAIN)  # every large plain initializer deferred
    assert len(data) < 4096 + 1000
    ours = ge_hub.load(path)
    theirs = import_model(onnx.load(path))
    got = {v.name: v.const for v in ours.constants}
    want = {v.name: v.const for v in theirs.constants}
    assert got.keys() == want.keys() == set(arrays)
    for name in arrays:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape
        np.testing.assert_array_equal(got[name], want[name])
    outputs = ge_hub.compile(ours).run({})
    for array, out in zip(arrays.values(), outputs):
        np.testing.assert_array_equal(out, array)


def test_other_types_and_late_data_types_stay_in_the_proto(tmp_path, rng):
    """bfloat16 is not deferred; a tensor whose data_type follows its raw_data (not the
    order protobuf writes, but valid) keeps its data in the proto."""
    bf16 = helper.make_tensor("bf", TensorProto.BFLOAT16, [3000],
                              vals=rng.integers(0, 1 << 15, 3000).astype(np.uint16)
                              .tobytes(), raw=True)
    floats = rng.standard_normal(2000).astype(np.float32)
    late = TensorProto()
    late.name = "late"
    late.raw_data = floats.tobytes()
    late.dims.extend([2000])
    late.data_type = TensorProto.FLOAT
    # serialize with raw_data (9) before data_type (2)
    late_bytes = (filedata._varint(9 << 3 | 2) + filedata._varint(len(late.raw_data))
                  + late.raw_data + filedata._varint(1 << 3) + filedata._varint(2000)
                  + filedata._varint(2 << 3) + filedata._varint(TensorProto.FLOAT)
                  + filedata._varint(8 << 3 | 2) + filedata._varint(4) + b"late")
    model = identity_model({"x": floats}, extra_inits=[bf16])
    path = tmp_path / "m.onnx"
    raw = model.SerializeToString()
    onnx.save(model, path)
    # splice the hand-ordered tensor in as one more initializer of the graph
    reparsed = onnx.ModelProto()
    reparsed.ParseFromString(raw)
    spliced = TensorProto()
    spliced.ParseFromString(late_bytes)
    reparsed.graph.initializer.append(spliced)
    reparsed.graph.node.append(helper.make_node("Identity", ["late"], ["late_out"]))
    reparsed.graph.output.append(helper.make_tensor_value_info("late_out", TensorProto.FLOAT,
                                                               [2000]))
    graph_bytes = reparsed.graph.SerializeToString().replace(
        spliced.SerializeToString(), late_bytes)
    model_bytes = reparsed.SerializeToString().replace(reparsed.graph.SerializeToString(),
                                                       graph_bytes)
    path.write_bytes(model_bytes)
    _, where = filedata.read_stripped(str(path))
    assert sorted(where.spans) == [1]  # only "x" (after bf16); bf16 and "late" stay
    graph = ge_hub.load(path)
    consts = {v.name: v.const for v in graph.constants}
    np.testing.assert_array_equal(consts["late"], floats)
    np.testing.assert_array_equal(consts["x"], floats)
    np.testing.assert_array_equal(consts["bf"], import_model(onnx.load(path)).constants[
        [v.name for v in import_model(onnx.load(path)).constants].index("bf")].const)


@pytest.mark.parametrize("cut", [1, 10, 200, -3])
def test_a_truncated_file_is_the_same_clear_error(tmp_path, rng, cut):
    path = tmp_path / "m.onnx"
    onnx.save(identity_model({"w": rng.standard_normal(3000).astype(np.float32)}), path)
    data = path.read_bytes()
    path.write_bytes(data[:cut] if cut > 0 else data[:cut])
    with pytest.raises(SerializationError):
        ge_hub.load(path)


def test_a_raw_data_size_that_does_not_fit_its_shape_is_refused(tmp_path, rng):
    tensor = numpy_helper.from_array(rng.standard_normal(3000).astype(np.float32), "w")
    tensor.dims[0] = 2999  # 4 bytes of data too many
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2999])],
                              [tensor])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(SerializationError, match="initializer 'w'.*does not hold shape"):
        ge_hub.load(path)


def test_a_compiled_conv_lets_its_original_weights_go(tmp_path, rng, monkeypatch):
    w = (rng.standard_normal((32, 16, 3, 3)) * 0.1).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 10, 10])],
        [numpy_helper.from_array(w, "w")])
    path = tmp_path / "conv.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    refs = []
    load = frontend_module.load

    def watching(*args, **kwargs):
        graph = load(*args, **kwargs)
        refs.extend(weakref.ref(v.const) for v in graph.constants)
        return graph

    monkeypatch.setattr(frontend_module, "load", watching)
    model = ge_hub.compile(path)
    gc.collect()
    assert len(refs) == 1 and refs[0]() is None
    x = rng.standard_normal((1, 16, 10, 10)).astype(np.float32)
    in_memory = ge_hub.compile(import_model(onnx.load(path)))
    np.testing.assert_array_equal(model.run({"x": x})[0], in_memory.run({"x": x})[0])
