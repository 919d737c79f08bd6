"""Recognize GELU written out elementwise and make it one `Gelu` node, as rewrite rules
(the `fuse_gelu` pass). Exporters before opset 20 have no Gelu op, so they write:

    erf form:   x * 0.5 * (1 + erf(x / sqrt(2)))        (or x * (1 / sqrt(2)))
    tanh form:  x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
                (x^3 as Pow(x, 3) or x * (x * x))

each a chain of five to nine elementwise steps; Gelu runs as one C kernel (ge_gelu_f32,
ge_gelu_tanh_f32 in core/kernels/activation.c). The factor 0.5 may multiply x, the
bracket or the product of the two: the three groupings are separate rules. Constants
must be single values within float32 rounding of the exact ones. Only float32 is fused
(the other dtypes' Gelu runs its reference). Runs before `fuse_conv_epilogue`, so a
Conv followed by a written-out GELU still becomes one FusedConv.
"""

from __future__ import annotations

import inspect
import math

from ge_hub.ir.dtypes import DType
from ge_hub.rewrite import Rule, rule_pass

NAME = "fuse_gelu"

# Exact values the constants stand for; float32 exports round them.
SQRT2 = math.sqrt(2.0)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
CUBIC = 0.044715


def _erf_bracket_div(op, x, v):
    return op.Add(op.Erf(op.Div(x, v["c_scale"].constant())), v["c_one"].constant())


def _erf_bracket_mul(op, x, v):
    return op.Add(op.Erf(op.Mul(x, v["c_scale"].constant())), v["c_one"].constant())


def _tanh_bracket(cube):
    def bracket(op, x, v):
        inner = op.Add(x, op.Mul(cube(op, x), v["c_cube"].constant()))
        return op.Add(op.Tanh(op.Mul(inner, v["c_tanh"].constant())), v["c_one"].constant())
    return bracket


def _pow3(op, x):
    return op.Pow(x, 3.0)


def _mul3(op, x):
    return op.Mul(x, op.Mul(x, x))


# How 0.5, x and the bracket B are grouped: (x * B) * 0.5, (x * 0.5) * B, x * (B * 0.5).
GROUPINGS = {
    "xb_half": lambda op, x, b, half: op.Mul(op.Mul(x, b), half.constant()),
    "xhalf_b": lambda op, x, b, half: op.Mul(op.Mul(x, half.constant()), b),
    "x_bhalf": lambda op, x, b, half: op.Mul(x, op.Mul(b, half.constant())),
}

# name -> (bracket pattern, approximate, {variable: exact value})
FORMS = {
    "erf_div": (_erf_bracket_div, "none", {"c_scale": SQRT2}),
    "erf_mul": (_erf_bracket_mul, "none", {"c_scale": 1.0 / SQRT2}),
    "tanh_pow": (_tanh_bracket(_pow3), "tanh", {"c_cube": CUBIC, "c_tanh": SQRT_2_OVER_PI}),
    "tanh_mul": (_tanh_bracket(_mul3), "tanh", {"c_cube": CUBIC, "c_tanh": SQRT_2_OVER_PI}),
}


def _close(value, exact: float) -> bool:
    # float32 rounding of the exact constant, with room for float16 exports' looser one
    return abs(value - exact) <= 1e-3 * abs(exact)


def _signed(function, head: str, names):
    """`function(head, x, v)` as a function whose parameters name the pattern variables
    (the rewrite engine binds variables by parameter name): x first, the others in `v`."""
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD)
              for n in (head, "x", *names)]

    def bound(first, x, *values, **by_name):
        by_name.update(zip(names, values))
        return function(first, x, by_name)

    bound.__signature__ = inspect.Signature(params)
    bound.__name__ = function.__name__
    return bound


def _make_rule(form: str, grouping: str) -> Rule:
    bracket, approximate, exact = FORMS[form]
    group = GROUPINGS[grouping]
    wanted = {"half": 0.5, "c_one": 1.0, **exact}
    names = tuple(wanted)

    def pattern(op, x, v):
        return group(op, x, bracket(op, x, v), v["half"])

    def check(ctx, x, v):
        if x.type.dtype is not DType.FLOAT32:
            return ctx.reject(f"dtype {x.type.dtype}: Gelu's C kernel is float32 only")
        for name, target in wanted.items():
            const = v[name].const
            if const.size != 1:
                return ctx.reject(f"constant {name} has {const.size} values, not one")
            if not _close(float(const.reshape(-1)[0]), target):
                return ctx.reject(f"constant {name} is {float(const.reshape(-1)[0])!r}, "
                                  f"not {target!r}")
        return True

    def replacement(op, x, v):
        return op.Gelu(x, approximate=approximate)

    return Rule(_signed(pattern, "op", names), _signed(replacement, "op", names),
                check=_signed(check, "ctx", names), name=f"{NAME}.{form}.{grouping}",
                doc=f"GELU written out ({form}, grouped {grouping}) -> Gelu")


RULES = [_make_rule(form, grouping) for form in FORMS for grouping in GROUPINGS]


def fuse_gelu_pass():
    return rule_pass(NAME, RULES, stage="fuse",
                     doc="GELU written out elementwise (erf or tanh form) -> one Gelu")
