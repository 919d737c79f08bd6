"""Unary elementwise ops: inference (concrete, symbolic, unknown rank), references checked
element by element against Python's `math` and hand-computed ONNX cases, every dtype
family each op claims, PRelu's slope broadcasting, Clip's optional bounds, Cast between
every pair of dtypes, and bad input; Shrink against its formula, BitCast against
`struct`."""

from __future__ import annotations

import math
import struct

import ml_dtypes
import numpy as np
import pytest
from conftest import close, random_array, run_op, tt
from conftest import infer as infer_types

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import Sym, TensorType
from ge_hub.ops import get_schema
from ge_hub.ops.schema import FLOATS

FLOAT_DTYPES = ["float32", "float64", "float16", "bfloat16"]
SIGNED_INT_DTYPES = ["int8", "int16", "int32", "int64"]
INT_DTYPES = SIGNED_INT_DTYPES + ["uint8"]
ALL_DTYPES = [d.value for d in DType]
# The narrow (storage-only) dtypes convert by rules of their own: tests/ops/test_narrow.py.
COMPUTE_DTYPES = [d.value for d in DType if not d.is_narrow]

# Relative and absolute tolerance per float dtype: the reference rounds once to the
# output dtype, the Python oracle computes in float64.
TOLERANCE = {"float64": 1e-12, "float32": 1e-6, "float16": 2e-3, "bfloat16": 1.6e-2}

ODD_SHAPE = (3, 5, 7)

# Selu's defaults as the ONNX spec writes them: the SELU paper's constants
# (1.6732632423543772..., 1.0507009873554804...) rounded to float32, as ONNX attributes are.
SELU_ALPHA = 1.67326319217681884765625
SELU_GAMMA = 1.05070102214813232421875


def np_dtype(name: str) -> np.dtype:
    return DType(name).numpy


def python_values(array: np.ndarray) -> list:
    """Elements as Python scalars: float for every float dtype, int, or bool."""
    if DType.from_numpy(array.dtype).is_float:
        return np.asarray(array).astype(np.float64).ravel().tolist()
    return np.asarray(array).ravel().tolist()


def oracle(fn, x: np.ndarray, *others: np.ndarray) -> np.ndarray:
    """fn on every element of x (and the broadcast elements of `others`), in float64."""
    columns = [python_values(a) for a in np.broadcast_arrays(x, *others)]
    return np.array([fn(*args) for args in zip(*columns)], dtype=np.float64).reshape(x.shape)


def assert_close(got: np.ndarray, want: np.ndarray, dtype: str) -> None:
    """got (of `dtype`) equals want (float64) up to rounding to `dtype`."""
    assert got.dtype == np_dtype(dtype) and got.shape == want.shape
    if dtype in TOLERANCE:
        tol = TOLERANCE[dtype]
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol,
                                   equal_nan=True)
    else:
        np.testing.assert_array_equal(got.astype(np.float64), want)


def infer(op_name, *types, node_name=None, **attrs):
    return get_schema(op_name).infer_types(list(types), attrs, node_name=node_name)


def sigmoid(v):
    return 1.0 / (1.0 + math.exp(-v))


def softplus(v):
    return math.log1p(math.exp(v))


# --- float math against Python's math module ---------------------------------------------

# (op, attrs, Python oracle, input range): ranges keep inputs inside each function's
# domain and away from poles, so that relative error is meaningful.
FLOAT_CASES = [
    ("Neg", {}, lambda v: -v, (-3, 3)),
    ("Abs", {}, abs, (-3, 3)),
    ("Sign", {}, lambda v: float((v > 0) - (v < 0)), (-3, 3)),
    ("Floor", {}, math.floor, (-5, 5)),
    ("Ceil", {}, math.ceil, (-5, 5)),
    ("Round", {}, round, (-5, 5)),  # Python's round() rounds halves to even
    ("Exp", {}, math.exp, (-3, 3)),
    ("Log", {}, math.log, (0.05, 6)),
    ("Sqrt", {}, math.sqrt, (0.05, 6)),
    ("Reciprocal", {}, lambda v: 1.0 / v, (0.2, 4)),
    ("Reciprocal", {}, lambda v: 1.0 / v, (-4, -0.2)),
    ("Erf", {}, lambda v: 1.0 - math.erfc(v), (-2.5, 2.5)),
    ("Sin", {}, math.sin, (-3, 3)),
    ("Cos", {}, math.cos, (-1.4, 1.4)),
    ("Tan", {}, math.tan, (-1.2, 1.2)),
    ("Asin", {}, math.asin, (-0.95, 0.95)),
    ("Acos", {}, math.acos, (-0.95, 0.95)),
    ("Atan", {}, math.atan, (-4, 4)),
    ("Sinh", {}, math.sinh, (-3, 3)),
    ("Cosh", {}, math.cosh, (-3, 3)),
    ("Tanh", {}, math.tanh, (-3, 3)),
    ("Asinh", {}, math.asinh, (-4, 4)),
    ("Acosh", {}, math.acosh, (1.05, 6)),
    ("Atanh", {}, math.atanh, (-0.9, 0.9)),
    ("Relu", {}, lambda v: max(v, 0.0), (-3, 3)),
    ("Sigmoid", {}, sigmoid, (-6, 6)),
    ("LeakyRelu", {}, lambda v: v if v >= 0 else 0.01 * v, (-3, 3)),
    ("LeakyRelu", {"alpha": 0.3}, lambda v: v if v >= 0 else 0.3 * v, (-3, 3)),
    ("ThresholdedRelu", {}, lambda v: v if v > 1.0 else 0.0, (-3, 3)),
    ("ThresholdedRelu", {"alpha": -0.5}, lambda v: v if v > -0.5 else 0.0, (-3, 3)),
    ("Elu", {}, lambda v: v if v > 0 else math.exp(v) - 1, (-3, 3)),
    ("Elu", {"alpha": 0.4}, lambda v: v if v > 0 else 0.4 * (math.exp(v) - 1), (-3, 3)),
    ("Selu", {}, lambda v: SELU_GAMMA * (v if v > 0 else SELU_ALPHA * (math.exp(v) - 1)),
     (-3, 3)),
    ("Selu", {"alpha": 2.0, "gamma": 0.5},
     lambda v: 0.5 * (v if v > 0 else 2.0 * (math.exp(v) - 1)), (-3, 3)),
    ("Celu", {}, lambda v: max(0.0, v) + min(0.0, math.exp(v) - 1), (-3, 3)),
    ("Celu", {"alpha": 1.7},
     lambda v: max(0.0, v) + min(0.0, 1.7 * (math.exp(v / 1.7) - 1)), (-3, 3)),
    ("Gelu", {}, lambda v: 0.5 * v * math.erfc(-v / math.sqrt(2.0)), (-4, 4)),
    ("Gelu", {"approximate": "tanh"},
     lambda v: 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3))),
     (-4, 4)),
    ("Softplus", {}, softplus, (-5, 5)),
    ("Softsign", {}, lambda v: v / (1 + abs(v)), (-5, 5)),
    ("Mish", {}, lambda v: v * math.tanh(softplus(v)), (-5, 5)),
    ("HardSigmoid", {}, lambda v: min(1.0, max(0.0, 0.2 * v + 0.5)), (-5, 5)),
    ("HardSigmoid", {"alpha": 0.7, "beta": -0.1},
     lambda v: min(1.0, max(0.0, 0.7 * v - 0.1)), (-3, 3)),
    ("HardSwish", {}, lambda v: v * min(max(v + 3, 0.0), 6.0) / 6.0, (-5, 5)),
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("op_name, attrs, fn, bounds", FLOAT_CASES,
                         ids=[f"{c[0]}{c[1] or ''}" for c in FLOAT_CASES])
def test_float_reference_matches_math(rng, op_name, attrs, fn, bounds, dtype):
    x = random_array(rng, ODD_SHAPE, np_dtype(dtype), *bounds)
    (y,) = run_op(op_name, [x], attrs)
    assert_close(y, oracle(fn, x), dtype)


@pytest.mark.parametrize("op_name, attrs, fn, bounds", FLOAT_CASES[:3],
                         ids=[c[0] for c in FLOAT_CASES[:3]])
@pytest.mark.parametrize("shape", [(), (1,), (13,), (2, 1, 9)])
def test_odd_and_scalar_shapes(rng, op_name, attrs, fn, bounds, shape):
    x = random_array(rng, shape, np.float32, *bounds)
    (y,) = run_op(op_name, [x], attrs)
    assert_close(y, oracle(fn, x), "float32")


def test_float32_is_computed_precisely(rng):
    # float32 math goes through float64, so results are the correctly rounded ones
    # except where float64's own error lands on a float32 tie (never, for this data).
    x = random_array(rng, (200,), np.float32, -5, 5)
    for op_name, fn in [("Exp", math.exp), ("Tanh", math.tanh), ("Sin", math.sin)]:
        (y,) = run_op(op_name, [x])
        want = np.array([fn(v) for v in python_values(x)]).astype(np.float32)
        np.testing.assert_array_equal(y, want)


def test_round_halves_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4, 2.6, -2.6, 3.5], np.float32)
    (y,) = run_op("Round", [x])
    np.testing.assert_array_equal(y, [0, 2, 2, -0.0, -2, -2, 2, 3, -3, 4])


def test_erf_known_values():
    x = np.array([0.5, 1.0, -2.0, 0.0], np.float64)
    (y,) = run_op("Erf", [x])
    np.testing.assert_allclose(
        y, [0.5204998778130465, 0.8427007929497149, -0.9953222650189527, 0.0], rtol=1e-15)


def test_edges_give_ieee_results_without_warnings():
    x = np.array([0.0, -1.0, -0.0], np.float32)
    with np.errstate(all="raise"):  # the references must not trip NumPy's warnings
        (log,) = run_op("Log", [x])
        (rec,) = run_op("Reciprocal", [x])
        (sqrt,) = run_op("Sqrt", [x])
        (exp,) = run_op("Exp", [np.array([100.0, -200.0], np.float32)])
        (sig,) = run_op("Sigmoid", [np.array([-1000.0, 1000.0], np.float32)])
        (atanh,) = run_op("Atanh", [np.array([1.0, -1.0, 2.0], np.float32)])
    np.testing.assert_array_equal(log[:2], [-np.inf, np.nan])
    np.testing.assert_array_equal(rec, [np.inf, -1.0, -np.inf])
    np.testing.assert_array_equal(sqrt[:2], [0.0, np.nan])
    np.testing.assert_array_equal(exp, [np.inf, 0.0])
    np.testing.assert_array_equal(sig, [0.0, 1.0])
    np.testing.assert_array_equal(atanh, [np.inf, -np.inf, np.nan])


def test_softplus_does_not_overflow_for_large_inputs():
    x = np.array([800.0, -800.0, 30.0], np.float64)
    (y,) = run_op("Softplus", [x])
    np.testing.assert_allclose(y, [800.0, 0.0, softplus(30.0)], rtol=1e-15, atol=1e-300)


NAN_PROPAGATING = ["Neg", "Abs", "Sign", "Floor", "Ceil", "Round", "Exp", "Erf", "Relu",
                   "Sigmoid", "LeakyRelu", "Elu", "Selu", "Celu", "Gelu", "Softplus",
                   "Softsign", "Mish", "HardSigmoid", "HardSwish", "Tanh", "Identity"]


@pytest.mark.parametrize("op_name", NAN_PROPAGATING)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_nan_propagates(op_name, dtype):
    x = np.array([np.nan, 1.5, -1.5], np_dtype(dtype))
    (y,) = run_op(op_name, [x])
    assert np.isnan(y[0].astype(np.float32)) and not np.isnan(y[1:].astype(np.float32)).any()


def test_thresholded_relu_maps_nan_to_zero():
    # ONNX: Y = X where X > alpha, else 0, and NaN > alpha is false.
    (y,) = run_op("ThresholdedRelu", [np.array([np.nan, 2.0], np.float32)])
    np.testing.assert_array_equal(y, [0.0, 2.0])


# --- integer inputs ------------------------------------------------------------------------


def wrap(value: int, dtype: str) -> int:
    """Two's-complement wraparound of a Python int into an integer dtype."""
    info = np.iinfo(np_dtype(dtype))
    return (value - info.min) % (int(info.max) - int(info.min) + 1) + int(info.min)


INT_CASES = [  # (op, dtypes, Python oracle)
    ("Neg", SIGNED_INT_DTYPES, lambda v: -v),
    ("Abs", INT_DTYPES, abs),
    ("Sign", INT_DTYPES, lambda v: (v > 0) - (v < 0)),
    ("Relu", SIGNED_INT_DTYPES, lambda v: max(v, 0)),
    ("Erf", INT_DTYPES, lambda v: int(math.erf(v))),  # truncated toward zero
]


@pytest.mark.parametrize("op_name, dtypes, fn", INT_CASES, ids=[c[0] for c in INT_CASES])
def test_integer_reference(rng, op_name, dtypes, fn):
    for dtype in dtypes:
        info = np.iinfo(np_dtype(dtype))
        x = random_array(rng, ODD_SHAPE, np_dtype(dtype), -100, 100)
        x.flat[:2] = [info.min, info.max]  # the extremes, where Neg and Abs wrap
        (y,) = run_op(op_name, [x])
        want = np.array([wrap(fn(v), dtype) for v in python_values(x)], dtype=np.int64)
        np.testing.assert_array_equal(y, want.reshape(x.shape).astype(y.dtype))


def test_neg_and_abs_of_int_min_wrap_as_in_c():
    x = np.array([-128, 127, -5], np.int8)
    np.testing.assert_array_equal(run_op("Neg", [x])[0], [-128, -127, 5])
    np.testing.assert_array_equal(run_op("Abs", [x])[0], [-128, 127, 5])


# --- IsNaN, IsInf -------------------------------------------------------------------------


def with_specials(rng, dtype):
    x = random_array(rng, ODD_SHAPE, np_dtype(dtype))
    x.flat[[0, 4, 9, 20, 33]] = np.array([np.nan, np.inf, -np.inf, -np.inf, np.nan]).astype(
        x.dtype)
    return x


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_is_nan(rng, dtype):
    x = with_specials(rng, dtype)
    (y,) = run_op("IsNaN", [x])
    assert y.dtype == np.bool_
    np.testing.assert_array_equal(y, oracle(math.isnan, x).astype(bool))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("negative, positive", [(1, 1), (1, 0), (0, 1), (0, 0)])
def test_is_inf(rng, dtype, negative, positive):
    x = with_specials(rng, dtype)
    (y,) = run_op("IsInf", [x], {"detect_negative": negative, "detect_positive": positive})

    def fn(v):
        return math.isinf(v) and (bool(negative) if v < 0 else bool(positive))

    np.testing.assert_array_equal(y, oracle(fn, x).astype(bool))


# --- PRelu --------------------------------------------------------------------------------

# slope shapes for X of shape (2, 3, 4, 5): per channel, last axis, scalar, full, and
# broadcast along both ends.
PRELU_SLOPES = [(3, 1, 1), (5,), (), (1, 3, 1, 1), (2, 3, 4, 5), (4, 1), (1,)]


@pytest.mark.parametrize("slope_shape", PRELU_SLOPES)
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int64"])
def test_prelu_broadcasts_slope(rng, slope_shape, dtype):
    x = random_array(rng, (2, 3, 4, 5), np_dtype(dtype), -20, 20)
    slope = random_array(rng, slope_shape, np_dtype(dtype), -3, 3)
    (y,) = run_op("PRelu", [x, slope])
    want = oracle(lambda v, s: v if v >= 0 else s * v, x, slope)
    assert_close(y, want, dtype)


def test_prelu_inference_symbolic_and_unknown():
    n, h = Sym("N"), Sym("H")
    x = TensorType("float32", (n, 3, h, 7))
    assert infer("PRelu", x, TensorType("float32", (3, 1, 1))) == [x]
    assert infer("PRelu", x, TensorType("float32", (Sym("C"), 1, 1))) == [x]
    unknown = TensorType("float32", None)
    assert infer("PRelu", unknown, TensorType("float32", (3,))) == [unknown]
    assert infer("PRelu", x, unknown) == [x]


@pytest.mark.parametrize("slope, message", [
    (TensorType("float32", (1, 2, 3, 4, 5)), r"'slope'.*rank must be <= 4"),
    (TensorType("float32", (3,)), r"'slope'.*slope dim 3 vs X dim 5"),
    (TensorType("float32", (4, 1, 1)), r"'slope'.*slope dim 4 vs X dim 3"),
    (TensorType("float16", (5,)), r"'slope' must have the same dtype as 'X'"),
])
def test_prelu_bad_slope(slope, message):
    with pytest.raises(OpError, match=f"PRelu.*{message}"):
        infer("PRelu", TensorType("float32", (2, 3, 4, 5)), slope)


def test_prelu_reference_rejects_slope_that_does_not_broadcast():
    with pytest.raises(OpError, match=r"PRelu: input 'slope' of shape \(3,\)"):
        get_schema("PRelu").run_reference([np.ones((2, 4), np.float32),
                                           np.ones(3, np.float32)], {})


# --- Clip ---------------------------------------------------------------------------------


def clip_oracle(low, high):
    def fn(v):
        if low is not None:
            v = max(v, low)
        if high is not None:
            v = min(v, high)
        return v

    return fn


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + INT_DTYPES)
@pytest.mark.parametrize("use_min, use_max", [(True, True), (True, False), (False, True),
                                              (False, False)])
def test_clip(rng, dtype, use_min, use_max):
    x = random_array(rng, ODD_SHAPE, np_dtype(dtype), -50, 50)
    low = np.array(-12 if dtype != "uint8" else 7, np_dtype(dtype)) if use_min else None
    high = np.array(20, np_dtype(dtype)) if use_max else None
    inputs = [x, low, high]
    while inputs[-1] is None:  # omitted trailing optional inputs are left off
        inputs.pop()
    (y,) = run_op("Clip", inputs)
    fn = clip_oracle(None if low is None else python_values(low)[0],
                     None if high is None else python_values(high)[0])
    assert_close(y, oracle(fn, x), dtype)


def test_clip_min_above_max_gives_max_everywhere(rng):
    x = random_array(rng, (4, 9), np.float32, -50, 50)
    (y,) = run_op("Clip", [x, np.array(5.0, np.float32), np.array(-1.0, np.float32)])
    np.testing.assert_array_equal(y, np.full((4, 9), -1.0, np.float32))


def test_clip_accepts_one_element_bounds_and_keeps_nan():
    x = np.array([np.nan, -4.0, 0.25, 9.0], np.float64)
    (y,) = run_op("Clip", [x, np.array([-1.0]), np.array([1.0])])
    np.testing.assert_array_equal(y, [np.nan, -1.0, 0.25, 1.0])


def test_clip_inference():
    x = TensorType("int16", (Sym("B"), 5))
    scalar = TensorType("int16", ())
    assert infer("Clip", x, scalar, scalar) == [x]
    assert infer("Clip", x, None, TensorType("int16", (1,))) == [x]
    assert infer("Clip", x, TensorType("int16", (Sym("k"),))) == [x]
    assert infer("Clip", TensorType("float32", None)) == [TensorType("float32", None)]


@pytest.mark.parametrize("bounds, message", [
    ([TensorType("float32", (2,))], r"input 'min' must be a scalar.*float32\[2\]"),
    ([None, TensorType("float32", (1, 1))], r"input 'max' must be a scalar.*float32\[1,1\]"),
    ([TensorType("int32", ())], r"input 'min' must have the same dtype as 'input'"),
])
def test_clip_bad_bounds(bounds, message):
    with pytest.raises(OpError, match=f"Clip.*{message}"):
        infer("Clip", TensorType("float32", (3,)), *bounds)


def test_clip_reference_rejects_non_scalar_bound():
    with pytest.raises(OpError, match=r"Clip: input 'max' must be a scalar, got shape \(2,\)"):
        get_schema("Clip").run_reference(
            [np.ones(3, np.float32), None, np.ones(2, np.float32)], {})


# --- Cast, CastLike, Identity -------------------------------------------------------------


def cast_oracle(value, source: str, target: str):
    """Cast one Python scalar by the documented rules, without NumPy's casting."""
    if target == "bool":
        return value != 0
    if DType(target).is_integer:
        info = np.iinfo(np_dtype(target))
        if DType(source).is_float:
            if math.isnan(value):
                return 0
            if math.isinf(value):
                return int(info.max) if value > 0 else int(info.min)
            return min(max(math.trunc(value), int(info.min)), int(info.max))
        return wrap(int(value), target)
    value = float(value)  # exact: the test's integers have at most 53 bits
    return bfloat16_value(value) if target == "bfloat16" else value


def bfloat16_value(value: float) -> float:
    """value rounded once to bfloat16's 8 significant bits, halves to even."""
    if math.isnan(value) or math.isinf(value) or value == 0:
        return value
    mantissa, exponent = math.frexp(value)  # value = mantissa * 2**exponent, exactly
    return math.ldexp(round(mantissa * 256), exponent - 8)


def cast_source(rng, dtype: str) -> np.ndarray:
    """Random values of `dtype` plus the cases each conversion has to get right."""
    if dtype == "bool":
        return random_array(rng, (40,), np.bool_)
    if DType(dtype).is_integer:
        info = np.iinfo(np_dtype(dtype))
        x = random_array(rng, (40,), np_dtype(dtype), -1000, 1000)
        x[:5] = [info.min, info.max, 0, 1, info.max // 2 + 3]
        return x
    x = random_array(rng, (40,), np.float64, -400, 400)
    x[:12] = [np.nan, np.inf, -np.inf, -0.5, 0.5, -2.75, 2.75, 255.9, -128.9, 1e10, -1e10, 0.0]
    with np.errstate(over="ignore"):
        return x.astype(np_dtype(dtype))


@pytest.mark.parametrize("target", COMPUTE_DTYPES)
@pytest.mark.parametrize("source", COMPUTE_DTYPES)
def test_cast_every_pair(rng, source, target):
    x = cast_source(rng, source)
    (y,) = run_op("Cast", [x], {"to": target})
    want = [cast_oracle(v, source, target) for v in python_values(x)]
    if DType(target).is_float:
        # float32 and float16 are rounded by NumPy, once, from the exact float64.
        with np.errstate(over="ignore"):
            want = np.array(want, np.float64).astype(np_dtype(target))
        np.testing.assert_array_equal(y.astype(np.float64), want.astype(np.float64))
    else:
        np.testing.assert_array_equal(y, np.array(want, np_dtype(target)))


def test_cast_float_to_int_truncates_and_saturates():
    x = np.array([2.9, -2.9, -0.5, 300.0, -300.0, np.inf, -np.inf, np.nan, 1e30], np.float32)
    (y,) = run_op("Cast", [x], {"to": "int8"})
    np.testing.assert_array_equal(y, [2, -2, 0, 127, -128, 127, -128, 0, 127])
    (y,) = run_op("Cast", [x], {"to": "uint8"})
    np.testing.assert_array_equal(y, [2, 0, 0, 255, 0, 255, 0, 0, 255])
    big = np.array([9.3e18, -9.3e18, 2.0**63, -(2.0**63)], np.float64)
    (y,) = run_op("Cast", [big], {"to": "int64"})
    imax, imin = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    np.testing.assert_array_equal(y, [imax, imin, imax, imin])


def test_cast_int_narrowing_wraps():
    x = np.array([300, -1, 128, -129], np.int32)
    np.testing.assert_array_equal(run_op("Cast", [x], {"to": "uint8"})[0], [44, 255, 128, 127])
    np.testing.assert_array_equal(run_op("Cast", [x], {"to": "int8"})[0], [44, -1, -128, 127])


def test_cast_to_bool_is_nonzero():
    x = np.array([0.0, -0.0, 1e-30, np.nan, -2.0], np.float32)
    np.testing.assert_array_equal(run_op("Cast", [x], {"to": "bool"})[0],
                                  [False, False, True, True, True])


def test_cast_float64_to_bfloat16_rounds_once():
    one_ulp = 2.0**-7  # bfloat16 keeps 7 fraction bits
    x = np.array([1 + one_ulp / 2 + 2.0**-40,   # just above a tie: rounds up
                  1 + one_ulp / 2,              # the tie: to even, down
                  1 + 3 * one_ulp / 2,          # the tie: to even, up
                  -(1 + one_ulp / 2 + 2.0**-40),
                  1e-300, 3.5e38, 1e300, np.nan])
    (y,) = run_op("Cast", [x], {"to": "bfloat16"})
    want = [1 + one_ulp, 1.0, 1 + 2 * one_ulp, -(1 + one_ulp), 0.0, np.inf, np.inf, np.nan]
    np.testing.assert_array_equal(y.astype(np.float64), want)


def test_cast_large_ints_to_bfloat16():
    # bfloat16 has 8 significant bits: 255 fits, 257 and 259 are ties (to even), and
    # 2**40 + 2**32 + 1 is just above a tie, which a float32 detour would lose.
    x = np.array([2**40 + 2**32 + 1, 2**40 + 2**32, -(2**20) - 1, 255, 257, 259], np.int64)
    (y,) = run_op("Cast", [x], {"to": "bfloat16"})
    np.testing.assert_array_equal(y.astype(np.float64),
                                  [2**40 + 2**33, 2**40, -(2**20), 255, 256, 260])


@pytest.mark.parametrize("to", ["int64", DType.INT64, np.int64])
def test_cast_inference(to):
    x = TensorType("float16", (Sym("N"), 3))
    assert infer("Cast", x, to=to) == [TensorType("int64", (Sym("N"), 3))]
    assert infer("Cast", TensorType("bool", None), to="float32") == [TensorType("float32")]


@pytest.mark.parametrize("attrs, message", [
    ({}, r"attribute 'to' \(dtype\) is required"),
    ({"to": "float8"}, r"attribute 'to' must be a dtype name, got 'float8'"),
    ({"to": "int8", "saturate": 2}, r"attribute 'saturate' must be 0 or 1, got 2"),
])
def test_cast_bad_attributes(attrs, message):
    with pytest.raises(OpError, match=f"Cast.*{message}"):
        infer("Cast", TensorType("float32", (2,)), **attrs)


@pytest.mark.parametrize("source, target", [("float32", "int16"), ("int64", "float16"),
                                            ("bool", "bfloat16"), ("float64", "bool"),
                                            ("uint8", "uint8")])
def test_cast_like(rng, source, target):
    x = cast_source(rng, source)
    like = random_array(rng, (2, 1), np_dtype(target))
    (y,) = run_op("CastLike", [x, like])
    (want,) = run_op("Cast", [x], {"to": target})
    np.testing.assert_array_equal(y.view(np.uint8), want.view(np.uint8))


def test_cast_like_inference():
    x = TensorType("float32", (Sym("N"), 4))
    assert infer("CastLike", x, TensorType("int8", None)) == [TensorType("int8", (Sym("N"), 4))]
    with pytest.raises(OpError, match=r"CastLike.*'saturate' must be 0 or 1, got -1"):
        infer("CastLike", x, TensorType("int8", ()), saturate=-1)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_identity_copies_every_dtype(rng, dtype):
    x = random_array(rng, ODD_SHAPE, np_dtype(dtype))
    (y,) = run_op("Identity", [x])
    np.testing.assert_array_equal(y.view(np.uint8), x.view(np.uint8))
    assert not np.shares_memory(x, y)  # folding must never alias a constant's data


# --- inference for every op ---------------------------------------------------------------

ALL_OPS = sorted({c[0] for c in FLOAT_CASES} | {"IsNaN", "IsInf", "Clip", "PRelu", "Cast",
                                                 "CastLike", "BitCast", "Shrink", "Identity"})


def inference_call(op_name, x: TensorType):
    """(input types, attrs, expected output dtype) of a typical node of `op_name`."""
    if op_name == "Cast":
        return [x], {"to": "int32"}, DType.INT32
    if op_name == "CastLike":
        return [x, TensorType("float16", (2,))], {}, DType.FLOAT16
    if op_name == "BitCast":
        return [x], {"to": "int32"}, DType.INT32
    if op_name in ("IsNaN", "IsInf"):
        return [x], {}, DType.BOOL
    if op_name == "Clip":
        return [x, TensorType(x.dtype, ()), TensorType(x.dtype, ())], {}, x.dtype
    if op_name == "PRelu":
        return [x, TensorType(x.dtype, ())], {}, x.dtype
    return [x], {}, x.dtype


def test_every_op_of_the_module_is_covered():
    from ge_hub.ops import activation
    from ge_hub.ops.schema import OpSchema

    declared = {v.name for v in vars(activation).values() if isinstance(v, OpSchema)}
    assert declared == set(ALL_OPS)


@pytest.mark.parametrize("op_name", ALL_OPS)
@pytest.mark.parametrize("shape", [(2, 7, 3), (Sym("N"), 5, Sym("L")), (), None],
                         ids=["concrete", "symbolic", "scalar", "unknown-rank"])
def test_inference_keeps_shape(op_name, shape):
    x = TensorType("float32", shape)
    types, attrs, dtype = inference_call(op_name, x)
    assert infer(op_name, *types, **attrs) == [TensorType(dtype, shape)]


def test_every_op_has_a_docstring():
    for op_name in ALL_OPS:
        doc = get_schema(op_name).doc
        assert doc and ("=" in doc or "output" in doc), op_name


# --- bad input ----------------------------------------------------------------------------

FLOAT_ONLY = [name for name in ALL_OPS if get_schema(name).inputs[0].types == FLOATS]


@pytest.mark.parametrize("op_name", FLOAT_ONLY)
def test_float_ops_reject_integers(op_name):
    schema = get_schema(op_name)
    x = TensorType("int32", (3,))
    types, attrs, _ = inference_call(op_name, x)
    with pytest.raises(OpError, match=rf"{op_name} \(node 'n1'\): input "
                                      rf"'{schema.input_name(0)}' must have dtype in "
                                      r"\{bfloat16, float16, float32, float64\}, got int32"):
        infer(op_name, *types, node_name="n1", **attrs)


@pytest.mark.parametrize("op_name, dtype", [("Neg", "uint8"), ("Relu", "uint8"),
                                            ("Abs", "bool"), ("Sign", "bool"),
                                            ("Erf", "bool"), ("Clip", "bool"),
                                            ("PRelu", "int8")])
def test_integer_capable_ops_reject_other_dtypes(op_name, dtype):
    types, attrs, _ = inference_call(op_name, TensorType(dtype, (3,)))
    with pytest.raises(OpError, match=rf"{op_name}: input '\w+' must have dtype in .*"
                                      rf"got {dtype}"):
        infer(op_name, *types, **attrs)


@pytest.mark.parametrize("op_name, attrs, message", [
    ("Gelu", {"approximate": "erf"},
     r"attribute 'approximate' must be one of \('none', 'tanh'\), got 'erf'"),
    ("Celu", {"alpha": 0.0}, r"attribute 'alpha' must be non-zero, got 0.0"),
    ("IsInf", {"detect_negative": 5}, r"attribute 'detect_negative' must be 0 or 1, got 5"),
    ("LeakyRelu", {"alpha": "big"}, r"attribute 'alpha' must be a float, got 'big'"),
    ("Elu", {"beta": 1.0}, r"unknown attribute 'beta'"),
])
def test_bad_attributes(op_name, attrs, message):
    with pytest.raises(OpError, match=f"{op_name} \\(node 'act'\\): {message}"):
        infer(op_name, TensorType("float32", (4,)), node_name="act", **attrs)


@pytest.mark.parametrize("op_name, attrs, message", [
    ("Gelu", {"approximate": "erf"}, r"Gelu: attribute 'approximate' must be one of"),
    ("Celu", {"alpha": 0.0}, r"Celu: attribute 'alpha' must be non-zero"),
])
def test_references_reject_bad_attributes(op_name, attrs, message):
    with pytest.raises(OpError, match=message):
        get_schema(op_name).run_reference([np.ones(3, np.float32)], attrs)


def test_wrong_input_count():
    with pytest.raises(OpError, match=r"Relu: expected 1 to 1 inputs \(X\), got 2"):
        infer("Relu", TensorType("float32", (3,)), TensorType("float32", (3,)))


def test_bfloat16_inputs_stay_bfloat16(rng):
    x = random_array(rng, (5,), ml_dtypes.bfloat16)
    for op_name in ("Exp", "Gelu", "Round", "Clip", "Identity"):
        (y,) = run_op(op_name, [x])
        assert y.dtype == ml_dtypes.bfloat16


# --- Shrink -----------------------------------------------------------------------------

N = Sym("N")


def loop_shrink(x, lambd, bias):
    return [v + bias if v < -lambd else v - bias if v > lambd else 0 for v in x]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("lambd,bias", [(0.5, 0.0), (1.5, 0.25), (0.0, -1.0)])
def test_shrink_float_matches_formula(rng, dtype, lambd, bias):
    x = random_array(rng, (4, 6), dtype)
    (out,) = run_op("Shrink", [x], {"lambd": lambd, "bias": bias})
    expected = loop_shrink(x.astype(np.float64).ravel().tolist(), lambd, bias)
    close(out.ravel(), expected, dtype)


@pytest.mark.parametrize("dtype", ["int8", "int32", "uint8"])
def test_shrink_integers_cast_lambd_and_bias_first(rng, dtype):
    x = random_array(rng, (20,), dtype, low=-4, high=4)
    (out,) = run_op("Shrink", [x], {"lambd": 1.7, "bias": 2.9})
    # lambd and bias truncate to 1 and 2 in an integer dtype.
    expected = [wrap(v, dtype) for v in loop_shrink([int(v) for v in x], 1, 2)]
    assert out.tolist() == expected


def test_shrink_spec_example_and_errors():
    x = np.arange(-2.0, 3.0, dtype=np.float32)
    assert run_op("Shrink", [x], {"lambd": 1.5})[0].tolist() == [-2, 0, 0, 0, 2]
    assert run_op("Shrink", [x], {"lambd": 1.5, "bias": 1.5})[0].tolist() == \
        [-0.5, 0, 0, 0, 0.5]
    assert infer_types("Shrink", [tt("int16", (N,))]) == [tt("int16", (N,))]
    with pytest.raises(OpError, match=r"Shrink.*'input'.*dtype.*bool"):
        infer_types("Shrink", [tt("bool", (2,))])
    with pytest.raises(OpError, match=r"Shrink.*'lambd' must be a float"):
        infer_types("Shrink", [tt("float32", (2,))], {"lambd": "big"})


# --- BitCast ------------------------------------------------------------------------------

F32 = DType.FLOAT32


@pytest.mark.parametrize("source,target,pack,unpack", [
    ("float32", "int32", "<f", "<i"), ("int32", "float32", "<i", "<f"),
    ("float64", "int64", "<d", "<q"), ("int64", "float64", "<q", "<d"),
    ("float16", "int16", "<e", "<h"), ("int8", "uint8", "<b", "<B"),
])
def test_bit_cast_matches_struct(rng, source, target, pack, unpack):
    x = random_array(rng, (3, 4), source)
    (y,) = run_op("BitCast", [x], {"to": target})
    assert y.dtype == np.dtype(target) and y.shape == x.shape
    expected = [struct.unpack(unpack, struct.pack(pack, v))[0] for v in x.reshape(-1).tolist()]
    np.testing.assert_array_equal(y.reshape(-1), np.array(expected, dtype=target))


def test_bit_cast_bfloat16_is_the_top_half_of_float32(rng):
    x = random_array(rng, (5,), "bfloat16")
    (y,) = run_op("BitCast", [x], {"to": "int16"})
    top_halves = [struct.unpack("<I", struct.pack("<f", v))[0] >> 16
                  for v in x.astype(np.float32).tolist()]
    np.testing.assert_array_equal(y.view(np.uint16), np.array(top_halves, np.uint16))
    (back,) = run_op("BitCast", [y], {"to": "bfloat16"})
    np.testing.assert_array_equal(back.view(np.uint16), x.view(np.uint16))


def test_bit_cast_bool_and_scalar():
    (y,) = run_op("BitCast", [np.array([True, False, True])], {"to": "uint8"})
    np.testing.assert_array_equal(y, [1, 0, 1])
    (flags,) = run_op("BitCast", [np.array([0, 7, 1], np.int8)], {"to": "bool"})
    np.testing.assert_array_equal(flags, [False, True, True])
    (y,) = run_op("BitCast", [np.float32(-2.5)], {"to": "int32"})
    assert y.shape == () and int(y) == struct.unpack("<i", struct.pack("<f", -2.5))[0]


def test_bit_cast_inference_and_bad_width():
    n = Sym("n")
    assert infer_types("BitCast", [tt(DType.FLOAT16, (n, 2))], {"to": "bfloat16"}) == \
        [tt(DType.BFLOAT16, (n, 2))]
    with pytest.raises(OpError, match="BitCast.*'to' \\(int64, 64 bits\\).*float32, 32 bits"):
        infer_types("BitCast", [tt(F32, (2,))], {"to": "int64"})
    with pytest.raises(OpError, match="BitCast.*'to'.*required"):
        infer_types("BitCast", [tt(F32, (2,))])
