"""Activation ATen ops that map onto one ge-hub activation each.

The decomposition table (`ge_torch.decompositions`) keeps these ops whole instead of
letting PyTorch expand them into arithmetic, because ge-hub has a kernel for each.
"""

from __future__ import annotations

import torch

from ge_torch.converters import converter

aten = torch.ops.aten


def _float_input(node) -> str | None:
    val = node.meta.get("val")
    if val is not None and not val.dtype.is_floating_point:
        return f"{node.target} of a {val.dtype} tensor"
    return None


@converter(aten.gelu.default, check=_float_input)
def gelu(cx, node, x, *, approximate="none"):
    if approximate not in ("none", "tanh"):
        cx.fail(f"gelu approximate={approximate!r}")
    return cx.op("Gelu", x, approximate=approximate)


@converter(aten.hardtanh.default)
def hardtanh(cx, node, x, min_val=-1.0, max_val=1.0):
    dtype = cx.out_dtype
    return cx.op("Clip", x, cx.scalar(min_val, dtype), cx.scalar(max_val, dtype))


@converter(aten.clamp.default)
def clamp(cx, node, x, min=None, max=None):  # noqa: A002 - ATen's argument names
    dtype = cx.out_dtype
    x = cx.cast(x, dtype)
    low = None if min is None else cx.scalar(min, dtype)
    high = None if max is None else cx.scalar(max, dtype)
    return cx.op("Clip", x, low, high)


@converter(aten.clamp.Tensor)
def clamp_tensor(cx, node, x, min=None, max=None):  # noqa: A002
    dtype = cx.out_dtype
    result = cx.cast(x, dtype)
    if min is not None:
        result = cx.op("Max", result, cx.cast(min, dtype))
    if max is not None:
        result = cx.op("Min", result, cx.cast(max, dtype))
    return result


@converter(aten.leaky_relu.default, check=_float_input)
def leaky_relu(cx, node, x, negative_slope=0.01):
    return cx.op("LeakyRelu", x, alpha=float(negative_slope))


@converter(aten.elu.default, check=_float_input)
def elu(cx, node, x, alpha=1.0, scale=1.0, input_scale=1.0):
    # scale * (x if x > 0 else alpha * (exp(x * input_scale) - 1)); celu and selu
    # decompose to this.
    dtype = cx.out_dtype
    if input_scale == 1:
        y = cx.op("Elu", x, alpha=float(alpha))
    else:
        zero = cx.scalar(0, dtype)
        scaled = cx.op("Mul", x, cx.scalar(input_scale, dtype))
        negative = cx.op("Mul", cx.scalar(alpha, dtype),
                         cx.op("Sub", cx.op("Exp", scaled), cx.scalar(1, dtype)))
        y = cx.op("Where", cx.op("Greater", x, zero), x, negative)
    return y if scale == 1 else cx.op("Mul", y, cx.scalar(scale, dtype))


@converter(aten.hardsigmoid.default, check=_float_input)
def hardsigmoid(cx, node, x):
    # relu6(x + 3) / 6
    return cx.op("HardSigmoid", x, alpha=1.0 / 6.0, beta=0.5)


@converter(aten.hardswish.default, check=_float_input)
def hardswish(cx, node, x):
    return cx.op("HardSwish", x)


@converter(aten.mish.default, check=_float_input)
def mish(cx, node, x):
    return cx.op("Mish", x)


@converter(aten.silu.default, check=_float_input)
def silu(cx, node, x):
    return cx.op("Mul", x, cx.op("Sigmoid", x))


@converter(aten._prelu_kernel.default, check=_float_input)
def prelu(cx, node, x, weight):
    zero = cx.scalar(0, cx.out_dtype)
    return cx.op("Where", cx.op("Greater", x, zero), x, cx.op("Mul", x, weight))
