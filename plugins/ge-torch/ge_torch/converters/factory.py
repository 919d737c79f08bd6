"""Tensor factories: full, full_like, scalar_tensor, arange, empty, zeros and ones.

With static sizes a factory is a constant of the graph (computed here, the way PyTorch
computes it); with symbolic sizes it is built at run time (ConstantOfShape, Range), and
ge-hub folds it to a constant once the sizes are known.
"""

from __future__ import annotations

import numpy as np
import torch

from ge_torch import symbolic
from ge_torch.context import ConvertContext
from ge_torch.converters import converter

aten = torch.ops.aten


def _cpu_only(node) -> str | None:
    device = node.kwargs.get("device")
    if device is not None and torch.device(device).type != "cpu":
        return f"a tensor created on device {device}"
    return None


def _filled(cx: ConvertContext, sizes, value):
    dtype = cx.out_dtype
    sizes = [symbolic.as_expr(s) for s in sizes]
    if symbolic.is_symbolic(value):
        return cx.op("Expand", cx.scalar(value, dtype), cx.shape(sizes))
    if all(isinstance(s, int) for s in sizes):
        return cx.const(np.full(sizes, value, dtype=dtype.numpy))
    fill = np.array([value], dtype=dtype.numpy)
    return cx.op("ConstantOfShape", cx.shape(sizes), value=fill)


@converter(aten.full.default, check=_cpu_only)
def full(cx, node, size, fill_value, **_options):
    return _filled(cx, size, fill_value)


@converter(aten.full_like.default, check=_cpu_only)
def full_like(cx, node, x, fill_value, **_options):
    return _filled(cx, cx.out_sizes(), fill_value)


@converter(aten.zeros.default, aten.empty.memory_format, check=_cpu_only)
def zeros(cx, node, size, **_options):
    # empty's contents are unspecified; zeros are as good as anything and deterministic.
    return _filled(cx, size, 0)


@converter(aten.ones.default, check=_cpu_only)
def ones(cx, node, size, **_options):
    return _filled(cx, size, 1)


@converter(aten.zeros_like.default, aten.empty_like.default, check=_cpu_only)
def zeros_like(cx, node, x, **_options):
    return _filled(cx, cx.out_sizes(), 0)


@converter(aten.ones_like.default, check=_cpu_only)
def ones_like(cx, node, x, **_options):
    return _filled(cx, cx.out_sizes(), 1)


@converter(aten.scalar_tensor.default, check=_cpu_only)
def scalar_tensor(cx, node, value, **_options):
    return cx.scalar(value, cx.out_dtype)


@converter(aten.arange.start_step, check=_cpu_only)
def arange(cx, node, start, end, step=1, **_options):
    dtype = cx.out_dtype
    (length,) = cx.out_sizes()
    if not any(symbolic.is_symbolic(v) for v in (start, end, step, length)):
        if dtype.is_integer:
            values = int(start) + int(step) * np.arange(length, dtype=np.int64)
        else:
            # Like PyTorch: start + i * step in double precision, then rounded once.
            values = float(start) + float(step) * np.arange(length, dtype=np.float64)
        return cx.const(values.astype(dtype.numpy))
    return cx.op("Range", cx.scalar(start, dtype), cx.scalar(end, dtype),
                 cx.scalar(step, dtype))


@converter(aten.arange.start, check=_cpu_only)
def arange_start(cx, node, start, end, **options):
    return arange(cx, node, start, end, 1, **options)


@converter(aten.arange.default, check=_cpu_only)
def arange_end(cx, node, end, **options):
    return arange(cx, node, 0, end, 1, **options)


@converter(aten.copy.default)
def copy(cx, node, target, source, non_blocking=False):
    # The functional copy: the target's shape and dtype with the source's values.
    return cx.op("Expand", cx.cast(source, target.type.dtype), cx.op("Shape", target))
