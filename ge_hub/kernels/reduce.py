"""Reduction and scan kernels: the Reduce* family, ArgMax/ArgMin, CumSum, CumProd and TopK.

The C side is core/kernels/reduce.c (Reduce*), reduce_index.c (ArgMax, ArgMin, TopK) and
reduce_scan.c (CumSum, CumProd); reduce.h documents the blobs. Everything shape-dependent is
resolved here, once per node: the axes (a constant input, or the node falls back to the
reference), keepdims (it changes no byte of the output) and noop_with_empty_axes.

A Reduce* node becomes a split of its input into kept and reduced dims: size-1 dims are
dropped and adjacent dims of the same kind merged, and a trailing run of kept dims
becomes `inner`, the contiguous stretch the C loop vectorizes over. The usual cases fold
to one kept and one reduced dim (a row or column reduction), any other axes set to a few
strided dims, never to a transpose.

ArgMax, ArgMin, CumSum, CumProd and TopK work along one axis, as [outer, n, inner].
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Node
from ge_hub.ir.types import TensorType
from ge_hub.kernels.base import BlobRecord, CKernel, Packed, pack_values
from ge_hub.ops import get_schema
from ge_hub.registry import KernelSpec

# GE_MAX_RANK in core/include/ge_hub/kernel.h: the most kept or reduced dims a blob has.
MAX_RANK = 8

F32, F64, I32, I64 = DType.FLOAT32, DType.FLOAT64, DType.INT32, DType.INT64
_SUFFIX = {F32: "f32", F64: "f64", I32: "i32", I64: "i64"}


def _static(types: Sequence[TensorType | None]) -> bool:
    return all(t is None or t.is_static for t in types)


def _attrs(node: Node) -> dict:
    return get_schema(node.op, node.domain).fill_attrs(dict(node.attrs), node.name)


def contiguous_strides(shape: Sequence[int]) -> list[int]:
    """Element strides of a row-major tensor of this shape."""
    strides, step = [0] * len(shape), 1
    for axis in reversed(range(len(shape))):
        strides[axis] = step
        step *= shape[axis]
    return strides


# --- Reduce* -------------------------------------------------------------------------


def reduced_axes(node: Node, input_types: Sequence[TensorType | None]) -> tuple[int, ...] | None:
    """The sorted axes a Reduce* node reduces, () for its elementwise step only; None when
    they are only known at run time."""
    rank = input_types[0].rank
    attrs = _attrs(node)
    axes_value = node.inputs[1] if len(node.inputs) > 1 else None
    if axes_value is None:
        axes: list[int] = []
    elif axes_value.const is not None:
        axes = [int(a) for a in axes_value.const.reshape(-1).tolist()]
    elif input_types[1] is not None and input_types[1].shape == (0,):
        axes = []  # a runtime input, but one that is always empty
    else:
        return None
    if not axes:
        return () if attrs["noop_with_empty_axes"] else tuple(range(rank))
    return tuple(sorted({a % rank for a in axes}))


def reduce_layout(shape: Sequence[int], axes: Sequence[int]):
    """Split a row-major `shape` into kept dims, reduced dims and a contiguous inner run.

    Returns (kept, reduced, inner): kept and reduced are lists of (size, stride) pairs,
    outermost first; `inner` is the size of the trailing run of kept dims (stride 1), 1
    when the last dim is reduced. Output element (row, i) is the reduction of the input
    elements at row_offset + reduced_offset + i.
    """
    strides = contiguous_strides(shape)
    axes = set(axes)
    groups: list[list] = []  # [size, stride, is_reduced]
    for axis, size in enumerate(shape):
        if size == 1:
            continue  # walks nowhere, whether kept or reduced
        is_reduced = axis in axes
        if groups and groups[-1][2] == is_reduced:
            # Contiguous input: the outer dim's stride is the inner's times its size.
            groups[-1][0] *= size
            groups[-1][1] = strides[axis]
        else:
            groups.append([size, strides[axis], is_reduced])
    inner = 1
    if groups and not groups[-1][2]:
        inner = groups.pop()[0]
    kept = [(size, stride) for size, stride, is_reduced in groups if not is_reduced]
    reduced = [(size, stride) for size, stride, is_reduced in groups if is_reduced]
    return kept, reduced, inner


def _reduce_ints(node: Node, input_types, output_types) -> list[int] | None:
    if not _static([input_types[0], *output_types]):
        return None
    axes = reduced_axes(node, input_types)
    if axes is None:
        return None
    kept, reduced, inner = reduce_layout(input_types[0].shape, axes)
    if len(kept) > MAX_RANK or len(reduced) > MAX_RANK:
        return None
    return [len(kept), *(s for s, _ in kept), *(st for _, st in kept),
            len(reduced), *(s for s, _ in reduced), *(st for _, st in reduced), inner]


def supports_reduce(node: Node, input_types, output_types) -> bool:
    """Static shapes and constant (or absent) axes."""
    return _reduce_ints(node, input_types, output_types) is not None


def pack_reduce(node: Node, input_types, output_types) -> Packed:
    """Blob: nk, kept_shape[nk], kept_strides[nk], nr, red_shape[nr], red_strides[nr], inner."""
    ints = _reduce_ints(node, input_types, output_types)
    if ints is None:
        raise ValueError(f"node {node.name!r} ({node.op}): the C reduction needs static shapes "
                         "and constant axes")
    return Packed(pack_values(ints))


# --- one axis: ArgMax, ArgMin, CumSum, TopK ------------------------------------------

# Their fixed blobs, field for field as core/kernels/reduce.h declares them.
ARG_BLOB = BlobRecord("GE_ARG_BLOB", ("outer", "n", "inner", "select_last_index"))
TOPK_BLOB = BlobRecord("GE_TOPK_BLOB", ("outer", "n", "inner", "k", "largest"))
CUMSUM_BLOB = BlobRecord("GE_CUMSUM_BLOB", ("outer", "n", "inner", "exclusive", "reverse",
                                            "runtime_axis"))


def axis_split(shape: Sequence[int], axis: int) -> tuple[int, int, int]:
    """(outer, n, inner) of a row-major shape around `axis`."""
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])


def _const_scalar(node: Node, index: int) -> int | None:
    value = node.inputs[index] if len(node.inputs) > index else None
    if value is None or value.const is None or value.const.size != 1:
        return None
    return int(value.const.reshape(-1)[0])


def _supports_static(node: Node, input_types, output_types) -> bool:
    return input_types[0].rank is not None and _static([input_types[0], *output_types])


def pack_arg(node: Node, input_types, output_types) -> Packed:
    """Blob: outer, n, inner, select_last_index."""
    attrs = _attrs(node)
    shape = input_types[0].shape
    outer, n, inner = axis_split(shape, attrs["axis"] % len(shape))
    return Packed(ARG_BLOB.pack(outer=outer, n=n, inner=inner,
                                select_last_index=attrs["select_last_index"]))


def supports_cumsum(node: Node, input_types, output_types) -> bool:
    """Static shapes; the axis a constant or a one-element graph input (read at run time)."""
    axis = input_types[1]
    return _supports_static(node, input_types, output_types) and (
        _const_scalar(node, 1) is not None
        or (axis.shape is not None and axis.is_static and math.prod(axis.shape) == 1))


def pack_cumsum(node: Node, input_types, output_types) -> Packed:
    """Blob: outer, n, inner, exclusive, reverse, runtime_axis."""
    attrs = _attrs(node)
    shape = input_types[0].shape
    axis = _const_scalar(node, 1)
    if axis is None:
        outer = n = inner = 0
    else:
        outer, n, inner = axis_split(shape, axis % max(len(shape), 1))
    return Packed(CUMSUM_BLOB.pack(outer=outer, n=n, inner=inner, exclusive=attrs["exclusive"],
                                   reverse=attrs["reverse"], runtime_axis=int(axis is None)))


def supports_topk(node: Node, input_types, output_types) -> bool:
    """Static shapes and a constant K."""
    return _supports_static(node, input_types, output_types) and _const_scalar(node, 1) is not None


def pack_topk(node: Node, input_types, output_types) -> Packed:
    """Blob: outer, n, inner, k, largest. The outputs themselves hold each row's heap."""
    attrs = _attrs(node)
    shape = input_types[0].shape
    outer, n, inner = axis_split(shape, attrs["axis"] % len(shape))
    return Packed(TOPK_BLOB.pack(outer=outer, n=n, inner=inner, k=_const_scalar(node, 1),
                                 largest=attrs["largest"]))


# --- the registrations -----------------------------------------------------------------

# op -> (symbol stem, dtypes with a C kernel)
_REDUCTIONS = {
    "ReduceSum": ("reduce_sum", (F32, I32, I64)),
    "ReduceMean": ("reduce_mean", (F32,)),
    "ReduceMax": ("reduce_max", (F32, I32, I64)),
    "ReduceMin": ("reduce_min", (F32, I32, I64)),
    "ReduceProd": ("reduce_prod", (F32, I32, I64)),
    "ReduceL1": ("reduce_l1", (F32,)),
    "ReduceL2": ("reduce_l2", (F32,)),
    "ReduceLogSumExp": ("reduce_log_sum_exp", (F32,)),
    "ReduceSumSquare": ("reduce_sum_square", (F32,)),
}
_ONE_AXIS = {
    "ArgMax": ("argmax", pack_arg, _supports_static),
    "ArgMin": ("argmin", pack_arg, _supports_static),
    "CumSum": ("cumsum", pack_cumsum, supports_cumsum),
    "TopK": ("topk", pack_topk, supports_topk),
}


def _spec(op: str, stem: str, dtype: DType, pack, supports) -> KernelSpec:
    symbol = f"ge_{stem}_{_SUFFIX[dtype]}"
    # Only the data input's dtype is declared: axes, axis and K come in several dtypes.
    return KernelSpec(op=op, name=symbol.removeprefix("ge_"), dtypes=(dtype,),
                      impl=CKernel(symbol, pack=pack, supports=supports))


KERNELS = [
    *(_spec(op, stem, dtype, pack_reduce, supports_reduce)
      for op, (stem, dtypes) in _REDUCTIONS.items() for dtype in dtypes),
    *(_spec(op, stem, dtype, pack, supports)
      for op, (stem, pack, supports) in _ONE_AXIS.items() for dtype in (F32, I32, I64)),
    # CumSum in float64, and CumProd (CumSum's blob and template in reduce_scan.c).
    _spec("CumSum", "cumsum", F64, pack_cumsum, supports_cumsum),
    *(_spec("CumProd", "cumprod", dtype, pack_cumsum, supports_cumsum)
      for dtype in (F32, F64, I32, I64)),
]
