"""The bounded forms of the data-dependent ops: what a segmented plan runs at a cut.

NonZero, Compress, Unique and NonMaxSuppression keep a number of elements that only the
data decides. A plan needs static shapes, so the segmenter (`ge_hub.segments`) puts each
such node at the end of a segment as its `ge_hub.<Op>Bounded` form: the same inputs and
attributes, every output at a bound shape (the most the op can produce for its input
shapes) and one more output, `count` (int64 [1]), the real length of the data-dependent
axis. The C kernels (core/kernels/select.c) write each output contiguously at its real
shape in the leading elements of its buffer (the convention of
core/include/ge_hub/kernel.h); `real_shapes` gives those shapes from the count, and the
segment after the cut is planned for them.

The references run the ops' own references (`ge_hub.ops.index`, `ge_hub.ops.select`)
and lay the result out the same way, padded with zeros: they are the oracle of the
kernel tests. Unique is bounded only without `axis` (flattened); with an axis the
segmenter specializes on the data instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import TensorType
from ge_hub.ops import index as index_ops
from ge_hub.ops import select as select_ops
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

BOUNDED_DOMAIN = "ge_hub"
COUNT = TensorType(DType.INT64, (1,))


def _static(ctx: InferenceContext, index: int) -> tuple[int, ...]:
    t = ctx.input(index)
    if not t.is_static:
        ctx.fail(f"input {ctx.schema.input_name(index)!r} must have a static shape, got {t}")
    return tuple(t.shape)


def _laid_out(result: np.ndarray, bound: Sequence[int]) -> np.ndarray:
    """`result` contiguous in the leading elements of a zeroed buffer of shape `bound`."""
    out = np.zeros(bound, dtype=result.dtype)
    out.reshape(-1)[: result.size] = result.reshape(-1)
    return out


def _count(n: int) -> np.ndarray:
    return np.array([n], dtype=np.int64)


# --- NonZero --------------------------------------------------------------------------


def _infer_non_zero(ctx: InferenceContext) -> list[TensorType]:
    shape = _static(ctx, 0)
    return [TensorType(DType.INT64, (len(shape), max(math.prod(shape), 1))), COUNT]


@op("NonZeroBounded", domain=BOUNDED_DOMAIN, inputs=[Input("X", ANY)],
    outputs=[Output("Y"), Output("count")], infer=_infer_non_zero)
def non_zero_bounded(x):
    """NonZero's coordinates [rank, n] in the leading elements of a [rank, max(numel, 1)]
    buffer, and n."""
    y = index_ops.non_zero(x)
    return _laid_out(y, (x.ndim, max(x.size, 1))), _count(y.shape[1])


# --- Compress -------------------------------------------------------------------------


def _infer_compress(ctx: InferenceContext) -> list[TensorType]:
    shape, cond = _static(ctx, 0), _static(ctx, 1)
    axis = ctx.attrs["axis"]
    if axis is None:
        return [TensorType(ctx.input(0).dtype, (math.prod(cond),)), COUNT]
    if not -len(shape) <= axis < len(shape):
        ctx.fail(f"attribute 'axis' {axis} is out of range for rank {len(shape)}")
    axis %= len(shape)
    bound = list(shape)
    bound[axis] = math.prod(cond)
    return [TensorType(ctx.input(0).dtype, tuple(bound)), COUNT]


@op("CompressBounded", domain=BOUNDED_DOMAIN,
    inputs=[Input("input", ANY), Input("condition", BOOL, type_var="T1")],
    outputs=[Output("output"), Output("count")],
    attrs=[Attr("axis", AttrKind.INT, None)], infer=_infer_compress)
def compress_bounded(x, condition, *, axis=None):
    """Compress's result in a buffer with one slot per condition entry along the axis."""
    y = select_ops.compress(x, condition, axis=axis)
    if axis is None:
        return _laid_out(y, (condition.size,)), _count(y.size)
    bound = list(x.shape)
    bound[axis] = condition.size
    return _laid_out(y, bound), _count(y.shape[axis])


# --- Unique (flattened) ---------------------------------------------------------------


def _infer_unique(ctx: InferenceContext) -> list[TensorType]:
    numel = math.prod(_static(ctx, 0))
    per = TensorType(DType.INT64, (numel,))
    return [TensorType(ctx.input(0).dtype, (numel,)), per, per, per, COUNT]


@op("UniqueBounded", domain=BOUNDED_DOMAIN, inputs=[Input("X", ANY)],
    outputs=[Output("Y"), Output("indices"), Output("inverse_indices"), Output("counts"),
             Output("count")],
    attrs=[Attr("sorted", AttrKind.INT, 1)], infer=_infer_unique)
def unique_bounded(x, *, sorted=1):  # noqa: A002 - the ONNX attribute's name
    """Unique of the flattened X, each per-value output in a buffer of numel(X) slots."""
    y, first, inverse, counts = select_ops.unique(x, sorted=sorted)
    bound = (x.size,)
    return (_laid_out(y, bound), _laid_out(first, bound), inverse,
            _laid_out(counts, bound), _count(y.size))


# --- NonMaxSuppression ----------------------------------------------------------------


def nms_bound(boxes_shape: Sequence[int], scores_shape: Sequence[int],
              max_per_class: np.ndarray | None) -> int:
    """The most boxes NonMaxSuppression can select: every class of every batch keeps at
    most all its boxes, or max_output_boxes_per_class of them when that is known."""
    per_class = boxes_shape[1]
    if max_per_class is not None and np.asarray(max_per_class).size == 1:
        per_class = max(0, min(per_class, int(np.asarray(max_per_class).reshape(-1)[0])))
    return scores_shape[0] * scores_shape[1] * per_class


def _infer_nms(ctx: InferenceContext) -> list[TensorType]:
    boxes, scores = _static(ctx, 0), _static(ctx, 1)
    if len(boxes) != 3 or len(scores) != 3:
        ctx.fail(f"'boxes' {ctx.input(0)} and 'scores' {ctx.input(1)} must have rank 3")
    bound = ctx.attrs["bound"]
    if bound < 0:
        bound = nms_bound(boxes, scores, None)
    return [TensorType(DType.INT64, (bound, 3)), COUNT]


@op("NonMaxSuppressionBounded", domain=BOUNDED_DOMAIN,
    inputs=[Input("boxes", FLOATS), Input("scores", FLOATS),
            Input("max_output_boxes_per_class", INT64, type_var="I", optional=True),
            Input("iou_threshold", FLOATS, type_var="F", optional=True),
            Input("score_threshold", FLOATS, type_var="F", optional=True)],
    outputs=[Output("selected_indices"), Output("count")],
    attrs=[Attr("center_point_box", AttrKind.INT, 0), Attr("bound", AttrKind.INT, -1)],
    infer=_infer_nms)
def non_max_suppression_bounded(boxes, scores, max_output_boxes_per_class=None,
                                iou_threshold=None, score_threshold=None, *,
                                center_point_box=0, bound=-1):
    """NonMaxSuppression's [n, 3] in a [bound, 3] buffer. `bound` < 0: every box of
    every class (the segmenter sets it from a constant max_output_boxes_per_class)."""
    y = select_ops.non_max_suppression(boxes, scores, max_output_boxes_per_class, iou_threshold,
                            score_threshold, center_point_box=center_point_box)
    if bound < 0:
        bound = nms_bound(boxes.shape, scores.shape, None)
    return _laid_out(y, (bound, 3)), _count(y.shape[0])


# --- what the segmenter needs -----------------------------------------------------------

# op -> (its bounded form, the data-dependent axis of each output; None: not data-dependent)
BOUNDED_FORMS = {
    "NonZero": ("NonZeroBounded", (1,)),
    "Compress": ("CompressBounded", (0,)),  # the axis attribute's, see dynamic_axes
    "Unique": ("UniqueBounded", (0, 0, None, 0)),
    "NonMaxSuppression": ("NonMaxSuppressionBounded", (0,)),
}


def dynamic_axes(op_name: str, attrs: dict, rank: int) -> tuple[int | None, ...]:
    """The data-dependent axis of each output of `op_name`'s bounded form."""
    axes = BOUNDED_FORMS[op_name][1]
    if op_name == "Compress" and attrs.get("axis") is not None:
        return (attrs["axis"] % rank,)
    return axes


def real_shapes(bound_types: Sequence[TensorType], axes: Sequence[int | None],
                count: int) -> list[tuple[int, ...]]:
    """Each output's real shape: its bound shape with the data-dependent axis at `count`."""
    shapes = []
    for t, axis in zip(bound_types, axes):
        shape = list(t.shape)
        if axis is not None:
            shape[axis] = count
        shapes.append(tuple(shape))
    return shapes
