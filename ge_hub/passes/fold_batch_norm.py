"""Fold an inference BatchNormalization into the Conv, ConvTranspose, Gemm or MatMul
before it, as rewrite rules (the `fold_batch_norm` pass).

    y = scale * (f(x, W) + b - mean) / sqrt(var + eps) + bias
      = f(x, W * k) + (b - mean) * k + bias,        k = scale / sqrt(var + eps)

with k applied along the output-channel axis of W. The weights, bias and all four
BatchNormalization parameters must be constants; the engine refuses the fold when the
producer's output is read by anything else. New weights are computed in float64.
"""

from __future__ import annotations

import numpy as np

from ge_hub.ir.dtypes import DType
from ge_hub.rewrite import Rule, rule_pass

FLOAT_DTYPES = (DType.FLOAT16, DType.FLOAT32, DType.FLOAT64)


def _bn(op, y, scale, bias, mean, var):
    return op.BatchNormalization(y, scale.constant(), bias.constant(), mean.constant(),
                                 var.constant(), training_mode=0)


def _factors(match, scale, bias, mean, var):
    eps = float(match.attrs("BatchNormalization")["epsilon"])
    k = scale.const.astype(np.float64) / np.sqrt(var.const.astype(np.float64) + eps)
    return k, bias.const.astype(np.float64) - mean.const.astype(np.float64) * k


def _check(ctx, x, b, match):
    if x.type.dtype not in FLOAT_DTYPES:
        return ctx.reject(f"dtype {x.type.dtype} is not a float type")
    return b is None or b.is_constant or ctx.reject("the bias is not a constant")


def _fold_conv(op, x, w, b, scale, bias, mean, var, match):
    k, shift = _factors(match, scale, bias, mean, var)
    weight = w.const.astype(np.float64)
    new_w = weight * k.reshape((-1,) + (1,) * (weight.ndim - 1))
    old_b = 0.0 if b is None else b.const.astype(np.float64)
    dtype = w.const.dtype
    return op.Conv(x, new_w.astype(dtype), (old_b * k + shift).astype(dtype),
                   **match.node("Conv").attrs)


def _fold_conv_transpose(op, x, w, b, scale, bias, mean, var, match):
    k, shift = _factors(match, scale, bias, mean, var)
    group = int(match.attrs("ConvTranspose")["group"])
    weight = w.const.astype(np.float64)          # [C, M / group, k...]
    c, m_per = weight.shape[:2]
    grouped = weight.reshape((group, c // group, m_per) + weight.shape[2:])
    factors = k.reshape((group, 1, m_per) + (1,) * (weight.ndim - 2))
    new_w = (grouped * factors).reshape(weight.shape)
    old_b = 0.0 if b is None else b.const.astype(np.float64)
    dtype = w.const.dtype
    return op.ConvTranspose(x, new_w.astype(dtype), (old_b * k + shift).astype(dtype),
                            **match.node("ConvTranspose").attrs)


def _fold_gemm(op, a, w, c, scale, bias, mean, var, match):
    k, shift = _factors(match, scale, bias, mean, var)
    attrs = match.attrs("Gemm")
    weight = w.const.astype(np.float64)
    new_w = weight * (k[:, None] if attrs["transB"] else k[None, :])
    old_c = 0.0 if c is None else float(attrs["beta"]) * c.const.astype(np.float64)
    dtype = w.const.dtype
    return op.Gemm(a, new_w.astype(dtype), (old_c * k + shift).astype(dtype),
                   alpha=float(attrs["alpha"]), transA=int(attrs["transA"]),
                   transB=int(attrs["transB"]))


def _check_matmul(ctx, a, w):
    if a.type.dtype not in FLOAT_DTYPES:
        return ctx.reject(f"dtype {a.type.dtype} is not a float type")
    return (a.type.rank == 2 and w.const.ndim == 2) or ctx.reject(
        "only a 2-D MatMul has its channels where BatchNormalization normalizes")


def _fold_matmul(op, a, w, scale, bias, mean, var, match):
    k, shift = _factors(match, scale, bias, mean, var)
    dtype = w.const.dtype
    return op.Gemm(a, (w.const.astype(np.float64) * k[None, :]).astype(dtype),
                   shift.astype(dtype))


RULES = [
    Rule(lambda op, x, w, b, scale, bias, mean, var:
         _bn(op, op.Conv(x, w.constant(), b.optional()), scale, bias, mean, var),
         _fold_conv, check=_check, name="fold_batch_norm.conv",
         doc="Conv + BatchNormalization -> Conv"),
    Rule(lambda op, x, w, b, scale, bias, mean, var:
         _bn(op, op.ConvTranspose(x, w.constant(), b.optional()), scale, bias, mean, var),
         _fold_conv_transpose, check=_check, name="fold_batch_norm.conv_transpose",
         doc="ConvTranspose + BatchNormalization -> ConvTranspose"),
    Rule(lambda op, a, w, c, scale, bias, mean, var:
         _bn(op, op.Gemm(a, w.constant(), c.optional()), scale, bias, mean, var),
         _fold_gemm, check=lambda ctx, a, c, match: _check(ctx, a, c, match),
         name="fold_batch_norm.gemm", doc="Gemm + BatchNormalization -> Gemm"),
    Rule(lambda op, a, w, scale, bias, mean, var:
         _bn(op, op.MatMul(a, w.constant()), scale, bias, mean, var),
         _fold_matmul, check=_check_matmul, name="fold_batch_norm.matmul",
         doc="2-D MatMul + BatchNormalization -> Gemm"),
]


def fold_batch_norm_pass():
    return rule_pass("fold_batch_norm", RULES, stage="fuse",
                     doc="fold inference BatchNormalization into the Conv, ConvTranspose, "
                         "Gemm or MatMul before it")
