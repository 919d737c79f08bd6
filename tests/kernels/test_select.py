"""The select C kernels (core/kernels/select.c) against their NumPy references: NonZero,
Compress, Unique and NonMaxSuppression in their bounded forms (ge_hub/ops/
select_bounded.py), which write each output at its real shape in the leading elements
of a bound-sized buffer and the real length in a last `count` output.

Only the leading elements are compared (the rest of a buffer is whatever the arena held).
Empty results (NonZero of zeros, NMS of no boxes, a condition all false), NaN and -0.0,
every dtype the kernels take, and bad inputs failing with the op named.
"""

from __future__ import annotations

import numpy as np
import pytest

import ge_hub
from ge_hub.executor import KernelError
from ge_hub.ir.graph import Graph
from ge_hub.ir.types import TensorType
from ge_hub.ops import get_schema
from ge_hub.ops.select_bounded import BOUNDED_FORMS, dynamic_axes, nms_bound, real_shapes


def run_bounded(op: str, arrays, attrs=None, *, consts=(), fallback=0):
    """Compile op's bounded form on these inputs (None: omitted; indices in `consts` are
    constants), run it, check it against the reference; returns the real outputs."""
    attrs = dict(attrs or {})
    form, _ = BOUNDED_FORMS[op]
    schema = get_schema(form, "ge_hub")
    graph = Graph(form)
    inputs, feed = [], {}
    for i, array in enumerate(arrays):
        if array is None:
            inputs.append(None)
        elif i in consts:
            inputs.append(graph.add_constant(array, f"c{i}"))
        else:
            inputs.append(graph.add_input(f"x{i}", TensorType.of(array)))
            feed[f"x{i}"] = array
    types = schema.infer_types([None if v is None else v.type for v in inputs], attrs,
                               consts=[None if v is None else v.const for v in inputs],
                               num_outputs=len(schema.outputs), node_name="n")
    node = graph.add_node(form, inputs, types, attrs, domain="ge_hub", name="n")
    graph.set_outputs(node.outputs)
    model = ge_hub.compile(graph)
    summary = model.summary()
    assert summary["python_steps"] == fallback and summary["fallback_steps"] == fallback
    got = model.run(feed)
    want = schema.run_reference(list(arrays), schema.fill_attrs(attrs, "n"))
    count = int(got[-1][0])
    assert count == int(want[-1][0])
    rank = next(a for a in arrays if a is not None).ndim
    shapes = real_shapes(types[:-1], dynamic_axes(op, attrs, rank), count)
    real = []
    for g, w, shape in zip(got[:-1], want[:-1], shapes):
        size = int(np.prod(shape, dtype=np.int64))
        g = g.reshape(-1)[:size].reshape(shape)
        np.testing.assert_array_equal(g, w.reshape(-1)[:size].reshape(shape))
        real.append(g)
    return real


# -- NonZero -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int8", "uint8", "int16",
                                   "int32", "int64", "uint64", "bool"])
@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 4), (2, 0, 3), ()])
def test_non_zero(rng, dtype, shape):
    x = (rng.integers(-1, 2, shape) * rng.integers(1, 5, shape)).astype(dtype)
    (y,) = run_bounded("NonZero", [x])
    if x.ndim:
        np.testing.assert_array_equal(y, np.array(np.nonzero(x)).reshape(x.ndim, -1))
    else:  # a scalar has no coordinates: only the count shows
        assert y.shape == (0, int(x != 0))


def test_non_zero_of_all_zeros_and_of_specials():
    (y,) = run_bounded("NonZero", [np.zeros((3, 5), np.float32)])
    assert y.shape == (2, 0)
    x = np.array([0.0, -0.0, np.nan, np.inf, 1e-45], np.float32)  # -0.0 is zero
    (y,) = run_bounded("NonZero", [x])
    assert y.tolist() == [[2, 3, 4]]


# -- Compress ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "float16"])
@pytest.mark.parametrize("shape, axis, length", [
    ((5, 4), 0, 5), ((5, 4), 1, 3), ((2, 3, 4), -1, 4), ((2, 3, 4), 1, 2),
    ((3, 4), None, 12), ((3, 4), None, 5), ((0, 4), 1, 4)])
def test_compress(rng, dtype, shape, axis, length):
    x = rng.integers(-5, 5, shape).astype(dtype)
    condition = rng.random(length) < 0.5
    run_bounded("Compress", [x, condition], {"axis": axis} if axis is not None else {})


def test_compress_all_false_and_all_true(rng):
    x = rng.standard_normal((4, 3)).astype(np.float32)
    (y,) = run_bounded("Compress", [x, np.zeros(4, bool)], {"axis": 0})
    assert y.shape == (0, 3)
    (y,) = run_bounded("Compress", [x, np.ones(3, bool)], {"axis": 1})
    np.testing.assert_array_equal(y, x)


# -- Unique --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("sorted_", [0, 1])
@pytest.mark.parametrize("shape", [(20,), (4, 5), (0,), (1,)])
def test_unique(rng, dtype, sorted_, shape):
    x = rng.integers(-4, 5, shape).astype(dtype)
    y, first, inverse, counts = run_bounded("Unique", [x], {"sorted": sorted_})
    np.testing.assert_array_equal(y[inverse], x.reshape(-1))


@pytest.mark.parametrize("sorted_", [0, 1])
def test_unique_compares_as_numbers(sorted_):
    x = np.array([np.nan, 0.0, -0.0, 1.5, np.nan, -np.inf, 1.5, 0.0], np.float32)
    y, first, inverse, counts = run_bounded("Unique", [x], {"sorted": sorted_})
    assert counts.sum() == 8 and y.size == 4  # NaNs are one value, -0.0 equals 0.0


def test_unique_of_a_dtype_without_kernel_falls_back_counted(rng):
    x = rng.integers(-3, 3, 10).astype(np.int8)
    run_bounded("Unique", [x], fallback=1)


# -- NonMaxSuppression ---------------------------------------------------------------------


def random_boxes(rng, batches, n, center=False):
    corner = rng.uniform(0, 10, (batches, n, 2))
    size = rng.uniform(0.5, 4, (batches, n, 2))
    if center:
        return np.concatenate([corner, size], axis=-1).astype(np.float32)
    boxes = np.concatenate([corner, corner + size], axis=-1)
    flip = rng.random((batches, n)) < 0.3  # some given by the other diagonal
    boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    return boxes.astype(np.float32)


@pytest.mark.parametrize("batches, classes, n", [(1, 1, 50), (2, 3, 40), (1, 2, 1)])
@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("limits", [(5, 0.5, 0.2), (100, 0.3, None), (3, None, None)])
def test_nms(rng, batches, classes, n, center, limits):
    boxes = random_boxes(rng, batches, n, bool(center))
    scores = rng.random((batches, classes, n)).astype(np.float32)
    scores[..., :3] = 0.75  # ties break by lower index
    limit, iou, floor = limits
    arrays = [boxes, scores, np.array([limit], np.int64),
              None if iou is None else np.array([iou], np.float32),
              None if floor is None else np.array([floor], np.float32)]
    while arrays[-1] is None:
        arrays.pop()
    (selected,) = run_bounded("NonMaxSuppression", arrays, {"center_point_box": center})
    assert selected.shape[1] == 3


def test_nms_bound_follows_a_constant_limit(rng):
    boxes, scores = random_boxes(rng, 1, 30), rng.random((1, 2, 30)).astype(np.float32)
    limit = np.array([4], np.int64)
    bound = nms_bound(boxes.shape, scores.shape, limit)
    assert bound == 8  # 2 classes x at most 4 boxes
    assert nms_bound(boxes.shape, scores.shape, None) == 60
    run_bounded("NonMaxSuppression", [boxes, scores, limit], {"bound": bound}, consts=(2,))


def test_nms_with_no_boxes_and_with_no_limit(rng):
    (selected,) = run_bounded("NonMaxSuppression", [np.zeros((1, 0, 4), np.float32),
                                                    np.zeros((1, 2, 0), np.float32),
                                                    np.array([5], np.int64)])
    assert selected.shape == (0, 3)
    boxes, scores = random_boxes(rng, 1, 6), rng.random((1, 1, 6)).astype(np.float32)
    (selected,) = run_bounded("NonMaxSuppression", [boxes, scores])  # limit 0: none
    assert selected.shape == (0, 3)


def test_nms_of_thousands_of_boxes(rng):
    # SSD-style: one class of many boxes, most of them far apart.
    boxes = random_boxes(rng, 1, 3000) * np.float32(20)
    scores = rng.random((1, 1, 3000)).astype(np.float32)
    (selected,) = run_bounded("NonMaxSuppression", [boxes, scores, np.array([200], np.int64),
                                                    np.array([0.5], np.float32),
                                                    np.array([0.9], np.float32)])
    assert 0 < selected.shape[0] <= 200


def test_nms_float64_boxes_fall_back_counted(rng):
    boxes = random_boxes(rng, 1, 10).astype(np.float64)
    run_bounded("NonMaxSuppression", [boxes, rng.random((1, 1, 10)),
                                      np.array([3], np.int64)], fallback=1)


def test_nms_negative_limit_fails_naming_the_op(rng):
    boxes, scores = random_boxes(rng, 1, 6), rng.random((1, 1, 6)).astype(np.float32)
    graph = Graph("bad")
    form = get_schema("NonMaxSuppressionBounded", "ge_hub")
    inputs = [graph.add_input("b", TensorType.of(boxes)),
              graph.add_input("s", TensorType.of(scores)),
              graph.add_input("k", TensorType.of(np.array([1], np.int64)))]
    types = form.infer_types([v.type for v in inputs], {}, consts=[None] * 3, num_outputs=2)
    graph.set_outputs(graph.add_node("NonMaxSuppressionBounded", inputs, types, {},
                                     domain="ge_hub", name="nms").outputs)
    model = ge_hub.compile(graph)
    with pytest.raises(KernelError, match="NonMaxSuppression.*must be >= 0, got -3"):
        model.run({"b": boxes, "s": scores, "k": np.array([-3], np.int64)})


@pytest.mark.parametrize("iou", [0.0, 0.5, -0.5])
def test_nms_buckets_agree_with_the_reference(rng, iou):
    # Many boxes, clustered and offset by class as torchvision's batched NMS does (its
    # kept boxes sit in buckets along x); NaN boxes and a negative threshold compare
    # every pair instead.
    boxes = random_boxes(rng, 1, 300)
    boxes += (rng.integers(0, 6, 300) * 20).astype(np.float32)[None, :, None]
    boxes[0, :5, 0] = 0.0  # some share an edge
    scores = rng.random((1, 1, 300)).astype(np.float32)
    limits = [np.array([300], np.int64), np.array([iou], np.float32)]
    (selected,) = run_bounded("NonMaxSuppression", [boxes, scores, *limits])
    assert selected.shape[0] > 0
    boxes[0, 7] = np.nan
    run_bounded("NonMaxSuppression", [boxes, scores, *limits])
