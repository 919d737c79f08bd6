"""Convolution ops: Conv and ConvTranspose, N-D and grouped.

Both take their window (kernel, strides, dilations, pads, auto_pad) from
`ge_hub.ops.window`, the geometry their inference, references and C kernels share.
Conv's reference gathers the input each kernel tap sees into columns and does one
grouped matmul; ConvTranspose's scatters each input cell's kernel-weighted copy into
the full output, then crops (or zero-extends) it to the requested size.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ge_hub.ir.types import Dim, TensorType, dim_mul
from ge_hub.ops.nn_common import check_vector, dim_or_sym, reference_fail, work_dtype
from ge_hub.ops.schema import FLOATS, Attr, AttrKind, InferenceContext, Input, Output, op
from ge_hub.ops.window import (
    Window,
    conv_transpose_layout,
    layout,
    out_spatial,
    pad_spatial,
    spatial_rank_from_attrs,
    window_views,
)
from ge_hub.ops.window import window as make_window

CONV_ATTRS = [
    Attr("auto_pad", AttrKind.STRING, "NOTSET"),
    Attr("dilations", AttrKind.INTS, None),
    Attr("group", AttrKind.INT, 1),
    Attr("kernel_shape", AttrKind.INTS, None),
    Attr("pads", AttrKind.INTS, None),
    Attr("strides", AttrKind.INTS, None),
]


# -- Conv ------------------------------------------------------------------------------


def _agreed_rank(ctx: InferenceContext, first: int, second: int) -> int | None:
    ranks = {ctx.input(i).rank for i in (first, second)} - {None}
    if len(ranks) > 1:
        a, b = ctx.input(first), ctx.input(second)
        ctx.fail(f"inputs {ctx.schema.input_name(first)!r} {a} and "
                 f"{ctx.schema.input_name(second)!r} {b} must have the same rank")
    return ranks.pop() if ranks else None


def _conv_kernel(ctx: InferenceContext, spatial: int) -> list[int] | None:
    """kernel_shape from the attribute or W's spatial dims; checks that they agree."""
    attr = ctx.attrs["kernel_shape"]
    w = ctx.input(1)
    w_kernel = None if w.shape is None else list(w.shape[2:])
    if attr is not None:
        if len(attr) != spatial:
            ctx.fail(f"attribute 'kernel_shape' must have {spatial} values, got {attr}")
        if w_kernel is not None and any(isinstance(d, int) and d != k
                                        for d, k in zip(w_kernel, attr)):
            ctx.fail(f"attribute 'kernel_shape' {attr} does not match input 'W' {w}")
        return list(attr)
    if w_kernel is not None and all(isinstance(d, int) for d in w_kernel):
        return w_kernel
    return None


def _infer_conv_common(ctx: InferenceContext, transposed: bool) -> list[TensorType]:
    x, w = ctx.input(0), ctx.input(1)
    ctx.require_rank(0, at_least=3)
    ctx.require_rank(1, at_least=3)
    rank = _agreed_rank(ctx, 0, 1)
    group = ctx.attrs["group"]
    if group < 1:
        ctx.fail(f"attribute 'group' must be >= 1, got {group}")
    spatial = rank - 2 if rank is not None else spatial_rank_from_attrs(ctx.attrs)
    if spatial is None:
        return [TensorType(x.dtype, None)]
    kernel = _conv_kernel(ctx, spatial)
    window = None if kernel is None else make_window(ctx.attrs, spatial, kernel, ctx.fail)

    channels = dim_or_sym(ctx, x, 1, "C")
    # Conv W is (M, C/group, k...); ConvTranspose W is (C, M/group, k...).
    w_in = dim_or_sym(ctx, w, 0 if transposed else 1, "C")
    w_out = dim_or_sym(ctx, w, 1 if transposed else 0, "M")
    expected_in = w_in if transposed else dim_mul(w_in, group)
    if isinstance(channels, int) and isinstance(expected_in, int) and channels != expected_in:
        how = "W dim 0" if transposed else f"W dim 1 ({w_in}) x group ({group})"
        ctx.fail(f"input 'X' {x} has {channels} channels but input 'W' {w} expects "
                 f"{expected_in} ({how})")
    if isinstance(channels, int) and channels % group:
        ctx.fail(f"input 'X' channels ({channels}) must be divisible by group ({group})")
    out_channels = dim_mul(w_out, group) if transposed else w_out
    if isinstance(out_channels, int) and out_channels % group:
        ctx.fail(f"input 'W' {w} gives {out_channels} output channels, which must be "
                 f"divisible by group ({group})")
    if ctx.has_input(2):
        check_vector(ctx, 2, out_channels, "one bias per output channel")

    batch = dim_or_sym(ctx, x, 0, "N")
    if transposed:
        dims = _conv_transpose_spatial(ctx, window, x, spatial)
    else:
        dims = out_spatial(ctx, window, x, spatial)
    return [TensorType(x.dtype, (batch, out_channels, *dims))]


def _infer_conv(ctx: InferenceContext) -> list[TensorType]:
    return _infer_conv_common(ctx, transposed=False)


@op("Conv",
    inputs=[Input("X", FLOATS), Input("W", FLOATS), Input("B", FLOATS, optional=True)],
    outputs=[Output("Y")], infer=_infer_conv, attrs=CONV_ATTRS)
def conv(x, w, b=None, *, auto_pad, dilations, group, kernel_shape, pads, strides):
    """N-D grouped convolution (cross-correlation) of X (N,C,...) with W (M,C/group,k...),
    plus bias B (M)."""
    attrs = dict(auto_pad=auto_pad, dilations=dilations, pads=pads, strides=strides)
    window = make_window(attrs, x.ndim - 2, kernel_shape or w.shape[2:], reference_fail("Conv"))
    out_dims, pads_used = layout(window, x.shape[2:])
    work = work_dtype(x.dtype)
    padded = pad_spatial(x.astype(work), [p[0] for p in pads_used],
                         [p[1] + p[2] for p in pads_used], 0)
    n, c = x.shape[:2]
    m = w.shape[0]
    taps = int(np.prod(window.kernel))
    # columns[n, c, tap, out...]: the input each kernel tap sees at each output position.
    columns = np.stack([view for _, view in window_views(padded, window, out_dims)], axis=2)
    # explicit sizes, not -1: a batch of 0 leaves nothing to infer -1 from
    columns = columns.reshape(n, group, (c // group) * taps, int(np.prod(out_dims)))
    weights = w.astype(work).reshape(group, m // group, (c // group) * taps)
    y = np.matmul(weights, columns).reshape(n, m, *out_dims)
    if b is not None:
        y = y + b.astype(work).reshape(m, *([1] * len(out_dims)))
    return y.astype(x.dtype)


# -- ConvTranspose ---------------------------------------------------------------------


def _conv_transpose_spatial(ctx: InferenceContext, window: Window | None, x: TensorType,
                            spatial: int) -> list[Dim]:
    attrs = ctx.attrs
    # output_shape may also be given in full, batch and channel dims included.
    for name, lengths in (("output_padding", (spatial,)),
                          ("output_shape", (spatial, spatial + 2))):
        value = attrs[name]
        if value is not None and len(value) not in lengths:
            ctx.fail(f"attribute {name!r} must have {spatial} values, got {value}")
        if value is not None and any(v < 0 for v in value):
            ctx.fail(f"attribute {name!r} values must be >= 0, got {value}")
    in_dims = [x.shape[a + 2] if x.shape is not None else ctx.new_sym("in")
               for a in range(spatial)]
    if window is None:
        output_shape = attrs["output_shape"]
        if output_shape is not None:
            return list(output_shape)[-spatial:]
        return [ctx.new_sym("out") for _ in range(spatial)]
    dims, _ = conv_transpose_layout(window, attrs, in_dims)
    for axis, d in enumerate(dims):
        if isinstance(d, int) and d < 1:
            ctx.fail(f"input 'X' {x} gives {d} output positions along spatial axis {axis} "
                     f"with pads {list(window.pads)}")
    return dims


def _infer_conv_transpose(ctx: InferenceContext) -> list[TensorType]:
    return _infer_conv_common(ctx, transposed=True)


def _crop_or_extend(full: np.ndarray, begins: Sequence[int], out_dims: Sequence[int]):
    """full[..., begin : begin + out] along each spatial axis, zeros outside `full`."""
    for axis, (begin, out) in enumerate(zip(begins, out_dims)):
        size = full.shape[axis + 2]
        before, after = max(0, -begin), max(0, begin + out - size)
        if before or after:
            widths = [(0, 0)] * full.ndim
            widths[axis + 2] = (before, after)
            full = np.pad(full, widths)
        index = [slice(None)] * full.ndim
        index[axis + 2] = slice(begin + before, begin + before + out)
        full = full[tuple(index)]
    return full


@op("ConvTranspose",
    inputs=[Input("X", FLOATS), Input("W", FLOATS), Input("B", FLOATS, optional=True)],
    outputs=[Output("Y")], infer=_infer_conv_transpose,
    attrs=[*CONV_ATTRS, Attr("output_padding", AttrKind.INTS, None),
           Attr("output_shape", AttrKind.INTS, None)])
def conv_transpose(x, w, b=None, *, auto_pad, dilations, group, kernel_shape, output_padding,
                   output_shape, pads, strides):
    """N-D grouped transposed convolution of X (N,C,...) with W (C,M/group,k...), plus
    bias B (M): every input cell scatters its kernel-weighted copy into the output."""
    attrs = dict(auto_pad=auto_pad, dilations=dilations, pads=pads, strides=strides,
                 output_padding=output_padding, output_shape=output_shape)
    window = make_window(attrs, x.ndim - 2, kernel_shape or w.shape[2:],
                         reference_fail("ConvTranspose"))
    in_dims = x.shape[2:]
    out_dims, pads_used = conv_transpose_layout(window, attrs, in_dims)
    work = work_dtype(x.dtype)
    n, c = x.shape[:2]
    m = w.shape[1] * group
    # explicit sizes, not -1: a batch of 0 leaves nothing to infer -1 from
    grouped_x = x.astype(work).reshape(n, group, c // group, int(np.prod(in_dims)))
    grouped_w = w.astype(work).reshape(group, c // group, m // group,
                                       int(np.prod(window.kernel)))
    # contributions[n, g, m, tap, p]: what input cell p sends through kernel tap `tap`.
    contributions = np.einsum("ngcp,gcmt->ngmtp", grouped_x, grouped_w)
    full_dims = [(i - 1) * s + e for i, s, e in
                 zip(in_dims, window.strides, map(window.extent, range(window.rank)))]
    full = np.zeros((n, m, *full_dims), dtype=work)
    for tap, position in enumerate(np.ndindex(*window.kernel)):
        index = tuple(slice(k * d, k * d + (i - 1) * s + 1, s)
                      for k, d, s, i in zip(position, window.dilations, window.strides, in_dims))
        full[(slice(None), slice(None), *index)] += \
            contributions[:, :, :, tap].reshape(n, m, *in_dims)
    y = _crop_or_extend(full, [p[0] for p in pads_used], out_dims)
    if b is not None:
        y = y + b.astype(work).reshape(m, *([1] * len(out_dims)))
    return y.astype(x.dtype)
