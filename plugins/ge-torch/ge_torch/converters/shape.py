"""ATen view and data-movement ops: view, expand, permute, cat, split, slice, pad, ...

After functionalization a view is just a function of its input's values, so `view` is a
Reshape, `slice` a Slice and `select` a Gather; strides never matter here, except for
`as_strided`, which reads its input's storage: it is converted only when that storage
is the input itself in row-major order (a contiguous input starting at its storage's
first element) and every element it reads lies inside the input. A stride pattern that
is a permuted block of that storage becomes Slice, Reshape and Transpose; any other
(overlapping windows, broadcast, gaps) a Gather from a constant index table.

Sizes can be symbolic. A target shape whose only symbolic entry can be written as -1
stays a constant (ge-hub then infers that dim exactly); otherwise the sizes are computed
in the graph from input shapes (`ConvertContext.shape`).
"""

from __future__ import annotations

import numpy as np
import torch
from ge_hub.plugin import DType

from ge_torch import symbolic
from ge_torch.context import ConvertContext, rank
from ge_torch.converters import converter

aten = torch.ops.aten
INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min


def _axis(cx: ConvertContext, axis: int, ndim: int) -> int:
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        cx.fail(f"axis {axis} out of range for rank {ndim}")
    return axis % max(ndim, 1)


def reshape_target(cx: ConvertContext, sizes) -> tuple:
    """(shape value, allowzero) for a Reshape to `sizes` (ints, -1, or expressions)."""
    sizes = [symbolic.as_expr(s) for s in sizes]
    symbolic_at = [i for i, s in enumerate(sizes) if symbolic.is_symbolic(s)]
    if len(symbolic_at) == 1 and -1 not in sizes:
        sizes[symbolic_at[0]] = -1  # the one unknown dim: let Reshape infer it
    allowzero = 1 if 0 in sizes else 0
    if allowzero and -1 in sizes:
        cx.fail(f"view to {sizes}: a zero dim beside an inferred one")
    return cx.shape(sizes), allowzero


@converter(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def view(cx, node, x, size):
    target, allowzero = reshape_target(cx, size)
    return cx.op("Reshape", x, target, allowzero=allowzero or None)


@converter(aten.expand.default)
def expand(cx, node, x, size, *, implicit=False):
    in_sizes = [symbolic.as_expr(s) for s in cx.meta(node.args[0]).shape]
    offset = len(size) - len(in_sizes)
    target = []
    for i, s in enumerate(size):
        s = symbolic.as_expr(s)
        kept = i >= offset and (s == -1 or s == in_sizes[i - offset])
        # Expand broadcasts both ways: 1 keeps the input's dim, whatever it is.
        target.append(1 if kept else s)
    return cx.op("Expand", x, cx.shape(target))


@converter(aten.permute.default)
def permute(cx, node, x, dims):
    n = rank(x)
    return cx.op("Transpose", x, perm=[_axis(cx, d, n) for d in dims])


@converter(aten.transpose.int)
def transpose(cx, node, x, dim0, dim1):
    n = rank(x)
    perm = list(range(n))
    a, b = _axis(cx, dim0, n), _axis(cx, dim1, n)
    perm[a], perm[b] = perm[b], perm[a]
    return cx.op("Transpose", x, perm=perm)


@converter(aten.t.default)
def t(cx, node, x):
    if rank(x) < 2:
        return cx.op("Identity", x)
    return cx.op("Transpose", x, perm=[1, 0])


@converter(aten.unsqueeze.default)
def unsqueeze(cx, node, x, dim):
    return cx.op("Unsqueeze", x, cx.ints([_axis(cx, dim, rank(x) + 1)]))


def _squeeze(cx: ConvertContext, node, x, dims):
    sizes = cx.meta(node.args[0]).shape
    axes = sorted({_axis(cx, d, len(sizes)) for d in dims})
    axes = [a for a in axes if symbolic.as_expr(sizes[a]) == 1]
    if not axes:
        return cx.op("Identity", x)
    return cx.op("Squeeze", x, cx.ints(axes))


@converter(aten.squeeze.default)
def squeeze(cx, node, x):
    return _squeeze(cx, node, x, range(rank(x)))


@converter(aten.squeeze.dim)
def squeeze_dim(cx, node, x, dim):
    return _squeeze(cx, node, x, [dim])


@converter(aten.squeeze.dims)
def squeeze_dims(cx, node, x, dims):
    return _squeeze(cx, node, x, dims)


@converter(aten.cat.default)
def cat(cx, node, tensors, dim=0):
    dtype = cx.out_dtype
    out_rank = len(cx.out_sizes())
    # torch.cat skips 1-D empty tensors (a legacy rule); they carry no data anyway.
    kept = [cx.cast(t, dtype) for t, raw in zip(tensors, node.args[0])
            if not (cx.meta(raw).dim() == 1 and symbolic.as_expr(cx.meta(raw).shape[0]) == 0)]
    if len(kept) == 1:
        return cx.op("Identity", kept[0])
    return cx.op("Concat", *kept, axis=_axis(cx, dim, out_rank))


def _split(cx: ConvertContext, x, sizes, dim):
    axis = _axis(cx, dim, rank(x))
    parts = cx.op("Split", x, cx.shape(sizes), axis=axis, outputs=len(sizes))
    return tuple(parts)


@converter(aten.split_with_sizes.default)
def split_with_sizes(cx, node, x, split_sizes, dim=0):
    return _split(cx, x, split_sizes, dim)


@converter(aten.split.Tensor)
def split(cx, node, x, split_size, dim=0):
    n = len(cx.meta())
    return _split(cx, x, [cx.out_sizes(i)[dim] for i in range(n)], dim)


@converter(aten.slice.Tensor)
def slice_(cx, node, x, dim=0, start=None, end=None, step=1):
    axis = _axis(cx, dim, rank(x))
    start = 0 if start is None else start
    end = INT64_MAX if end is None else end
    if not isinstance(step, int) or step < 1:
        cx.fail(f"slice step {step}")
    return cx.op("Slice", x, cx.shape([start]), cx.shape([end]), cx.ints([axis]),
                 cx.ints([step]))


@converter(aten.select.int)
def select(cx, node, x, dim, index):
    axis = _axis(cx, dim, rank(x))
    return cx.op("Gather", x, cx.scalar(index, DType.INT64), axis=axis)


@converter(aten.flip.default)
def flip(cx, node, x, dims):
    axes = [_axis(cx, d, rank(x)) for d in dims]
    if not axes:
        return cx.op("Identity", x)
    n = len(axes)
    return cx.op("Slice", x, cx.ints([-1] * n), cx.ints([INT64_MIN] * n), cx.ints(axes),
                 cx.ints([-1] * n))


@converter(aten.repeat.default)
def repeat(cx, node, x, repeats):
    extra = len(repeats) - rank(x)
    if extra > 0:
        x = cx.op("Unsqueeze", x, cx.ints(range(extra)))
    return cx.op("Tile", x, cx.shape(repeats))


@converter(aten.constant_pad_nd.default)
def constant_pad_nd(cx, node, x, pad, value=0):
    n = rank(x)
    if len(pad) % 2 or len(pad) // 2 > n:
        cx.fail(f"pad {pad} for rank {n}")
    begins, ends = [0] * n, [0] * n
    # (left, right) pairs, starting from the last dim.
    for i in range(len(pad) // 2):
        begins[n - 1 - i] = pad[2 * i]
        ends[n - 1 - i] = pad[2 * i + 1]
    return cx.op("Pad", x, cx.shape(begins + ends), cx.scalar(value, x.type.dtype),
                 mode="constant")


@converter(aten.pixel_shuffle.default)
def pixel_shuffle(cx, node, x, upscale_factor):
    if rank(x) != 4:
        cx.fail("pixel_shuffle of a tensor that is not 4-D")
    return cx.op("DepthToSpace", x, blocksize=int(upscale_factor), mode="CRD")


# The largest index table an as_strided conversion builds (int64 elements).
AS_STRIDED_MAX_INDICES = 1 << 22


def _as_strided_reason(node) -> str | None:
    x = node.args[0].meta.get("val")
    size, stride = node.args[1], node.args[2]
    offset = node.args[3] if len(node.args) > 3 else node.kwargs.get("storage_offset")
    offset = 0 if offset is None else offset
    numbers = [*x.shape, *x.stride(), x.storage_offset(), *size, *stride, offset]
    if not all(isinstance(v, int) for v in numbers):
        return "as_strided with symbolic sizes or strides"
    if not x.is_contiguous() or x.storage_offset() != 0:
        return "as_strided of a tensor that is not its storage in row-major order"
    count = int(np.prod(size, dtype=np.int64)) if size else 1
    if count and (min(stride, default=0) < 0 or offset < 0 or offset + sum(
            (n - 1) * s for n, s in zip(size, stride)) >= x.numel()):
        return "as_strided reading outside its input"
    if count > AS_STRIDED_MAX_INDICES and _as_strided_block(size, stride) is None:
        return f"as_strided of {count} elements that are not a permuted block"
    return None


def _as_strided_block(size, stride) -> list[int] | None:
    """The dims of size > 1, outermost first in memory, when the strides make them one
    dense row-major block of the storage; None otherwise."""
    dims = sorted((d for d, n in enumerate(size) if n > 1), key=lambda d: -stride[d])
    expected = 1
    for d in reversed(dims):
        if stride[d] != expected:
            return None
        expected *= size[d]
    return dims


@converter(aten.as_strided.default, check=_as_strided_reason)
def as_strided(cx, node, x, size, stride, storage_offset=None):
    offset = storage_offset or 0
    flat = cx.op("Reshape", x, cx.ints([-1]))
    size, stride = list(size), list(stride)
    dims = _as_strided_block(size, stride) if 0 not in size else None
    if dims is not None:
        span = int(np.prod([size[d] for d in dims], dtype=np.int64))
        block = cx.op("Slice", flat, cx.ints([offset]), cx.ints([offset + span]), cx.ints([0]))
        block = cx.op("Reshape", block, cx.ints([size[d] for d in dims]))
        order = sorted(range(len(dims)), key=lambda i: dims[i])  # back to output order
        if order != list(range(len(dims))):
            block = cx.op("Transpose", block, perm=order)
        return cx.op("Reshape", block, cx.ints(size))
    index = np.full(size, offset, dtype=np.int64)
    for d, (n, s) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = n
        index = index + (np.arange(n, dtype=np.int64) * s).reshape(shape)
    return cx.op("Gather", flat, cx.const(index), axis=0)
