"""Convolution ops: Conv and ConvTranspose, N-D and grouped; DeformConv (Conv with learned
per-tap offsets); Col2Im (the scatter-add that undoes a convolution's im2col).

Both take their window (kernel, strides, dilations, pads, auto_pad) from
`ge_hub.ops.window`, the geometry their inference, references and C kernels share.
Conv's reference gathers the input each kernel tap sees into columns and does one
grouped matmul; ConvTranspose's scatters each input cell's kernel-weighted copy into
the full output, then crops (or zero-extends) it to the requested size. DeformConv and
Col2Im check their per-axis attributes with `window.spatial_attr`.

ge_hub.FusedConv is ge-hub's internal Conv with its epilogue (bias, residual Add, an
activation), made by the `fuse_conv_epilogue` rules; its reference runs the references
of the nodes it replaces. ge_hub.PointwiseDepthwise is a pointwise FusedConv and the
depthwise FusedConv reading it, made by `fuse_pointwise_depthwise`; its reference too.
ge_hub.FusedConvNHWC is a FusedConv on channels-last tensors, made by `channels_last`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import Dim, TensorType, dim_add, dim_floordiv, dim_mul, dim_sub
from ge_hub.ops import activation as activation_ops
from ge_hub.ops import elementwise as elementwise_ops
from ge_hub.ops.inference import const_ints
from ge_hub.ops.nn_common import check_vector, dim_or_sym, reference_fail, work_dtype
from ge_hub.ops.schema import (
    FLOATS,
    INT64,
    NUMERIC,
    Attr,
    AttrKind,
    InferenceContext,
    Input,
    Output,
    op,
)
from ge_hub.ops.window import (
    Window,
    conv_transpose_layout,
    layout,
    out_spatial,
    pad_spatial,
    spatial_attr,
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


# --- Col2Im ---------------------------------------------------------------------------


def _block_positions(fail, image, block, dilations, pads, strides) -> list[int]:
    """How many positions a block takes along each axis of the padded image."""
    rank = len(image)
    counts = []
    for d in range(rank):
        padded = image[d] + pads[d] + pads[d + rank]
        extent = dilations[d] * (block[d] - 1) + 1
        if padded < extent:
            fail(f"block dim {d} spans {extent} (dilated) but the padded image has {padded}")
        counts.append((padded - extent) // strides[d] + 1)
    return counts


def _infer_col2im(ctx: InferenceContext) -> list[TensorType]:
    x = ctx.input(0)
    ctx.require_rank(0, 3)
    ctx.require_rank(1, 1)
    ctx.require_rank(2, 1)
    image, block = const_ints(ctx, 1), const_ints(ctx, 2)
    rank = next((len(v) for v in (image, block) if v is not None), None)
    if rank is None:
        shape = ctx.input(1).shape
        rank = shape[0] if shape is not None and isinstance(shape[0], int) else None
    if image is not None and block is not None and len(image) != len(block):
        ctx.fail(f"inputs 'image_shape' {image} and 'block_shape' {block} must have the same "
                 f"length (one entry per spatial dim)")
    for name, values in (("image_shape", image), ("block_shape", block)):
        if values is not None and any(v < 1 for v in values):
            ctx.fail(f"input {name!r} must be all >= 1, got {values}")
    if rank is None:
        return [TensorType(x.dtype, None)]
    dilations = spatial_attr(ctx.fail, ctx.attrs, "dilations", rank, 1)
    strides = spatial_attr(ctx.fail, ctx.attrs, "strides", rank, 1)
    pads = spatial_attr(ctx.fail, ctx.attrs, "pads", 2 * rank, 0)
    batch = x.shape[0] if x.shape is not None else ctx.new_sym("batch")
    columns = x.shape[1] if x.shape is not None else ctx.new_sym("columns")
    if block is None:
        channels: Dim = ctx.new_sym("channels")
    else:
        size = int(np.prod(block))
        if isinstance(columns, int) and columns % size:
            ctx.fail(f"input 'input' {x} dim 1 must be a multiple of the block size {size} "
                     f"(block_shape {block})")
        channels = dim_floordiv(columns, size)
    if image is not None and block is not None and x.shape is not None \
            and isinstance(x.shape[2], int):
        count = int(np.prod(_block_positions(ctx.fail, image, block, dilations, pads, strides)))
        if x.shape[2] != count:
            ctx.fail(f"input 'input' {x} dim 2 must be {count}, the number of block positions "
                     f"in image {image} (block {block}, dilations {dilations}, pads {pads}, "
                     f"strides {strides})")
    spatial = tuple(image) if image is not None else \
        ctx.new_syms(rank, "image")
    return [TensorType(x.dtype, (batch, channels) + spatial)]


@op("Col2Im", inputs=[Input("input", NUMERIC),
                      Input("image_shape", INT64, type_var="I", decides_shape=True),
                      Input("block_shape", INT64, type_var="I", decides_shape=True)],
    outputs=[Output("output")], infer=_infer_col2im,
    attrs=[Attr("dilations", AttrKind.INTS, None), Attr("pads", AttrKind.INTS, None),
           Attr("strides", AttrKind.INTS, None)])
def col2im(x, image_shape, block_shape, *, dilations, pads, strides):
    """Sum column blocks back into an image (PyTorch's fold), batched.

    input [N, C * prod(block), L]: column l holds, for each offset k inside the block,
    the value of channel c at image position p * stride - pad_begin + k * dilation, p
    being block position l (both k and l in C order). Overlapping values add up;
    positions falling in the padding are dropped. Output [N, C, *image_shape]."""
    fail = reference_fail("Col2Im")
    image = [int(v) for v in np.asarray(image_shape).reshape(-1)]
    block = [int(v) for v in np.asarray(block_shape).reshape(-1)]
    rank = len(image)
    if len(block) != rank or x.ndim != 3:
        fail(f"expected input of rank 3 and image_shape, block_shape of one length, got "
             f"input shape {x.shape}, image_shape {image}, block_shape {block}")
    attrs = {"dilations": dilations, "pads": pads, "strides": strides}
    dilations = spatial_attr(fail, attrs, "dilations", rank, 1)
    strides = spatial_attr(fail, attrs, "strides", rank, 1)
    pads = spatial_attr(fail, attrs, "pads", 2 * rank, 0)
    positions = _block_positions(fail, image, block, dilations, pads, strides)
    size = int(np.prod(block))
    if x.shape[1] % size or x.shape[2] != int(np.prod(positions)):
        fail(f"input shape {x.shape} must be [N, C * {size}, {int(np.prod(positions))}] for "
             f"block {block} over image {image}")
    batch, channels = x.shape[0], x.shape[1] // size
    blocks = x.reshape(batch, channels, *block, *positions)
    padded = np.zeros((batch, channels) + tuple(image[d] + pads[d] + pads[d + rank]
                                                 for d in range(rank)), x.dtype)
    # For one offset inside the block the positions it lands on are distinct, so a
    # strided slice per offset can add without np.add.at.
    for offset in np.ndindex(*block):
        where = tuple(slice(offset[d] * dilations[d],
                            offset[d] * dilations[d] + (positions[d] - 1) * strides[d] + 1,
                            strides[d]) for d in range(rank))
        padded[(slice(None), slice(None)) + where] += blocks[(slice(None), slice(None)) + offset]
    crop = tuple(slice(pads[d], pads[d] + image[d]) for d in range(rank))
    return padded[(slice(None), slice(None)) + crop]


# --- DeformConv -----------------------------------------------------------------------


def _deform_geometry(fail, rank: int, kernel_shape, dilations, pads, strides, weight_kernel):
    """The spatial attributes of a DeformConv with `rank` spatial dims, defaults filled."""
    kernel = list(kernel_shape or weight_kernel)
    if len(kernel) != rank or any(k < 1 for k in kernel if isinstance(k, int)):
        fail(f"attribute 'kernel_shape' must have {rank} values >= 1, got {kernel}")
    attrs = {"dilations": dilations, "pads": pads, "strides": strides}
    return (kernel, spatial_attr(fail, attrs, "dilations", rank, 1),
            spatial_attr(fail, attrs, "pads", 2 * rank, 0),
            spatial_attr(fail, attrs, "strides", rank, 1))


def _conv_out_dim(size: Dim, kernel: int, dilation: int, pad_total: int, stride: int) -> Dim:
    """floor((size + pads - dilated kernel) / stride) + 1."""
    amount = pad_total - (dilation * (kernel - 1) + 1)
    shifted = dim_add(size, amount) if amount >= 0 else dim_sub(size, -amount)
    return dim_add(dim_floordiv(shifted, stride), 1)


def _known(*dims: Dim) -> bool:
    return all(isinstance(d, int) for d in dims)


def _infer_deform_conv(ctx: InferenceContext) -> list[TensorType]:
    x, w, offset = ctx.input(0), ctx.input(1), ctx.input(2)
    rank = ctx.require_rank(0, at_least=3)
    if rank is None:
        rank = w.rank if w.rank is not None else offset.rank
    if rank is None:
        return [TensorType(x.dtype, None)]
    for index in (1, 2):
        ctx.require_rank(index, rank)
    spatial = rank - 2
    weight_kernel = w.shape[2:] if w.shape is not None else None
    if not ctx.attrs["kernel_shape"] and (weight_kernel is None or not all(
            isinstance(k, int) for k in weight_kernel)):
        ctx.fail(f"needs attribute 'kernel_shape' or a weight 'W' of known kernel dims, got {w}")
    kernel, dilations, pads, strides = _deform_geometry(
        ctx.fail, spatial, ctx.attrs["kernel_shape"], ctx.attrs["dilations"],
        ctx.attrs["pads"], ctx.attrs["strides"], weight_kernel)
    group, offset_group = ctx.attrs["group"], ctx.attrs["offset_group"]
    if group < 1 or offset_group < 1:
        ctx.fail(f"attributes 'group' and 'offset_group' must be >= 1, got {group} and "
                 f"{offset_group}")
    if x.shape is not None and w.shape is not None:
        channels, out_channels = x.shape[1], w.shape[0]
        if _known(channels, w.shape[1]) and channels != w.shape[1] * group:
            ctx.fail(f"input 'X' {x} has {channels} channels; 'W' {w} with group {group} "
                     f"expects {w.shape[1] * group}")
        if _known(out_channels) and out_channels % group:
            ctx.fail(f"'W' {w} has {out_channels} output channels, not a multiple of group "
                     f"{group}")
        if _known(channels) and channels % offset_group:
            ctx.fail(f"input 'X' {x} has {channels} channels, not a multiple of offset_group "
                     f"{offset_group}")
        if _known(*w.shape[2:]) and list(w.shape[2:]) != kernel:
            ctx.fail(f"'W' {w} has kernel dims {list(w.shape[2:])}, attribute 'kernel_shape' "
                     f"says {kernel}")
    taps = int(np.prod(kernel))
    if offset.shape is not None and _known(offset.shape[1]) \
            and offset.shape[1] != offset_group * taps * spatial:
        ctx.fail(f"input 'offset' {offset} must have {offset_group * taps * spatial} channels "
                 f"(offset_group {offset_group} x {taps} kernel taps x {spatial} coordinates)")
    batch = x.shape[0] if x.shape is not None else ctx.new_sym("batch")
    out_channels = w.shape[0] if w.shape is not None else ctx.new_sym("channels")
    if x.shape is not None:
        out = tuple(_conv_out_dim(x.shape[d + 2], kernel[d], dilations[d],
                                  pads[d] + pads[d + spatial], strides[d])
                    for d in range(spatial))
    elif offset.shape is not None:
        out = tuple(offset.shape[2:])
    else:
        out = tuple(ctx.new_sym("out") for _ in range(spatial))
    if offset.shape is not None and any(_known(a, b) and a != b
                                        for a, b in zip(offset.shape[2:], out)):
        ctx.fail(f"input 'offset' {offset} must have the output's spatial dims {list(out)}")
    if ctx.has_input(3):
        check_vector(ctx, 3, out_channels, "one bias per output channel")
    if ctx.has_input(4):
        mask = ctx.input(4)
        ctx.require_rank(4, rank)
        if mask.shape is not None and _known(mask.shape[1]) \
                and mask.shape[1] != offset_group * taps:
            ctx.fail(f"input 'mask' {mask} must have {offset_group * taps} channels "
                     f"(offset_group {offset_group} x {taps} kernel taps)")
    return [TensorType(x.dtype, (batch, out_channels) + out)]


@op("DeformConv", inputs=[Input("X", FLOATS), Input("W", FLOATS), Input("offset", FLOATS),
                          Input("B", FLOATS, optional=True), Input("mask", FLOATS, optional=True)],
    outputs=[Output("Y")], infer=_infer_deform_conv,
    attrs=[Attr("dilations", AttrKind.INTS, None), Attr("group", AttrKind.INT, 1),
           Attr("kernel_shape", AttrKind.INTS, None), Attr("offset_group", AttrKind.INT, 1),
           Attr("pads", AttrKind.INTS, None), Attr("strides", AttrKind.INTS, None)])
def deform_conv(x, w, offset, b=None, mask=None, *, dilations, group, kernel_shape,
                offset_group, pads, strides):
    """A convolution whose kernel taps move: tap k of output position o reads X at
    o * stride - pad_begin + k * dilation + offset[n, g, k, :, o] by (multi)linear
    interpolation, corners outside X counting 0, scaled by mask[n, g, k, o] (1 when
    omitted). g is the offset group of the input channel; offset is [N, offset_group *
    taps * spatial dims, *out] and mask [N, offset_group * taps, *out]. Groups, bias and
    output shape are as in Conv."""
    fail = reference_fail("DeformConv")
    spatial = x.ndim - 2
    kernel, dilations, pads, strides = _deform_geometry(
        fail, spatial, kernel_shape, dilations, pads, strides, w.shape[2:])
    batch, channels, in_dims = x.shape[0], x.shape[1], x.shape[2:]
    taps = int(np.prod(kernel))
    out_dims = tuple((in_dims[d] + pads[d] + pads[d + spatial] - dilations[d] * (kernel[d] - 1)
                      - 1) // strides[d] + 1 for d in range(spatial))
    if channels != w.shape[1] * group or w.shape[0] % group or channels % offset_group \
            or offset.shape != (batch, offset_group * taps * spatial) + out_dims \
            or (mask is not None and mask.shape != (batch, offset_group * taps) + out_dims):
        fail(f"inconsistent shapes: X {x.shape}, W {w.shape}, offset {offset.shape}, mask "
             f"{None if mask is None else mask.shape} for group {group}, offset_group "
             f"{offset_group}, kernel {kernel} and output dims {out_dims}")
    work = work_dtype(x.dtype)
    per_group = channels // offset_group
    image = x.astype(work).reshape(batch, offset_group, per_group, -1)
    shifts = offset.astype(np.float64).reshape(batch, offset_group, taps, spatial, *out_dims)
    scales = np.ones((batch, offset_group, taps) + out_dims) if mask is None else \
        mask.astype(np.float64).reshape(batch, offset_group, taps, *out_dims)
    grid = np.meshgrid(*[np.arange(n) for n in out_dims], indexing="ij")
    n_index = np.arange(batch).reshape((batch, 1) + (1,) * spatial)
    g_index = np.arange(offset_group).reshape((1, offset_group) + (1,) * spatial)
    columns = np.zeros((batch, offset_group, taps) + out_dims + (per_group,), work)
    for t, tap in enumerate(np.ndindex(*kernel)):
        where = [grid[d] * strides[d] - pads[d] + tap[d] * dilations[d] + shifts[:, :, t, d]
                 for d in range(spatial)]
        floors = [np.floor(p).astype(np.int64) for p in where]
        for corner in np.ndindex(*([2] * spatial)):
            weight = scales[:, :, t].copy()
            inside = np.ones(weight.shape, bool)
            flat = np.zeros(weight.shape, np.int64)
            for d in range(spatial):
                at = floors[d] + corner[d]
                weight *= 1.0 - np.abs(where[d] - at)
                inside &= (at >= 0) & (at < in_dims[d])
                flat = flat * in_dims[d] + np.clip(at, 0, in_dims[d] - 1)
            values = image[n_index, g_index, :, flat]  # [N, G, *out, per_group]
            columns[:, :, t] += (weight * inside)[..., None].astype(work) * values
    # [N, G, taps, *out, per_group] -> [N, channels, taps, *out]: channel = g * per_group + c
    columns = np.moveaxis(columns, -1, 2).reshape(batch, channels, taps, -1)
    out_channels = w.shape[0]
    columns = columns.reshape(batch, group, channels // group, taps, -1)
    weights = w.astype(work).reshape(group, out_channels // group, channels // group, taps)
    y = np.einsum("ngckp,gock->ngop", columns, weights).reshape(batch, out_channels, *out_dims)
    if b is not None:
        y = y + b.astype(work).reshape((1, -1) + (1,) * spatial)
    return y.astype(x.dtype)


# --- ge_hub.FusedConv -----------------------------------------------------------------
# A Conv with its epilogue: what the `fuse_conv_epilogue` rules (ge_hub/passes/
# fuse_conv_epilogue.py) make of a Conv, the residual Add after it and the activation
# after that. Its C kernel (core/kernels/conv.c, ge_conv_fused_f32) applies the bias,
# the residual and the activation as each tile of the output is stored, instead of as
# separate passes over memory.

# The internal domain of ge-hub's own fused ops (plugins use theirs, DESIGN.md).
FUSED_DOMAIN = "ge_hub"

# The activations a FusedConv applies, by name; the position is the code its C kernel
# reads (FUSED_ACT_* in core/kernels/conv_epilogue.h). alpha and beta are:
#   Clip: the bounds (an omitted bound is -inf or +inf); LeakyRelu: alpha;
#   HardSigmoid: alpha, beta; the others: unused.
# SiLU is X * Sigmoid(X); Gelu is the erf form, GeluTanh the tanh approximation.
CONV_ACTIVATIONS = ("", "Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish",
                    "SiLU", "Gelu", "GeluTanh")


def apply_activation(y: np.ndarray, activation: str, alpha: float, beta: float) -> np.ndarray:
    """The unfused activation node(s) a FusedConv's `activation` stands for, run with
    their own references (so the fused op means exactly the subgraph it replaced)."""
    ops = activation_ops
    if activation == "":
        return y
    if activation == "Relu":
        return ops.relu(y)
    if activation == "Clip":
        low = None if alpha == -np.inf else np.asarray(alpha, y.dtype)
        high = None if beta == np.inf else np.asarray(beta, y.dtype)
        return ops.clip(y, low, high)
    if activation == "LeakyRelu":
        return ops.leaky_relu(y, alpha=alpha)
    if activation == "Sigmoid":
        return ops.sigmoid(y)
    if activation == "HardSigmoid":
        return ops.hard_sigmoid(y, alpha=alpha, beta=beta)
    if activation == "HardSwish":
        return ops.hard_swish(y)
    if activation == "SiLU":
        return elementwise_ops.mul(y, ops.sigmoid(y))
    if activation in ("Gelu", "GeluTanh"):
        return ops.gelu(y, approximate="tanh" if activation == "GeluTanh" else "none")
    raise OpError(f"ge_hub.FusedConv: unknown activation {activation!r} "
                  f"(known: {', '.join(a or repr('') for a in CONV_ACTIVATIONS)})")


def _infer_fused_conv(ctx: InferenceContext) -> list[TensorType]:
    activation = ctx.attrs["activation"]
    if activation not in CONV_ACTIVATIONS:
        ctx.fail(f"attribute 'activation' must be one of "
                 f"{', '.join(repr(a) for a in CONV_ACTIVATIONS)}, got {activation!r}")
    (y,) = _infer_conv_common(ctx, transposed=False)
    if ctx.has_input(3):
        z = ctx.input(3)
        same = z.shape is None or y.shape is None or (
            len(z.shape) == len(y.shape)
            and all(not (isinstance(a, int) and isinstance(b, int)) or a == b
                    for a, b in zip(z.shape, y.shape)))
        if not same:
            ctx.fail(f"input 'Z' {z} must have the output's shape {y}")
    return [y]


@op("FusedConv", domain=FUSED_DOMAIN,
    inputs=[Input("X", FLOATS), Input("W", FLOATS), Input("B", FLOATS, optional=True),
            Input("Z", FLOATS, optional=True)],
    outputs=[Output("Y")], infer=_infer_fused_conv,
    attrs=[*CONV_ATTRS, Attr("activation", AttrKind.STRING, ""),
           Attr("alpha", AttrKind.FLOAT, 0.0), Attr("beta", AttrKind.FLOAT, 0.0)])
def fused_conv(x, w, b=None, z=None, *, auto_pad, dilations, group, kernel_shape, pads,
               strides, activation, alpha, beta):
    """Y = activation(Conv(X, W, B) + Z): a Conv, the residual Add of Z (same shape as
    the Conv's output; omitted: none) and an activation (`activation`, one of
    CONV_ACTIVATIONS, with its `alpha` and `beta`), as the nodes it replaces compute
    them."""
    y = conv(x, w, b, auto_pad=auto_pad, dilations=dilations, group=group,
             kernel_shape=kernel_shape, pads=pads, strides=strides)
    if z is not None:
        if z.shape != y.shape:
            reference_fail("ge_hub.FusedConv")(
                f"input 'Z' has shape {z.shape}, the output has {y.shape}")
        y = elementwise_ops.add(y, z)
    return apply_activation(y, activation, alpha, beta)


# --- ge_hub.FusedConvNHWC -------------------------------------------------------------
# A 2-D FusedConv on channels-last tensors: X (N, H, W, C), the residual Z and Y
# (N, OH, OW, M); W and B as a Conv's. The `channels_last` pass (ge_hub/passes/
# channels_last.py) makes it of bf16 FusedConvs where the bf16 products run on AMX, so
# that a chain of them passes its activations position by position, the layout the AMX
# tiles read and write, instead of turning every layer's input and output around.


def to_channels_last(shape):
    """(N, C, spatial...) -> (N, spatial..., C)."""
    return (shape[0], *shape[2:], shape[1])


def to_channels_first(shape):
    """(N, spatial..., C) -> (N, C, spatial...)."""
    return (shape[0], shape[-1], *shape[1:-1])


def _infer_fused_conv_nhwc(ctx: InferenceContext) -> list[TensorType]:
    ctx.require_rank(0, 4)
    if ctx.has_input(3):
        ctx.require_rank(3, 4)
    saved = list(ctx.input_types)
    ctx.input_types = [
        t if i not in (0, 3) or t is None or t.shape is None
        else TensorType(t.dtype, to_channels_first(t.shape))
        for i, t in enumerate(saved)]
    try:
        (y,) = _infer_fused_conv(ctx)
    finally:
        ctx.input_types = saved
    return [y if y.shape is None else TensorType(y.dtype, to_channels_last(y.shape))]


@op("FusedConvNHWC", domain=FUSED_DOMAIN,
    inputs=[Input("X", FLOATS), Input("W", FLOATS, type_var="W"),
            Input("B", FLOATS, type_var="W", optional=True), Input("Z", FLOATS, optional=True)],
    outputs=[Output("Y")], infer=_infer_fused_conv_nhwc,
    attrs=[*CONV_ATTRS, Attr("activation", AttrKind.STRING, ""),
           Attr("alpha", AttrKind.FLOAT, 0.0), Attr("beta", AttrKind.FLOAT, 0.0)])
def fused_conv_nhwc(x, w, b=None, z=None, *, auto_pad, dilations, group, kernel_shape, pads,
                    strides, activation, alpha, beta):
    """ge_hub.FusedConv on channels-last X, Z and Y: Y = transpose(FusedConv(X', W, B,
    Z'), to channels-last), X' and Z' X and Z turned channels-first. X and Z share a dtype
    (float32, or bfloat16 between the Convs of a bf16 chain), which Y has too; W and B may
    differ from it: the sums are those of W's dtype, rounded to X's once at the end."""
    if x.ndim != 4 or (z is not None and z.ndim != 4):
        reference_fail("ge_hub.FusedConvNHWC")(
            f"X and Z must be N x H x W x C, got {x.shape} and "
            f"{None if z is None else z.shape}")
    first, work = (0, 3, 1, 2), w.dtype
    y = fused_conv(x.transpose(first).astype(work), w, b,
                   None if z is None else z.transpose(first).astype(work),
                   auto_pad=auto_pad, dilations=dilations, group=group,
                   kernel_shape=kernel_shape, pads=pads, strides=strides,
                   activation=activation, alpha=alpha, beta=beta)
    return np.ascontiguousarray(y.transpose(0, 2, 3, 1)).astype(x.dtype)


def _infer_to_channels_last(ctx: InferenceContext) -> list[TensorType]:
    ctx.require_rank(0, 4)
    x = ctx.input(0)
    shape = None if x.shape is None else to_channels_last(x.shape)
    return [TensorType(DType.parse(ctx.attrs["to"]), shape)]


@op("ToChannelsLast", domain=FUSED_DOMAIN, inputs=[Input("X", FLOATS)], outputs=[Output("Y")],
    infer=_infer_to_channels_last, attrs=[Attr("to", AttrKind.DTYPE, DType.BFLOAT16)])
def to_channels_last_op(x, *, to):
    """Y = Cast(Transpose(X, perm=(0, 2, 3, 1)), to): where a bf16 chain of FusedConvNHWC
    reads a float32 NCHW value (the `channels_last` pass), one pass over it instead of a
    Cast and a Transpose."""
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1)).astype(DType.parse(to).numpy)


# --- ge_hub.PointwiseDepthwise ----------------------------------------------------------
# A pointwise (1x1, stride 1, unpadded, ungrouped) Conv with its activation, and the
# depthwise Conv with its activation that alone reads its output: MobileNetV2's and
# EfficientNet's expansion and depthwise layers, made one step by the
# `fuse_pointwise_depthwise` pass (ge_hub/passes/fuse_pointwise_depthwise.py) where the
# pointwise product runs in bf16. Its C kernel (core/kernels/conv_pointwise_depthwise.c)
# computes the pointwise output a band of rows at a time and runs the depthwise window
# over it while it is in cache, instead of writing the wide intermediate to memory and
# reading it back. The Conv attributes are the depthwise Conv's.


def _infer_pointwise_depthwise(ctx: InferenceContext) -> list[TensorType]:
    for name in ("pointwise_activation", "activation"):
        if ctx.attrs[name] not in CONV_ACTIVATIONS:
            ctx.fail(f"attribute {name!r} must be one of "
                     f"{', '.join(repr(a) for a in CONV_ACTIVATIONS)}, got {ctx.attrs[name]!r}")
    for index in (0, 1, 3):
        ctx.require_rank(index, 4)
    x, w1, w2 = ctx.input(0), ctx.input(1), ctx.input(3)
    channels = dim_or_sym(ctx, x, 1, "C")
    expanded = dim_or_sym(ctx, w1, 0, "E")
    if w1.shape is not None and any(isinstance(d, int) and d != 1 for d in w1.shape[2:]):
        ctx.fail(f"input 'W1' {w1} must be a 1x1 kernel")
    if w1.shape is not None and isinstance(channels, int) and isinstance(w1.shape[1], int) \
            and w1.shape[1] != channels:
        ctx.fail(f"input 'X' {x} has {channels} channels but input 'W1' {w1} expects "
                 f"{w1.shape[1]}")
    if w2.shape is not None and (
            (isinstance(w2.shape[0], int) and isinstance(expanded, int)
             and w2.shape[0] != expanded) or w2.shape[1] != 1):
        ctx.fail(f"input 'W2' {w2} must be ({expanded}, 1, kh, kw): one kernel per channel "
                 "of the pointwise output")
    if isinstance(expanded, int) and ctx.attrs["group"] != expanded:
        ctx.fail(f"attribute 'group' must be the pointwise output's {expanded} channels "
                 f"(a depthwise Conv), got {ctx.attrs['group']}")
    for index in (2, 4):
        check_vector(ctx, index, expanded, "one bias per channel")
    kernel = ctx.attrs["kernel_shape"] or (None if w2.shape is None else list(w2.shape[2:]))
    if kernel is None or not all(isinstance(k, int) for k in kernel):
        return [TensorType(x.dtype, None)]
    window = make_window(ctx.attrs, 2, kernel, ctx.fail)
    dims = out_spatial(ctx, window, x, 2)
    return [TensorType(x.dtype, (dim_or_sym(ctx, x, 0, "N"), expanded, *dims))]


@op("PointwiseDepthwise", domain=FUSED_DOMAIN,
    inputs=[Input("X", FLOATS), Input("W1", FLOATS), Input("B1", FLOATS),
            Input("W2", FLOATS), Input("B2", FLOATS)],
    outputs=[Output("Y")], infer=_infer_pointwise_depthwise,
    attrs=[*CONV_ATTRS, Attr("pointwise_activation", AttrKind.STRING, ""),
           Attr("pointwise_alpha", AttrKind.FLOAT, 0.0),
           Attr("pointwise_beta", AttrKind.FLOAT, 0.0),
           Attr("activation", AttrKind.STRING, ""), Attr("alpha", AttrKind.FLOAT, 0.0),
           Attr("beta", AttrKind.FLOAT, 0.0)])
def pointwise_depthwise(x, w1, b1, w2, b2, *, auto_pad, dilations, group, kernel_shape, pads,
                        strides, pointwise_activation, pointwise_alpha, pointwise_beta,
                        activation, alpha, beta):
    """Y = FusedConv(FusedConv(X, W1, B1, activation=pointwise_activation), W2, B2, the
    depthwise window, activation=activation): the two nodes it replaces, computed by
    their own references."""
    hidden = fused_conv(x, w1, b1, auto_pad="NOTSET", dilations=None, group=1,
                        kernel_shape=None, pads=None, strides=None,
                        activation=pointwise_activation, alpha=pointwise_alpha,
                        beta=pointwise_beta)
    return fused_conv(hidden, w2, b2, auto_pad=auto_pad, dilations=dilations, group=group,
                      kernel_shape=kernel_shape, pads=pads, strides=strides,
                      activation=activation, alpha=alpha, beta=beta)
