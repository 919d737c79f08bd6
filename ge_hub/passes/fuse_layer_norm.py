"""LayerNormalization fusions, as rewrite rules (the `fuse_layer_norm` pass).

Decomposed LayerNormalization -> LayerNormalization. Exporters before opset 17 (and
hand-written models) spell it out:

    mean = ReduceMean(x, axes)          d = x - mean
    var  = ReduceMean(d ^ 2, axes)      (or d * d)
    y    = d / Sqrt(var + eps) [* scale] [+ bias]

nine steps that each read and write a whole tensor; LayerNormalization is one C kernel.
The axes must be the trailing ones (the same for both means, keepdims=1); eps a single
constant; scale and bias constants that broadcast to the normalized shape (absent:
ones and no B).

Residual Add + LayerNormalization -> ge_hub.SkipLayerNormalization:

    LayerNormalization((x + bias) + skip, Scale, B)     (bias: a constant, optional)

where skip has x's shape: the post-norm transformer block's "norm(x + sublayer(x))",
with the bias Add of the sublayer's last Linear folded in as well. Where the sum is read
elsewhere too (a pre-norm block's residual stream, which the next block adds to), the
fused step also writes it, as its Sum output.

Only float32 is fused: the C kernels are float32 only.
"""

from __future__ import annotations

import numpy as np

from ge_hub.ir.dtypes import DType
from ge_hub.ops.norm import FUSED_DOMAIN
from ge_hub.rewrite import Rule, rule_pass

NAME = "fuse_layer_norm"


def _float32(ctx, x) -> bool:
    return x.type.dtype is DType.FLOAT32 or ctx.reject(
        f"dtype {x.type.dtype}: the LayerNormalization kernels are float32 only")


# -- decomposed LayerNormalization ---------------------------------------------------------


def _square_pow(op, d):
    return op.Pow(d, 2.0)


def _square_mul(op, d):
    return op.Mul(d, d)


def _normalized(op, x, axes, axes2, eps, square):
    d = op.Sub(x, op.ReduceMean(x, axes.constant(), keepdims=1))
    var = op.ReduceMean(square(op, d), axes2.constant(), keepdims=1)
    return op.Div(d, op.Sqrt(op.Add(var, eps.constant())))


def _trailing_axis(x, axes, axes2) -> int | str:
    """The first normalized axis (negative), or why the axes do not fit."""
    rank = x.type.rank
    if rank is None or rank == 0:
        return "the input's rank is unknown"
    first = sorted(int(a) % rank for a in np.asarray(axes.const).reshape(-1))
    second = sorted(int(a) % rank for a in np.asarray(axes2.const).reshape(-1))
    if not first or first != second:
        return f"the two ReduceMean axes differ ({first} and {second})"
    if first != list(range(first[0], rank)):
        return f"axes {first} are not the trailing axes of a rank-{rank} input"
    return first[0] - rank


def _row_param(value, row) -> np.ndarray | None:
    """A constant scale or bias as an array of the normalized shape `row`, or None when
    it would broadcast beyond it."""
    const = np.asarray(value.const)
    shape = list(const.shape)
    while shape and shape[0] == 1:
        shape.pop(0)
    if len(shape) > len(row) or list(row[len(row) - len(shape):]) != shape:
        return None
    return np.ascontiguousarray(np.broadcast_to(const.reshape(shape), row))


def _decomposed_rule(square_name, square, affine):
    names = {"none": "", "scale": ", scale", "scale_bias": ", scale, bias"}[affine]

    def full(op, x, axes, axes2, eps, scale=None, bias=None):
        y = _normalized(op, x, axes, axes2, eps, square)
        if scale is not None:
            y = op.Mul(y, scale.constant())
        if bias is not None:
            y = op.Add(y, bias.constant())
        return y

    # The engine binds variables by parameter name: one signature per affine form.
    if affine == "none":
        def pattern(op, x, axes, axes2, eps):
            return full(op, x, axes, axes2, eps)
    elif affine == "scale":
        def pattern(op, x, axes, axes2, eps, scale):
            return full(op, x, axes, axes2, eps, scale)
    else:
        def pattern(op, x, axes, axes2, eps, scale, bias):
            return full(op, x, axes, axes2, eps, scale, bias)

    def check(ctx, match, x, axes, axes2, eps):
        if not _float32(ctx, x):
            return False
        axis = _trailing_axis(x, axes, axes2)
        if isinstance(axis, str):
            return ctx.reject(axis)
        if x.type.shape is None or not x.type.is_static:
            return ctx.reject("the normalized shape must be static")
        if np.asarray(eps.const).size != 1:
            return ctx.reject(f"epsilon has {np.asarray(eps.const).size} values, not one")
        row = list(x.type.shape[axis:])
        for name in ("scale", "bias"):
            value = match.values.get(name)
            if value is not None and _row_param(value, row) is None:
                return ctx.reject(f"{name} of shape {list(value.const.shape)} broadcasts "
                                  f"beyond the normalized shape {row}")
        return True

    def replacement(op, match, x, axes, axes2, eps):
        axis = _trailing_axis(x, axes, axes2)
        row = list(x.type.shape[axis:])
        scale, bias = match.values.get("scale"), match.values.get("bias")
        scale_array = (np.ones(row, np.float32) if scale is None
                       else _row_param(scale, row).astype(np.float32))
        bias_array = None if bias is None else _row_param(bias, row).astype(np.float32)
        epsilon = float(np.asarray(eps.const).reshape(-1)[0])
        return op.LayerNormalization(x, scale_array, bias_array, axis=axis, epsilon=epsilon)

    return Rule(pattern, replacement, check=check,
                name=f"{NAME}.decomposed_{square_name}_{affine}",
                doc=f"ReduceMean/Sub/{square_name}/ReduceMean/Add/Sqrt/Div{names} "
                    "-> LayerNormalization")


# -- residual Add + LayerNormalization -----------------------------------------------------


def _skip_check(ctx, match, x, skip, scale, b):
    if not _float32(ctx, x):
        return False
    if scale.type.dtype is not DType.FLOAT32 or (b is not None
                                                 and b.type.dtype is not DType.FLOAT32):
        return ctx.reject("Scale or B is not float32")
    node = match.node("LayerNormalization")
    if len(node.outputs) != 1:
        return ctx.reject("the LayerNormalization's Mean or InvStdDev output is used")
    if node.attrs.get("stash_type", 1) != 1:
        return ctx.reject("stash_type is not float32")
    if x.type.shape is None or not x.type.is_static or skip.type.shape != x.type.shape:
        return ctx.reject(f"the added {skip.type} is not of {x.type}'s static shape (a "
                          "broadcast Add stays an Add)")
    bias = match.values.get("bias")
    if bias is not None:
        axis = node.attrs.get("axis", -1) % x.type.rank
        if _row_param(bias, list(x.type.shape[axis:])) is None:
            return ctx.reject(f"bias of shape {list(bias.const.shape)} is not along the "
                              "normalized axes")
    return True


def _skip_attrs(match):
    attrs = match.node("LayerNormalization").attrs
    return {"axis": int(attrs.get("axis", -1)), "epsilon": float(attrs.get("epsilon", 1e-5))}


def _skip_bias_pattern(op, x, bias, skip, scale, b):
    return op.LayerNormalization(op.Add(op.Add(x, bias.constant()), skip), scale,
                                 b.optional())


def _skip_bias(op, match, x, bias, skip, scale, b):
    axis = _skip_attrs(match)["axis"] % x.type.rank
    row = list(x.type.shape[axis:])
    bias_array = _row_param(bias, row).astype(np.float32)
    return op.SkipLayerNormalization(x, skip, scale, b, bias_array, _domain=FUSED_DOMAIN,
                                     **_skip_attrs(match))


def _skip_pattern(op, x, skip, scale, b):
    return op.LayerNormalization(op.Add(x, skip), scale, b.optional())


def _skip(op, match, x, skip, scale, b):
    return op.SkipLayerNormalization(x, skip, scale, b, _domain=FUSED_DOMAIN,
                                     **_skip_attrs(match))


# Pre-norm blocks read the residual sum again (the next block's skip): the sum is an
# output of the match, and of the fused step.


def _skip_bias_sum_pattern(op, x, bias, skip, scale, b):
    total = op.Add(op.Add(x, bias.constant()), skip)
    return op.LayerNormalization(total, scale, b.optional()), total


def _skip_bias_sum(op, match, x, bias, skip, scale, b):
    axis = _skip_attrs(match)["axis"] % x.type.rank
    bias_array = _row_param(bias, list(x.type.shape[axis:])).astype(np.float32)
    return op.SkipLayerNormalization(x, skip, scale, b, bias_array, _domain=FUSED_DOMAIN,
                                     _outputs=2, **_skip_attrs(match))


def _skip_sum_pattern(op, x, skip, scale, b):
    total = op.Add(x, skip)
    return op.LayerNormalization(total, scale, b.optional()), total


def _skip_sum(op, match, x, skip, scale, b):
    return op.SkipLayerNormalization(x, skip, scale, b, None, _domain=FUSED_DOMAIN,
                                     _outputs=2, **_skip_attrs(match))


RULES = [
    # The longest forms first: a bare form would take the inner part of a fuller one.
    *[_decomposed_rule(square_name, square, affine)
      for affine in ("scale_bias", "scale", "none")
      for square_name, square in (("pow", _square_pow), ("mul", _square_mul))],
    Rule(_skip_bias_pattern, _skip_bias, check=_skip_check, name=f"{NAME}.skip_bias",
         doc="LayerNormalization((x + bias) + skip) -> ge_hub.SkipLayerNormalization"),
    Rule(_skip_pattern, _skip, check=_skip_check, name=f"{NAME}.skip",
         doc="LayerNormalization(x + skip) -> ge_hub.SkipLayerNormalization"),
    # After the single-output forms: the sum is written only where it is read again.
    Rule(_skip_bias_sum_pattern, _skip_bias_sum, check=_skip_check,
         name=f"{NAME}.skip_bias_sum",
         doc="LayerNormalization((x + bias) + skip) and the sum, read again -> "
             "ge_hub.SkipLayerNormalization with its Sum output"),
    Rule(_skip_sum_pattern, _skip_sum, check=_skip_check, name=f"{NAME}.skip_sum",
         doc="LayerNormalization(x + skip) and the sum, read again -> "
             "ge_hub.SkipLayerNormalization with its Sum output"),
]


def fuse_layer_norm_pass():
    return rule_pass(NAME, RULES, stage="fuse",
                     doc="decomposed LayerNormalization -> LayerNormalization; residual "
                         "Add + LayerNormalization -> ge_hub.SkipLayerNormalization")
