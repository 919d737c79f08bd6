"""Fuse a Conv's epilogue into one `ge_hub.FusedConv` step, as rewrite rules (the
`fuse_conv_epilogue` pass):

    Add(Conv(X, W, B), Z)          -> FusedConv(X, W, B, Z)              (residual)
    Sum(Conv(X, W, B), Z)          -> the same                           (residual_sum)
    Mul(Conv(X, W, B), s)          -> Conv(X, W * s, B * s)              (scale)
    Add(Conv(X, W, B), t)          -> Conv(X, W, B + t)                  (shift)
    act(Conv(X, W, B))             -> FusedConv(X, W, B, activation=act)
    act(FusedConv(X, W, B, Z))     -> FusedConv(X, W, B, Z, activation=act)

s and t are constants with one value per output channel (or one value): batch norms that
exporters wrote as Mul and Add, folded (in float64) so that the Conv meets its activation.
act is one of Relu, Clip with constant bounds (Relu6), LeakyRelu, Sigmoid, HardSigmoid,
HardSwish, X * Sigmoid(X) (SiLU/Swish) and Gelu (erf or tanh). The residual Z must have
the Conv output's shape (a broadcast Add, such as a per-channel shift, stays an Add); the
activation joins a FusedConv only when it has none yet, so act(Add(Conv, Z)) becomes one
step but Add(act(Conv), Z) keeps its Add. The engine refuses a match whose Conv (or
FusedConv) output is also read by another node or is a graph output, so a Conv whose
result is needed unactivated elsewhere stays whole.

Only float32 convolutions of 1 to 3 spatial dims are fused: those are what the C kernel
(ge_conv_fused_f32, core/kernels/conv.c) runs; anything else would trade a fast Conv for
a reference step. Runs after `fold_batch_norm`, so Conv + BatchNormalization + Relu is one
step in the end.
"""

from __future__ import annotations

import inspect

import numpy as np

from ge_hub.ir.dtypes import DType
from ge_hub.ops.conv import FUSED_DOMAIN
from ge_hub.rewrite import Rule, rule_pass

NAME = "fuse_conv_epilogue"


def _with_vars(function, names):
    """`function` taking its pattern variables by keyword, with a signature that names
    them (the rewrite engine binds variables by parameter name)."""
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD)
              for n in ("op", *names)]

    def bound(op, *values, **by_name):
        return function(op, **dict(zip(names, values)), **by_name)

    bound.__signature__ = inspect.Signature(params)
    bound.__name__ = function.__name__
    return bound


def _conv(op, x, w, b, z=None):
    return op.Conv(x, w, b.optional())


def _fused(op, x, w, b, z):
    return op.FusedConv(x, w, b.optional(), z.optional(), activation="", _domain=FUSED_DOMAIN)


def _check_conv(ctx, x):
    if x.type.dtype is not DType.FLOAT32:
        return ctx.reject(f"dtype {x.type.dtype}: the fused kernel is float32 only")
    return x.type.rank in (3, 4, 5) or ctx.reject(
        f"input of rank {x.type.rank}: the fused kernel takes 1 to 3 spatial dims")


def _conv_attrs(match):
    node = next(n for n in match.nodes if n.op in ("Conv", "FusedConv"))
    return {k: v for k, v in node.attrs.items() if k not in ("activation", "alpha", "beta")}


# -- residual ------------------------------------------------------------------------------


def _residual_pattern(op, x, w, b, z):
    return op.Add(op.Conv(x, w, b.optional()), z)


def _residual_sum_pattern(op, x, w, b, z):  # caffe2-era exports add with a two-input Sum
    return op.Sum(op.Conv(x, w, b.optional()), z)


def _residual_check(ctx, x, z, match):
    if not _check_conv(ctx, x):
        return False
    out = match.node("Conv").outputs[0].type
    return (z.type.dtype is out.dtype and z.type.shape == out.shape) or ctx.reject(
        f"the added {z.type} is not of the Conv output's type {out} (a broadcast Add "
        "stays an Add)")


def _residual(op, x, w, b, z, match):
    return op.FusedConv(x, w, b, z, _domain=FUSED_DOMAIN, **_conv_attrs(match))


# -- per-channel scale and shift (batch norms exported as Mul and Add) -------------------


def _per_channel(x, c, match):
    """(c's values as one per output channel of the Conv, a scalar repeated; None) or
    (None, why not)."""
    if x.type.dtype is not DType.FLOAT32 or c.type.dtype is not DType.FLOAT32:
        return None, f"dtype {c.type.dtype}: only float32 Convs are folded"
    out = match.node("Conv").outputs[0].type.shape
    shape, rank, channels = c.const.shape, len(out), out[1]
    if c.const.size == 1:
        return np.full(channels, c.const.reshape(-1)[0], np.float64), None
    # broadcast against [N, M, spatial...]: [M, 1, ..., 1] or [1, M, 1, ..., 1]
    dims = (1,) * (rank - len(shape)) + tuple(shape) if len(shape) <= rank else None
    if dims is None or dims[0] != 1 or dims[1] != channels or any(d != 1 for d in dims[2:]):
        return None, f"{list(shape)} is not one value per output channel of {list(out)}"
    return c.const.reshape(-1).astype(np.float64), None


def _per_channel_check(ctx, x, c, match):
    if not _check_conv(ctx, x):
        return False
    values, why = _per_channel(x, c, match)
    return values is not None or ctx.reject(why)


def _scale_check(ctx, x, s, match):
    return _per_channel_check(ctx, x, s, match)


def _shift_check(ctx, x, t, match):
    return _per_channel_check(ctx, x, t, match)


def _scale(op, x, w, b, s, match):
    k, _ = _per_channel(x, s, match)
    weight = w.const.astype(np.float64)
    new_w = (weight * k.reshape((-1,) + (1,) * (weight.ndim - 1))).astype(np.float32)
    new_b = None if b is None else (b.const.astype(np.float64) * k).astype(np.float32)
    return op.Conv(x, new_w, new_b, **_conv_attrs(match))


def _shift(op, x, w, b, t, match):
    shift, _ = _per_channel(x, t, match)
    old = 0.0 if b is None else b.const.astype(np.float64)
    return op.Conv(x, w, (old + shift).astype(np.float32), **_conv_attrs(match))


# -- activations ---------------------------------------------------------------------------

def _scalar(value, default):
    if value is None:
        return default
    return float(value.const.reshape(-1)[0])


# name -> (activation node(s) over the producer y, extra variables, the FusedConv's
# activation, alpha and beta from the match)
ACTIVATIONS = {
    "relu": (lambda op, y: op.Relu(y), (), lambda m, v: ("Relu", 0.0, 0.0)),
    "clip": (lambda op, y, lo, hi: op.Clip(y, lo.constant().optional(),
                                          hi.constant().optional()),
             ("lo", "hi"),
             lambda m, v: ("Clip", _scalar(v["lo"], -np.inf), _scalar(v["hi"], np.inf))),
    "leaky_relu": (lambda op, y: op.LeakyRelu(y), (),
                   lambda m, v: ("LeakyRelu", float(m.attrs("LeakyRelu")["alpha"]), 0.0)),
    "sigmoid": (lambda op, y: op.Sigmoid(y), (), lambda m, v: ("Sigmoid", 0.0, 0.0)),
    "hard_sigmoid": (lambda op, y: op.HardSigmoid(y), (),
                     lambda m, v: ("HardSigmoid", float(m.attrs("HardSigmoid")["alpha"]),
                                   float(m.attrs("HardSigmoid")["beta"]))),
    "hard_swish": (lambda op, y: op.HardSwish(y), (), lambda m, v: ("HardSwish", 0.0, 0.0)),
    "silu": (lambda op, y: op.Mul(y, op.Sigmoid(y)), (), lambda m, v: ("SiLU", 0.0, 0.0)),
    "gelu": (lambda op, y: op.Gelu(y), (),
             lambda m, v: ("GeluTanh" if m.attrs("Gelu")["approximate"] == "tanh" else "Gelu",
                           0.0, 0.0)),
}


def _bounds_check(ctx, values):
    for name in ("lo", "hi"):
        value = values.get(name)
        if value is not None and value.const.size != 1:
            return ctx.reject(f"Clip bound {name} has {value.const.size} values, not one")
    return True


def _activation_rules(key, wrap, extra, params):
    rules = []
    for fused in (False, True):
        producer = _fused if fused else _conv
        variables = ("x", "w", "b", *(("z",) if fused else ()), *extra)

        def pattern(op, producer=producer, **v):
            y = producer(op, v["x"], v["w"], v["b"], v.get("z"))
            return wrap(op, y, *(v[n] for n in extra))

        def check(ctx, match, **v):
            return _check_conv(ctx, v["x"]) and _bounds_check(ctx, v)

        def replacement(op, match, fused=fused, **v):
            activation, alpha, beta = params(match, v)
            z = v.get("z") if fused else None
            return op.FusedConv(v["x"], v["w"], v["b"], z, activation=activation,
                                alpha=alpha, beta=beta, _domain=FUSED_DOMAIN,
                                **_conv_attrs(match))

        source = "FusedConv" if fused else "Conv"
        rules.append(Rule(
            _with_vars(pattern, variables), _with_vars_match(replacement, variables),
            check=_with_vars_match(check, variables, ctx=True),
            name=f"{NAME}.{'residual_' if fused else ''}{key}",
            doc=f"{key} after a {source} -> FusedConv"))
    return rules


def _with_vars_match(function, names, ctx=False):
    """Like `_with_vars`, for a check (`ctx` first) or replacement that also takes
    `match`."""
    head = "ctx" if ctx else "op"
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD)
              for n in (head, *names, "match")]

    def bound(first, *values, **by_name):
        by_name.update(zip((*names, "match"), values))
        return function(first, **by_name)

    bound.__signature__ = inspect.Signature(params)
    bound.__name__ = function.__name__
    return bound


RULES = [
    Rule(lambda op, x, w, b, s: op.Mul(op.Conv(x, w.constant(), b.constant().optional()),
                                       s.constant()),
         _scale, check=_scale_check, name=f"{NAME}.scale",
         doc="Conv then Mul by a constant per output channel -> Conv with scaled weights"),
    Rule(lambda op, x, w, b, t: op.Add(op.Conv(x, w, b.constant().optional()), t.constant()),
         _shift, check=_shift_check, name=f"{NAME}.shift",
         doc="Conv then Add of a constant per output channel -> Conv with that bias"),
    Rule(_residual_pattern, _residual, check=_residual_check, name=f"{NAME}.residual",
         doc="Add of a same-shape tensor after a Conv -> FusedConv"),
    Rule(_residual_sum_pattern, _residual, check=_residual_check, name=f"{NAME}.residual_sum",
         doc="two-input Sum of a Conv and a same-shape tensor -> FusedConv"),
    *[rule for key, (wrap, extra, params) in ACTIVATIONS.items()
      for rule in _activation_rules(key, wrap, extra, params)],
]


def fuse_conv_epilogue_pass():
    return rule_pass(NAME, RULES, stage="fuse",
                     doc="fuse a Conv's residual Add and activation into one "
                         "ge_hub.FusedConv step")
