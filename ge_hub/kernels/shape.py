"""Data-movement kernels: Transpose, Slice, Expand, Tile, DepthToSpace, SpaceToDepth,
Concat, Split and Pad. The C side is core/kernels/shape.c.

None of these computes on elements, so each kernel works by element size and serves
every dtype (`dtypes=None`). Six of them are one strided copy (`ge_hub.kernels.shape_strided`):
their packers only work out where each output element comes from. Concat and Split are
block copies of an [outer, axis * inner] view; Pad maps each output coordinate of each
dim to an input coordinate (or to the constant), reusing NumPy's own padding on an
index ramp so that reflect, edge and wrap match the reference exactly.

Shape-determining inputs (Slice's starts, Pad's pads, ...) must be constants for a C
kernel; otherwise `supports` declines and the node runs its reference. Expand, Tile and
Split need no such input: the static output shape says everything.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ge_hub.ir.graph import Node
from ge_hub.ir.types import TensorType
from ge_hub.kernels.base import CKernel, Packed, pack_values
from ge_hub.kernels.shape_strided import (
    MAX_WALK_DIMS,
    const_input,
    contiguous_strides,
    fits_walk,
    inputs_constant,
    node_attrs,
    permuted,
    strided_copy,
)
from ge_hub.ops.shape import _clamp_slice
from ge_hub.registry import KernelSpec

Types = Sequence[TensorType | None]


# --- strided copies -------------------------------------------------------------------


def _transpose_walk(node: Node, in_types: Types, out_types: Types):
    shape = list(in_types[0].shape)
    perm = node_attrs(node)["perm"]
    if perm is None:
        perm = list(reversed(range(len(shape))))
    out_shape, strides = permuted(shape, perm)
    return out_shape, strides, 0


def _slice_walk(node: Node, in_types: Types, out_types: Types):
    shape = list(in_types[0].shape)
    starts = [int(v) for v in const_input(node, 1).reshape(-1)]
    ends = [int(v) for v in const_input(node, 2).reshape(-1)]
    axes = const_input(node, 3)
    steps = const_input(node, 4)
    axes = range(len(starts)) if axes is None else [int(v) for v in axes.reshape(-1)]
    steps = [1] * len(starts) if steps is None else [int(v) for v in steps.reshape(-1)]
    contiguous = contiguous_strides(shape)
    strides = list(contiguous)
    base = 0
    for axis, start, end, step in zip(axes, starts, ends, steps):
        axis = axis + len(shape) if axis < 0 else axis
        start, _ = _clamp_slice(shape[axis], start, end, step)
        base += start * contiguous[axis]
        strides[axis] = step * contiguous[axis]
    return list(out_types[0].shape), strides, base


def _expand_walk(node: Node, in_types: Types, out_types: Types):
    out_shape = list(out_types[0].shape)
    shape = [1] * (len(out_shape) - len(in_types[0].shape)) + list(in_types[0].shape)
    strides = [0 if d == 1 else s for d, s in zip(shape, contiguous_strides(shape))]
    return out_shape, strides, 0


def _tile_walk(node: Node, in_types: Types, out_types: Types):
    # The output viewed as [r0, d0, r1, d1, ...]: each repeat re-reads the input (stride 0).
    shape = list(in_types[0].shape)
    out_shape, strides = [], []
    for dim, out, stride in zip(shape, out_types[0].shape, contiguous_strides(shape)):
        repeats = out // dim if dim else 0
        out_shape += [repeats, dim]
        strides += [0, stride]
    return out_shape, strides, 0


def _depth_to_space_walk(node: Node, in_types: Types, out_types: Types):
    n, c, h, w = in_types[0].shape
    attrs = node_attrs(node)
    b = attrs["blocksize"]
    if attrs["mode"] == "DCR":
        out_shape, strides = permuted([n, b, b, c // (b * b), h, w], (0, 3, 4, 1, 5, 2))
    else:
        out_shape, strides = permuted([n, c // (b * b), b, b, h, w], (0, 1, 4, 2, 5, 3))
    return out_shape, strides, 0


def _space_to_depth_walk(node: Node, in_types: Types, out_types: Types):
    n, c, h, w = in_types[0].shape
    attrs = node_attrs(node)
    b = attrs["blocksize"]
    order = (0, 3, 5, 1, 2, 4) if attrs["mode"] == "DCR" else (0, 1, 3, 5, 2, 4)
    return (*permuted([n, c, h // b, b, w // b, b], order), 0)


def _strided_kernel(walk, const_inputs: tuple[int, ...] = ()) -> CKernel:
    """A ge_strided_copy kernel whose geometry `walk(node, in_types, out_types)` gives as
    (output shape, input strides, base); `const_inputs` must be constants."""

    def pack(node: Node, in_types: Types, out_types: Types) -> Packed:
        out_shape, strides, base = walk(node, in_types, out_types)
        return strided_copy(in_types[0].dtype.itemsize, out_shape, strides, base)

    def supports(node: Node, in_types: Types, out_types: Types) -> bool:
        if not inputs_constant(node, *const_inputs):
            return False
        out_shape, strides, _ = walk(node, in_types, out_types)
        return fits_walk(out_shape, strides)

    return CKernel("ge_strided_copy", pack=pack, supports=supports)


# --- Concat, Split --------------------------------------------------------------------


def _blocks(axis: int, whole: Sequence[int], parts: Sequence[Sequence[int]],
            itemsize: int) -> Packed:
    """ge_concat/ge_split's blob: outer, parts, bytes of each part's row."""
    axis = axis + len(whole) if axis < 0 else axis
    outer = math.prod(whole[:axis])
    inner = math.prod(whole[axis + 1:])
    row_bytes = [part[axis] * inner * itemsize for part in parts]
    return Packed(pack_values([outer, len(parts), *row_bytes]))


def _pack_concat(node: Node, in_types: Types, out_types: Types) -> Packed:
    return _blocks(node_attrs(node)["axis"], out_types[0].shape,
                   [t.shape for t in in_types], out_types[0].dtype.itemsize)


def _pack_split(node: Node, in_types: Types, out_types: Types) -> Packed:
    return _blocks(node_attrs(node)["axis"], in_types[0].shape,
                   [t.shape for t in out_types], in_types[0].dtype.itemsize)


# --- Pad ------------------------------------------------------------------------------


# A Pad node whose padding (the coordinate maps the blob carries, one int64 per padded
# cell of each dim) exceeds this many entries runs its reference instead: the blob would
# be as large as the padding itself.
MAX_PAD_MAP_ENTRIES = 1 << 20


def _pad_widths(node: Node, in_types: Types) -> list[tuple[int, int]]:
    """(begin, end) padding of each dim of the input (negative: cropped)."""
    rank = len(in_types[0].shape)
    pads = [int(p) for p in const_input(node, 1).reshape(-1)]
    axes = const_input(node, 3)
    axes = range(rank) if axes is None else [int(a) % rank for a in axes.reshape(-1)]
    widths = {axis: (pads[i], pads[i + len(axes)]) for i, axis in enumerate(axes)}
    return [widths.get(axis, (0, 0)) for axis in range(rank)]


def _pad_map_entries(node: Node, in_types: Types) -> int:
    return sum(max(b, 0) + max(e, 0) for b, e in _pad_widths(node, in_types))


def _pad_axis(size: int, begin: int, end: int, mode: str) -> tuple:
    """(out_n, lo, mid_start, mid_len, hi, is_identity, lo map, hi map) of one dim: the
    input coordinate each padded output coordinate reads (-1: the constant), by padding an
    index ramp the way the reference pads the data, and the longest run of consecutive
    input coordinates, copied as is.

    Only the padding is materialized, never the whole dim: when the kept run is longer
    than twice the padding, the padding can read only its first and last `keep`
    coordinates, and NumPy pads a ramp of just those (a dim of 2**32 costs nothing)."""
    options = {"constant_values": -1} if mode == "constant" else {}
    if begin == 0 and end == 0:
        none = np.zeros(0, np.int64)
        return size, 0, 0, size, 0, True, none, none
    crop_lo, crop_hi = max(-begin, 0), max(-end, 0)
    before, after = max(begin, 0), max(end, 0)
    length = size - crop_lo - crop_hi
    keep = before + after + 1
    if length > 2 * keep:
        short = np.concatenate([np.arange(crop_lo, crop_lo + keep, dtype=np.int64),
                                np.arange(size - crop_hi - keep, size - crop_hi,
                                          dtype=np.int64)])
        padded = np.pad(short, (before, after), mode=mode, **options)
        # the kept run is longer than any run in the padding, so it is the longest
        return (before + length + after, before, crop_lo, length, after, False,
                padded[:before], padded[len(padded) - after:])
    ramp = np.arange(crop_lo, max(size - crop_hi, crop_lo), dtype=np.int64)
    dim_map = np.pad(ramp, (before, after), mode=mode, **options)
    is_identity = len(dim_map) == size and np.array_equal(dim_map, np.arange(size))
    lo, mid_start, mid_len = _longest_run(dim_map)
    return (len(dim_map), lo, mid_start, mid_len, len(dim_map) - lo - mid_len, is_identity,
            dim_map[:lo], dim_map[lo + mid_len:])


def _pad_dims(node: Node, in_types: Types):
    """Per dim (out_n, in_stride, lo, mid_start, mid_len, hi, identity, lo map, hi map),
    where the mid part is the input run copied as is; unpadded neighbours are merged."""
    shape = list(in_types[0].shape)
    mode = node_attrs(node)["mode"]
    dims = []
    for (begin, end), stride, size in zip(_pad_widths(node, in_types),
                                          contiguous_strides(shape), shape):
        out_n, lo, mid_start, mid_len, hi, is_identity, lo_map, hi_map = \
            _pad_axis(size, begin, end, mode)
        if is_identity and dims and dims[-1][6]:
            # Both walk their input straight through: one dim of the product's length.
            out_n = dims[-1][0] * size
            dims[-1] = (out_n, stride, 0, 0, out_n, 0, True, lo_map[:0], lo_map[:0])
            continue
        dims.append((out_n, stride, lo, mid_start, mid_len, hi, is_identity, lo_map, hi_map))
    return dims


def _longest_run(dim_map: np.ndarray) -> tuple[int, int, int]:
    """(position, first value, length) of the first longest run of consecutive input
    coordinates in `dim_map` (0, 0, 0 when it reads nothing); vectorized."""
    valid = dim_map >= 0
    if not valid.any():
        return 0, 0, 0
    continues = np.zeros(len(dim_map), bool)
    continues[1:] = valid[1:] & valid[:-1] & (dim_map[1:] == dim_map[:-1] + 1)
    starts = np.flatnonzero(valid & ~continues)
    ends = np.flatnonzero(valid & ~np.append(continues[1:], False)) + 1
    best = int(np.argmax(ends - starts))  # the first of the longest
    k = int(starts[best])
    return k, int(dim_map[k]), int(ends[best] - starts[best])


def _pack_pad(node: Node, in_types: Types, out_types: Types) -> Packed:
    dims = _pad_dims(node, in_types)
    ints = [in_types[0].dtype.itemsize, len(dims)]
    for out_n, stride, lo, mid_start, mid_len, hi, *_ in dims:
        ints += [out_n, stride, lo, mid_start, mid_len, hi]
    for *_, lo_map, hi_map in dims:
        ints += [int(v) for v in lo_map] + [int(v) for v in hi_map]
    return Packed(pack_values(ints))


def _supports_pad(node: Node, in_types: Types, out_types: Types) -> bool:
    if not inputs_constant(node, 1, 3):
        return False
    if _pad_map_entries(node, in_types) > MAX_PAD_MAP_ENTRIES:
        return False  # the reference pads it, without a blob as large as the padding
    if any(size + min(begin, 0) + min(end, 0) < 0 for size, (begin, end)
           in zip(in_types[0].shape, _pad_widths(node, in_types))):
        return False  # crops past the dim: left to the reference
    try:
        dims = _pad_dims(node, in_types)
    except ValueError:  # NumPy cannot pad this (reflecting an emptied dim): the reference
        return False    # reports it at run time
    return len(dims) <= MAX_WALK_DIMS


KERNELS = [
    KernelSpec(op="Transpose", name="movement_transpose",
               impl=_strided_kernel(_transpose_walk)),
    KernelSpec(op="Slice", name="movement_slice",
               impl=_strided_kernel(_slice_walk, const_inputs=(1, 2, 3, 4))),
    KernelSpec(op="Expand", name="movement_expand", impl=_strided_kernel(_expand_walk)),
    KernelSpec(op="Tile", name="movement_tile", impl=_strided_kernel(_tile_walk)),
    KernelSpec(op="DepthToSpace", name="movement_depth_to_space",
               impl=_strided_kernel(_depth_to_space_walk)),
    KernelSpec(op="SpaceToDepth", name="movement_space_to_depth",
               impl=_strided_kernel(_space_to_depth_walk)),
    KernelSpec(op="Concat", name="movement_concat", impl=CKernel("ge_concat", pack=_pack_concat)),
    KernelSpec(op="Split", name="movement_split", impl=CKernel("ge_split", pack=_pack_split)),
    KernelSpec(op="Pad", name="movement_pad",
               impl=CKernel("ge_pad", pack=_pack_pad, supports=_supports_pad)),
]
