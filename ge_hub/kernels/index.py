"""Index kernels: Gather, GatherElements, GatherND, ScatterElements, ScatterND, Trilu,
Range, OneHot and ConstantOfShape. The C side is core/kernels/index.c, which documents
each blob.

Gathers and scatters move whole elements, so they serve every dtype; scatters with a
reduction other than 'none' compute, and have kernels for float32, float64, int32 and
int64 only. OneHot writes values of any dtype from int32, int64 or float32 indices.
Index values arrive at run time: the C kernels check their range there and fail naming
the op, as the references do (OneHot, like ONNX, leaves an index out of range all off).

Scatters and Trilu produce a changed copy of their first input, of its size; they may
write it in place (`inplace=((0, 0),)`), which spares the copy when the planner finds
the input dead after the node.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Node
from ge_hub.ir.types import TensorType
from ge_hub.kernels.base import CKernel, Packed, pack_values
from ge_hub.kernels.shape_strided import MAX_WALK_DIMS, contiguous_strides, node_attrs
from ge_hub.registry import KernelSpec

Types = Sequence[TensorType | None]

REDUCTIONS = {"none": 0, "add": 1, "mul": 2, "max": 3, "min": 4}
# Dtypes the scatter reductions other than 'none' compute in.
REDUCING_DTYPES = frozenset({DType.FLOAT32, DType.FLOAT64, DType.INT32, DType.INT64})
RANGE_DTYPES = frozenset({DType.FLOAT32, DType.FLOAT64, DType.INT32, DType.INT64})
ONE_HOT_INDICES = frozenset({DType.INT32, DType.INT64, DType.FLOAT32})
IN_PLACE = ((0, 0),)


def _axis(node: Node, rank: int) -> int:
    axis = node_attrs(node)["axis"]
    return axis + rank if axis < 0 else axis


# --- Gather ---------------------------------------------------------------------------


def _pack_gather(node: Node, in_types: Types, out_types: Types) -> Packed:
    shape = in_types[0].shape
    axis = _axis(node, len(shape))
    return Packed(pack_values([
        in_types[0].dtype.itemsize, axis, math.prod(shape[:axis]), shape[axis],
        math.prod(shape[axis + 1:]), in_types[1].numel]))


# --- GatherElements, ScatterElements --------------------------------------------------


def _element_walk(node: Node, in_types: Types) -> list[int]:
    """The walk over the indices tensor (see index.c): elem, axis, axis_n, ndim, walk_axis,
    shape, data strides; neighbour dims that index data contiguously are merged."""
    data_shape, index_shape = in_types[0].shape, in_types[1].shape
    axis = _axis(node, len(data_shape))
    dims: list[list[int]] = []  # [size, data stride, is the axis]
    for d, (size, stride, data_size) in enumerate(
            zip(index_shape, contiguous_strides(data_shape), data_shape)):
        is_axis = d == axis
        if size == 1 and not is_axis:
            continue
        # This dim continues the previous one in data when the previous one is not the
        # axis and this one covers its data dim fully.
        if (dims and not is_axis and not dims[-1][2] and size == data_size
                and dims[-1][1] == stride * size):
            dims[-1][0] *= size
            dims[-1][1] = stride
            continue
        dims.append([size, stride, is_axis])
    walk_axis = next(i for i, d in enumerate(dims) if d[2])
    return [in_types[0].dtype.itemsize, axis, data_shape[axis], len(dims), walk_axis,
            *(d[0] for d in dims), *(d[1] for d in dims)]


def _pack_gather_elements(node: Node, in_types: Types, out_types: Types) -> Packed:
    return Packed(pack_values(_element_walk(node, in_types)))


def _supports_element_walk(node: Node, in_types: Types, out_types: Types) -> bool:
    return _element_walk(node, in_types)[3] <= MAX_WALK_DIMS


def _reduction(node: Node) -> int:
    return REDUCTIONS[node_attrs(node)["reduction"]]


def _scatter_scratch(node: Node, in_types: Types) -> int:
    """float32 'add' and 'mul' accumulate in float64 scratch, one value per element."""
    if in_types[0].dtype == DType.FLOAT32 and node_attrs(node)["reduction"] in ("add", "mul"):
        return in_types[0].numel * 8
    return 0


def _supports_reduction(node: Node, in_types: Types) -> bool:
    return node_attrs(node)["reduction"] == "none" or in_types[0].dtype in REDUCING_DTYPES


def _pack_scatter_elements(node: Node, in_types: Types, out_types: Types) -> Packed:
    return Packed(pack_values([_reduction(node), *_element_walk(node, in_types)]),
                  scratch_bytes=_scatter_scratch(node, in_types))


def _supports_scatter_elements(node: Node, in_types: Types, out_types: Types) -> bool:
    return (_supports_reduction(node, in_types)
            and _supports_element_walk(node, in_types, out_types))


# --- GatherND, ScatterND --------------------------------------------------------------


def _nd_walk(data_shape: Sequence[int], index_shape: Sequence[int], batch_dims: int):
    """tuples per batch, depth, slice, sizes and strides of the indexed axes (index.c)."""
    depth = index_shape[-1]
    indexed = data_shape[batch_dims:batch_dims + depth]
    strides = contiguous_strides(data_shape[batch_dims:])[:depth]
    tuples = math.prod(index_shape[batch_dims:-1])
    return [tuples, depth, math.prod(data_shape[batch_dims + depth:]), *indexed, *strides]


def _pack_gather_nd(node: Node, in_types: Types, out_types: Types) -> Packed:
    data_shape = in_types[0].shape
    batch_dims = node_attrs(node)["batch_dims"]
    return Packed(pack_values([
        in_types[0].dtype.itemsize, math.prod(data_shape[:batch_dims]),
        math.prod(data_shape[batch_dims:]),
        *_nd_walk(data_shape, in_types[1].shape, batch_dims)]))


def _supports_nd(node: Node, in_types: Types, out_types: Types) -> bool:
    return in_types[1].shape[-1] <= MAX_WALK_DIMS


def _pack_scatter_nd(node: Node, in_types: Types, out_types: Types) -> Packed:
    return Packed(pack_values([_reduction(node), in_types[0].dtype.itemsize,
                               *_nd_walk(in_types[0].shape, in_types[1].shape, 0)]),
                  scratch_bytes=_scatter_scratch(node, in_types))


def _supports_scatter_nd(node: Node, in_types: Types, out_types: Types) -> bool:
    return _supports_reduction(node, in_types) and _supports_nd(node, in_types, out_types)


# --- Trilu, Range ---------------------------------------------------------------------


def _pack_trilu(node: Node, in_types: Types, out_types: Types) -> Packed:
    *batch, rows, cols = in_types[0].shape
    return Packed(pack_values([in_types[0].dtype.itemsize, math.prod(batch), rows, cols,
                               int(node_attrs(node)["upper"])]))


def _supports_range(node: Node, in_types: Types, out_types: Types) -> bool:
    return out_types[0].dtype in RANGE_DTYPES


# --- OneHot ---------------------------------------------------------------------------


def _pack_one_hot(node: Node, in_types: Types, out_types: Types) -> Packed:
    shape = in_types[0].shape
    axis = node_attrs(node)["axis"]
    axis = axis + len(shape) + 1 if axis < 0 else axis
    depth = out_types[0].shape[axis]
    return Packed(pack_values([out_types[0].dtype.itemsize, math.prod(shape[:axis]), depth,
                               math.prod(shape[axis:])]))


def _supports_one_hot(node: Node, in_types: Types, out_types: Types) -> bool:
    return in_types[0].dtype in ONE_HOT_INDICES


# --- ConstantOfShape -------------------------------------------------------------------


def _pack_fill(node: Node, in_types: Types, out_types: Types) -> Packed:
    value = np.asarray(node_attrs(node)["value"]).reshape(-1)[:1]
    # The value's bytes, first in one int64 (native order, as the C side memcpy's them).
    bits = int(np.frombuffer(value.tobytes().ljust(8, b"\0"), dtype=np.int64)[0])
    return Packed(pack_values([value.dtype.itemsize, bits]))


KERNELS = [
    KernelSpec(op="Gather", name="index_gather", impl=CKernel("ge_gather", pack=_pack_gather)),
    KernelSpec(op="GatherElements", name="index_gather_elements",
               impl=CKernel("ge_gather_elements", pack=_pack_gather_elements,
                            supports=_supports_element_walk)),
    KernelSpec(op="GatherND", name="index_gather_nd",
               impl=CKernel("ge_gather_nd", pack=_pack_gather_nd, supports=_supports_nd)),
    KernelSpec(op="ScatterElements", name="index_scatter_elements",
               impl=CKernel("ge_scatter_elements", pack=_pack_scatter_elements,
                            inplace=IN_PLACE, supports=_supports_scatter_elements)),
    KernelSpec(op="ScatterND", name="index_scatter_nd",
               impl=CKernel("ge_scatter_nd", pack=_pack_scatter_nd, inplace=IN_PLACE,
                            supports=_supports_scatter_nd)),
    KernelSpec(op="Trilu", name="index_trilu",
               impl=CKernel("ge_trilu", pack=_pack_trilu, inplace=IN_PLACE)),
    KernelSpec(op="Range", name="index_range",
               impl=CKernel("ge_range", supports=_supports_range)),
    KernelSpec(op="OneHot", name="index_one_hot",
               impl=CKernel("ge_one_hot", pack=_pack_one_hot, supports=_supports_one_hot)),
    # Registered under its old name: plans and offline files name kernels by it.
    KernelSpec(op="ConstantOfShape", name="movement_constant_of_shape",
               impl=CKernel("ge_fill", pack=_pack_fill)),
]
