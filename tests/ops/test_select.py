"""Tests of the ops that select by value: Compress, Unique, NonMaxSuppression.

Each reference is checked against the worked examples of the ONNX spec (hand-checked)
and, on random data, against an independent computation: Python loops over slices for
Compress and Unique, and for NonMaxSuppression the properties that define the greedy
selection, checked pair by pair.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import random_array, run_op

from ge_hub.errors import OpError
from ge_hub.ir.types import Sym, TensorType, dim_mul
from ge_hub.ops import get_schema

DTYPES = ["float32", "float16", "bfloat16", "float64", "int8", "uint8", "int32", "int64",
          "bool"]


def infer(op, types, attrs=None, consts=None, num_outputs=None):
    types = [t if t is None or isinstance(t, TensorType) else TensorType(*t) for t in types]
    return get_schema(op).infer_types(types, attrs or {}, consts=consts,
                                      num_outputs=num_outputs)


# --- Compress -------------------------------------------------------------------------


def test_compress_spec_examples():
    x = np.array([[1, 2], [3, 4], [5, 6]], np.float32)
    cases = [
        ({"axis": 0}, [False, True, True], [[3, 4], [5, 6]]),
        ({"axis": 1}, [False, True], [[2], [4], [6]]),
        ({"axis": -1}, [False, True], [[2], [4], [6]]),
        ({}, [False, True, False, False, True], [2, 5]),
        ({"axis": 0}, [False, True], [[3, 4]]),  # shorter condition: the rest is dropped
    ]
    for attrs, condition, expected in cases:
        (out,) = run_op("Compress", [x, np.array(condition)], attrs)
        np.testing.assert_array_equal(out, np.array(expected, np.float32))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_compress_matches_loop(rng, dtype, axis):
    x = random_array(rng, (4, 5, 3), dtype)
    length = x.size if axis is None else x.shape[axis]
    condition = rng.random(length - 1) < 0.5  # one shorter than the axis
    attrs = {} if axis is None else {"axis": axis}
    (out,) = run_op("Compress", [x, condition], attrs)
    if axis is None:
        expected = [v for v, keep in zip(x.reshape(-1).tolist(), condition) if keep]
        assert out.tolist() == expected
    else:
        slices = [np.take(x, i, axis=axis) for i in range(length - 1) if condition[i]]
        assert out.shape[axis] == len(slices)
        for i, want in enumerate(slices):
            np.testing.assert_array_equal(np.take(out, i, axis=axis), want)
    assert out.dtype == x.dtype


def test_compress_infer_symbolic_until_condition_is_known():
    (t,) = infer("Compress", [("float32", (Sym("N"), 4)), ("bool", (3,))], {"axis": 1})
    assert t.shape[0] == Sym("N") and isinstance(t.shape[1], Sym)
    (t,) = infer("Compress", [("float32", (2, 4)), ("bool", (3,))], {"axis": 1},
                 consts=[None, np.array([True, False, True])])
    assert t == TensorType("float32", (2, 2))
    (t,) = infer("Compress", [("int8", (2, 4)), ("bool", (5,))])
    assert t.rank == 1 and isinstance(t.shape[0], Sym)


def test_compress_bad_input_names_the_culprit():
    with pytest.raises(OpError, match="'condition' has 4 entries, more than axis 0"):
        infer("Compress", [("float32", (3, 2)), ("bool", (4,))], {"axis": 0})
    with pytest.raises(OpError, match="'condition' must have dtype"):
        infer("Compress", [("float32", (3, 2)), ("int64", (3,))], {"axis": 0})
    with pytest.raises(OpError, match="axis' 2 is out of range"):
        infer("Compress", [("float32", (3, 2)), ("bool", (3,))], {"axis": 2})
    with pytest.raises(OpError, match="Compress: input 'condition' has 7 entries"):
        get_schema("Compress")(np.zeros((2, 3)), np.ones(7, bool))


# --- Unique ---------------------------------------------------------------------------


def test_unique_spec_examples():
    y, first, inverse, counts = run_op("Unique", [np.array([2, 1, 1, 3, 4, 3], np.float32)],
                                       {"sorted": 0})
    assert y.tolist() == [2, 1, 3, 4] and first.tolist() == [0, 1, 3, 4]
    assert inverse.tolist() == [0, 1, 1, 2, 3, 2] and counts.tolist() == [1, 2, 2, 1]

    y, first, inverse, counts = run_op("Unique", [np.array([[1, 3], [2, 3]], np.float32)])
    assert y.tolist() == [1, 2, 3] and first.tolist() == [0, 2, 1]
    assert inverse.tolist() == [0, 2, 1, 2] and counts.tolist() == [1, 1, 2]

    x = np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4]], np.float32)
    y, first, inverse, counts = run_op("Unique", [x], {"axis": 0})
    assert y.tolist() == [[1, 0, 0], [2, 3, 4]] and first.tolist() == [0, 2]
    assert inverse.tolist() == [0, 0, 1] and counts.tolist() == [2, 1]

    x = np.array([[[1, 1], [0, 1], [2, 1], [0, 1]], [[1, 1], [0, 1], [2, 1], [0, 1]]],
                 np.float32)
    y, first, inverse, counts = run_op("Unique", [x], {"axis": 1})
    assert y.tolist() == [[[0, 1], [1, 1], [2, 1]], [[0, 1], [1, 1], [2, 1]]]
    assert first.tolist() == [1, 0, 2] and inverse.tolist() == [1, 0, 2, 0]
    assert counts.tolist() == [2, 1, 1]


def unique_by_loop(x, axis, sorted_):
    """Distinct slices in first-occurrence order (then sorted by their values as tuples)."""
    if axis is None:
        slices = [(v,) for v in x.reshape(-1).tolist()]
    else:
        slices = [tuple(np.take(x, i, axis=axis).reshape(-1).tolist())
                  for i in range(x.shape[axis])]
    first: dict[tuple, int] = {}
    for i, s in enumerate(slices):
        first.setdefault(s, i)
    order = sorted(first) if sorted_ else list(first)
    position = {s: k for k, s in enumerate(order)}
    return ([first[s] for s in order], [position[s] for s in slices],
            [slices.count(s) for s in order])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("sorted_", [0, 1])
def test_unique_matches_loop(rng, dtype, axis, sorted_):
    # Few distinct values, so that slices repeat too.
    x = random_array(rng, (6, 3), dtype, low=-2, high=2)
    if np.dtype(dtype).kind == "f" or dtype == "bfloat16":
        x = np.round(x.astype(np.float32)).astype(dtype)
    x[2] = x[4]
    attrs = {"sorted": sorted_} if axis is None else {"sorted": sorted_, "axis": axis}
    y, first, inverse, counts = run_op("Unique", [x], attrs)
    want_first, want_inverse, want_counts = unique_by_loop(x, axis, sorted_)
    assert first.tolist() == want_first
    assert inverse.tolist() == want_inverse
    assert counts.tolist() == want_counts
    source = x.reshape(-1) if axis is None else x
    np.testing.assert_array_equal(y, np.take(source, want_first, axis=axis or 0))
    assert y.dtype == x.dtype


def test_unique_compares_as_numbers():
    # -0.0 equals 0.0 and NaNs are one value that sorts last, with or without an axis.
    x = np.array([np.nan, 1, np.nan, -0.0, 0.0], np.float32)
    y, first, inverse, counts = run_op("Unique", [x])
    assert str(y.tolist()) == "[-0.0, 1.0, nan]" and first.tolist() == [3, 1, 0]
    assert inverse.tolist() == [2, 1, 2, 0, 0] and counts.tolist() == [2, 1, 2]
    rows = np.array([[np.nan, 1], [0.0, 2], [np.nan, 1], [-0.0, 2], [np.inf, 0]], np.float16)
    y, first, inverse, counts = run_op("Unique", [rows], {"axis": 0})
    assert first.tolist() == [1, 4, 0] and inverse.tolist() == [2, 0, 2, 0, 1]
    assert counts.tolist() == [2, 1, 2]


def test_unique_of_empty_tensors():
    y, first, inverse, counts = run_op("Unique", [np.zeros((0, 3), np.float32)], {"axis": 0})
    assert y.shape == (0, 3) and first.size == inverse.size == counts.size == 0
    y, first, inverse, counts = run_op("Unique", [np.zeros((3, 0), np.int32)], {"axis": 0})
    assert y.shape == (1, 0) and inverse.tolist() == [0, 0, 0] and counts.tolist() == [3]


def test_unique_outputs_asked_for_and_inference():
    t = infer("Unique", [("float32", (Sym("N"), 3))], num_outputs=3)
    assert len(t) == 3 and t[2] == TensorType("int64", (dim_mul(Sym("N"), 3),))
    assert isinstance(t[0].shape[0], Sym) and t[1].shape == t[0].shape
    y, inverse = infer("Unique", [("int32", (4, 5))], {"axis": 1}, num_outputs=3)[::2]
    assert y.shape[0] == 4 and isinstance(y.shape[1], Sym) and inverse.shape == (5,)
    data = np.array([3, 1, 3, 3], np.int64)
    types = infer("Unique", [("int64", (4,))], consts=[data], num_outputs=4)
    assert [t.shape for t in types] == [(2,), (2,), (4,), (2,)]


def test_unique_bad_input_names_the_culprit():
    with pytest.raises(OpError, match="attribute 'sorted' must be 0 or 1"):
        infer("Unique", [("float32", (3,))], {"sorted": 2})
    with pytest.raises(OpError, match="axis' 3 is out of range for rank 2"):
        infer("Unique", [("float32", (3, 2))], {"axis": 3})
    with pytest.raises(OpError, match="needs an input of rank >= 1"):
        infer("Unique", [("float32", ())], {"axis": 0})


# --- NonMaxSuppression ----------------------------------------------------------------

SPEC_BOXES = np.array([[[0.0, 0.0, 1.0, 1.0], [0.0, 0.1, 1.0, 1.1], [0.0, -0.1, 1.0, 0.9],
                        [0.0, 10.0, 1.0, 11.0], [0.0, 10.1, 1.0, 11.1],
                        [0.0, 100.0, 1.0, 101.0]]], np.float32)
SPEC_SCORES = np.array([[[0.9, 0.75, 0.6, 0.95, 0.5, 0.3]]], np.float32)


def nms(boxes, scores, limit=None, iou=None, floor=None, **attrs):
    inputs = [boxes, scores]
    for value, dtype in ((limit, np.int64), (iou, np.float32), (floor, np.float32)):
        inputs.append(None if value is None else np.array([value], dtype))
    while inputs[-1] is None:
        inputs.pop()
    (out,) = run_op("NonMaxSuppression", inputs, attrs)
    return out.tolist()


def test_nms_spec_examples():
    assert nms(SPEC_BOXES, SPEC_SCORES, 3, 0.5, 0.0) == [[0, 0, 3], [0, 0, 0], [0, 0, 5]]
    assert nms(SPEC_BOXES, SPEC_SCORES, 3, 0.5, 0.4) == [[0, 0, 3], [0, 0, 0]]
    assert nms(SPEC_BOXES, SPEC_SCORES, 2, 0.5, 0.0) == [[0, 0, 3], [0, 0, 0]]
    assert nms(SPEC_BOXES, SPEC_SCORES) == []  # no max_output_boxes_per_class: nothing
    # Corners given as the other diagonal select the same boxes.
    flipped = SPEC_BOXES[..., [2, 3, 0, 1]]
    assert nms(flipped, SPEC_SCORES, 3, 0.5, 0.0) == [[0, 0, 3], [0, 0, 0], [0, 0, 5]]
    # The same boxes as [x_center, y_center, width, height].
    y1, x1, y2, x2 = np.moveaxis(SPEC_BOXES, -1, 0)
    centered = np.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], axis=-1)
    assert nms(centered, SPEC_SCORES, 3, 0.5, 0.0, center_point_box=1) == \
        [[0, 0, 3], [0, 0, 0], [0, 0, 5]]
    # Two batches, two classes: per batch, then per class.
    boxes = np.concatenate([SPEC_BOXES, SPEC_BOXES])
    scores = np.concatenate([SPEC_SCORES, SPEC_SCORES], axis=1)
    assert nms(boxes[:1], scores, 2, 0.5, 0.0) == \
        [[0, 0, 3], [0, 0, 0], [0, 1, 3], [0, 1, 0]]
    assert nms(boxes, scores[:, :1].repeat(2, 0), 2, 0.5, 0.0) == \
        [[0, 0, 3], [0, 0, 0], [1, 0, 3], [1, 0, 0]]
    # Identical boxes: the first of the equal scores is kept, the rest suppressed.
    same = np.tile(np.array([0.0, 0.0, 1.0, 1.0], np.float32), (1, 10, 1))
    assert nms(same, np.full((1, 1, 10), 0.9, np.float32), 3, 0.5, 0.0) == [[0, 0, 0]]


def iou(a, b):
    """IoU of two [y1, x1, y2, x2] boxes (any diagonal), written from the definition."""
    ya, yb = sorted(a[0::2]), sorted(b[0::2])
    xa, xb = sorted(a[1::2]), sorted(b[1::2])
    h = max(0.0, min(ya[1], yb[1]) - max(ya[0], yb[0]))
    w = max(0.0, min(xa[1], xb[1]) - max(xa[0], xb[0]))
    area_a = (ya[1] - ya[0]) * (xa[1] - xa[0])
    area_b = (yb[1] - yb[0]) * (xb[1] - xb[0])
    if h * w <= 0 or area_a <= 0 or area_b <= 0:
        return 0.0
    return h * w / (area_a + area_b - h * w)


@pytest.mark.parametrize("seed", range(6))
def test_nms_random_boxes_satisfy_the_greedy_definition(seed):
    rng = np.random.default_rng(seed)
    batches, classes, count = 2, 3, 12
    corner = rng.uniform(0, 4, (batches, count, 2))
    size = rng.uniform(0.5, 3, (batches, count, 2))
    boxes = np.concatenate([corner, corner + size], axis=-1).astype(np.float32)
    scores = rng.random((batches, classes, count)).astype(np.float32)
    # Odd seeds stop at the limit; even ones run until suppression leaves no candidate.
    limit, threshold, floor = (4 if seed % 2 else count), 0.3, 0.2
    selected = nms(boxes, scores, limit, threshold, floor)
    suppressed_any = False
    for b in range(batches):
        for c in range(classes):
            kept = [box for bb, cc, box in selected if (bb, cc) == (b, c)]
            s = scores[b, c].astype(np.float64)
            ranked = sorted((i for i in range(count) if s[i] > np.float32(floor)),
                            key=lambda i: (-s[i], i))
            assert kept == [i for i in ranked if i in kept]  # by decreasing score
            assert len(kept) <= limit
            suppressed_any = suppressed_any or len(kept) < min(limit, len(ranked))
            box = boxes[b].astype(np.float64).tolist()
            for i in ranked[: ranked.index(kept[-1]) + 1 if len(kept) == limit else None]:
                earlier = [k for k in kept if ranked.index(k) < ranked.index(i)]
                overlaps = any(iou(box[i], box[k]) > threshold for k in earlier)
                # A candidate is kept exactly when no earlier kept box overlaps it.
                assert (i in kept) == (not overlaps), (b, c, i)
    assert suppressed_any or seed % 2
    batches_seen = [row[0] for row in selected]
    assert batches_seen == sorted(batches_seen)


def test_nms_infer_exact_only_with_constants():
    types = [("float32", (1, 6, 4)), ("float32", (1, 1, 6)), ("int64", (1,)),
             ("float32", (1,)), ("float32", (1,))]
    (t,) = infer("NonMaxSuppression", types)
    assert t.dtype == "int64" and isinstance(t.shape[0], Sym) and t.shape[1] == 3
    consts = [SPEC_BOXES, SPEC_SCORES, np.array([3]), np.array([0.5], np.float32),
              np.array([0.0], np.float32)]
    (t,) = infer("NonMaxSuppression", types, consts=consts)
    assert t == TensorType("int64", (3, 3))


def test_nms_bad_input_names_the_culprit():
    scores = ("float32", (1, 1, 6))
    with pytest.raises(OpError, match="'boxes' must have 4 coordinates"):
        infer("NonMaxSuppression", [("float32", (1, 6, 3)), scores])
    with pytest.raises(OpError, match=r"disagree on the number of boxes \(6 vs 5\)"):
        infer("NonMaxSuppression", [("float32", (1, 6, 4)), ("float32", (1, 1, 5))])
    with pytest.raises(OpError, match="'max_output_boxes_per_class' must be a scalar"):
        infer("NonMaxSuppression", [("float32", (1, 6, 4)), scores, ("int64", (2,))])
    with pytest.raises(OpError, match="attribute 'center_point_box' must be 0 or 1"):
        infer("NonMaxSuppression", [("float32", (1, 6, 4)), scores], {"center_point_box": 2})
    with pytest.raises(OpError, match="'max_output_boxes_per_class' must be >= 0, got -1"):
        get_schema("NonMaxSuppression")(SPEC_BOXES, SPEC_SCORES, np.array([-1]))
