"""Elementwise ATen ops: arithmetic, comparison, logic, unary math, where and casts.

PyTorch promotes the operands of a binary op to one dtype before computing; the FX node
records the result (`cx.out_dtype`), and for comparisons `promoted_dtype` redoes the
promotion from the arguments' dtypes. Every operand is cast to that dtype first, so the
ge-hub op computes in exactly the type eager did (an int tensor divided by an int is
float division, an int tensor plus 2.5 is float addition).
"""

from __future__ import annotations

import torch
from ge_hub.plugin import DType, Value

from ge_torch.context import ConvertContext
from ge_torch.converters import converter
from ge_torch.dtypes import to_dtype

aten = torch.ops.aten


# --- promotion helpers --------------------------------------------------------------


def promoted_dtype(cx: ConvertContext, *raw_args) -> DType:
    """The dtype torch computes a binary op of these FX arguments in."""
    stand_ins = []
    for arg in raw_args:
        val = cx.meta(arg)
        if isinstance(val, torch.Tensor):
            # Same dtype and the same "dimensioned or 0-d" category: that is all that
            # promotion looks at.
            stand_ins.append(torch.empty([1] * val.dim(), dtype=val.dtype))
        elif isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool):
            stand_ins.append(1)
        elif isinstance(val, (torch.SymFloat, float)):
            stand_ins.append(1.0)
        else:
            stand_ins.append(val)
    return to_dtype(torch.result_type(*stand_ins))


def operands(cx: ConvertContext, dtype: DType, *args) -> list[Value]:
    """Tensors and scalars, all as ge-hub values of `dtype`."""
    return [cx.scalar(a, dtype) for a in args]


def _numeric(cx: ConvertContext, dtype: DType) -> DType:
    if dtype is DType.BOOL:
        cx.fail("arithmetic on bool tensors")
    return dtype


# --- arithmetic ---------------------------------------------------------------------


def _scaled(cx: ConvertContext, value: Value, alpha, dtype: DType) -> Value:
    if alpha == 1:
        return value
    return cx.op("Mul", value, cx.scalar(alpha, dtype))


@converter(aten.add.Tensor, aten.add.Scalar)
def add(cx, node, a, b, *, alpha=1):
    dtype = _numeric(cx, cx.out_dtype)
    a, b = operands(cx, dtype, a, b)
    return cx.op("Add", a, _scaled(cx, b, alpha, dtype))


@converter(aten.sub.Tensor, aten.sub.Scalar)
def sub(cx, node, a, b, *, alpha=1):
    dtype = _numeric(cx, cx.out_dtype)
    a, b = operands(cx, dtype, a, b)
    return cx.op("Sub", a, _scaled(cx, b, alpha, dtype))


@converter(aten.rsub.Tensor, aten.rsub.Scalar)
def rsub(cx, node, a, b, *, alpha=1):
    dtype = _numeric(cx, cx.out_dtype)
    a, b = operands(cx, dtype, a, b)
    return cx.op("Sub", b, _scaled(cx, a, alpha, dtype))


@converter(aten.mul.Tensor, aten.mul.Scalar)
def mul(cx, node, a, b):
    dtype = cx.out_dtype
    if dtype is DType.BOOL:
        return cx.op("And", *operands(cx, dtype, a, b))
    return cx.op("Mul", *operands(cx, dtype, a, b))


@converter(aten.div.Tensor, aten.div.Scalar)
def div(cx, node, a, b):
    # The result dtype is floating even for integer operands: true division.
    return cx.op("Div", *operands(cx, cx.out_dtype, a, b))


@converter(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(cx, node, a, b, *, rounding_mode=None):
    dtype = cx.out_dtype
    a, b = operands(cx, dtype, a, b)
    if rounding_mode is None:
        return cx.op("Div", a, b)
    if rounding_mode == "trunc":
        return _trunc_div(cx, a, b, dtype)
    if rounding_mode == "floor":
        return _floor_div(cx, a, b, dtype)
    cx.fail(f"rounding_mode {rounding_mode!r}")


def _trunc_div(cx, a: Value, b: Value, dtype: DType) -> Value:
    if dtype.is_integer:
        return cx.op("Div", a, b)  # ge-hub integer division truncates, like C
    quotient = cx.op("Div", a, b)
    # trunc(q) = sign(q) * floor(|q|); there is no Trunc op.
    return cx.op("Mul", cx.op("Sign", quotient), cx.op("Floor", cx.op("Abs", quotient)))


def _floor_div(cx, a: Value, b: Value, dtype: DType) -> Value:
    """Python's a // b, computed the way PyTorch's kernel does it."""
    zero = cx.scalar(0, dtype)
    remainder = cx.op("Mod", a, b, fmod=1)
    signs_differ = cx.op("Xor", cx.op("Less", remainder, zero), cx.op("Less", b, zero))
    adjust = cx.op("And", cx.op("Not", cx.op("Equal", remainder, zero)), signs_differ)
    if dtype.is_integer:
        quotient = cx.op("Div", a, b)
        return cx.op("Sub", quotient, cx.cast(adjust, dtype))
    # Float: (a - fmod(a, b)) / b is an exact integer up to rounding; step down by one
    # where the remainder's sign differs from b's, then round to the nearest integer.
    exact = cx.op("Div", cx.op("Sub", a, remainder), b)
    exact = cx.op("Sub", exact, cx.cast(adjust, dtype))
    floored = cx.op("Floor", exact)
    round_up = cx.op("Greater", cx.op("Sub", exact, floored), cx.scalar(0.5, dtype))
    result = cx.op("Add", floored, cx.cast(round_up, dtype))
    # b == 0 gives the IEEE quotient, as in eager.
    return cx.op("Where", cx.op("Equal", b, zero), cx.op("Div", a, b), result)


@converter(aten.remainder.Tensor, aten.remainder.Scalar)
def remainder(cx, node, a, b):
    dtype = _numeric(cx, cx.out_dtype)
    a, b = operands(cx, dtype, a, b)
    if dtype.is_integer:
        return cx.op("Mod", a, b)  # fmod=0 is Python's sign-of-divisor remainder
    # Floats: fmod, then moved into the divisor's sign as PyTorch's kernel does.
    zero = cx.scalar(0, dtype)
    mod = cx.op("Mod", a, b, fmod=1)
    signs_differ = cx.op("Xor", cx.op("Less", mod, zero), cx.op("Less", b, zero))
    fix = cx.op("And", cx.op("Not", cx.op("Equal", mod, zero)), signs_differ)
    return cx.op("Where", fix, cx.op("Add", mod, b), mod)


@converter(aten.fmod.Tensor, aten.fmod.Scalar)
def fmod(cx, node, a, b):
    dtype = _numeric(cx, cx.out_dtype)
    return cx.op("Mod", *operands(cx, dtype, a, b), fmod=1)


@converter(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar)
def pow_(cx, node, a, b):
    dtype = _numeric(cx, cx.out_dtype)
    if not dtype.is_float:
        cx.fail("integer powers")  # torch raises on negative exponents, ge-hub truncates
    if isinstance(b, (int, float)) and b == 2:
        a = cx.scalar(a, dtype)
        return cx.op("Mul", a, a)  # what eager does for a square
    return cx.op("Pow", *operands(cx, dtype, a, b))


@converter(aten.maximum.default)
def maximum(cx, node, a, b):
    return cx.op("Max", *operands(cx, _numeric(cx, cx.out_dtype), a, b))


@converter(aten.minimum.default)
def minimum(cx, node, a, b):
    return cx.op("Min", *operands(cx, _numeric(cx, cx.out_dtype), a, b))


# --- comparison and logic -----------------------------------------------------------


def _comparison(onnx_op: str, negate: bool = False):
    def convert(cx, node, a, b):
        dtype = promoted_dtype(cx, *node.args[:2])
        if dtype is DType.BOOL and onnx_op != "Equal":
            dtype = DType.INT32  # ordering of bools is the ordering of 0 and 1
        result = cx.op(onnx_op, *operands(cx, dtype, a, b))
        return cx.op("Not", result) if negate else result

    return convert


for _name, (_op, _negate) in {
    "eq": ("Equal", False), "ne": ("Equal", True), "lt": ("Less", False),
    "le": ("LessOrEqual", False), "gt": ("Greater", False), "ge": ("GreaterOrEqual", False),
}.items():
    _packet = getattr(aten, _name)
    converter(_packet.Tensor, _packet.Scalar)(_comparison(_op, _negate))


def _logical(onnx_op: str):
    def convert(cx, node, a, b):
        return cx.op(onnx_op, *operands(cx, DType.BOOL, a, b))

    return convert


for _name, _op in {"and": "And", "or": "Or", "xor": "Xor"}.items():
    converter(getattr(aten, f"logical_{_name}").default)(_logical(_op))


def _bitwise(logical_op: str, bitwise_op: str):
    """Logical on bools, bitwise on integers (in the promoted dtype)."""

    def convert(cx, node, a, b):
        dtype = cx.out_dtype
        if dtype.is_float:
            cx.fail(f"{bitwise_op} of {dtype}")
        op = logical_op if dtype is DType.BOOL else bitwise_op
        return cx.op(op, *operands(cx, dtype, a, b))

    return convert


for _name, _ops in {"and": ("And", "BitwiseAnd"), "or": ("Or", "BitwiseOr"),
                    "xor": ("Xor", "BitwiseXor")}.items():
    _packet = getattr(aten, f"bitwise_{_name}")
    converter(_packet.Tensor, _packet.Scalar)(_bitwise(*_ops))


@converter(aten.logical_not.default)
def logical_not(cx, node, x):
    return cx.op("Not", cx.cast(x, DType.BOOL))


@converter(aten.bitwise_not.default)
def bitwise_not(cx, node, x):
    return cx.op("Not" if x.type.dtype is DType.BOOL else "BitwiseNot", x)


# --- unary math ---------------------------------------------------------------------


def _float_unary(onnx_op: str):
    """An op on floats; integer inputs are promoted to the float result first."""

    def convert(cx, node, x):
        return cx.op(onnx_op, cx.cast(x, cx.out_dtype))

    return convert


_FLOAT_UNARY = {
    "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "reciprocal": "Reciprocal", "sin": "Sin",
    "cos": "Cos", "tan": "Tan", "asin": "Asin", "acos": "Acos", "atan": "Atan",
    "sinh": "Sinh", "cosh": "Cosh", "tanh": "Tanh", "asinh": "Asinh", "acosh": "Acosh",
    "atanh": "Atanh", "erf": "Erf", "sigmoid": "Sigmoid",
}
for _name, _op in _FLOAT_UNARY.items():
    converter(getattr(aten, _name).default)(_float_unary(_op))


@converter(aten.rsqrt.default)
def rsqrt(cx, node, x):
    return cx.op("Reciprocal", cx.op("Sqrt", cx.cast(x, cx.out_dtype)))


# expm1 and log1p: exp(x) - 1 and log(1 + x) lose every digit for tiny x. For |x| < 0.5
# Kahan's forms, (u - 1) * x / log(u) with u = exp(x), and log(u) * x / (u - 1) with
# u = 1 + x, keep full precision; further out the plain forms are already exact enough.


@converter(aten.expm1.default)
def expm1(cx, node, x):
    dtype = cx.out_dtype
    x = cx.cast(x, dtype)
    u = cx.op("Exp", x)
    plain = cx.op("Sub", u, cx.scalar(1, dtype))
    exact = cx.op("Div", cx.op("Mul", plain, x), cx.op("Log", u))
    exact = cx.op("Where", cx.op("Equal", plain, cx.scalar(0, dtype)), x, exact)
    return cx.op("Where", _small(cx, x, dtype), exact, plain)


@converter(aten.log1p.default)
def log1p(cx, node, x):
    dtype = cx.out_dtype
    x = cx.cast(x, dtype)
    u = cx.op("Add", x, cx.scalar(1, dtype))
    plain = cx.op("Log", u)
    step = cx.op("Sub", u, cx.scalar(1, dtype))
    exact = cx.op("Div", cx.op("Mul", plain, x), step)
    exact = cx.op("Where", cx.op("Equal", step, cx.scalar(0, dtype)), x, exact)
    return cx.op("Where", _small(cx, x, dtype), exact, plain)


def _small(cx, x, dtype):
    return cx.op("Less", cx.op("Abs", x), cx.scalar(0.5, dtype))


def _rounding(onnx_op: str):
    def convert(cx, node, x):
        if x.type.dtype.is_integer:
            return cx.op("Identity", x)  # integers are already whole
        return cx.op(onnx_op, x)

    return convert


for _name, _op in {"floor": "Floor", "ceil": "Ceil", "round": "Round"}.items():
    # Round is half-to-even in both ONNX and PyTorch.
    converter(getattr(aten, _name).default)(_rounding(_op))


@converter(aten.trunc.default)
def trunc(cx, node, x):
    if x.type.dtype.is_integer:
        return cx.op("Identity", x)
    return cx.op("Mul", cx.op("Sign", x), cx.op("Floor", cx.op("Abs", x)))


def _signed_unary(onnx_op: str):
    def convert(cx, node, x):
        if x.type.dtype in (DType.BOOL, DType.UINT8):
            cx.fail(f"{onnx_op} of {x.type.dtype}")
        return cx.op(onnx_op, x)

    return convert


for _name, _op in {"abs": "Abs", "neg": "Neg", "sign": "Sign", "relu": "Relu"}.items():
    converter(getattr(aten, _name).default)(_signed_unary(_op))


@converter(aten.isnan.default)
def isnan(cx, node, x):
    if not x.type.dtype.is_float:
        return cx.op("Not", cx.op("Equal", x, x))  # integers are never NaN: all false
    return cx.op("IsNaN", x)


@converter(aten.isinf.default)
def isinf(cx, node, x):
    if not x.type.dtype.is_float:
        cx.fail("isinf of an integer tensor")
    return cx.op("IsInf", x)


# --- where, copies and casts --------------------------------------------------------


@converter(aten.where.self)
def where(cx, node, condition, a, b):
    dtype = cx.out_dtype
    a, b = operands(cx, dtype, a, b)
    return cx.op("Where", cx.cast(condition, DType.BOOL), a, b)


def _cpu_only(node) -> str | None:
    device = node.kwargs.get("device")
    if device is not None and torch.device(device).type != "cpu":
        return f"copy to device {device}"
    return None


@converter(aten._to_copy.default, check=_cpu_only)
def to_copy(cx, node, x, **_layout):
    # Layout, memory format and pinning change how the data is stored, not the values.
    dtype = cx.out_dtype
    return cx.op("Cast", x, to=dtype) if x.type.dtype != dtype else cx.op("Identity", x)


@converter(aten.clone.default, aten.alias.default, aten.detach.default,
           aten.lift_fresh_copy.default, aten.contiguous.default)
def identity(cx, node, x, **_memory_format):
    return cx.op("Identity", x)


@converter(aten.fill.Scalar)
def fill(cx, node, x, value):
    return cx.op("Expand", cx.scalar(value, cx.out_dtype), cx.op("Shape", x))
