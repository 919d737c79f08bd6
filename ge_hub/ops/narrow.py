"""Conversions to and from the storage-only element types (`DType.is_narrow`), by ONNX's
rules: Cast, CastLike, QuantizeLinear and DequantizeLinear reach those types only here.

Widening is exact: an 8-bit float becomes a float32. Narrowing rounds once, to nearest
even, from float32 (ml_dtypes does that step); a float64 or integer source is first
rounded to float32 "to odd" (truncated, its last bit set when inexact), which keeps what
the second rounding needs, so that the result is still rounded once.

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
from ge_hub.ir.dtypes import FLOAT8_TYPES, DType

E8M0_ROUND_MODES = ("up", "down", "nearest")
_E8M0_BIAS = 127
_E8M0_MAX_CODE = 254
_E8M0_NAN = 255
_EXACT_IN_FLOAT32 = frozenset({DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16, DType.INT8,
                               DType.INT16, DType.UINT8, DType.UINT16, DType.BOOL})


def widen(x: np.ndarray) -> np.ndarray:
    """A narrow-typed array as float32 (exact); any other array unchanged."""
    if DType.from_numpy(x.dtype).is_narrow:
        return x.astype(np.float32)
    return x


def narrow(x: np.ndarray, to: DType, *, saturate: bool = True,
           round_mode: str = "up") -> np.ndarray:
    """x (of a non-narrow dtype) converted to the narrow dtype `to`."""
    if to is DType.FLOAT8_E8M0FNU:
        return _to_e8m0(x, saturate, round_mode)
    if to not in FLOAT8_TYPES:
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
