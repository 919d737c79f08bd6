"""Pooling ops: MaxPool and AveragePool over a sliding window, GlobalAveragePool and
GlobalMaxPool over all spatial dims.

MaxPool and AveragePool take their window (kernel, strides, dilations, pads, auto_pad,
ceil_mode) from `ge_hub.ops.window`, the geometry their inference, references and C
kernels share.
"""

from __future__ import annotations

import numpy as np

from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import TensorType
from ge_hub.ops.nn_common import check_flag, dim_or_sym, output_count, reference_fail, work_dtype
from ge_hub.ops.schema import FLOATS, REQUIRED, Attr, AttrKind, InferenceContext, Input, Output, op
from ge_hub.ops.window import Window, layout, out_spatial, pad_spatial, window_views
from ge_hub.ops.window import window as make_window

POOL_TYPES = FLOATS
MAXPOOL_TYPES = FLOATS | {DType.INT8, DType.UINT8}

POOL_ATTRS = [
    Attr("auto_pad", AttrKind.STRING, "NOTSET"),
    Attr("ceil_mode", AttrKind.INT, 0),
    Attr("dilations", AttrKind.INTS, None),
    Attr("kernel_shape", AttrKind.INTS, REQUIRED),
    Attr("pads", AttrKind.INTS, None),
    Attr("strides", AttrKind.INTS, None),
]


def _infer_pool(ctx: InferenceContext) -> list[TensorType]:
    x = ctx.input(0)
    ctx.require_rank(0, at_least=3)
    kernel = ctx.attrs["kernel_shape"]
    spatial = len(kernel)
    if x.rank is not None and x.rank - 2 != spatial:
        ctx.fail(f"attribute 'kernel_shape' {kernel} has {spatial} values but input 'X' "
                 f"{x} has {x.rank - 2} spatial dims")
    check_flag(ctx, "ceil_mode")
    for flag in ("storage_order", "count_include_pad"):
        if flag in ctx.attrs:
            check_flag(ctx, flag)
    window = make_window(ctx.attrs, spatial, kernel, ctx.fail, bool(ctx.attrs["ceil_mode"]))
    shape = (dim_or_sym(ctx, x, 0, "N"), dim_or_sym(ctx, x, 1, "C"),
             *out_spatial(ctx, window, x, spatial))
    y = TensorType(x.dtype, shape)
    if ctx.schema.name == "MaxPool" and output_count(ctx, 1) == 2:
        return [y, y.with_dtype(DType.INT64)]
    return [y]


def _pool_window(op_name: str, x, auto_pad, ceil_mode, dilations, kernel_shape, pads,
                 strides) -> Window:
    attrs = dict(auto_pad=auto_pad, dilations=dilations, pads=pads, strides=strides)
    return make_window(attrs, x.ndim - 2, kernel_shape, reference_fail(op_name), bool(ceil_mode))


@op("MaxPool", inputs=[Input("X", MAXPOOL_TYPES)],
    outputs=[Output("Y"), Output("Indices", optional=True)], infer=_infer_pool,
    attrs=[*POOL_ATTRS, Attr("storage_order", AttrKind.INT, 0)])
def max_pool(x, *, auto_pad, ceil_mode, dilations, kernel_shape, pads, storage_order,
             strides):
    """Y = max of X over each (dilated) kernel window, padding ignored; Indices = flat
    index into X of each maximum (first on ties; spatial dims column-major when
    storage_order=1). NaN propagates."""
    window = _pool_window("MaxPool", x, auto_pad, ceil_mode, dilations, kernel_shape, pads,
                          strides)
    in_dims = x.shape[2:]
    out_dims, pads_used = layout(window, in_dims)
    # int8/uint8 are exact in float32; -inf padding loses to every real value.
    work = work_dtype(x.dtype)
    begins, ends = [p[0] for p in pads_used], [p[1] + p[2] for p in pads_used]
    padded = pad_spatial(x.astype(work), begins, ends, -np.inf)
    positions, views = zip(*window_views(padded, window, out_dims))
    stacked = np.stack(views)  # (taps, N, C, *out)
    y = np.max(stacked, axis=0)  # NaN propagates
    # The winner is the first tap inside X that holds the maximum (or a NaN); looking
    # only inside X keeps an input of -inf from losing to the -inf padding.
    inside = pad_spatial(np.ones((1, 1, *in_dims), dtype=bool), begins, ends, False)
    inside = np.stack([view for _, view in window_views(inside, window, out_dims)])
    winner = np.argmax(((stacked == y) | np.isnan(stacked)) & inside, axis=0)

    # The input coordinate of the winning tap along each spatial axis.
    positions = np.array(positions)  # (taps, spatial)
    flat_spatial = np.zeros(winner.shape, dtype=np.int64)
    axis_order = range(window.rank) if storage_order == 0 else reversed(range(window.rank))
    for axis in axis_order:
        starts = np.arange(out_dims[axis]) * window.strides[axis] - pads_used[axis][0]
        shape = [1] * (window.rank + 2)
        shape[axis + 2] = out_dims[axis]
        coord = starts.reshape(shape) + positions[winner, axis] * window.dilations[axis]
        flat_spatial = flat_spatial * in_dims[axis] + coord
    n, c = x.shape[:2]
    plane = int(np.prod(in_dims))
    base = (np.arange(n)[:, None] * c + np.arange(c)[None, :]) * plane
    indices = base.reshape(n, c, *([1] * window.rank)) + flat_spatial
    return y.astype(x.dtype), indices.astype(np.int64)


@op("AveragePool", inputs=[Input("X", POOL_TYPES)], outputs=[Output("Y")],
    infer=_infer_pool, attrs=[*POOL_ATTRS, Attr("count_include_pad", AttrKind.INT, 0)])
def average_pool(x, *, auto_pad, ceil_mode, count_include_pad, dilations, kernel_shape, pads,
                 strides):
    """Y = mean of X over each (dilated) kernel window; the divisor counts the padding
    only when count_include_pad=1, and never the cells past it that ceil_mode reaches."""
    window = _pool_window("AveragePool", x, auto_pad, ceil_mode, dilations, kernel_shape,
                          pads, strides)
    in_dims = x.shape[2:]
    out_dims, pads_used = layout(window, in_dims)
    work = work_dtype(x.dtype)
    begins = [p[0] for p in pads_used]
    padded = pad_spatial(x.astype(work), begins, [p[1] + p[2] for p in pads_used], 0)
    # counted[...]: 1 where a cell counts towards the divisor.
    counted = np.ones((1, 1, *in_dims), dtype=work)
    if count_include_pad:
        counted = pad_spatial(counted, begins, [p[1] for p in pads_used], 1)
        counted = pad_spatial(counted, [0] * window.rank, [p[2] for p in pads_used], 0)
    else:
        counted = pad_spatial(counted, begins, [p[1] + p[2] for p in pads_used], 0)
    total = sum(view for _, view in window_views(padded, window, out_dims))
    count = sum(view for _, view in window_views(counted, window, out_dims))
    return (total / count).astype(x.dtype)


def _infer_global_pool(ctx: InferenceContext) -> list[TensorType]:
    x = ctx.input(0)
    ctx.require_rank(0, at_least=2)
    if x.shape is None:
        return [x]
    return [x.with_shape((*x.shape[:2], *([1] * (x.rank - 2))))]


@op("GlobalAveragePool", inputs=[Input("X", FLOATS)], outputs=[Output("Y")],
    infer=_infer_global_pool)
def global_average_pool(x):
    """Y[n, c, 1, ...] = mean of X[n, c] over all spatial dims."""
    axes = tuple(range(2, x.ndim))
    return np.mean(x.astype(work_dtype(x.dtype)), axis=axes, keepdims=True).astype(x.dtype)


@op("GlobalMaxPool", inputs=[Input("X", FLOATS)], outputs=[Output("Y")],
    infer=_infer_global_pool)
def global_max_pool(x):
    """Y[n, c, 1, ...] = max of X[n, c] over all spatial dims; NaN propagates."""
    axes = tuple(range(2, x.ndim))
    return np.max(x.astype(work_dtype(x.dtype)), axis=axes, keepdims=True).astype(x.dtype)
