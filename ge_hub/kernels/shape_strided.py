"""Strided walks: the compile-time geometry behind the data-movement and index kernels.

Transpose, Slice, Expand, Tile, DepthToSpace and SpaceToDepth all write a contiguous
output whose element at multi-index i is the input element at `base + sum(i_k * s_k)`:
a permutation permutes the strides, a slice offsets the base and scales them, a
broadcast or a repeat makes one 0. `strided_copy` collapses such a walk (drops size-1
dims, merges neighbours that step through memory as one) and packs it for the single C
kernel `ge_strided_copy` (core/kernels/shape.c), which then has the fewest, longest
loops to run.
"""

from __future__ import annotations

from collections.abc import Sequence

from ge_hub.ir.graph import Node
from ge_hub.kernels.base import Packed, pack_values
from ge_hub.ops import get_schema

# The most dims the C kernels walk after collapsing (GE_MV_MAX_DIMS in shape.h).
MAX_WALK_DIMS = 16


def contiguous_strides(shape: Sequence[int]) -> list[int]:
    """Row-major strides, in elements."""
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return strides[::-1]


def collapse(shape: Sequence[int], strides: Sequence[int]) -> tuple[list[int], list[int]]:
    """The same walk with size-1 dims dropped and mergeable neighbours merged.

    Dims a and b (b inner) merge when stepping a once is stepping b through its whole
    size: stride_a == stride_b * size_b. Always returns at least one dim.
    """
    dims: list[list[int]] = []
    for size, stride in zip(shape, strides):
        if size == 1:
            continue
        if dims and dims[-1][1] == stride * size:
            dims[-1] = [dims[-1][0] * size, stride]
        else:
            dims.append([size, stride])
    if not dims:
        return [1], [1]
    return [d[0] for d in dims], [d[1] for d in dims]


def strided_copy(itemsize: int, out_shape: Sequence[int], in_strides: Sequence[int],
                 base: int = 0) -> Packed:
    """The blob of ge_strided_copy: elem, ndim, base, shape[ndim], stride[ndim]."""
    shape, strides = collapse(out_shape, in_strides)
    if len(shape) > MAX_WALK_DIMS:
        raise ValueError(f"a strided walk of {len(shape)} dims exceeds {MAX_WALK_DIMS}")
    return Packed(pack_values([itemsize, len(shape), base, *shape, *strides]))


def fits_walk(out_shape: Sequence[int], in_strides: Sequence[int]) -> bool:
    return len(collapse(out_shape, in_strides)[0]) <= MAX_WALK_DIMS


def permuted(view_shape: Sequence[int], perm: Sequence[int]) -> tuple[list[int], list[int]]:
    """Output shape and input strides of transposing a contiguous `view_shape` by `perm`."""
    strides = contiguous_strides(view_shape)
    return [view_shape[p] for p in perm], [strides[p] for p in perm]


def node_attrs(node: Node) -> dict:
    """The node's attributes with the op's defaults filled in."""
    return get_schema(node.op, node.domain).fill_attrs(node.attrs, node.name)


def const_input(node: Node, index: int):
    """The constant data of input `index`, or None when it is omitted or not a constant."""
    if index >= len(node.inputs) or node.inputs[index] is None:
        return None
    return node.inputs[index].const


def inputs_constant(node: Node, *indices: int) -> bool:
    """Whether each of these inputs is omitted or a constant."""
    return all(index >= len(node.inputs) or node.inputs[index] is None
               or node.inputs[index].is_constant for index in indices)
