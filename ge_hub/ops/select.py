"""Ops that select elements by their values: Compress, Unique, NonMaxSuppression.

How many elements they keep depends on the data, not only on shapes (NonZero, in
`ge_hub.ops.index`, is the fourth of this kind). Inference gives such a length a fresh
symbol, and the exact length when the inputs that decide it are constants. The inputs
that decide it are marked `decides_shape`: when they are fed at run time, the compiled
model specializes its plan on their values (`ge_hub.runtime`), which makes them
constants while planning, so the node folds (or, for Compress, whose `input` only moves,
runs with an exact type). The limit of that design: one plan per distinct value of the
deciding inputs, kept in the bounded plan cache (`max_cached_plans`), so a model fed
ever new data here compiles on every run; and the folding happens at compile time, in
the NumPy references below.

The references are the oracle for constant folding and for kernels:

- Compress keeps the slices whose `condition` is true; a condition shorter than the
  axis drops the slices past its end, a longer one is refused;
- Unique compares values as numbers (-0.0 equals 0.0, NaNs are one value), sorted
  ascending (slices along `axis` lexicographically) or, with `sorted=0`, in the order
  of their first occurrence; `indices` are first occurrences;
- NonMaxSuppression follows ONNX: per batch and class, boxes with a score above
  `score_threshold` are taken by decreasing score (ties by lower box index) and a box
  is dropped when its IoU with an already selected box exceeds `iou_threshold`.
"""

from __future__ import annotations

import math

import numpy as np

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import Dim, TensorType, dim_prod
from ge_hub.ops.inference import normalize_axis
from ge_hub.ops.nn_common import check_flag, output_count
from ge_hub.ops.schema import (
    ANY,
    BOOL,
    FLOATS,
    INT64,
    Attr,
    AttrKind,
    InferenceContext,
    Input,
    Output,
    op,
)

# --- Compress -------------------------------------------------------------------------


def _infer_compress(ctx: InferenceContext) -> list[TensorType]:
    x = ctx.input(0)
    ctx.require_rank(1, 1)
    axis = ctx.attrs["axis"]
    if axis is not None:
        if x.rank is None:
            return [TensorType(x.dtype, None)]
        axis = normalize_axis(ctx, axis, x.rank, "attribute 'axis'")
    # Slices the condition chooses from: elements of the flattened input, or along axis.
    if axis is not None:
        length: Dim | None = x.shape[axis]
    else:
        length = None if x.shape is None else dim_prod(x.shape)
    condition = ctx.const(1)
    cond_len = ctx.input(1).shape[0] if ctx.input(1).shape is not None else None
    if isinstance(length, int) and isinstance(cond_len, int) and cond_len > length:
        where = "the flattened input" if axis is None else f"axis {axis} of 'input'"
        ctx.fail(f"input 'condition' has {cond_len} entries, more than {where} "
                 f"({length}); it may be shorter, not longer")
    kept: Dim = ctx.new_sym("kept") if condition is None else int(np.count_nonzero(condition))
    if axis is None:
        return [TensorType(x.dtype, (kept,))]
    shape = list(x.shape)
    shape[axis] = kept
    return [TensorType(x.dtype, tuple(shape))]


@op("Compress",
    inputs=[Input("input", ANY), Input("condition", BOOL, type_var="T1", decides_shape=True)],
    outputs=[Output("output")],
    attrs=[Attr("axis", AttrKind.INT, None)],
    infer=_infer_compress)
def compress(x, condition, *, axis=None):
    """The slices of `x` along `axis` (the flattened `x` when omitted) where `condition`."""
    condition = np.asarray(condition).reshape(-1).astype(bool)
    if axis is None:
        x = x.reshape(-1)
        axis = 0
    elif not -x.ndim <= axis < x.ndim:
        raise OpError(f"Compress: attribute 'axis' {axis} is out of range for rank {x.ndim}")
    length = x.shape[axis]
    if condition.size > length:
        raise OpError(f"Compress: input 'condition' has {condition.size} entries, more than "
                      f"the {length} slices of 'input' along axis {axis}")
    return np.take(x, np.flatnonzero(condition), axis=axis)


# --- Unique ---------------------------------------------------------------------------


def _infer_unique(ctx: InferenceContext) -> list[TensorType]:
    check_flag(ctx, "sorted")
    count = len(ctx.schema.outputs) if ctx.num_outputs is None else output_count(ctx, 1)
    x = ctx.input(0)
    axis = ctx.attrs["axis"]
    if axis is not None:
        if x.rank == 0:
            ctx.fail("attribute 'axis' needs an input of rank >= 1, got a scalar")
        axis = normalize_axis(ctx, axis, x.rank, "attribute 'axis'")
    data = ctx.const(0)
    found: Dim = ctx.new_sym("unique") if data is None else \
        unique(data, axis=axis, sorted=ctx.attrs["sorted"])[0].shape[0 if axis is None else axis]
    if axis is None:
        y = TensorType(x.dtype, (found,))
        scanned: Dim = dim_prod(x.shape) if x.shape is not None else ctx.new_sym("numel")
    elif x.shape is None:
        y = TensorType(x.dtype, None)
        scanned = ctx.new_sym("slices")
    else:
        y = TensorType(x.dtype, x.shape[:axis] + (found,) + x.shape[axis + 1:])
        scanned = x.shape[axis]
    per_value = TensorType(DType.INT64, (found,))
    return [y, per_value, TensorType(DType.INT64, (scanned,)), per_value][:count]


@op("Unique",
    inputs=[Input("X", ANY, decides_shape=True)],
    outputs=[Output("Y"), Output("indices", optional=True),
             Output("inverse_indices", optional=True), Output("counts", optional=True)],
    attrs=[Attr("axis", AttrKind.INT, None), Attr("sorted", AttrKind.INT, 1)],
    infer=_infer_unique)
def unique(x, *, axis=None, sorted=1):  # noqa: A002 - the ONNX attribute's name
    """Distinct values (slices along `axis`) of `x`, with the index of each one's first
    occurrence, the index in Y of every input element (slice), and how often each occurs."""
    if axis is None:
        x = x.reshape(-1)
        axis = 0
    elif not -x.ndim <= axis < x.ndim:
        raise OpError(f"Unique: attribute 'axis' {axis} is out of range for rank {x.ndim}")
    _, first, inverse, counts = np.unique(_slice_keys(x, axis), return_index=True,
                                          return_inverse=True, return_counts=True, axis=0)
    inverse = inverse.reshape(-1)
    if not sorted:
        # Order of first occurrence: renumber every value by where it first appears.
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    as_int64 = [np.asarray(a, dtype=np.int64) for a in (first, inverse, counts)]
    return (np.take(x, first, axis=axis), *as_int64)


def _slice_keys(x: np.ndarray, axis: int) -> np.ndarray:
    """One row per slice along `axis`, whose rows are equal (and order) exactly as the
    slices compare as numbers: -0.0 equals 0.0, NaN equals NaN and sorts last."""
    rows = np.moveaxis(x, axis, 0)
    rows = rows.reshape(rows.shape[0], math.prod(rows.shape[1:]))
    if rows.shape[1] == 0:  # empty slices are all equal
        return np.zeros((rows.shape[0], 1), np.int8)
    if not DType.from_numpy(x.dtype).is_float:
        return rows
    # Each element becomes (is NaN, value or 0) in float64, which bfloat16 and float8
    # widen to exactly; adding 0.0 turns -0.0 into 0.0.
    values = rows.astype(np.float64)
    nan = np.isnan(values)
    pairs = np.stack([nan, np.where(nan, 0.0, values + 0.0)], axis=-1)
    return pairs.reshape(len(rows), 2 * rows.shape[1])


# --- NonMaxSuppression ----------------------------------------------------------------


def _infer_nms(ctx: InferenceContext) -> list[TensorType]:
    check_flag(ctx, "center_point_box")
    boxes, scores = ctx.input(0), ctx.input(1)
    ctx.require_rank(0, 3)
    ctx.require_rank(1, 3)
    if boxes.shape is not None:
        if isinstance(boxes.shape[2], int) and boxes.shape[2] != 4:
            ctx.fail(f"input 'boxes' must have 4 coordinates per box (last dim 4), got {boxes}")
        if scores.shape is not None:
            for b_axis, s_axis, what in ((0, 0, "batches"), (1, 2, "boxes")):
                b, s = boxes.shape[b_axis], scores.shape[s_axis]
                if isinstance(b, int) and isinstance(s, int) and b != s:
                    ctx.fail(f"inputs 'boxes' {boxes} and 'scores' {scores} disagree on the "
                             f"number of {what} ({b} vs {s})")
    for index in (2, 3, 4):
        t = ctx.input(index) if ctx.has_input(index) else None
        if t is not None and t.is_static and t.numel != 1:
            ctx.fail(f"input {ctx.schema.input_name(index)!r} must be a scalar (one element), "
                     f"got {t}")
    consts = [ctx.const(i) if ctx.has_input(i) else None for i in range(5)]
    known = all(consts[i] is not None for i in range(5) if ctx.has_input(i))
    selected: Dim = ctx.new_sym("selected")
    if known:
        selected = non_max_suppression(
            *consts, center_point_box=ctx.attrs["center_point_box"]).shape[0]
    return [TensorType(DType.INT64, (selected, 3))]


@op("NonMaxSuppression",
    inputs=[Input("boxes", FLOATS, decides_shape=True),
            Input("scores", FLOATS, decides_shape=True),
            Input("max_output_boxes_per_class", INT64, type_var="I", optional=True,
                  decides_shape=True),
            Input("iou_threshold", FLOATS, type_var="F", optional=True, decides_shape=True),
            Input("score_threshold", FLOATS, type_var="F", optional=True, decides_shape=True)],
    outputs=[Output("selected_indices")],
    attrs=[Attr("center_point_box", AttrKind.INT, 0)],
    infer=_infer_nms)
def non_max_suppression(boxes, scores, max_output_boxes_per_class=None, iou_threshold=None,
                        score_threshold=None, *, center_point_box=0):
    """[batch, class, box] (int64, shape [selected, 3]) of the boxes kept, per batch then
    class, each class's boxes in the order they were selected."""
    limit = _scalar(max_output_boxes_per_class, "max_output_boxes_per_class", 0)
    iou_limit = _scalar(iou_threshold, "iou_threshold", 0.0)
    floor = _scalar(score_threshold, "score_threshold", None)
    if boxes.ndim != 3 or boxes.shape[2] != 4:
        raise OpError(f"NonMaxSuppression: input 'boxes' must have shape "
                      f"[batches, boxes, 4], got {boxes.shape}")
    if scores.ndim != 3 or scores.shape[0] != boxes.shape[0] or \
            scores.shape[2] != boxes.shape[1]:
        raise OpError(f"NonMaxSuppression: input 'scores' must have shape [batches, classes, "
                      f"boxes] = [{boxes.shape[0]}, C, {boxes.shape[1]}], got {scores.shape}")
    if limit < 0:
        raise OpError(f"NonMaxSuppression: input 'max_output_boxes_per_class' must be >= 0, "
                      f"got {limit}")
    corners = _corners(boxes.astype(np.float64), center_point_box)
    selected = []
    for batch in range(scores.shape[0]):
        areas = np.prod(corners[batch, :, 2:] - corners[batch, :, :2], axis=1)
        for cls in range(scores.shape[1]):
            for box in _suppress(corners[batch], areas, scores[batch, cls].astype(np.float64),
                                 limit, iou_limit, floor):
                selected.append((batch, cls, box))
    return np.array(selected, dtype=np.int64).reshape(-1, 3)


def _scalar(value, name: str, default):
    if value is None:
        return default
    value = np.asarray(value)
    if value.size != 1:
        raise OpError(f"NonMaxSuppression: input {name!r} must be a scalar (one element), "
                      f"got shape {value.shape}")
    return value.reshape(-1)[0].item()


def _corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """Boxes as [y_min, x_min, y_max, x_max], whichever diagonal or format they came in."""
    if center_point_box:
        x, y, w, h = np.moveaxis(boxes, -1, 0)
        return np.stack([y - h / 2, x - w / 2, y + h / 2, x + w / 2], axis=-1)
    y1, x1, y2, x2 = np.moveaxis(boxes, -1, 0)
    return np.stack([np.minimum(y1, y2), np.minimum(x1, x2),
                     np.maximum(y1, y2), np.maximum(x1, x2)], axis=-1)


def _suppress(corners, areas, scores, limit, iou_limit, floor) -> list[int]:
    """Greedy NMS over one class's boxes: the indices kept, in the order kept."""
    candidates = [i for i in range(scores.size) if floor is None or scores[i] > floor]
    # Highest score first; equal scores by lower index (a stable sort of -score).
    candidates.sort(key=lambda i: -scores[i])
    kept: list[int] = []
    for box in candidates:
        if len(kept) >= limit:
            break
        if all(_iou(corners, areas, box, other) <= iou_limit for other in kept):
            kept.append(box)
    return kept


def _iou(corners, areas, a: int, b: int) -> float:
    low = np.maximum(corners[a, :2], corners[b, :2])
    high = np.minimum(corners[a, 2:], corners[b, 2:])
    overlap = float(np.prod(np.clip(high - low, 0.0, None)))
    union = areas[a] + areas[b] - overlap
    # Degenerate boxes (no area) never suppress anything.
    if overlap <= 0 or areas[a] <= 0 or areas[b] <= 0 or union <= 0:
        return 0.0
    return overlap / union
