"""Cast, CastLike, QuantizeLinear and DequantizeLinear to and from the narrow (storage-only)
dtypes, against ml_dtypes' conversions, Python's integer arithmetic and values worked out by
hand from ONNX's tables (saturate, float8_e8m0fnu's round modes, float4_e2m1fn)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from conftest import infer, run_op

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import FLOAT8_TYPES, DType
from ge_hub.ir.types import TensorType

FLOAT8 = sorted(d.value for d in FLOAT8_TYPES)
NAN = float("nan")


def as_float64(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return x.astype(np.float64)


def assert_same(got: np.ndarray, want, dtype: str) -> None:
    """Same dtype and same values, NaN matching NaN and -0 matching only -0."""
    want = np.asarray(want, dtype=np.float64)
    assert got.dtype == DType(dtype).numpy
    got64 = as_float64(got)
    same = ((got64 == want) & (np.signbit(got64) == np.signbit(want))) | \
        (np.isnan(got64) & np.isnan(want))
    assert same.all(), (got64[~same], want[~same])


def every_value(dtype: str) -> np.ndarray:
    """All 256 encodings of an 8-bit dtype."""
    return np.arange(256, dtype=np.uint8).view(DType(dtype).numpy)


# -- float8 <-> float32 --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [*FLOAT8, "float8_e8m0fnu"])
def test_every_float8_value_widens_exactly(dtype):
    x = every_value(dtype)
    (y,) = run_op("Cast", [x], {"to": "float32"})
    assert_same(y, as_float64(x), "float32")
    (y,) = run_op("Cast", [x], {"to": "float64"})
    assert_same(y, as_float64(x), "float64")


@pytest.mark.parametrize("dtype", FLOAT8)
@pytest.mark.parametrize("saturate", [0, 1])
def test_in_range_floats_round_as_ml_dtypes_does(rng, dtype, saturate):
    largest = float(ml_dtypes.finfo(DType(dtype).numpy).max)
    x = rng.uniform(-largest, largest, 200).astype(np.float32)
    x[:50] /= 1000.0  # small values too, down into the subnormals
    (y,) = run_op("Cast", [x], {"to": dtype, "saturate": saturate})
    assert y.tobytes() == x.astype(DType(dtype).numpy).tobytes()


# ONNX's tables, value by value: x, then the result with saturate=1 and with saturate=0.
E4M3FN_CASES = [(1e6, 448, NAN), (-1e6, -448, NAN), (math.inf, 448, NAN),
                (-math.inf, -448, NAN), (NAN, NAN, NAN), (460.0, 448, 448), (470.0, 448, NAN),
                (-0.0, -0.0, -0.0), (200.0, 192, 192), (0.001953125, 0.001953125, 0.001953125)]
E5M2_CASES = [(1e6, 57344, math.inf), (-math.inf, -57344, -math.inf), (-0.0, -0.0, -0.0),
              (3.5, 3.5, 3.5), (NAN, NAN, NAN)]
E4M3FNUZ_CASES = [(1e6, 240, NAN), (-math.inf, -240, NAN), (-0.0, 0.0, 0.0), (NAN, NAN, NAN)]
E5M2FNUZ_CASES = [(1e6, 57344, NAN), (math.inf, 57344, NAN), (-0.0, 0.0, 0.0)]


@pytest.mark.parametrize("dtype, cases", [("float8_e4m3fn", E4M3FN_CASES),
                                          ("float8_e5m2", E5M2_CASES),
                                          ("float8_e4m3fnuz", E4M3FNUZ_CASES),
                                          ("float8_e5m2fnuz", E5M2FNUZ_CASES)])
def test_saturate_follows_onnx_tables(dtype, cases):
    x = np.array([c[0] for c in cases], np.float32)
    (y,) = run_op("Cast", [x], {"to": dtype})
    assert_same(y, [c[1] for c in cases], dtype)
    (y,) = run_op("Cast", [x], {"to": dtype, "saturate": 0})
    assert_same(y, [c[2] for c in cases], dtype)


def test_float64_rounds_to_float8_once():
    # 1.0625 is the tie between 1 and 1.125; just above it must round up, though through
    # float32 (where it rounds onto the tie) it would round to even, 1.
    x = np.array([1.0625 + 2.0**-40, 1.0625, 1.1875 - 2.0**-40], np.float64)
    (y,) = run_op("Cast", [x], {"to": "float8_e4m3fn"})
    assert_same(y, [1.125, 1.0, 1.125], "float8_e4m3fn")


def test_integers_and_bools_to_float8():
    x = np.array([3, -200, 1000, 2**40, 0], np.int64)
    (y,) = run_op("Cast", [x], {"to": "float8_e4m3fn"})
    assert_same(y, [3, -192, 448, 448, 0], "float8_e4m3fn")
    (y,) = run_op("Cast", [np.array([True, False])], {"to": "float8_e5m2"})
    assert_same(y, [1, 0], "float8_e5m2")


def test_float8_to_integers_truncates_and_saturates():
    x = np.array([-2.5, 2.75, 448, -448, NAN, 0.015625], np.float32).astype(
        ml_dtypes.float8_e4m3fn)
    (y,) = run_op("Cast", [x], {"to": "int8"})
    np.testing.assert_array_equal(y, np.array([-2, 2, 127, -128, 0, 0], np.int8))
    (y,) = run_op("Cast", [x], {"to": "int64"})
    np.testing.assert_array_equal(y, np.array([-2, 2, 448, -448, 0, 0], np.int64))
    (y,) = run_op("Cast", [x], {"to": "bool"})
    np.testing.assert_array_equal(y, [True, True, True, True, True, True])


def test_float8_to_float8_goes_through_the_exact_value():
    x = np.array([1.5, 448, -0.0, NAN], np.float32).astype(ml_dtypes.float8_e4m3fn)
    (y,) = run_op("Cast", [x], {"to": "float8_e5m2"})
    assert_same(y, [1.5, 448, -0.0, NAN], "float8_e5m2")
    (y,) = run_op("Cast", [x], {"to": "float8_e4m3fnuz"})  # 448 > 240: saturates
    assert_same(y, [1.5, 240, 0.0, NAN], "float8_e4m3fnuz")


# -- float8_e8m0fnu ------------------------------------------------------------------------


@pytest.mark.parametrize("round_mode, cases", [
    ("up", [(0.124, 0.125), (0.25, 0.25), (1.1, 2), (3, 4), (-4, 4), (2.0**-130, 2.0**-127)]),
    ("down", [(0.124, 0.0625), (1.9, 1), (3, 2), (4, 4)]),
    ("nearest", [(1.4, 1), (1.5, 2), (2.9, 2), (3, 4), (0.75, 1), (0.7, 0.5)]),
])
def test_e8m0_round_modes(round_mode, cases):
    x = np.array([c[0] for c in cases], np.float64)
    (y,) = run_op("Cast", [x], {"to": "float8_e8m0fnu", "round_mode": round_mode})
    assert_same(y, [c[1] for c in cases], "float8_e8m0fnu")


def test_e8m0_saturate():
    x = np.array([0.0, math.inf, 1.5 * 2.0**127, 2.0**127, NAN, 1e-40], np.float64)
    (y,) = run_op("Cast", [x], {"to": "float8_e8m0fnu"})
    assert_same(y, [2.0**-127, 2.0**127, 2.0**127, 2.0**127, NAN, 2.0**-127],
                "float8_e8m0fnu")
    (y,) = run_op("Cast", [x], {"to": "float8_e8m0fnu", "saturate": 0})
    assert_same(y, [NAN, NAN, NAN, 2.0**127, NAN, NAN], "float8_e8m0fnu")


def test_e8m0_codes_are_biased_exponents():
    x = np.array([1.0, 2.0**-127, 2.0**127, 0.5], np.float32)
    (y,) = run_op("Cast", [x], {"to": "float8_e8m0fnu"})
    np.testing.assert_array_equal(y.view(np.uint8), [127, 0, 254, 126])


def test_round_mode_must_be_known():
    with pytest.raises(OpError, match="Cast.*'round_mode' must be one of up, down, nearest"):
        infer("Cast", [TensorType("float32", (2,))], {"to": "float8_e8m0fnu",
                                                      "round_mode": "sideways"})


def test_cast_like_passes_saturate_on():
    x = np.array([1e6, 2.0], np.float32)
    like = np.zeros(1, ml_dtypes.float8_e4m3fn)
    (y,) = run_op("CastLike", [x, like], {"saturate": 0})
    assert_same(y, [NAN, 2.0], "float8_e4m3fn")
    (y,) = run_op("CastLike", [x, like])
    assert_same(y, [448, 2.0], "float8_e4m3fn")


# -- 4- and 2-bit integers, float4_e2m1fn --------------------------------------------------

SMALL_INTS = {"int4": (4, True), "uint4": (4, False), "int2": (2, True), "uint2": (2, False)}


def wrapped(value: int, dtype: str) -> int:
    bits, signed = SMALL_INTS[dtype]
    low = value % 2**bits
    return low - 2**bits if signed and low >= 2 ** (bits - 1) else low


@pytest.mark.parametrize("dtype", sorted(SMALL_INTS))
def test_every_small_integer_widens_exactly(dtype):
    bits, signed = SMALL_INTS[dtype]
    values = range(-(2 ** (bits - 1)), 2 ** (bits - 1)) if signed else range(2**bits)
    x = np.array(list(values), np.int64).astype(DType(dtype).numpy)
    for target in ("int8", "int64", "float32", "uint8"):
        (y,) = run_op("Cast", [x], {"to": target})
        want = [v % 256 if target == "uint8" else v for v in values]
        np.testing.assert_array_equal(y, np.array(want, DType(target).numpy))


@pytest.mark.parametrize("dtype", sorted(SMALL_INTS))
def test_integers_to_small_integers_keep_the_low_bits(rng, dtype):
    x = rng.integers(-(2**40), 2**40, 100)
    x[:4] = [-9, 15, 2**63 - 1, -(2**63)]
    (y,) = run_op("Cast", [x], {"to": dtype})
    assert y.dtype == DType(dtype).numpy
    np.testing.assert_array_equal(y.astype(np.int64), [wrapped(int(v), dtype) for v in x])


def test_floats_to_int4_truncate_then_wrap():
    # -9 -> 7 and 15 -> -1 are ONNX's test values; a float goes to int64 first (truncate,
    # saturate, NaN 0), so 1e30 keeps the low bits of int64's max.
    x = np.array([-9.0, 15.7, -0.9, 200.0, NAN, 1e30, -8.5], np.float32)
    (y,) = run_op("Cast", [x], {"to": "int4"})
    np.testing.assert_array_equal(y.astype(np.int64), [7, -1, 0, -8, 0, -1, -8])
    (y,) = run_op("Cast", [x], {"to": "uint2"})
    np.testing.assert_array_equal(y.astype(np.int64), [3, 3, 0, 0, 0, 3, 0])


def test_float4_values():
    # e2m1: +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}; ties to even; no inf or NaN: overflow
    # saturates to 6 and NaN becomes -0, as ml_dtypes (and ONNX's reference) convert.
    x = np.array([0.48, 0.25, 1.05, -3.5, -8, 9, 1e6, 1e-7, -0.0, 2.5, 5.0, NAN], np.float32)
    (y,) = run_op("Cast", [x], {"to": "float4_e2m1fn"})
    assert_same(y, [0.5, 0, 1, -4, -6, 6, 6, 0, -0.0, 2, 4, -0.0], "float4_e2m1fn")
    (y,) = run_op("Cast", [every_value("float4_e2m1fn")[:16]], {"to": "float32"})
    assert_same(y, [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6],
                "float32")


def test_quantize_to_int4_rounds_and_saturates():
    x = np.array([0.0, 2.5, 4.8, 8.6, -30.0, 13.0, -3.0], np.float32)
    (y,) = run_op("QuantizeLinear", [x, np.float32(2), np.array(1, ml_dtypes.int4)])
    # round_half_even(x / 2) + 1, clipped to [-8, 7]
    np.testing.assert_array_equal(y.astype(np.int64), [1, 2, 3, 5, -8, 7, -1])
    (y,) = run_op("QuantizeLinear", [x, np.float32(2), np.array(0, ml_dtypes.uint2)])
    np.testing.assert_array_equal(y.astype(np.int64), [0, 1, 2, 3, 0, 3, 0])


def test_dequantize_small_integers():
    x = np.array([-2, 0, 1, -1], np.int64).astype(ml_dtypes.int2)
    (y,) = run_op("DequantizeLinear", [x, np.float32(2), np.array(1, ml_dtypes.int2)])
    np.testing.assert_array_equal(y, np.array([-6, -2, 0, -4], np.float32))
    x = np.array([0, 15, 7], np.int64).astype(ml_dtypes.uint4)
    (y,) = run_op("DequantizeLinear", [x, np.float32(0.5), np.array(3, ml_dtypes.uint4)])
    np.testing.assert_array_equal(y, np.array([-1.5, 6, 2], np.float32))


def test_quantize_to_float4():
    x = np.array([0.0, 2.5, 9.0, -30.0, 1.4], np.float32)
    (y,) = run_op("QuantizeLinear", [x, np.float32(2), np.zeros((), ml_dtypes.float4_e2m1fn)])
    assert_same(y, [0, 1, 4, -6, 0.5], "float4_e2m1fn")


# -- QuantizeLinear / DequantizeLinear -----------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT8)
def test_quantize_to_float8_divides_then_casts(rng, dtype):
    x = rng.uniform(-1000, 1000, 30).astype(np.float32)
    scale = np.float32(2.5)
    zero = np.zeros((), DType(dtype).numpy)
    (y,) = run_op("QuantizeLinear", [x, scale, zero])
    largest = np.float32(ml_dtypes.finfo(DType(dtype).numpy).max)
    want = np.clip(x / scale, -largest, largest).astype(DType(dtype).numpy)
    assert y.tobytes() == want.tobytes()
    (y,) = run_op("QuantizeLinear", [x, scale, zero], {"saturate": 0})
    assert y.tobytes() == (x / scale).astype(DType(dtype).numpy).tobytes()


def test_dequantize_float8_multiplies_exactly(rng):
    x = every_value("float8_e5m2")
    x = x[np.isfinite(as_float64(x))]
    scale = np.float32(0.375)
    (y,) = run_op("DequantizeLinear", [x, scale, np.zeros((1,), ml_dtypes.float8_e5m2)])
    assert_same(y, as_float64(x) * 0.375, "float32")


@pytest.mark.parametrize("op, inputs", [
    ("QuantizeLinear", [np.ones(3, np.float32), np.float32(1),
                        np.ones((), ml_dtypes.float8_e4m3fn)]),
    ("DequantizeLinear", [np.ones(3, ml_dtypes.float8_e4m3fn), np.float32(1),
                          np.ones((), ml_dtypes.float8_e4m3fn)]),
])
def test_float8_zero_points_must_be_zero(op, inputs):
    with pytest.raises(OpError, match=f"{op}.*zero_point.*must be 0"):
        run_op(op, inputs)
