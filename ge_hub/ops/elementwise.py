"""Elementwise ops with two or more inputs: arithmetic, comparison, logic, bitwise logic,
Where.

All of them broadcast their inputs NumPy-style (ONNX multidirectional broadcasting).
Not and BitwiseNot are here too, beside the other logic ops.

The references are the oracle for kernels and constant folding, so they pin down what
C would leave undefined or what NumPy would do differently:

- the output has exactly the dtype inference promised; half-precision floats (float16,
  bfloat16) are computed in float32 and rounded once at the end;
- floats follow IEEE (x / 0 is inf or nan, NaN propagates through Max and Min);
- integers wrap around on overflow, like two's-complement C;
- integer division or modulo by zero raises IntegerDivisionByZeroError (a ZeroDivisionError
  and a ge-hub OpError) instead of returning NumPy's silent 0 (C would crash).
"""

from __future__ import annotations

import functools

import numpy as np

from ge_hub.errors import IntegerDivisionByZeroError, OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import TensorType
from ge_hub.ops.inference import broadcast, broadcast_shapes, broadcast_to_bool, same_as_input
from ge_hub.ops.schema import (
    ANY,
    BOOL,
    FLOATS,
    INTEGERS,
    NUMERIC,
    Attr,
    AttrKind,
    InferenceContext,
    Input,
    Output,
    op,
)

_HALF_FLOATS = (DType.FLOAT16.numpy, DType.BFLOAT16.numpy)

# Pow's base: ONNX allows int32/int64 and floats; the exponent may be any number type.
_POW_BASE = FLOATS | {DType.INT32, DType.INT64}
_UINT8 = frozenset({DType.UINT8})


def _widen(x: np.ndarray) -> np.ndarray:
    """Half-precision floats as float32, so every step is not rounded to 8 or 11 bits."""
    return x.astype(np.float32) if x.dtype in _HALF_FLOATS else x


def _float_compute_dtype(dtype: np.dtype) -> np.dtype:
    """Where Pow, Sum and Mean of floats are computed before one final rounding: float32
    for half floats (as everywhere), float64 otherwise, so a sum of many float32 inputs
    or a float32 power is rounded once rather than at every step."""
    return np.dtype(np.float32) if dtype in _HALF_FLOATS else np.dtype(np.float64)


def _is_integer(x: np.ndarray) -> bool:
    return x.dtype.kind in "iu"


def _require_nonzero_divisor(op_name: str, divisor: np.ndarray) -> None:
    if np.any(divisor == 0):
        raise IntegerDivisionByZeroError(f"{op_name}: integer input 'B' contains a zero divisor")


def _arithmetic(ufunc, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # errstate: IEEE inf/nan for floats and wraparound for ints are the defined results,
    # not something to warn about.
    with np.errstate(all="ignore"):
        return ufunc(_widen(a), _widen(b)).astype(a.dtype, copy=False)


def _compare(ufunc, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return ufunc(_widen(a), _widen(b))


# --- arithmetic ---------------------------------------------------------------------


@op("Add", inputs=[Input("A", NUMERIC), Input("B", NUMERIC)], outputs=[Output("C")],
    infer=broadcast)
def add(a, b):
    """C = A + B, broadcast."""
    return _arithmetic(np.add, a, b)


@op("Sub", inputs=[Input("A", NUMERIC), Input("B", NUMERIC)], outputs=[Output("C")],
    infer=broadcast)
def sub(a, b):
    """C = A - B, broadcast."""
    return _arithmetic(np.subtract, a, b)


@op("Mul", inputs=[Input("A", NUMERIC), Input("B", NUMERIC)], outputs=[Output("C")],
    infer=broadcast)
def mul(a, b):
    """C = A * B, broadcast."""
    return _arithmetic(np.multiply, a, b)


@op("Div", inputs=[Input("A", NUMERIC), Input("B", NUMERIC)], outputs=[Output("C")],
    infer=broadcast)
def div(a, b):
    """C = A / B, broadcast; integer division truncates toward zero, like C."""
    if not _is_integer(a):
        return _arithmetic(np.true_divide, a, b)
    _require_nonzero_divisor("Div", b)
    with np.errstate(all="ignore"):  # INT_MIN / -1 wraps to INT_MIN
        floored = np.floor_divide(a, b)
        # Floor and truncation differ exactly when the division is inexact and the
        # operands have opposite signs.
        inexact_negative = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
        return (floored + inexact_negative).astype(a.dtype, copy=False)


def _int_pow(base: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """Integer base: exact (wrapping) powers for integer exponents, C-style truncation of
    the real power for float exponents."""
    if exponent.dtype.kind == "f":
        with np.errstate(all="ignore"):
            real = np.trunc(np.power(base.astype(np.float64), exponent.astype(np.float64)))
        info = np.iinfo(base.dtype)
        unrepresentable = ~np.isfinite(real) | (real < info.min) | (real > info.max)
        if np.any(unrepresentable):
            raise ValueError(f"Pow: a power of the {base.dtype} input 'X' with a float "
                             f"exponent 'Y' is not finite or does not fit {base.dtype}")
        return real.astype(base.dtype)
    b, e = np.broadcast_arrays(base.astype(np.int64), exponent.astype(np.int64))
    negative = e < 0
    if np.any(negative & (b == 0)):
        raise IntegerDivisionByZeroError(
            "Pow: input 'X' has 0 raised to a negative integer power 'Y'")
    with np.errstate(all="ignore"):  # wraps modulo 2**64, hence modulo 2**32 after the cast
        result = np.power(b, np.where(negative, 0, e))
    # x ** -n is 1 / x ** n: truncated to zero unless |x| is 1.
    odd = (e % 2) != 0
    reciprocal = np.where(b == 1, 1, np.where(b == -1, np.where(odd, -1, 1), 0))
    return np.where(negative, reciprocal, result).astype(base.dtype)


@op("Pow", inputs=[Input("X", _POW_BASE, "T"), Input("Y", NUMERIC, "T1")],
    outputs=[Output("Z")], infer=broadcast)
def pow_(x, y):
    """Z = X ** Y, broadcast; Z has the dtype of X (integer X: see `_int_pow`)."""
    if _is_integer(x):
        return _int_pow(x, y)
    wide = _float_compute_dtype(x.dtype)
    # Full, contiguous operands: NumPy takes shortcuts (sqrt for a scalar 0.5, ...) that
    # differ from C's pow at -0 and -inf, and which shortcuts it takes depends on its
    # version and on the operands' layout. Full arrays always get pow's IEEE semantics.
    base, exponent = (np.ascontiguousarray(a) for a in
                      np.broadcast_arrays(x.astype(wide), y.astype(wide)))
    with np.errstate(all="ignore"):
        return np.power(base, exponent).astype(x.dtype)


def _mod_attr_problem(dtype: DType, fmod: int) -> str | None:
    """Why Mod's `fmod` attribute does not fit the input dtype, or None when it does."""
    if fmod not in (0, 1):
        return f"attribute 'fmod' must be 0 or 1, got {fmod}"
    return None


def _infer_mod(ctx: InferenceContext) -> list[TensorType]:
    problem = _mod_attr_problem(ctx.input(0).dtype, ctx.attrs["fmod"])
    if problem:
        ctx.fail(problem)
    return broadcast(ctx)


@op("Mod", inputs=[Input("A", NUMERIC), Input("B", NUMERIC)], outputs=[Output("C")],
    infer=_infer_mod, attrs=[Attr("fmod", AttrKind.INT, 0)])
def mod(a, b, *, fmod):
    """C = A mod B, broadcast; fmod=0: sign of B (Python %, floor modulo, for floats too:
    x mod +-inf is x or +-inf, mod 0 is NaN), fmod=1: sign of A (C fmod)."""
    problem = _mod_attr_problem(DType.from_numpy(a.dtype), fmod)
    if problem:
        raise OpError(f"Mod: {problem}")
    if _is_integer(a):
        _require_nonzero_divisor("Mod", b)
    ufunc = np.fmod if fmod else np.mod
    with np.errstate(all="ignore"):  # fmod(x, 0.0) is nan; INT_MIN % -1 is 0
        return ufunc(_widen(a), _widen(b)).astype(a.dtype, copy=False)


# --- variadic -----------------------------------------------------------------------


def _fold(ufunc, inputs) -> np.ndarray:
    # Max and Min are exact in the input dtype; only the widening for half floats matters.
    return functools.reduce(ufunc, [_widen(x) for x in inputs]).astype(inputs[0].dtype)


@op("Max", inputs=[Input("data_0", NUMERIC, variadic=True)], outputs=[Output("max")],
    infer=broadcast)
def max_(*inputs):
    """max = elementwise maximum of all inputs, broadcast; NaN propagates."""
    return _fold(np.maximum, inputs)


@op("Min", inputs=[Input("data_0", NUMERIC, variadic=True)], outputs=[Output("min")],
    infer=broadcast)
def min_(*inputs):
    """min = elementwise minimum of all inputs, broadcast; NaN propagates."""
    return _fold(np.minimum, inputs)


def _sum(inputs) -> np.ndarray:
    wide = _float_compute_dtype(inputs[0].dtype)
    return functools.reduce(np.add, [x.astype(wide) for x in inputs])


@op("Sum", inputs=[Input("data_0", FLOATS, variadic=True)], outputs=[Output("sum")],
    infer=broadcast)
def sum_(*inputs):
    """sum = elementwise sum of all inputs, broadcast."""
    with np.errstate(all="ignore"):
        return _sum(inputs).astype(inputs[0].dtype)


@op("Mean", inputs=[Input("data_0", FLOATS, variadic=True)], outputs=[Output("mean")],
    infer=broadcast)
def mean(*inputs):
    """mean = elementwise sum of all inputs divided by their number, broadcast."""
    with np.errstate(all="ignore"):
        return (_sum(inputs) / len(inputs)).astype(inputs[0].dtype)


# --- comparison ---------------------------------------------------------------------


@op("Equal", inputs=[Input("A", NUMERIC | BOOL), Input("B", NUMERIC | BOOL)],
    outputs=[Output("C")], infer=broadcast_to_bool)
def equal(a, b):
    """C = (A == B), broadcast; bool output."""
    return _compare(np.equal, a, b)


@op("Less", inputs=[Input("A", NUMERIC), Input("B", NUMERIC)], outputs=[Output("C")],
    infer=broadcast_to_bool)
def less(a, b):
    """C = (A < B), broadcast; bool output."""
    return _compare(np.less, a, b)


@op("LessOrEqual", inputs=[Input("A", NUMERIC), Input("B", NUMERIC)], outputs=[Output("C")],
    infer=broadcast_to_bool)
def less_or_equal(a, b):
    """C = (A <= B), broadcast; bool output."""
    return _compare(np.less_equal, a, b)


@op("Greater", inputs=[Input("A", NUMERIC), Input("B", NUMERIC)], outputs=[Output("C")],
    infer=broadcast_to_bool)
def greater(a, b):
    """C = (A > B), broadcast; bool output."""
    return _compare(np.greater, a, b)


@op("GreaterOrEqual", inputs=[Input("A", NUMERIC), Input("B", NUMERIC)],
    outputs=[Output("C")], infer=broadcast_to_bool)
def greater_or_equal(a, b):
    """C = (A >= B), broadcast; bool output."""
    return _compare(np.greater_equal, a, b)


# --- logic --------------------------------------------------------------------------


@op("And", inputs=[Input("A", BOOL), Input("B", BOOL)], outputs=[Output("C")],
    infer=broadcast_to_bool)
def and_(a, b):
    """C = A and B, broadcast."""
    return np.logical_and(a, b)


@op("Or", inputs=[Input("A", BOOL), Input("B", BOOL)], outputs=[Output("C")],
    infer=broadcast_to_bool)
def or_(a, b):
    """C = A or B, broadcast."""
    return np.logical_or(a, b)


@op("Xor", inputs=[Input("A", BOOL), Input("B", BOOL)], outputs=[Output("C")],
    infer=broadcast_to_bool)
def xor(a, b):
    """C = A xor B, broadcast."""
    return np.logical_xor(a, b)


@op("Not", inputs=[Input("X", BOOL)], outputs=[Output("Y")], infer=same_as_input)
def not_(x):
    """Y = not X."""
    return np.logical_not(x)


# --- selection and bits -------------------------------------------------------------


def _infer_where(ctx: InferenceContext) -> list[TensorType]:
    shape = broadcast_shapes(ctx, [ctx.input(i).shape for i in range(3)])
    return [TensorType(ctx.input(1).dtype, shape)]


@op("Where", inputs=[Input("condition", BOOL, "B"), Input("X", ANY), Input("Y", ANY)],
    outputs=[Output("output")], infer=_infer_where)
def where(condition, x, y):
    """output = X where condition else Y, all three broadcast."""
    return np.where(condition, x, y).astype(x.dtype, copy=False)


_SHIFT_DIRECTIONS = ("LEFT", "RIGHT")


def _shift_direction_problem(direction: str) -> str | None:
    if direction not in _SHIFT_DIRECTIONS:
        return f"attribute 'direction' must be 'LEFT' or 'RIGHT', got {direction!r}"
    return None


def _infer_bit_shift(ctx: InferenceContext) -> list[TensorType]:
    problem = _shift_direction_problem(ctx.attrs["direction"])
    if problem:
        ctx.fail(problem)
    return broadcast(ctx)


# ONNX (opset 28) allows signed and unsigned integers.
_SHIFTABLE = INTEGERS


@op("BitShift", inputs=[Input("X", _SHIFTABLE), Input("Y", _SHIFTABLE)],
    outputs=[Output("Z")], infer=_infer_bit_shift, attrs=[Attr("direction", AttrKind.STRING)])
def bit_shift(x, y, *, direction):
    """Z = X << Y or X >> Y (direction LEFT or RIGHT), broadcast. A right shift of a signed
    X is arithmetic (copies of the sign bit fill in); a left shift discards bits moved past
    the top bit. A shift by a negative Y or by the bit width or more leaves only the sign
    fill: -1 for a right shift of a negative X, 0 otherwise."""
    problem = _shift_direction_problem(direction)
    if problem:
        raise OpError(f"BitShift: {problem}")
    bits = x.dtype.itemsize * 8
    # C leaves shifts < 0 or >= the bit width undefined; every bit has been shifted out.
    out_of_range = (y < 0) | (y >= bits)
    in_range = np.clip(y, 0, bits - 1).astype(x.dtype)
    if direction == "LEFT":
        # Shift the unsigned bit pattern so that bits past the sign bit wrap, never overflow.
        unsigned = np.dtype(f"u{x.dtype.itemsize}")
        shifted = np.left_shift(x.view(unsigned), in_range.astype(unsigned)).view(x.dtype)
        filled = np.zeros((), x.dtype)
    else:
        shifted = np.right_shift(x, in_range)
        filled = np.where(x < 0, x.dtype.type(-1), x.dtype.type(0)) if x.dtype.kind == "i" \
            else np.zeros((), x.dtype)
    return np.where(out_of_range, filled, shifted).astype(x.dtype, copy=False)


# --- bitwise logic ----------------------------------------------------------------------


@op("BitwiseAnd", inputs=[Input("A", INTEGERS), Input("B", INTEGERS)], outputs=[Output("C")],
    infer=broadcast)
def bitwise_and(a, b):
    """C = A & B, bit by bit, broadcast."""
    return np.bitwise_and(a, b)


@op("BitwiseOr", inputs=[Input("A", INTEGERS), Input("B", INTEGERS)], outputs=[Output("C")],
    infer=broadcast)
def bitwise_or(a, b):
    """C = A | B, bit by bit, broadcast."""
    return np.bitwise_or(a, b)


@op("BitwiseXor", inputs=[Input("A", INTEGERS), Input("B", INTEGERS)], outputs=[Output("C")],
    infer=broadcast)
def bitwise_xor(a, b):
    """C = A ^ B, bit by bit, broadcast."""
    return np.bitwise_xor(a, b)


@op("BitwiseNot", inputs=[Input("X", INTEGERS)], outputs=[Output("Y")], infer=same_as_input)
def bitwise_not(x):
    """Y = ~X: every bit flipped (-x - 1 for signed integers)."""
    return np.invert(x)
