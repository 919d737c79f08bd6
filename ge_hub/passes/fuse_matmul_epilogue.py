"""Fuse a MatMul's (or a Gemm's) epilogue into one `ge_hub.FusedMatMul` step, as rewrite
rules (the `fuse_matmul_epilogue` pass):

    Add(MatMul(A, B), c)                -> FusedMatMul(A, B, Bias=c)          (bias)
    Add(MatMul(A, B), Z)                -> FusedMatMul(A, B, Z=Z)             (residual)
    Add(FusedMatMul(A, B, Bias), Z)     -> FusedMatMul(A, B, Bias, Z)         (bias_residual)
    act(MatMul(A, B))                   -> FusedMatMul(A, B, activation=act)
    act(FusedMatMul(A, B, Bias, Z))     -> FusedMatMul(A, B, Bias, Z, activation=act)
    act(Gemm(A, W, c))                  -> FusedMatMul(A, W, Bias=c, activation=act, trans_b)
    act(Reshape(P, s))                  -> Reshape(act fused into P, s)
    Add(Gemm(A, W, c), Z)               -> FusedMatMul(A, W, Bias=c, Z=Z, trans_b)

c is a constant with one value per column of the product (shape [N] or [1, ..., 1, N])
or a single value; Z has the product's shape (a broadcast Add that is not a bias stays an
Add). A Gemm is taken when transA is 0, alpha is 1, its C is absent or a bias with beta
1, and its weight W is either read as it is (transB=0, whatever computes it; ge-torch
writes Transpose(constant), which the plan folds) or a constant (transB=1, as torch.onnx
exports Linear). The FusedMatMul keeps the Gemm's transB as its trans_b and W as it is:
the kernels for a constant weight (ge_nn_linear_f32 and _bf16) lay it out in their panels
from either orientation, and a transposed copy made here would hold a second copy of the
largest weights of a CNN's classifier (VGG's first Linear is 392 MiB) while the pass runs.
A rule that rebuilds a FusedMatMul carries its trans_b. act is one of the
FusedConv activations (ge_hub.passes.fuse_conv_epilogue.ACTIVATIONS: Relu, Clip with
constant bounds, LeakyRelu, Sigmoid, HardSigmoid, HardSwish, X * Sigmoid(X), Gelu erf or
tanh). The
activation joins only a FusedMatMul that has none yet, so act(Add(MatMul, Z)) is one step
but Add(act(MatMul), Z) keeps its Add. The engine refuses a match whose intermediate value
is also read elsewhere or is a graph output. The activation is elementwise, so it moves
across a Reshape between it and the product (ge-torch writes Gemm, Reshape, Gelu for a
Linear on a [batch, sequence, features] input).

Only float32 products whose B has rank >= 2 are fused (what ge_nn_matmul_fused_f32,
core/kernels/nn_matmul_fused.c, runs). Runs after `fuse_gelu` (GELU written out becomes
a Gelu node first) and after `fuse_layer_norm`, whose SkipLayerNormalization already
takes a bias Add and residual Add in front of a LayerNormalization.
"""

from __future__ import annotations

import numpy as np

from ge_hub.ir.dtypes import DType
from ge_hub.ops.nn import FUSED_DOMAIN
from ge_hub.passes.fuse_conv_epilogue import (
    ACTIVATIONS,
    _bounds_check,
    _with_vars,
    _with_vars_match,
)
from ge_hub.rewrite import Rule, rule_pass

NAME = "fuse_matmul_epilogue"


def _product_check(ctx, a, b, match):
    if a.type.dtype is not DType.FLOAT32:
        return ctx.reject(f"dtype {a.type.dtype}: the fused kernel is float32 only")
    if b.type.rank is None or b.type.rank < 2:
        return ctx.reject(f"B of rank {b.type.rank}: the fused kernel needs B's columns")
    shapes = (a.type.shape, b.type.shape)
    if any(s is None or not all(isinstance(d, int) for d in s) for s in shapes):
        return ctx.reject("symbolic shapes: the fused kernel is packed for static ones")
    return True


def _product_out(match):
    node = next(n for n in match.nodes if n.op in ("MatMul", "Gemm", "FusedMatMul"))
    return node.outputs[0].type


def _bias_values(c, columns):
    """c as `columns` values (a single value repeated), or None with why not."""
    if c.type.dtype is not DType.FLOAT32:
        return None, f"bias dtype {c.type.dtype}"
    values = c.const
    if values.size == 1:
        return np.full(columns, values.reshape(-1)[0], np.float32), None
    if values.ndim == 0 or values.shape[-1] != columns or any(d != 1 for d in values.shape[:-1]):
        return None, f"{list(values.shape)} is not one value per column ({columns})"
    return np.ascontiguousarray(values.reshape(-1), np.float32), None


def _same_shape(ctx, z, out):
    return (z.type.dtype is out.dtype and z.type.shape == out.shape) or ctx.reject(
        f"the added {z.type} is not of the product's type {out} (a broadcast Add stays "
        "an Add)")


# -- MatMul + bias, MatMul + residual, FusedMatMul + residual ------------------------------


def _bias_check(ctx, a, b, c, match):
    if not _product_check(ctx, a, b, match):
        return False
    out = _product_out(match)
    if c.const.ndim > len(out.shape):
        return ctx.reject(f"bias {list(c.const.shape)} widens the product {out}")
    values, why = _bias_values(c, out.shape[-1])
    return values is not None or ctx.reject(why)


def _bias(op, a, b, c, match):
    values, _ = _bias_values(c, _product_out(match).shape[-1])
    return op.FusedMatMul(a, b, values, _domain=FUSED_DOMAIN)


def _residual_check(ctx, a, b, z, match):
    return _product_check(ctx, a, b, match) and _same_shape(ctx, z, _product_out(match))


def _residual(op, a, b, z, match):
    return op.FusedMatMul(a, b, None, z, _domain=FUSED_DOMAIN)


def _trans_b(match, op_type):
    return int(match.attrs(op_type).get("transB" if op_type == "Gemm" else "trans_b", 0))


def _bias_residual_check(ctx, a, b, bias, z, match):
    return _product_check(ctx, a, b, match) and _same_shape(ctx, z, _product_out(match))


def _bias_residual(op, a, b, bias, z, match):
    return op.FusedMatMul(a, b, bias, z, trans_b=_trans_b(match, "FusedMatMul"),
                          _domain=FUSED_DOMAIN)


# -- Gemm ------------------------------------------------------------------------------


def _gemm_check(ctx, a, w, c, match):
    attrs = match.attrs("Gemm")
    if attrs.get("transA", 0):
        return ctx.reject("transA=1: the fused kernel reads A as it is")
    if float(attrs.get("alpha", 1.0)) != 1.0:
        return ctx.reject(f"alpha={attrs['alpha']}: only alpha 1 keeps the rounding")
    if c is not None and float(attrs.get("beta", 1.0)) != 1.0:
        return ctx.reject(f"beta={attrs['beta']}: only beta 1 keeps the rounding")
    if attrs.get("transB", 0) and not w.is_constant:
        return ctx.reject("transB=1 with a weight computed at run time: the fused kernel "
                          "reads B as it is")
    if not _product_check(ctx, a, w, match):
        return False
    if c is not None:
        out = _product_out(match)
        if c.type.rank is not None and c.type.rank > 2:
            return ctx.reject(f"C {c.type} has rank > 2")
        values, why = _bias_values(c, out.shape[-1])
        if values is None:
            return ctx.reject(why)
    return True


def _gemm_operands(w, c, match):
    """W as it is, the bias values, trans_b."""
    out = _product_out(match)
    bias = None if c is None else _bias_values(c, out.shape[-1])[0]
    return w, bias, _trans_b(match, "Gemm")


def _gemm_residual_check(ctx, a, w, c, z, match):
    return _gemm_check(ctx, a, w, c, match) and _same_shape(ctx, z, _product_out(match))


def _gemm_residual(op, a, w, c, z, match):
    weight, bias, trans_b = _gemm_operands(w, c, match)
    return op.FusedMatMul(a, weight, bias, z, trans_b=trans_b, _domain=FUSED_DOMAIN)


def _gemm_pattern(op, a, w, c):
    return op.Gemm(a, w, c.constant().optional())


def _with_residual(operands):
    weight, bias, trans_b = operands
    return weight, bias, None, trans_b


# -- activations -----------------------------------------------------------------------


def _producers():
    """(name, pattern of the product, its variables, extra check, replacement operands:
    A, B, Bias, Z, trans_b)."""

    def matmul(op, v):
        return op.MatMul(v["a"], v["b"])

    def fused(op, v):
        return op.FusedMatMul(v["a"], v["b"], v["bias"].optional(), v["z"].optional(),
                              activation="", _domain=FUSED_DOMAIN)

    def gemm(op, v):
        return _gemm_pattern(op, v["a"], v["w"], v["c"])

    return [
        ("", matmul, ("a", "b"), lambda ctx, m, v: _product_check(ctx, v["a"], v["b"], m),
         lambda m, v: (v["a"], v["b"], None, None, 0)),
        ("fused_", fused, ("a", "b", "bias", "z"),
         lambda ctx, m, v: _product_check(ctx, v["a"], v["b"], m),
         lambda m, v: (v["a"], v["b"], v["bias"], v["z"], _trans_b(m, "FusedMatMul"))),
        ("gemm_", gemm, ("a", "w", "c"),
         lambda ctx, m, v: _gemm_check(ctx, v["a"], v["w"], v["c"], m),
         lambda m, v: (v["a"], *_with_residual(_gemm_operands(v["w"], v["c"], m)))),
    ]


def _activation_rules(key, wrap, extra, params):
    rules = []
    for reshaped in (False, True):
        for prefix, producer, names, product_check, operands in _producers():
            variables = (*names, *(("shape",) if reshaped else ()), *extra)

            def pattern(op, producer=producer, reshaped=reshaped, **v):
                y = producer(op, v)
                return wrap(op, op.Reshape(y, v["shape"]) if reshaped else y,
                            *(v[n] for n in extra))

            def check(ctx, match, product_check=product_check, **v):
                return product_check(ctx, match, v) and _bounds_check(ctx, v)

            def replacement(op, match, operands=operands, reshaped=reshaped, **v):
                activation, alpha, beta = params(match, v)
                a, b, bias, z, trans_b = operands(match, v)
                y = op.FusedMatMul(a, b, bias, z, activation=activation, alpha=alpha,
                                   beta=beta, trans_b=trans_b, _domain=FUSED_DOMAIN)
                return op.Reshape(y, v["shape"], **match.attrs("Reshape")) if reshaped else y

            where = f"{'reshape_' if reshaped else ''}{prefix}"
            rules.append(Rule(
                _with_vars(pattern, variables), _with_vars_match(replacement, variables),
                check=_with_vars_match(check, variables, ctx=True),
                name=f"{NAME}.{where}{key}",
                doc=f"{key} after a {prefix.rstrip('_') or 'matmul'}"
                    f"{' and a Reshape' if reshaped else ''} -> FusedMatMul"))
    return rules


RULES = [
    Rule(lambda op, a, b, c: op.Add(op.MatMul(a, b), c.constant()), _bias, check=_bias_check,
         name=f"{NAME}.bias", doc="MatMul then Add of a per-column constant -> FusedMatMul"),
    Rule(lambda op, a, b, z: op.Add(op.MatMul(a, b), z), _residual, check=_residual_check,
         name=f"{NAME}.residual", doc="MatMul then Add of a same-shape tensor -> FusedMatMul"),
    Rule(lambda op, a, b, bias, z: op.Add(
        op.FusedMatMul(a, b, bias, activation="", _domain=FUSED_DOMAIN), z),
         _bias_residual, check=_bias_residual_check, name=f"{NAME}.bias_residual",
         doc="FusedMatMul with a bias then Add of a same-shape tensor -> one FusedMatMul"),
    Rule(lambda op, a, w, c, z: op.Add(_gemm_pattern(op, a, w, c), z), _gemm_residual,
         check=_gemm_residual_check, name=f"{NAME}.gemm_residual",
         doc="Gemm (constant weight) then Add of a same-shape tensor -> FusedMatMul"),
    *[rule for key, (wrap, extra, params) in ACTIVATIONS.items()
      for rule in _activation_rules(key, wrap, extra, params)],
]


def fuse_matmul_epilogue_pass():
    return rule_pass(NAME, RULES, stage="fuse",
                     doc="fuse a MatMul's (or constant-weight Gemm's) bias Add, residual "
                         "Add and activation into one ge_hub.FusedMatMul step")
