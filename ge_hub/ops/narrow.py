"""Conversions to and from the storage-only element types (`DType.is_narrow`), by ONNX's
rules: Cast, CastLike, QuantizeLinear and DequantizeLinear reach those types only here.

Widening is exact: an 8- or 4-bit float becomes a float32, a 4- or 2-bit integer an int8
or uint8. Narrowing to a float rounds once, to nearest even, from float32 (ml_dtypes does
that step); a float64 or integer source is first rounded to float32 "to odd" (truncated,
its last bit set when inexact), which keeps what the second rounding needs, so that the
result is still rounded once. float4_e2m1fn has no inf or NaN: ml_dtypes saturates
overflow to +-6 and makes NaN -0, whatever `saturate` says (as ONNX's reference does).

Narrowing an integer to a 4- or 2-bit integer keeps its low bits (two's complement
wraparound, as between any two integer types); Cast brings a float to int64 first
(truncating, saturating), so -9.0 becomes int4 7. ONNX's Cast leaves a float out of a
fixed-point type's range undefined; ge-hub wraps as ONNX Runtime does, not as whichever
ml_dtypes generated ONNX's test expectations (it wraps up to 0.6, gives 0 from 0.7 on;
see ge-onnx's expected_failures.txt, category spec-undefined).

`saturate` (Cast's attribute, default 1) makes out-of-range values and infinities the
largest finite value of their sign; NaN stays NaN. Without it ml_dtypes' rules apply,
which are ONNX's: overflow is inf for float8_e5m2 and NaN for the other float8 types.

float8_e8m0fnu holds only powers of two, 2**(code - 127) for codes 0..254, and NaN (code
255). A value becomes the power of two below it (round_mode "down"), above it ("up",
ONNX's default) or the nearer one, 1.5 * 2**k going up ("nearest"). It has no sign: a
negative value (which ONNX leaves unspecified) converts as its magnitude. With saturate,
infinities and values above 2**127 become 2**127 and values below 2**-127 (0 included)
become 2**-127; without it they become NaN.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import NARROW_FLOAT_TYPES, SMALL_INTEGER_TYPES, DType

E8M0_ROUND_MODES = ("up", "down", "nearest")
_E8M0_BIAS = 127
_E8M0_MAX_CODE = 254
_E8M0_NAN = 255
_EXACT_IN_FLOAT32 = frozenset({DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16, DType.INT8,
                               DType.INT16, DType.UINT8, DType.UINT16, DType.BOOL})


def widen(x: np.ndarray) -> np.ndarray:
    """A narrow-typed array as float32, int8 or uint8 (exact); any other unchanged."""
    dtype = DType.from_numpy(x.dtype)
    if not dtype.is_narrow:
        return x
    if dtype.is_float:
        return x.astype(np.float32)
    return x.astype(np.int8 if dtype.is_signed else np.uint8)


def narrow(x: np.ndarray, to: DType, *, saturate: bool = True,
           round_mode: str = "up") -> np.ndarray:
    """x (of a non-narrow dtype; an integer or bool one for a small integer `to`)
    converted to the narrow dtype `to`."""
    if to in SMALL_INTEGER_TYPES:
        return _to_small_integer(x, to)
    if to is DType.FLOAT8_E8M0FNU:
        return _to_e8m0(x, saturate, round_mode)
    if to not in NARROW_FLOAT_TYPES:
        raise OpError(f"no conversion to {to} (not a narrow dtype)")
    values = _float32_for_rounding(x)
    if saturate:
        largest = np.float32(ml_dtypes.finfo(to.numpy).max)
        values = np.clip(values, -largest, largest)  # NaN stays NaN
    with np.errstate(over="ignore", invalid="ignore"):
        return values.astype(to.numpy)


def _float32_for_rounding(x: np.ndarray) -> np.ndarray:
    """x as float32: exactly when its dtype fits, else rounded to odd (float64 and the
    32- and 64-bit integers go through float64, exact up to 2**53, far beyond float8)."""
    if DType.from_numpy(x.dtype) in _EXACT_IN_FLOAT32:
        return x.astype(np.float32)
    return round_to_odd_float32(x.astype(np.float64))


def _to_small_integer(x: np.ndarray, to: DType) -> np.ndarray:
    if x.dtype.kind not in "iub":
        raise OpError(f"conversion to {to} takes integers, got {x.dtype}")
    bits = 4 if to in (DType.INT4, DType.UINT4) else 2
    low = x.astype(np.int64) & (2**bits - 1)
    if to.is_signed:
        low = np.where(low >= 2 ** (bits - 1), low - 2**bits, low)
    return low.astype(np.int8).astype(to.numpy)


def round_to_odd_float32(x: np.ndarray) -> np.ndarray:
    """float64 to float32 rounded "to odd": truncated toward zero, then the last mantissa
    bit set when the result is inexact. A later rounding to a type with at least two
    fewer significant bits then equals the single rounding of the float64."""
    with np.errstate(over="ignore", invalid="ignore"):
        near = np.asarray(x.astype(np.float32))
        back = near.astype(np.float64)
        inexact = (back != x) & ~np.isnan(x)
        rounded_away = inexact & (np.abs(back) > np.abs(x))
    bits = near.view(np.uint32)
    bits = np.where(rounded_away, bits - np.uint32(1), bits)  # one ulp toward zero
    bits = np.where(inexact, bits | np.uint32(1), bits)
    return bits.astype(np.uint32).view(np.float32)


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    if round_mode not in E8M0_ROUND_MODES:
        raise OpError(f"round_mode must be one of {', '.join(E8M0_ROUND_MODES)}, got "
                      f"{round_mode!r}")
    magnitude = np.abs(np.asarray(x, dtype=np.float64))
    positive = np.isfinite(magnitude) & (magnitude > 0)
    # magnitude = fraction * 2**exponent with fraction in [0.5, 1): the power of two at or
    # below it is 2**(exponent - 1), and 2 * fraction says how far above it lies.
    fraction, exponent = np.frexp(np.where(positive, magnitude, 1.0))
    power = exponent.astype(np.int64) - 1
    if round_mode == "up":
        power += fraction > 0.5
    elif round_mode == "nearest":
        power += fraction >= 0.75
    code = power + _E8M0_BIAS
    too_high = np.isinf(magnitude) | (positive & (code > _E8M0_MAX_CODE))
    too_low = (magnitude == 0) | (positive & (code < 0))
    code = np.clip(code, 0, _E8M0_MAX_CODE)
    if not saturate:
        code = np.where(too_high | too_low, _E8M0_NAN, code)
    else:
        code = np.where(too_high, _E8M0_MAX_CODE, np.where(too_low, 0, code))
    code = np.where(np.isnan(magnitude), _E8M0_NAN, code)
    return code.astype(np.uint8).view(DType.FLOAT8_E8M0FNU.numpy)
