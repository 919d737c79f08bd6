"""Version adapters: each older form of an op, imported, becomes the core form and computes
what onnxruntime computes for the original model."""

from __future__ import annotations

import numpy as np
import pytest
from ge_hub.errors import OpError
from ge_hub.reference import evaluate
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import ge_onnx
from ge_onnx.adapters import ADAPTERS, PRE_OPSET_7_FORMS

from .conftest import assert_matches_onnxruntime, make_model, random_array

F = T.FLOAT


def only_node(graph, op):
    nodes = [n for n in graph.nodes if n.op == op]
    assert len(nodes) == 1, f"expected one {op} node, got {[n.op for n in graph.nodes]}"
    return nodes[0]


def test_adapter_table_is_sorted_per_op():
    for op_type, entries in ADAPTERS.items():
        belows = [below for below, _ in entries]
        assert belows == sorted(belows), op_type


@pytest.mark.parametrize("op, opset", [("ReduceSum", 11), ("ReduceMean", 13), ("ReduceMax", 13),
                                       ("ReduceL2", 11), ("ReduceSumSquare", 17)])
def test_reduce_axes_attribute_becomes_input(rng, op, opset):
    model = make_model([helper.make_node(op, ["x"], ["y"], axes=[0, 2], keepdims=0)],
                       [("x", F, [2, 3, 4])], [("y", F, None)], opset=opset)
    graph = assert_matches_onnxruntime(model, {"x": random_array(rng, (2, 3, 4))})
    node = only_node(graph, op)
    assert "axes" not in node.attrs
    assert node.inputs[1].const.tolist() == [0, 2]
    assert graph.outputs[0].type.shape == (3,)


def test_reduce_without_axes_reduces_everything(rng):
    model = make_model([helper.make_node("ReduceMean", ["x"], ["y"])],
                       [("x", F, [2, 3])], [("y", F, None)], opset=11)
    graph = assert_matches_onnxruntime(model, {"x": random_array(rng, (2, 3))})
    assert len(only_node(graph, "ReduceMean").inputs) == 1
    assert graph.outputs[0].type.shape == (1, 1)


@pytest.mark.parametrize("opset", [7, 11])
def test_squeeze_and_unsqueeze_axes_attribute_becomes_input(rng, opset):
    nodes = [helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0, 3]),
             helper.make_node("Squeeze", ["u"], ["y"], axes=[0])]
    model = make_model(nodes, [("x", F, [2, 3])], [("y", F, None)], opset=opset)
    graph = assert_matches_onnxruntime(model, {"x": random_array(rng, (2, 3))})
    assert only_node(graph, "Unsqueeze").inputs[1].const.tolist() == [0, 3]
    assert only_node(graph, "Squeeze").inputs[1].const.tolist() == [0]
    assert graph.outputs[0].type.shape == (2, 3, 1)


def test_split_sizes_attribute_becomes_input(rng):
    model = make_model([helper.make_node("Split", ["x"], ["a", "b"], axis=1, split=[1, 4])],
                       [("x", F, [2, 5])], [("a", F, None), ("b", F, None)], opset=11)
    graph = assert_matches_onnxruntime(model, {"x": random_array(rng, (2, 5))})
    assert only_node(graph, "Split").inputs[1].const.tolist() == [1, 4]
    assert [v.type.shape for v in graph.outputs] == [(2, 1), (2, 4)]


@pytest.mark.parametrize("opset", [11, 13])
def test_split_without_sizes_gets_num_outputs(rng, opset):
    model = make_model([helper.make_node("Split", ["x"], ["a", "b", "c"])],
                       [("x", F, [6, 2])], [(n, F, None) for n in "abc"], opset=opset)
    graph = assert_matches_onnxruntime(model, {"x": random_array(rng, (6, 2))})
    assert only_node(graph, "Split").attrs["num_outputs"] == 3


def test_clip_bounds_attributes_become_inputs(rng):
    model = make_model([helper.make_node("Clip", ["x"], ["y"], min=-0.5, max=1.25)],
                       [("x", F, [3, 4])], [("y", F, None)], opset=10)
    graph = assert_matches_onnxruntime(model, {"x": random_array(rng, (3, 4))})
    clip = only_node(graph, "Clip")
    assert [float(v.const) for v in clip.inputs[1:]] == [-0.5, 1.25]


def test_clip_with_one_bound_leaves_the_other_out(rng):
    model = make_model([helper.make_node("Clip", ["x"], ["y"], max=0.75)],
                       [("x", F, [5])], [("y", F, None)], opset=9)
    graph = assert_matches_onnxruntime(model, {"x": random_array(rng, (5,))})
    clip = only_node(graph, "Clip")
    assert clip.inputs[1] is None and float(clip.inputs[2].const) == 0.75


def test_pad_attributes_become_inputs(rng):
    model = make_model([helper.make_node("Pad", ["x"], ["y"], pads=[0, 1, 2, 0], value=1.5)],
                       [("x", F, [2, 3])], [("y", F, None)], opset=10)
    graph = assert_matches_onnxruntime(model, {"x": random_array(rng, (2, 3))})
    pad = only_node(graph, "Pad")
    assert pad.inputs[1].const.tolist() == [0, 1, 2, 0] and float(pad.inputs[2].const) == 1.5
    assert graph.outputs[0].type.shape == (4, 4)


def test_pad_reflect_mode_is_kept(rng):
    model = make_model([helper.make_node("Pad", ["x"], ["y"], mode="reflect", pads=[0, 2, 0, 1])],
                       [("x", F, [2, 4])], [("y", F, None)], opset=7)
    graph = assert_matches_onnxruntime(model, {"x": random_array(rng, (2, 4))})
    assert only_node(graph, "Pad").attrs["mode"] == "reflect"


def test_slice_attributes_become_inputs(rng):
    model = make_model(
        [helper.make_node("Slice", ["x"], ["y"], starts=[1, -3], ends=[3, 100], axes=[0, 2])],
        [("x", F, [4, 2, 5])], [("y", F, None)], opset=9)
    graph = assert_matches_onnxruntime(model, {"x": random_array(rng, (4, 2, 5))})
    slice_node = only_node(graph, "Slice")
    assert [v.const.tolist() for v in slice_node.inputs[1:4]] == [[1, -3], [3, 100], [0, 2]]
    assert graph.outputs[0].type.shape == (2, 2, 3)


def test_topk_k_attribute_becomes_input(rng):
    model = make_model([helper.make_node("TopK", ["x"], ["v", "i"], k=2, axis=1)],
                       [("x", F, [3, 5])], [("v", F, None), ("i", T.INT64, None)], opset=9)
    graph = assert_matches_onnxruntime(model, {"x": random_array(rng, (3, 5))})
    assert only_node(graph, "TopK").inputs[1].const.tolist() == [2]


def test_dropout_ratio_attribute_becomes_input(rng):
    model = make_model([helper.make_node("Dropout", ["x"], ["y"], ratio=0.3)],
                       [("x", F, [2, 3])], [("y", F, None)], opset=10)
    graph = assert_matches_onnxruntime(model, {"x": random_array(rng, (2, 3))})
    assert float(only_node(graph, "Dropout").inputs[1].const) == pytest.approx(0.3)


def test_dropout_7_mask_has_the_data_dtype(rng):
    # onnxruntime answers zeros for this mask; the spec (and ONNX's reference) keep every
    # element in inference, so the mask is all ones, in the data's dtype for Dropout-7.
    model = make_model([helper.make_node("Dropout", ["x"], ["y", "mask"], ratio=0.5)],
                       [("x", F, [2, 3])], [("y", F, None), ("mask", F, None)], opset=7)
    graph = ge_onnx.load(model)
    x = random_array(rng, (2, 3))
    y, mask = evaluate(graph, {"x": x})
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.float32 and (mask == 1).all()
    assert graph.outputs[1].producer.op == "Cast"


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_softmax_before_13_works_on_a_2d_view(rng, op, axis):
    model = make_model([helper.make_node(op, ["x"], ["y"], axis=axis)],
                       [("x", F, [2, 3, 4])], [("y", F, None)], opset=11)
    graph = assert_matches_onnxruntime(model, {"x": random_array(rng, (2, 3, 4))})
    assert graph.outputs[0].type.rank == 3
    if axis == 2:  # the last axis: the two semantics agree, no reshaping needed
        assert [n.op for n in graph.nodes] == [op]


def test_softmax_before_13_default_axis_is_1(rng):
    model = make_model([helper.make_node("Softmax", ["x"], ["y"])],
                       [("x", F, [2, 3, 4])], [("y", F, None)], opset=7)
    graph = assert_matches_onnxruntime(model, {"x": random_array(rng, (2, 3, 4))})
    assert only_node(graph, "Flatten").attrs["axis"] == 1


def batch_norm_model(opset, outputs=("y",), **attrs):
    channels = 3
    params = [numpy_helper.from_array(np.linspace(0.5, 1.5, channels).astype(np.float32), n)
              for n in ("scale", "bias", "mean")]
    params.append(numpy_helper.from_array(np.linspace(1, 2, channels).astype(np.float32), "var"))
    node = helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"],
                            list(outputs), **attrs)
    return make_model([node], [("x", F, [2, channels, 4])], [(o, F, None) for o in outputs],
                      opset=opset, initializers=params)


@pytest.mark.parametrize("opset, attrs", [(6, {"is_test": 1}), (7, {"spatial": 1}), (9, {}),
                                          (14, {})])
def test_batch_norm_forms(rng, opset, attrs):
    model = batch_norm_model(opset, epsilon=1e-3, **attrs)
    graph = ge_onnx.load(model)
    node = only_node(graph, "BatchNormalization")
    assert "spatial" not in node.attrs and "is_test" not in node.attrs
    x = random_array(rng, (2, 3, 4))
    params = {c.name: c.const.reshape(3, 1) for c in graph.constants}
    expected = ((x - params["mean"]) / np.sqrt(params["var"] + 1e-3) * params["scale"]
                + params["bias"])
    np.testing.assert_allclose(evaluate(graph, {"x": x})[0], expected, rtol=1e-5, atol=1e-6)
    if opset >= 7:  # onnxruntime has no BatchNormalization-6
        assert_matches_onnxruntime(model, {"x": x})


def test_batch_norm_spatial_0_is_refused_clearly():
    with pytest.raises(OpError, match=r"BatchNormalization.*version 7.*spatial=0"):
        ge_onnx.load(batch_norm_model(7, spatial=0))


def test_batch_norm_training_outputs_are_refused_clearly():
    model = batch_norm_model(9, outputs=("y", "mean_out", "var_out"))
    with pytest.raises(OpError, match=r"training outputs \['mean_out', 'var_out'\]"):
        ge_onnx.load(model)


def test_upsample_7_scales_attribute_becomes_resize(rng):
    model = make_model([helper.make_node("Upsample", ["x"], ["y"], scales=[1.0, 1.0, 2.0, 3.0])],
                       [("x", F, [1, 2, 3, 2])], [("y", F, None)], opset=7)
    graph = assert_matches_onnxruntime(model, {"x": random_array(rng, (1, 2, 3, 2))})
    resize = only_node(graph, "Resize")
    assert resize.attrs["coordinate_transformation_mode"] == "asymmetric"
    assert resize.inputs[2].const.tolist() == [1.0, 1.0, 2.0, 3.0]
    assert graph.outputs[0].type.shape == (1, 2, 6, 6)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_9_scales_input_becomes_resize(rng, mode):
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], dtype=np.float32), "scales")
    model = make_model([helper.make_node("Upsample", ["x", "scales"], ["y"], mode=mode)],
                       [("x", F, [1, 1, 3, 4])], [("y", F, None)], opset=9,
                       initializers=[scales])
    assert_matches_onnxruntime(model, {"x": random_array(rng, (1, 1, 3, 4))})


def test_resize_10_becomes_asymmetric_resize(rng):
    scales = numpy_helper.from_array(np.array([1, 1, 2, 1.5], dtype=np.float32), "scales")
    model = make_model([helper.make_node("Resize", ["x", "scales"], ["y"], mode="nearest")],
                       [("x", F, [1, 2, 4, 4])], [("y", F, None)], opset=10,
                       initializers=[scales])
    graph = assert_matches_onnxruntime(model, {"x": random_array(rng, (1, 2, 4, 4))})
    resize = only_node(graph, "Resize")
    assert resize.inputs[1] is None and resize.attrs["nearest_mode"] == "floor"


def test_resize_11_empty_roi_and_scales_are_omitted(rng):
    empty = numpy_helper.from_array(np.zeros(0, dtype=np.float32), "empty")
    sizes = numpy_helper.from_array(np.array([1, 2, 6, 3], dtype=np.int64), "sizes")
    model = make_model(
        [helper.make_node("Resize", ["x", "empty", "empty", "sizes"], ["y"], mode="linear")],
        [("x", F, [1, 2, 4, 4])], [("y", F, None)], opset=11, initializers=[empty, sizes])
    graph = assert_matches_onnxruntime(model, {"x": random_array(rng, (1, 2, 4, 4))})
    resize = only_node(graph, "Resize")
    assert resize.inputs[1] is None and resize.inputs[2] is None
    assert graph.outputs[0].type.shape == (1, 2, 6, 3)


def test_scatter_9_becomes_scatter_elements(rng):
    indices = numpy_helper.from_array(np.array([[1, 0, 2]], dtype=np.int64), "indices")
    model = make_model([helper.make_node("Scatter", ["x", "indices", "updates"], ["y"], axis=0)],
                       [("x", F, [3, 3]), ("updates", F, [1, 3])], [("y", F, None)], opset=10,
                       initializers=[indices])
    graph = assert_matches_onnxruntime(model, {"x": random_array(rng, (3, 3)),
                                               "updates": random_array(rng, (1, 3))})
    assert [n.op for n in graph.nodes] == ["ScatterElements"]


def test_range_with_one_element_bounds_gets_scalars(rng):
    bounds = [numpy_helper.from_array(np.array([v], dtype=np.float32), n)
              for n, v in (("start", 1.0), ("delta", 0.5))]
    nodes = [helper.make_node("ReduceMax", ["limit_in"], ["limit"], keepdims=1),  # shape [1]
             helper.make_node("Range", ["start", "limit", "delta"], ["y"])]
    model = make_model(nodes, [("limit_in", F, [3])], [("y", F, None)], opset=13,
                       initializers=bounds)
    graph = ge_onnx.load(model)
    range_node = only_node(graph, "Range")
    assert all(v.type.shape == () for v in range_node.inputs)
    (y,) = evaluate(graph, {"limit_in": np.array([2.0, 4.0, 3.0], dtype=np.float32)})
    np.testing.assert_array_equal(y, np.arange(1.0, 4.0, 0.5, dtype=np.float32))


@pytest.mark.parametrize("op", ["Add", "Mul", "Sub", "Div"])
def test_opset_6_broadcast_with_axis(rng, op):
    model = make_model([helper.make_node(op, ["a", "b"], ["y"], broadcast=1, axis=1)],
                       [("a", F, [2, 3, 4]), ("b", F, [3])], [("y", F, None)], opset=6)
    graph = ge_onnx.load(model)
    assert graph.outputs[0].type.shape == (2, 3, 4)
    a, b = random_array(rng, (2, 3, 4)), random_array(rng, (3,))
    (y,) = evaluate(graph, {"a": a, "b": b})
    expected = {"Add": np.add, "Mul": np.multiply, "Sub": np.subtract,
                "Div": np.divide}[op](a, b.reshape(3, 1))
    np.testing.assert_allclose(y, expected, rtol=1e-6)


def test_opset_6_ops_with_adapters_are_read(rng):
    # onnxruntime lacks PRelu-6, so the expected values are computed here.
    weight, bias = random_array(rng, (4, 3)), random_array(rng, (4,))
    slope = np.array([0.1, 0.2, 0.3], dtype=np.float32)
    nodes = [helper.make_node("PRelu", ["x", "slope"], ["p"]),
             helper.make_node("AveragePool", ["p"], ["pooled"], kernel_shape=[2]),
             helper.make_node("Flatten", ["pooled"], ["flat"]),
             helper.make_node("Gemm", ["flat", "w", "c"], ["y"], transB=1, broadcast=1)]
    initializers = [numpy_helper.from_array(a, n)
                    for a, n in ((weight, "w"), (bias, "c"), (slope, "slope"))]
    model = make_model(nodes, [("x", F, [2, 3, 2])], [("y", F, None)], opset=6,
                       initializers=initializers)
    assert {"PRelu", "AveragePool", "Gemm"} <= PRE_OPSET_7_FORMS
    graph = ge_onnx.load(model)
    assert graph.outputs[0].type.shape == (2, 4)
    x = random_array(rng, (2, 3, 2))
    per_channel = np.where(x >= 0, x, x * slope.reshape(3, 1))
    expected = per_channel.mean(axis=2) @ weight.T + bias
    np.testing.assert_allclose(evaluate(graph, {"x": x})[0], expected, rtol=1e-5, atol=1e-6)


def test_opset_6_op_without_adapter_is_refused_clearly():
    # Upsample-1 (experimental) changed at opset 7 and has no adapter for its old form.
    model = make_model([helper.make_node("Upsample", ["x"], ["y"], height_scale=2.0,
                                         width_scale=2.0)],
                       [("x", F, [1, 1, 2, 2])], [("y", F, None)], opset=6)
    with pytest.raises(OpError, match=r"'Upsample'.*version 1 \(opset 6\).*predates opset 7"):
        ge_onnx.load(model)


@pytest.mark.parametrize("mode", [None, "bilinear", "bicubic", "nearest"])
def test_grid_sample_16_mode_names(rng, mode):
    attrs = {} if mode is None else {"mode": mode}
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], padding_mode="border", **attrs)
    model = make_model([node], [("x", F, [1, 2, 4, 5]), ("grid", F, [1, 3, 2, 2])],
                       [("y", F, None)], opset=16)
    feeds = {"x": random_array(rng, (1, 2, 4, 5)),
             "grid": random_array(rng, (1, 3, 2, 2), low=-1.2, high=1.2)}
    graph = assert_matches_onnxruntime(model, feeds, rtol=1e-5, atol=1e-5)
    expected = {None: "linear", "bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    assert only_node(graph, "GridSample").attrs["mode"] == expected
