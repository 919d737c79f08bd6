"""Kernels of the bounded data-dependent ops (`ge_hub.ops.select_bounded`): NonZero,
Compress, Unique and NonMaxSuppression with an output size that the kernel writes at run
time. The C side is core/kernels/select.c, which documents each blob and the layout of
the outputs (each at its real shape in the leading elements of a bound-sized buffer, the
real length in the last output).

Dtypes the C kernels do not handle (Unique of int8, NMS of float64 boxes) are left to the
reference fallback, which kernel selection counts and `summary()` names.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Node
from ge_hub.ir.types import TensorType
from ge_hub.kernels.base import CKernel, Packed, pack_values
from ge_hub.kernels.shape_strided import node_attrs
from ge_hub.ops.select_bounded import BOUNDED_DOMAIN
from ge_hub.registry import KernelSpec

Types = Sequence[TensorType | None]

NON_ZERO_DTYPES = frozenset({
    DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.BFLOAT16, DType.INT8, DType.UINT8,
    DType.BOOL, DType.INT16, DType.UINT16, DType.INT32, DType.UINT32, DType.INT64,
    DType.UINT64})
UNIQUE_DTYPES = frozenset({DType.FLOAT32, DType.FLOAT64, DType.INT32, DType.INT64})
UNIQUE_ITEM_BYTES = 32 + 16  # one sort item and one group record per element (select.c)
# A candidate, its corners and area, a kept index, a bucket head and link (select.c).
NMS_BOX_BYTES = 8 + 5 * 8 + 3 * 4


def _supports_non_zero(node: Node, in_types: Types, out_types: Types) -> bool:
    return in_types[0].dtype in NON_ZERO_DTYPES


def _pack_compress(node: Node, in_types: Types, out_types: Types) -> Packed:
    shape = in_types[0].shape
    axis = node_attrs(node)["axis"]
    itemsize = in_types[0].dtype.itemsize
    if axis is None:
        return Packed(pack_values([1, math.prod(shape), itemsize]))
    axis %= len(shape)
    return Packed(pack_values([math.prod(shape[:axis]), shape[axis],
                               math.prod(shape[axis + 1:]) * itemsize]))


def _pack_unique(node: Node, in_types: Types, out_types: Types) -> Packed:
    return Packed(pack_values([node_attrs(node)["sorted"]]),
                  scratch_bytes=in_types[0].numel * UNIQUE_ITEM_BYTES)


def _supports_unique(node: Node, in_types: Types, out_types: Types) -> bool:
    return in_types[0].dtype in UNIQUE_DTYPES


def _pack_nms(node: Node, in_types: Types, out_types: Types) -> Packed:
    return Packed(pack_values([node_attrs(node)["center_point_box"], out_types[0].shape[0]]),
                  scratch_bytes=in_types[0].shape[1] * NMS_BOX_BYTES + 4)


def _supports_nms(node: Node, in_types: Types, out_types: Types) -> bool:
    return all(t is None or t.dtype is DType.FLOAT32
               for t in (in_types[0], in_types[1], *in_types[3:5]))


KERNELS = [
    KernelSpec(op="NonZeroBounded", domain=BOUNDED_DOMAIN, name="select_non_zero",
               impl=CKernel("ge_non_zero_bounded", supports=_supports_non_zero)),
    KernelSpec(op="CompressBounded", domain=BOUNDED_DOMAIN, name="select_compress",
               impl=CKernel("ge_compress_bounded", pack=_pack_compress)),
    KernelSpec(op="UniqueBounded", domain=BOUNDED_DOMAIN, name="select_unique",
               impl=CKernel("ge_unique_bounded", pack=_pack_unique, supports=_supports_unique)),
    KernelSpec(op="NonMaxSuppressionBounded", domain=BOUNDED_DOMAIN, name="select_nms",
               impl=CKernel("ge_nms_bounded", pack=_pack_nms, supports=_supports_nms)),
]
