"""Elementwise ops: arithmetic, comparisons, logic, activations, casts.

Paddle's PIR binary ops broadcast as NumPy does, as the core ops do. Legacy
`elementwise_*` ops may carry an `axis`: Y's dims line up with X's from that axis, so Y
gets trailing 1-dims first.
"""

from __future__ import annotations

import numpy as np

from ge_paddle.converters.table import converts

_BINARY = {
    "add": "Add", "subtract": "Sub", "multiply": "Mul", "divide": "Div",
    "maximum": "Max", "minimum": "Min", "elementwise_pow": "Pow",
    "equal": "Equal", "greater_than": "Greater", "less_than": "Less",
    "greater_equal": "GreaterOrEqual", "less_equal": "LessOrEqual",
    "logical_and": "And", "logical_or": "Or", "logical_xor": "Xor",
    "bitwise_and": "BitwiseAnd", "bitwise_or": "BitwiseOr", "bitwise_xor": "BitwiseXor",
}

_UNARY = {
    "relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "exp": "Exp", "log": "Log",
    "sqrt": "Sqrt", "abs": "Abs", "erf": "Erf", "floor": "Floor", "ceil": "Ceil",
    "sin": "Sin", "cos": "Cos", "sign": "Sign", "reciprocal": "Reciprocal",
    "round": "Round", "logical_not": "Not", "bitwise_not": "BitwiseNot", "mish": "Mish",
    "softsign": "Softsign", "isnan": "IsNaN", "isinf": "IsInf", "assign": "Identity",
    "identity": "Identity", "hardswish": "HardSwish",
}


def _aligned(cv, op, x, y):
    """Legacy elementwise ops: Y's dims start at X's `axis`."""
    axis = op.attrs.get("axis", -1)
    if axis is None or axis == -1 or x.type.rank is None or y.type.rank is None:
        return y
    trailing = x.type.rank - axis - y.type.rank
    if trailing <= 0:
        return y
    return cv.one("Unsqueeze", [y, cv.ints(range(y.type.rank, y.type.rank + trailing))])


def _binary(core):
    def convert(cv, op):
        x, y = cv.input(op, 0), cv.input(op, 1)
        return cv.one(core, [x, _aligned(cv, op, x, y)])
    return convert


def _unary(core):
    def convert(cv, op):
        return cv.one(core, [cv.input(op, 0)])
    return convert


for _name, _core in _BINARY.items():
    converts(_name)(_binary(_core))
for _name, _core in _UNARY.items():
    converts(_name)(_unary(_core))


@converts("not_equal")
def not_equal(cv, op):
    x, y = cv.input(op, 0), cv.input(op, 1)
    return cv.one("Not", [cv.one("Equal", [x, _aligned(cv, op, x, y)])])


@converts("remainder")
def remainder(cv, op):
    x, y = cv.input(op, 0), cv.input(op, 1)
    fmod = 1 if x.type.dtype.is_float else 0  # Paddle: the sign of the divisor, as Python
    if fmod:
        quotient = cv.one("Floor", [cv.one("Div", [x, y])])
        return cv.one("Sub", [x, cv.one("Mul", [quotient, y])])
    return cv.one("Mod", [x, y], {"fmod": 0})


@converts("floor_divide")
def floor_divide(cv, op):
    x, y = cv.input(op, 0), cv.input(op, 1)
    if x.type.dtype.is_float:
        return cv.one("Floor", [cv.one("Div", [x, y])])
    remainder_ = cv.one("Mod", [x, y], {"fmod": 0})
    return cv.one("Div", [cv.one("Sub", [x, remainder_]), y])


def _scalar(cv, like, value):
    return cv.constant(np.asarray(value, dtype=like.type.dtype.numpy), "scalar")


@converts("rsqrt")
def rsqrt(cv, op):
    return cv.one("Reciprocal", [cv.one("Sqrt", [cv.input(op, 0)])])


@converts("square")
def square(cv, op):
    x = cv.input(op, 0)
    return cv.one("Mul", [x, x])


@converts("relu6")
def relu6(cv, op):
    x = cv.input(op, 0)
    return cv.one("Clip", [x, _scalar(cv, x, 0.0), _scalar(cv, x, 6.0)])


@converts("leaky_relu")
def leaky_relu(cv, op):
    return cv.one("LeakyRelu", [cv.input(op, 0)],
                  {"alpha": float(op.attrs.get("negative_slope", 0.02))})


@converts("elu")
def elu(cv, op):
    return cv.one("Elu", [cv.input(op, 0)], {"alpha": float(op.attrs.get("alpha", 1.0))})


@converts("selu")
def selu(cv, op):
    return cv.one("Selu", [cv.input(op, 0)], {"alpha": float(op.attrs["alpha"]),
                                               "gamma": float(op.attrs["scale"])})


@converts("celu")
def celu(cv, op):
    return cv.one("Celu", [cv.input(op, 0)], {"alpha": float(op.attrs.get("alpha", 1.0))})


@converts("hardsigmoid", "hard_sigmoid")
def hardsigmoid(cv, op):
    return cv.one("HardSigmoid", [cv.input(op, 0)],
                  {"alpha": float(op.attrs.get("slope", 1 / 6)),
                   "beta": float(op.attrs.get("offset", 0.5))})


@converts("hard_swish")
def hard_swish(cv, op):
    threshold = float(op.attrs.get("threshold", 6.0))
    scale = float(op.attrs.get("scale", 6.0))
    offset = float(op.attrs.get("offset", 3.0))
    if (threshold, scale, offset) != (6.0, 6.0, 3.0):
        x = cv.input(op, 0)
        clipped = cv.one("Clip", [cv.one("Add", [x, _scalar(cv, x, offset)]),
                                  _scalar(cv, x, 0.0), _scalar(cv, x, threshold)])
        return cv.one("Div", [cv.one("Mul", [x, clipped]), _scalar(cv, x, scale)])
    return cv.one("HardSwish", [cv.input(op, 0)])


@converts("swish", "silu")
def swish(cv, op):
    x = cv.input(op, 0)
    beta = float(op.attrs.get("beta", 1.0))
    gate_in = x if beta == 1.0 else cv.one("Mul", [x, _scalar(cv, x, beta)])
    return cv.one("Mul", [x, cv.one("Sigmoid", [gate_in])])


@converts("gelu")
def gelu(cv, op):
    approximate = "tanh" if op.attrs.get("approximate") else "none"
    return cv.one("Gelu", [cv.input(op, 0)], {"approximate": approximate})


@converts("softplus")
def softplus(cv, op):
    x = cv.input(op, 0)
    beta = float(op.attrs.get("beta", 1.0))
    threshold = float(op.attrs.get("threshold", 20.0))
    scaled = cv.one("Mul", [x, _scalar(cv, x, beta)]) if beta != 1.0 else x
    soft = cv.one("Softplus", [scaled])
    if beta != 1.0:
        soft = cv.one("Div", [soft, _scalar(cv, x, beta)])
    # Paddle returns x itself where beta * x > threshold.
    linear = cv.one("Greater", [scaled, _scalar(cv, x, threshold)])
    return cv.one("Where", [linear, x, soft])


@converts("prelu")
def prelu(cv, op):
    x, alpha = cv.input(op, 0), cv.input(op, 1)
    mode = op.attrs.get("mode", "all")
    rank = x.type.rank
    if mode == "channel" and alpha.type.rank == 1 and rank and rank > 2:
        channel_last = op.attrs.get("data_format", "NCHW") in ("NHWC", "NLC", "NDHWC")
        if not channel_last:
            alpha = cv.one("Unsqueeze", [alpha, cv.ints(range(1, rank - 1))])
    elif mode == "element" and alpha.type.rank == rank and alpha.type.shape[0] == 1:
        pass  # [1, C, H, W] broadcasts over the batch as it is
    return cv.one("PRelu", [x, alpha])


@converts("scale")
def scale(cv, op):
    x = cv.input(op, 0)
    factor = cv.input(op, 1, optional=True)
    if factor is None:
        factor = _scalar(cv, x, float(op.attrs.get("scale", 1.0)))
    elif factor.type.dtype != x.type.dtype:
        factor = cv.one("Cast", [factor], {"to": x.type.dtype})
    if factor.type.rank and factor.type.shape == (1,):
        factor = cv.one("Reshape", [factor, cv.ints([])])
    bias = float(op.attrs.get("bias", 0.0))
    if bias == 0.0:
        return cv.one("Mul", [x, factor])
    bias_value = _scalar(cv, x, bias)
    if op.attrs.get("bias_after_scale", True):
        return cv.one("Add", [cv.one("Mul", [x, factor]), bias_value])
    return cv.one("Mul", [cv.one("Add", [x, bias_value]), factor])


@converts("pow")
def pow_(cv, op):
    x = cv.input(op, 0)
    exponent = cv.input(op, 1, optional=True)
    if exponent is None:
        exponent = _scalar(cv, x, float(op.attrs.get("y", 1.0)))
    return cv.one("Pow", [x, exponent])


@converts("clip")
def clip(cv, op):
    x = cv.input(op, 0)
    bounds = []
    for index, attr in ((1, "min"), (2, "max")):
        bound = cv.input(op, index, optional=True)
        if bound is None:
            bound = _scalar(cv, x, float(op.attrs.get(attr)))
        else:
            if bound.type.dtype != x.type.dtype:
                bound = cv.one("Cast", [bound], {"to": x.type.dtype})
            if bound.type.rank:
                bound = cv.one("Reshape", [bound, cv.ints([])])
        bounds.append(bound)
    return cv.one("Clip", [x, *bounds])


@converts("cast")
def cast(cv, op):
    return cv.one("Cast", [cv.input(op, 0)], {"to": op.attrs["dtype"]})


@converts("where")
def where(cv, op):
    return cv.one("Where", [cv.input(op, 0), cv.input(op, 1), cv.input(op, 2)])


@converts("dropout")
def dropout(cv, op):
    x = cv.input(op, 0)
    mode = op.attrs.get("mode", op.attrs.get("dropout_implementation", "downgrade_in_infer"))
    if mode == "upscale_in_train":
        return [cv.one("Identity", [x]), None]
    p = cv.input(op, 2, optional=True)
    rate = float(np.reshape(p.const, -1)[0]) if p is not None and p.const is not None \
        else float(op.attrs.get("p", op.attrs.get("dropout_prob", 0.5)))
    return [cv.one("Mul", [x, _scalar(cv, x, 1.0 - rate)]), None]
