"""Reductions: sum, mean, amax/amin, max/min over a dim, argmax/argmin, prod, var,
any/all, cumsum, and sort (a TopK of the whole axis).

PyTorch reduces over every dim when `dim` is None or empty, which is what the ONNX
reductions do when `axes` is absent. Integer and bool sums accumulate in int64 in
PyTorch (the node's output dtype), so the input is cast to the output dtype first.
"""

from __future__ import annotations

import numpy as np
import torch
from ge_hub.plugin import DType

from ge_torch import symbolic
from ge_torch.context import ConvertContext, rank
from ge_torch.converters import converter

aten = torch.ops.aten


def _axes(cx: ConvertContext, x, dim) -> list[int] | None:
    """Normalized axes, or None for 'every axis'."""
    if dim is None:
        return None
    dims = [dim] if isinstance(dim, int) else list(dim)
    if not dims:
        return None
    n = max(rank(x), 1)
    return sorted({d % n for d in dims})


def _reduce(cx: ConvertContext, op: str, x, dim, keepdim: bool):
    if rank(x) == 0:
        return cx.op("Identity", x)
    axes = _axes(cx, x, dim)
    return cx.op(op, x, None if axes is None else cx.ints(axes), keepdims=int(bool(keepdim)))


@converter(aten.sum.dim_IntList)
def sum_dim(cx, node, x, dim, keepdim=False, *, dtype=None):
    return _reduce(cx, "ReduceSum", cx.cast(x, cx.out_dtype), dim, keepdim)


@converter(aten.sum.default)
def sum_all(cx, node, x, *, dtype=None):
    return _reduce(cx, "ReduceSum", cx.cast(x, cx.out_dtype), None, False)


@converter(aten.mean.dim)
def mean_dim(cx, node, x, dim, keepdim=False, *, dtype=None):
    return _reduce(cx, "ReduceMean", cx.cast(x, cx.out_dtype), dim, keepdim)


@converter(aten.mean.default)
def mean_all(cx, node, x, *, dtype=None):
    return _reduce(cx, "ReduceMean", cx.cast(x, cx.out_dtype), None, False)


@converter(aten.prod.dim_int)
def prod_dim(cx, node, x, dim, keepdim=False, *, dtype=None):
    return _reduce(cx, "ReduceProd", cx.cast(x, cx.out_dtype), dim, keepdim)


@converter(aten.prod.default)
def prod_all(cx, node, x, *, dtype=None):
    return _reduce(cx, "ReduceProd", cx.cast(x, cx.out_dtype), None, False)


def _no_bool(node) -> str | None:
    val = node.meta.get("val")
    if isinstance(val, (tuple, list)):
        val = val[0]
    if val is not None and val.dtype == torch.bool:
        return f"{node.target} of a bool tensor"
    return None


@converter(aten.amax.default, check=_no_bool)
def amax(cx, node, x, dim=(), keepdim=False):
    return _reduce(cx, "ReduceMax", x, dim, keepdim)


@converter(aten.amin.default, check=_no_bool)
def amin(cx, node, x, dim=(), keepdim=False):
    return _reduce(cx, "ReduceMin", x, dim, keepdim)


@converter(aten.max.default, check=_no_bool)
def max_all(cx, node, x):
    return _reduce(cx, "ReduceMax", x, None, False)


@converter(aten.min.default, check=_no_bool)
def min_all(cx, node, x):
    return _reduce(cx, "ReduceMin", x, None, False)


def _value_and_index(reduce_op: str, arg_op: str):
    def convert(cx, node, x, dim, keepdim=False):
        axis = dim % max(rank(x), 1)
        values = cx.op(reduce_op, x, cx.ints([axis]), keepdims=int(keepdim))
        indices = cx.op(arg_op, x, axis=axis, keepdims=int(keepdim))
        return values, indices

    return convert


converter(aten.max.dim, check=_no_bool)(_value_and_index("ReduceMax", "ArgMax"))
converter(aten.min.dim, check=_no_bool)(_value_and_index("ReduceMin", "ArgMin"))


def _arg(arg_op: str):
    def convert(cx, node, x, dim=None, keepdim=False):
        # PyTorch returns the first index of the extreme value, as ArgMax does by default.
        if dim is None:
            flat = cx.op("Reshape", x, cx.ints([-1]))
            result = cx.op(arg_op, flat, axis=0, keepdims=0)
            if keepdim:
                result = cx.op("Reshape", result, cx.ints([1] * rank(x)))
            return result
        return cx.op(arg_op, x, axis=dim % max(rank(x), 1), keepdims=int(keepdim))

    return convert


converter(aten.argmax.default, check=_no_bool)(_arg("ArgMax"))
converter(aten.argmin.default, check=_no_bool)(_arg("ArgMin"))


def _count(cx: ConvertContext, node, x, axes: list[int] | None, dtype: DType):
    """The number of elements reduced over, as a scalar of `dtype`."""
    sizes = [symbolic.as_expr(s) for s in cx.meta(node.args[0]).shape]
    picked = sizes if axes is None else [sizes[a] for a in axes]
    if all(isinstance(s, int) for s in picked):
        return cx.scalar(int(np.prod(picked, dtype=np.int64)), dtype)
    count = cx.op("ReduceProd", cx.shape(picked), keepdims=0)
    return cx.cast(count, dtype)


def _variance(cx: ConvertContext, node, x, dim, correction, keepdim):
    dtype = cx.out_dtype
    if not dtype.is_float:
        cx.fail("variance of an integer tensor")
    axes = _axes(cx, x, dim)
    axes_value = None if axes is None else cx.ints(axes)
    mean = cx.op("ReduceMean", x, axes_value, keepdims=1)
    centered = cx.op("Sub", x, mean)
    squares = cx.op("ReduceSum", cx.op("Mul", centered, centered), axes_value,
                    keepdims=int(bool(keepdim)))
    correction = 1 if correction is None else correction
    divisor = cx.op("Sub", _count(cx, node, x, axes, dtype), cx.scalar(correction, dtype))
    variance = cx.op("Div", squares, divisor)
    if not keepdim:
        mean = cx.op("ReduceMean", x, axes_value, keepdims=0)
    return variance, mean


@converter(aten.var.correction)
def var(cx, node, x, dim=None, *, correction=None, keepdim=False):
    return _variance(cx, node, x, dim, correction, keepdim)[0]


@converter(aten.var_mean.correction)
def var_mean(cx, node, x, dim=None, *, correction=None, keepdim=False):
    return _variance(cx, node, x, dim, correction, keepdim)


def _logical_reduce(reduce_op: str, everything: bool = False):
    def convert(cx, node, x, dim=None, keepdim=False):
        if everything:
            dim, keepdim = None, False
        as_int = cx.cast(cx.cast(x, DType.BOOL), DType.INT32)
        return cx.cast(_reduce(cx, reduce_op, as_int, dim, keepdim), DType.BOOL)

    return convert


converter(aten.any.dim, aten.any.dims)(_logical_reduce("ReduceMax"))
converter(aten.all.dim, aten.all.dims)(_logical_reduce("ReduceMin"))
converter(aten.any.default)(_logical_reduce("ReduceMax", everything=True))
converter(aten.all.default)(_logical_reduce("ReduceMin", everything=True))


@converter(aten.cumsum.default)
def cumsum(cx, node, x, dim, *, dtype=None):
    x = cx.cast(x, cx.out_dtype)
    if rank(x) == 0:
        return cx.op("Identity", x)
    return cx.op("CumSum", x, cx.const(np.array(dim % rank(x), dtype=np.int64)))


@converter(aten.linalg_vector_norm.default)
def vector_norm(cx, node, x, ord=2, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    x = cx.cast(x, cx.out_dtype)
    if ord == 2:
        return _reduce(cx, "ReduceL2", x, dim, keepdim)
    if ord == 1:
        return _reduce(cx, "ReduceL1", x, dim, keepdim)
    magnitude = cx.op("Abs", x)
    if ord == float("inf"):
        return _reduce(cx, "ReduceMax", magnitude, dim, keepdim)
    if ord == float("-inf"):
        return _reduce(cx, "ReduceMin", magnitude, dim, keepdim)
    if not ord:
        cx.fail(f"vector norm of order {ord}")
    dtype = cx.out_dtype
    powered = cx.op("Pow", magnitude, cx.scalar(ord, dtype))
    return cx.op("Pow", _reduce(cx, "ReduceSum", powered, dim, keepdim),
                 cx.scalar(1.0 / ord, dtype))


def _sortable(node) -> str | None:
    val = node.args[0].meta.get("val")
    if val is not None and val.dtype == torch.bool:
        return "sort of a bool tensor"
    return None


@converter(aten.sort.default, check=_sortable)
def sort(cx, node, x, dim=-1, descending=False):
    return _sort(cx, node, x, dim, descending)


@converter(aten.sort.stable, check=_sortable)
def sort_stable(cx, node, x, *, stable=None, dim=-1, descending=False):
    return _sort(cx, node, x, dim, descending)


def _sort(cx: ConvertContext, node, x, dim: int, descending: bool):
    """TopK with k the axis' length. TopK breaks ties by the lower index in both
    directions, which is what a stable sort does (and what an unstable one may do), and
    sees NaN as the largest value, as torch.sort does (last ascending, first descending)."""
    n = rank(x)
    if n == 0:
        return cx.op("Identity", x), cx.const(np.zeros((), dtype=np.int64))
    axis = dim % n
    k = cx.shape([cx.meta(node.args[0]).shape[axis]])
    values, indices = cx.op("TopK", x, k, axis=axis, largest=int(bool(descending)), sorted=1,
                            outputs=2)
    return values, indices
