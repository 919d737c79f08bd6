"""Unary elementwise ops: math functions, activations (Shrink among them), the casts
(Cast, CastLike, and BitCast, which reinterprets the bytes), Identity.

Every op here maps each element of its first input to one output element, so the output
has the input's shape (PRelu's slope and Clip's bounds only parameterize the mapping).
Float math is computed in a wider type and rounded back once (see `_float_math`), so the
reference is at least as precise as the kernels it is the oracle for.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import ml_dtypes
import numpy as np

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import TensorType
from ge_hub.ops import narrow
from ge_hub.ops.inference import same_as_input
from ge_hub.ops.schema import (
    ANY,
    FLOATS,
    NUMERIC,
    SIGNED,
    Attr,
    AttrKind,
    InferenceContext,
    Input,
    Output,
    op,
)

# PRelu's dtypes at ONNX opset 16 that ge-hub has (ONNX also lists uint32 and uint64).
PRELU_TYPES = FLOATS | {DType.INT32, DType.INT64}

# Selu's defaults are the float32 values ONNX writes in its spec.
SELU_ALPHA = 1.67326319217681884765625
SELU_GAMMA = 1.05070102214813232421875


# --- helpers ------------------------------------------------------------------------------


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    """The float type that math on elements of `dtype` is computed in.

    float16 and bfloat16 go through float32, as the C kernels do; float32 goes through
    float64 so that the oracle is more precise than the kernels it checks; integers
    (Erf accepts them) go through float64, which holds every int32 exactly.
    """
    if dtype in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)):
        return np.dtype(np.float32)
    return np.dtype(np.float64)


def _float_math(fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    """Apply `fn` to `x` in its compute type and round the result back to x's dtype."""
    # Domain errors (log of a negative) and overflow are meant to give NaN and inf
    # quietly, as IEEE arithmetic in a C kernel does.
    with np.errstate(all="ignore"):
        return np.asarray(fn(x.astype(_compute_dtype(x.dtype)))).astype(x.dtype)


def _is_float(array: np.ndarray) -> bool:
    return DType.from_numpy(array.dtype).is_float


def _check_flag(ctx: InferenceContext, name: str) -> None:
    """Fail unless int attribute `name` is 0 or 1."""
    value = ctx.attrs[name]
    if value not in (0, 1):
        ctx.fail(f"attribute {name!r} must be 0 or 1, got {value}")


def _same_shape_bool(ctx: InferenceContext) -> list[TensorType]:
    """One bool output shaped like the first input (IsNaN, IsInf)."""
    return [ctx.input(0).with_dtype(DType.BOOL)]


# --- sign, magnitude and rounding ---------------------------------------------------------


@op("Neg", inputs=[Input("X", SIGNED)], outputs=[Output("Y")], infer=same_as_input)
def neg(x):
    """Y = -X (integers wrap around: -INT_MIN is INT_MIN, as in C)."""
    if _is_float(x):
        return _float_math(np.negative, x)
    return np.negative(x)


@op("Abs", inputs=[Input("X", NUMERIC)], outputs=[Output("Y")], infer=same_as_input)
def abs_(x):
    """Y = |X| (integers wrap around: |INT_MIN| is INT_MIN, as in C)."""
    if _is_float(x):
        return _float_math(np.abs, x)
    return np.abs(x)


@op("Sign", inputs=[Input("input", NUMERIC)], outputs=[Output("output")], infer=same_as_input)
def sign(x):
    """output = -1, 0 or 1 by the sign of input; NaN stays NaN."""
    if _is_float(x):
        return _float_math(np.sign, x)
    return np.sign(x)


@op("Floor", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=same_as_input)
def floor(x):
    """Y = the largest integer <= X."""
    return _float_math(np.floor, x)


@op("Ceil", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=same_as_input)
def ceil(x):
    """Y = the smallest integer >= X."""
    return _float_math(np.ceil, x)


@op("Round", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=same_as_input)
def round_(x):
    """Y = X rounded to the nearest integer, halves to even (2.5 -> 2, -1.5 -> -2)."""
    return _float_math(np.rint, x)


@op("IsNaN", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=_same_shape_bool)
def is_nan(x):
    """Y = whether X is NaN; bool output."""
    return np.isnan(x.astype(_compute_dtype(x.dtype)))


def _infer_is_inf(ctx: InferenceContext) -> list[TensorType]:
    _check_flag(ctx, "detect_negative")
    _check_flag(ctx, "detect_positive")
    return _same_shape_bool(ctx)


@op("IsInf", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=_infer_is_inf,
    attrs=[Attr("detect_negative", AttrKind.INT, 1), Attr("detect_positive", AttrKind.INT, 1)])
def is_inf(x, *, detect_negative, detect_positive):
    """Y = whether X is -inf (when detect_negative) or +inf (when detect_positive)."""
    wide = x.astype(_compute_dtype(x.dtype))
    return (np.isneginf(wide) & bool(detect_negative)) | (np.isposinf(wide) & bool(detect_positive))


# --- exponentials, logarithms, powers -----------------------------------------------------


@op("Exp", inputs=[Input("input", FLOATS)], outputs=[Output("output")], infer=same_as_input)
def exp(x):
    """output = e ** input."""
    return _float_math(np.exp, x)


@op("Log", inputs=[Input("input", FLOATS)], outputs=[Output("output")], infer=same_as_input)
def log(x):
    """output = natural log of input (-inf at 0, NaN below 0)."""
    return _float_math(np.log, x)


@op("Sqrt", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=same_as_input)
def sqrt(x):
    """Y = square root of X (NaN below 0)."""
    return _float_math(np.sqrt, x)


@op("Reciprocal", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=same_as_input)
def reciprocal(x):
    """Y = 1 / X (inf at 0, with the sign of the zero)."""
    return _float_math(np.reciprocal, x)


@op("Erf", inputs=[Input("input", NUMERIC)], outputs=[Output("output")], infer=same_as_input)
def erf(x):
    """output = the error function of input; integer results truncate toward zero."""
    # NumPy has no erf and the core does not depend on SciPy; math.erf is correctly
    # computed in float64, which is all an oracle needs (it is never the fast path).
    erf_of = np.frompyfunc(math.erf, 1, 1)
    return _float_math(lambda w: erf_of(w).astype(w.dtype), x)


# --- trigonometric and hyperbolic ---------------------------------------------------------


@op("Sin", inputs=[Input("input", FLOATS)], outputs=[Output("output")], infer=same_as_input)
def sin(x):
    """output = sin(input), input in radians."""
    return _float_math(np.sin, x)


@op("Cos", inputs=[Input("input", FLOATS)], outputs=[Output("output")], infer=same_as_input)
def cos(x):
    """output = cos(input), input in radians."""
    return _float_math(np.cos, x)


@op("Tan", inputs=[Input("input", FLOATS)], outputs=[Output("output")], infer=same_as_input)
def tan(x):
    """output = tan(input), input in radians."""
    return _float_math(np.tan, x)


@op("Asin", inputs=[Input("input", FLOATS)], outputs=[Output("output")], infer=same_as_input)
def asin(x):
    """output = arcsin(input), in [-pi/2, pi/2]; NaN outside [-1, 1]."""
    return _float_math(np.arcsin, x)


@op("Acos", inputs=[Input("input", FLOATS)], outputs=[Output("output")], infer=same_as_input)
def acos(x):
    """output = arccos(input), in [0, pi]; NaN outside [-1, 1]."""
    return _float_math(np.arccos, x)


@op("Atan", inputs=[Input("input", FLOATS)], outputs=[Output("output")], infer=same_as_input)
def atan(x):
    """output = arctan(input), in (-pi/2, pi/2)."""
    return _float_math(np.arctan, x)


@op("Sinh", inputs=[Input("input", FLOATS)], outputs=[Output("output")], infer=same_as_input)
def sinh(x):
    """output = sinh(input)."""
    return _float_math(np.sinh, x)


@op("Cosh", inputs=[Input("input", FLOATS)], outputs=[Output("output")], infer=same_as_input)
def cosh(x):
    """output = cosh(input)."""
    return _float_math(np.cosh, x)


@op("Tanh", inputs=[Input("input", FLOATS)], outputs=[Output("output")], infer=same_as_input)
def tanh(x):
    """output = tanh(input)."""
    return _float_math(np.tanh, x)


@op("Asinh", inputs=[Input("input", FLOATS)], outputs=[Output("output")], infer=same_as_input)
def asinh(x):
    """output = arcsinh(input)."""
    return _float_math(np.arcsinh, x)


@op("Acosh", inputs=[Input("input", FLOATS)], outputs=[Output("output")], infer=same_as_input)
def acosh(x):
    """output = arccosh(input); NaN below 1."""
    return _float_math(np.arccosh, x)


@op("Atanh", inputs=[Input("input", FLOATS)], outputs=[Output("output")], infer=same_as_input)
def atanh(x):
    """output = arctanh(input); +-inf at +-1, NaN outside [-1, 1]."""
    return _float_math(np.arctanh, x)


# --- activations --------------------------------------------------------------------------


@op("Relu", inputs=[Input("X", SIGNED)], outputs=[Output("Y")], infer=same_as_input)
def relu(x):
    """Y = max(X, 0); NaN stays NaN."""
    return np.maximum(x, x.dtype.type(0))


@op("Sigmoid", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=same_as_input)
def sigmoid(x):
    """Y = 1 / (1 + exp(-X))."""
    return _float_math(lambda w: 1.0 / (1.0 + np.exp(-w)), x)


@op("LeakyRelu", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=same_as_input,
    attrs=[Attr("alpha", AttrKind.FLOAT, 0.01)])
def leaky_relu(x, *, alpha):
    """Y = X where X >= 0, else alpha * X."""
    return _float_math(lambda w: np.where(w >= 0, w, alpha * w), x)


def _infer_prelu(ctx: InferenceContext) -> list[TensorType]:
    """Y has X's type; slope must broadcast to X without changing X's shape."""
    x, slope = ctx.input(0), ctx.input(1)
    if x.shape is None or slope.shape is None:
        return [x]
    if slope.rank > x.rank:
        ctx.fail(f"input 'slope' must broadcast to input 'X' {x}, so its rank must be "
                 f"<= {x.rank}, got {slope} (rank {slope.rank})")
    for x_dim, slope_dim in zip(reversed(x.shape), reversed(slope.shape)):
        # A symbol on either side cannot be checked until shapes are specialized.
        if isinstance(x_dim, int) and isinstance(slope_dim, int) and slope_dim not in (1, x_dim):
            ctx.fail(f"input 'slope' {slope} does not broadcast to input 'X' {x} "
                     f"(slope dim {slope_dim} vs X dim {x_dim})")
    return [x]


@op("PRelu", inputs=[Input("X", PRELU_TYPES), Input("slope", PRELU_TYPES)],
    outputs=[Output("Y")], infer=_infer_prelu)
def prelu(x, slope):
    """Y = X where X >= 0, else slope * X; slope broadcasts to X's shape (one way)."""
    try:
        slope = np.broadcast_to(slope, x.shape)
    except ValueError:
        raise OpError(f"PRelu: input 'slope' of shape {slope.shape} does not broadcast to "
                      f"input 'X' of shape {x.shape}") from None
    if _is_float(x):
        wide = _compute_dtype(x.dtype)
        return _float_math(lambda w: np.where(w < 0, slope.astype(wide) * w, w), x)
    return np.where(x < 0, slope * x, x)  # integer products wrap, as in C


@op("ThresholdedRelu", inputs=[Input("X", FLOATS)], outputs=[Output("Y")],
    infer=same_as_input, attrs=[Attr("alpha", AttrKind.FLOAT, 1.0)])
def thresholded_relu(x, *, alpha):
    """Y = X where X > alpha, else 0."""
    return _float_math(lambda w: np.where(w > alpha, w, 0.0), x)


@op("Elu", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=same_as_input,
    attrs=[Attr("alpha", AttrKind.FLOAT, 1.0)])
def elu(x, *, alpha):
    """Y = X where X > 0, else alpha * (exp(X) - 1)."""
    return _float_math(lambda w: np.where(w > 0, w, alpha * np.expm1(w)), x)


@op("Selu", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=same_as_input,
    attrs=[Attr("alpha", AttrKind.FLOAT, SELU_ALPHA), Attr("gamma", AttrKind.FLOAT, SELU_GAMMA)])
def selu(x, *, alpha, gamma):
    """Y = gamma * X where X > 0, else gamma * alpha * (exp(X) - 1)."""
    return _float_math(lambda w: gamma * np.where(w > 0, w, alpha * np.expm1(w)), x)


def _check_celu_alpha(alpha: float, fail: Callable[[str], None]) -> None:
    # Celu divides by alpha.
    if alpha == 0:
        fail(f"attribute 'alpha' must be non-zero, got {alpha}")


def _infer_celu(ctx: InferenceContext) -> list[TensorType]:
    _check_celu_alpha(ctx.attrs["alpha"], ctx.fail)
    return same_as_input(ctx)


def _raise(op_name: str) -> Callable[[str], None]:
    """A `fail` for references, which have no inference context to name the node."""

    def fail(message: str):
        raise OpError(f"{op_name}: {message}")

    return fail


@op("Celu", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=_infer_celu,
    attrs=[Attr("alpha", AttrKind.FLOAT, 1.0)])
def celu(x, *, alpha):
    """Y = max(0, X) + min(0, alpha * (exp(X / alpha) - 1))."""
    _check_celu_alpha(alpha, _raise("Celu"))
    return _float_math(
        lambda w: np.maximum(w, 0.0) + np.minimum(0.0, alpha * np.expm1(w / alpha)), x)


GELU_APPROXIMATIONS = ("none", "tanh")


def _check_gelu_approximate(value: str, fail: Callable[[str], None]) -> None:
    if value not in GELU_APPROXIMATIONS:
        fail(f"attribute 'approximate' must be one of {GELU_APPROXIMATIONS}, got {value!r}")


def _infer_gelu(ctx: InferenceContext) -> list[TensorType]:
    _check_gelu_approximate(ctx.attrs["approximate"], ctx.fail)
    return same_as_input(ctx)


@op("Gelu", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=_infer_gelu,
    attrs=[Attr("approximate", AttrKind.STRING, "none")])
def gelu(x, *, approximate):
    """Y = X * Phi(X) (Phi the standard normal CDF), or its tanh approximation."""
    _check_gelu_approximate(approximate, _raise("Gelu"))
    if approximate == "tanh":
        scale = math.sqrt(2.0 / math.pi)
        return _float_math(
            lambda w: 0.5 * w * (1.0 + np.tanh(scale * (w + 0.044715 * w**3))), x)
    erf_of = np.frompyfunc(math.erf, 1, 1)
    return _float_math(
        lambda w: 0.5 * w * (1.0 + erf_of(w / math.sqrt(2.0)).astype(w.dtype)), x)


@op("Softplus", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=same_as_input)
def softplus(x):
    """Y = log(1 + exp(X))."""
    # logaddexp(0, X) does not overflow for large X, where exp(X) would.
    return _float_math(lambda w: np.logaddexp(0.0, w), x)


@op("Softsign", inputs=[Input("input", FLOATS)], outputs=[Output("output")],
    infer=same_as_input)
def softsign(x):
    """output = input / (1 + |input|)."""
    return _float_math(lambda w: w / (1.0 + np.abs(w)), x)


@op("Mish", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=same_as_input)
def mish(x):
    """Y = X * tanh(softplus(X))."""
    return _float_math(lambda w: w * np.tanh(np.logaddexp(0.0, w)), x)


@op("HardSigmoid", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=same_as_input,
    attrs=[Attr("alpha", AttrKind.FLOAT, 0.2), Attr("beta", AttrKind.FLOAT, 0.5)])
def hard_sigmoid(x, *, alpha, beta):
    """Y = max(0, min(1, alpha * X + beta))."""
    return _float_math(lambda w: np.clip(alpha * w + beta, 0.0, 1.0), x)


@op("HardSwish", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=same_as_input)
def hard_swish(x):
    """Y = X * max(0, min(1, X / 6 + 1/2))."""
    return _float_math(lambda w: w * np.clip(w / 6.0 + 0.5, 0.0, 1.0), x)


# --- Clip ---------------------------------------------------------------------------------


def _may_be_scalar(t: TensorType) -> bool:
    """Whether `t` can hold one element: rank 0, or 1-D of length 1 (or a symbol)."""
    # ONNX asks for a scalar; exporters also write a one-element 1-D tensor. A symbolic
    # length can only be checked once shapes are specialized.
    if t.shape is None or t.rank == 0:
        return True
    return t.rank == 1 and (t.shape[0] == 1 or not isinstance(t.shape[0], int))


def _infer_clip(ctx: InferenceContext) -> list[TensorType]:
    """output has input's type; min and max, when given, must be scalars."""
    for index in (1, 2):
        if ctx.has_input(index) and not _may_be_scalar(ctx.input(index)):
            name = ctx.schema.input_name(index)
            ctx.fail(f"input {name!r} must be a scalar (rank 0, or shape [1]), "
                     f"got {ctx.input(index)}")
    return same_as_input(ctx)


def _scalar_bound(bound: np.ndarray | None, name: str) -> np.ndarray | None:
    if bound is None:
        return None
    if bound.size != 1:
        raise OpError(f"Clip: input {name!r} must be a scalar, got shape {bound.shape}")
    return bound.reshape(())


@op("Clip", inputs=[Input("input", NUMERIC), Input("min", NUMERIC, optional=True),
                    Input("max", NUMERIC, optional=True)],
    outputs=[Output("output")], infer=_infer_clip)
def clip(x, low=None, high=None):
    """output = min(max(input, min), max); an omitted bound does not clip; NaN stays NaN."""
    # Applying max last is what makes every element equal max where min > max, as ONNX asks.
    low, high = _scalar_bound(low, "min"), _scalar_bound(high, "max")
    result = x.copy()
    if low is not None:
        result = np.maximum(result, low)
    if high is not None:
        result = np.minimum(result, high)
    return result.astype(x.dtype, copy=False)


# --- Cast, CastLike, Identity -------------------------------------------------------------


def cast_array(x: np.ndarray, to: DType, *, saturate: bool = True,
               round_mode: str = "up") -> np.ndarray:
    """Convert `x` to dtype `to` with the semantics of Cast.

    - float to int: truncate toward zero; out-of-range values and infinities saturate to
      the int's min or max; NaN becomes 0 (ONNX leaves these undefined, see below);
    - int to int: two's-complement wraparound, as C's conversions do (300 -> uint8 44);
    - anything to bool: `x != 0` (NaN is True); bool to anything: 0 or 1;
    - to a float: round to nearest, halves to even; too large becomes inf;
    - from a narrow (storage-only) dtype: as from float32, which holds it exactly; to one:
      `ge_hub.ops.narrow`, where `saturate` and `round_mode` (float8_e8m0fnu) apply.
    """
    x = narrow.widen(x)
    if to.is_narrow:
        if to.is_integer:  # floats truncate and saturate as to any integer; then wrap
            x = cast_array(x, DType.INT64)
        return narrow.narrow(x, to, saturate=bool(saturate), round_mode=round_mode)
    source = DType.from_numpy(x.dtype)
    target = to.numpy
    if to is DType.BOOL:
        return np.asarray(x != 0)  # NaN is non-zero, so True
    if source.is_float and to.is_integer:
        return _float_to_int(x, target)
    if to is DType.BFLOAT16 and (source is DType.FLOAT64 or not source.is_float):
        # Integers widen to float64 exactly up to 2**53; int64 beyond that is rounded
        # twice (to float64, then to bfloat16), the one documented inexactness.
        return _float64_to_bfloat16(x.astype(np.float64))
    with np.errstate(over="ignore"):  # a float too large for the target becomes inf
        return x.astype(target)


def _float_to_int(x: np.ndarray, target: np.dtype) -> np.ndarray:
    """Truncate toward zero; saturate out-of-range values and infinities; NaN becomes 0.

    ONNX leaves NaN and out-of-range conversions undefined (in C they are undefined
    behaviour, and NumPy's answer depends on the platform); ge-hub defines them so that
    kernels and constant folding agree everywhere.
    """
    info = np.iinfo(target)
    whole = np.trunc(x.astype(np.float64))  # every float type widens to float64 exactly
    # int(info.max) + 1 is a power of two, exact in float64 (info.max itself may not be).
    too_high = whole >= float(int(info.max) + 1)
    too_low = whole < info.min
    in_range = np.where(too_high | too_low | np.isnan(whole), 0.0, whole).astype(target)
    return np.where(too_high, target.type(info.max),
                    np.where(too_low, target.type(info.min), in_range))


def _float64_to_bfloat16(x: np.ndarray) -> np.ndarray:
    """Round float64 to bfloat16 once, to nearest even.

    ml_dtypes narrows float64 through float32, rounding twice: a value just above a
    bfloat16 tie can round down onto the tie and then to even. Rounding to float32 "to
    odd" first (truncate, then set the last bit when inexact) keeps the sticky bit.
    """
    return narrow.round_to_odd_float32(x).astype(ml_dtypes.bfloat16)


def _check_cast_attrs(ctx: InferenceContext) -> None:
    _check_flag(ctx, "saturate")
    if ctx.attrs["round_mode"] not in narrow.E8M0_ROUND_MODES:
        ctx.fail(f"attribute 'round_mode' must be one of {', '.join(narrow.E8M0_ROUND_MODES)}, "
                 f"got {ctx.attrs['round_mode']!r}")


def _infer_cast(ctx: InferenceContext) -> list[TensorType]:
    _check_cast_attrs(ctx)
    return [ctx.input(0).with_dtype(ctx.attrs["to"])]


# `saturate` and `round_mode` concern only conversions to float8 (round_mode only to
# float8_e8m0fnu): see ge_hub.ops.narrow.
_CAST_ATTRS = [Attr("saturate", AttrKind.INT, 1), Attr("round_mode", AttrKind.STRING, "up")]


@op("Cast", inputs=[Input("input", ANY, type_var="T1")], outputs=[Output("output")],
    infer=_infer_cast, attrs=[Attr("to", AttrKind.DTYPE), *_CAST_ATTRS])
def cast(x, *, to, saturate, round_mode):
    """output = input as dtype `to`; float->int truncates, saturates, NaN->0; int->int wraps."""
    return cast_array(x, DType.parse(to), saturate=saturate, round_mode=round_mode)


def _infer_cast_like(ctx: InferenceContext) -> list[TensorType]:
    _check_cast_attrs(ctx)
    return [ctx.input(0).with_dtype(ctx.input(1).dtype)]


@op("CastLike", inputs=[Input("input", ANY, type_var="T1"),
                        Input("target_type", ANY, type_var="T2")],
    outputs=[Output("output")], infer=_infer_cast_like, attrs=_CAST_ATTRS)
def cast_like(x, target_type, *, saturate, round_mode):
    """output = input converted, as Cast does, to the dtype of target_type."""
    return cast_array(x, DType.from_numpy(target_type.dtype), saturate=saturate,
                      round_mode=round_mode)


@op("Identity", inputs=[Input("input", ANY)], outputs=[Output("output")], infer=same_as_input)
def identity(x):
    """output = input (a copy, so that folding never aliases a constant)."""
    return x.copy()


# --- Shrink -----------------------------------------------------------------------------


@op("Shrink", inputs=[Input("input", NUMERIC - {DType.BFLOAT16})], outputs=[Output("output")],
    infer=same_as_input,
    attrs=[Attr("bias", AttrKind.FLOAT, 0.0), Attr("lambd", AttrKind.FLOAT, 0.5)])
def shrink(x, *, bias, lambd):
    """output = x + bias where x < -lambd, x - bias where x > lambd, 0 elsewhere;
    `lambd` and `bias` are first cast to the input's dtype (ints truncate)."""
    lambd_cast = float(np.asarray(lambd).astype(x.dtype))
    bias_cast = np.asarray(bias).astype(x.dtype)
    # Compare as float64 so that -lambd exists for unsigned inputs too.
    wide = x.astype(np.float64)
    with np.errstate(over="ignore"):  # integer results wrap, like C
        added, subtracted = x + bias_cast, x - bias_cast
    return np.where(wide < -lambd_cast, added,
                    np.where(wide > lambd_cast, subtracted, 0)).astype(x.dtype)


# --- BitCast --------------------------------------------------------------------------


def _infer_bit_cast(ctx: InferenceContext) -> list[TensorType]:
    x = ctx.input(0)
    to = DType.parse(ctx.attrs["to"])
    if to.itemsize != x.dtype.itemsize:
        ctx.fail(f"attribute 'to' ({to}, {8 * to.itemsize} bits) must have the bit width of "
                 f"input 'input' ({x.dtype}, {8 * x.dtype.itemsize} bits)")
    return [TensorType(to, x.shape)]


@op("BitCast", inputs=[Input("input", ANY)], outputs=[Output("output")], infer=_infer_bit_cast,
    attrs=[Attr("to", AttrKind.DTYPE)])
def bit_cast(x, *, to):
    """output = the bytes of `input` (little endian) read as dtype `to` of the same width; the
    shape stays. A byte read as bool is true when it is not zero (NumPy would keep the
    byte, so that two true values could compare unequal)."""
    target = DType.parse(to)
    if target.itemsize != x.dtype.itemsize:
        raise OpError(f"BitCast: attribute 'to' ({target}) must have the bit width of input "
                      f"'input' ({x.dtype})")
    # np.array, not np.ascontiguousarray, which would make a scalar 1-D.
    data = np.array(x, dtype=x.dtype.newbyteorder("<"), order="C")
    if target is DType.BOOL:
        return data.view(np.uint8) != 0
    return data.view(target.numpy.newbyteorder("<")).astype(target.numpy)
