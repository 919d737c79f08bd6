"""Pooling ops: MaxPool, AveragePool and LpPool over a sliding window, GlobalAveragePool
and GlobalMaxPool over all spatial dims, and MaxUnpool, which scatters MaxPool's values
back to the positions its indices name; ge_hub.MaxPoolNHWC, MaxPool on channels-last
tensors.

MaxPool, AveragePool and LpPool take their window (kernel, strides, dilations, pads, auto_pad,
ceil_mode) from `ge_hub.ops.window`, the geometry their inference, references and C
kernels share.
"""

from __future__ import annotations

import numpy as np

from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import Dim, TensorType, dim_add, dim_mul, dim_sub
from ge_hub.ops.conv import FUSED_DOMAIN, to_channels_first, to_channels_last
from ge_hub.ops.inference import const_ints
from ge_hub.ops.nn_common import (
    check_flag,
    dim_or_sym,
    in_work_dtype,
    output_count,
    reference_fail,
    work_dtype,
)
from ge_hub.ops.schema import (
    FLOATS,
    INT64,
    REQUIRED,
    Attr,
    AttrKind,
    InferenceContext,
    Input,
    Output,
    op,
)
from ge_hub.ops.window import Window, layout, out_spatial, pad_spatial, spatial_attr, window_views
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


# --- LpPool -----------------------------------------------------------------------------


def _infer_lp_pool(ctx: InferenceContext) -> list[TensorType]:
    x = ctx.input(0)
    ctx.require_rank(0, at_least=3)
    kernel = ctx.attrs["kernel_shape"]
    spatial = len(kernel)
    if x.rank is not None and x.rank - 2 != spatial:
        ctx.fail(f"attribute 'kernel_shape' {kernel} has {spatial} values but input 'X' "
                 f"{x} has {x.rank - 2} spatial dims")
    check_flag(ctx, "ceil_mode")
    if ctx.attrs["p"] < 1:
        ctx.fail(f"attribute 'p' must be >= 1, got {ctx.attrs['p']}")
    window = make_window(ctx.attrs, spatial, kernel, ctx.fail, bool(ctx.attrs["ceil_mode"]))
    shape = (dim_or_sym(ctx, x, 0, "N"), dim_or_sym(ctx, x, 1, "C"),
             *out_spatial(ctx, window, x, spatial))
    return [TensorType(x.dtype, shape)]


@op("LpPool", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=_infer_lp_pool,
    attrs=[Attr("auto_pad", AttrKind.STRING, "NOTSET"), Attr("ceil_mode", AttrKind.INT, 0),
           Attr("dilations", AttrKind.INTS, None), Attr("kernel_shape", AttrKind.INTS, REQUIRED),
           Attr("p", AttrKind.INT, 2), Attr("pads", AttrKind.INTS, None),
           Attr("strides", AttrKind.INTS, None)])
def lp_pool(x, *, auto_pad, ceil_mode, dilations, kernel_shape, p, pads, strides):
    """Y = (sum of |X|^p over each (dilated) kernel window) ^ (1/p); padding counts as 0."""
    fail = reference_fail("LpPool")
    if p < 1:
        fail(f"attribute 'p' must be >= 1, got {p}")
    attrs = dict(auto_pad=auto_pad, dilations=dilations, pads=pads, strides=strides)
    window = make_window(attrs, x.ndim - 2, kernel_shape, fail, bool(ceil_mode))
    out_dims, pads_used = layout(window, x.shape[2:])
    powered = np.abs(in_work_dtype(x)) ** p
    padded = pad_spatial(powered, [b for b, _, _ in pads_used],
                         [e + over for _, e, over in pads_used], 0)
    total = sum(view for _, view in window_views(padded, window, out_dims))
    return (total ** (1.0 / p)).astype(x.dtype)


# --- MaxUnpool ------------------------------------------------------------------------


def _unpooled_size(size: Dim, kernel: int, stride: int, pad_total: int) -> Dim:
    """(size - 1) * stride + kernel - pads: the extent MaxPool's window grid covered."""
    grown = dim_mul(dim_sub(size, 1), stride)
    amount = kernel - pad_total
    return dim_add(grown, amount) if amount >= 0 else dim_sub(grown, -amount)


def _infer_max_unpool(ctx: InferenceContext) -> list[TensorType]:
    x, indices = ctx.input(0), ctx.input(1)
    kernel = ctx.attrs["kernel_shape"]
    ctx.require_rank(0, len(kernel) + 2)
    ctx.require_rank(1, len(kernel) + 2)
    if x.shape is not None and indices.shape is not None and any(
            isinstance(a, int) and isinstance(b, int) and a != b
            for a, b in zip(x.shape, indices.shape)):
        ctx.fail(f"input 'I' {indices} must have the shape of 'X' {x}")
    spatial = len(kernel)
    if any(k < 1 for k in kernel):
        ctx.fail(f"attribute 'kernel_shape' must be all >= 1, got {kernel}")
    strides = spatial_attr(ctx.fail, ctx.attrs, "strides", spatial, 1)
    pads = spatial_attr(ctx.fail, ctx.attrs, "pads", 2 * spatial, 0)
    rank = spatial + 2
    if ctx.has_input(2):
        ctx.require_rank(2, 1)
        given = const_ints(ctx, 2)
        if given is None:
            return [TensorType(x.dtype, ctx.new_syms(rank, "unpooled"))]
        if len(given) != rank:
            ctx.fail(f"input 'output_shape' {given} must have {rank} entries (the rank of 'X')")
        if x.shape is not None:
            for d in range(2):  # batch and channels are never resized
                if isinstance(x.shape[d], int) and given[d] != x.shape[d]:
                    ctx.fail(f"input 'output_shape' {given} must keep dim {d} of 'X' {x}")
            for d in range(spatial):
                least = _unpooled_size(x.shape[d + 2], kernel[d], strides[d],
                                       pads[d] + pads[d + spatial])
                if isinstance(least, int) and given[d + 2] < least:
                    ctx.fail(f"input 'output_shape' {given} cannot hold the unpooled tensor: "
                             f"dim {d + 2} must be at least {least}")
        return [TensorType(x.dtype, tuple(given))]
    if x.shape is None:
        return [TensorType(x.dtype, ctx.new_syms(rank, "unpooled"))]
    shape = tuple(x.shape[:2]) + tuple(
        _unpooled_size(x.shape[d + 2], kernel[d], strides[d], pads[d] + pads[d + spatial])
        for d in range(spatial))
    return [TensorType(x.dtype, shape)]


@op("MaxUnpool", inputs=[Input("X", FLOATS), Input("I", INT64, type_var="I"),
                         Input("output_shape", INT64, type_var="I", optional=True,
                               decides_shape=True)],
    outputs=[Output("output")], infer=_infer_max_unpool,
    attrs=[Attr("kernel_shape", AttrKind.INTS), Attr("pads", AttrKind.INTS, None),
           Attr("strides", AttrKind.INTS, None)])
def max_unpool(x, indices, output_shape=None, *, kernel_shape, pads, strides):
    """The partial inverse of MaxPool: zeros, with each X value put back where I says.

    I holds MaxPool's flat indices into the tensor MaxPool read, of spatial size
    (in - 1) * stride + kernel - pads per axis. When output_shape is given and larger,
    that tensor sits in its leading corner and the rest is zero (as the ONNX reference
    and its conformance tests place it)."""
    fail = reference_fail("MaxUnpool")
    spatial = len(kernel_shape)
    if x.ndim != spatial + 2 or indices.shape != x.shape:
        fail(f"expected X and I of one shape of rank {spatial + 2} (kernel_shape "
             f"{kernel_shape}), got {x.shape} and {indices.shape}")
    attrs = {"pads": pads, "strides": strides}
    strides = spatial_attr(fail, attrs, "strides", spatial, 1)
    pads = spatial_attr(fail, attrs, "pads", 2 * spatial, 0)
    shape = x.shape[:2] + tuple(
        _unpooled_size(x.shape[d + 2], kernel_shape[d], strides[d], pads[d] + pads[d + spatial])
        for d in range(spatial))
    total = int(np.prod(shape))
    flat_indices = indices.reshape(-1)
    if flat_indices.size and (flat_indices.min() < 0 or flat_indices.max() >= total):
        fail(f"input 'I' must index into the {total} elements of the unpooled tensor {shape}, "
             f"got indices from {flat_indices.min()} to {flat_indices.max()}")
    unpooled = np.zeros(total, x.dtype)
    unpooled[flat_indices] = x.reshape(-1)
    unpooled = unpooled.reshape(shape)
    if output_shape is None:
        return unpooled
    target = tuple(int(v) for v in np.asarray(output_shape).reshape(-1))
    if len(target) != x.ndim or target[:2] != shape[:2] or any(
            t < s for t, s in zip(target[2:], shape[2:])):
        fail(f"input 'output_shape' {list(target)} cannot hold the unpooled tensor {shape}")
    out = np.zeros(target, x.dtype)
    out[tuple(slice(0, s) for s in shape)] = unpooled
    return out


# --- ge_hub.MaxPoolNHWC -----------------------------------------------------------------
# MaxPool on channels-last tensors, X and Y (N, H, W, C): where the `channels_last` pass
# (ge_hub/passes/channels_last.py) runs a chain of Convs on bf16 channels-last activations,
# ResNet's MaxPool between its stem and its first block joins the chain instead of turning
# the stem's output around and back.


def _infer_max_pool_nhwc(ctx: InferenceContext) -> list[TensorType]:
    ctx.require_rank(0, 4)
    saved = list(ctx.input_types)
    x = saved[0]
    if x is not None and x.shape is not None:
        ctx.input_types = [TensorType(x.dtype, to_channels_first(x.shape))]
    try:
        (y,) = _infer_pool(ctx)
    finally:
        ctx.input_types = saved
    return [y if y.shape is None else TensorType(y.dtype, to_channels_last(y.shape))]


@op("MaxPoolNHWC", domain=FUSED_DOMAIN, inputs=[Input("X", FLOATS)], outputs=[Output("Y")],
    infer=_infer_max_pool_nhwc, attrs=POOL_ATTRS)
def max_pool_nhwc(x, *, auto_pad, ceil_mode, dilations, kernel_shape, pads, strides):
    """Y = MaxPool(X turned channels-first), turned back: the maximum is exact, so a bf16 X
    gives the bf16 Y its float32 twin would."""
    if x.ndim != 4:
        reference_fail("ge_hub.MaxPoolNHWC")(f"X must be N x H x W x C, got {x.shape}")
    y, _ = max_pool(x.transpose(0, 3, 1, 2), auto_pad=auto_pad, ceil_mode=ceil_mode,
                    dilations=dilations, kernel_shape=kernel_shape, pads=pads, storage_order=0,
                    strides=strides)
    return np.ascontiguousarray(y.transpose(0, 2, 3, 1))
