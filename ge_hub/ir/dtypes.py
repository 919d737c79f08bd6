"""Element types of ge-hub tensors and their mapping to NumPy.

`DType` is the one list of element types the IR, the op schemas, the plan and the
executor agree on. Its values are the NumPy names, so `DType("float32")` and
`DType.from_numpy(np.float32)` both work. bfloat16, the 8- and 4-bit floats and the 4-
and 2-bit integers come from the `ml_dtypes` package, which gives NumPy real scalar types
for them; it stores a 4- or 2-bit element in a byte of its own, and so does ge-hub (ONNX
files pack them, two or four to a byte: the ONNX plugin packs and unpacks).

The sets below say what ops may do with a dtype. FLOAT_TYPES and INTEGER_TYPES are the
types ops compute in. The narrow types (NARROW_TYPES: the 8- and 4-bit floats, the 4- and
2-bit integers) are storage types: Cast, CastLike, QuantizeLinear and DequantizeLinear
convert to and from them, and data-movement ops carry them as bytes, but no arithmetic op
takes them, as in ONNX. `is_float` and `is_integer` say what kind of number a dtype
holds, narrow or not; float8_e8m0fnu (a power of two, 2**(e - 127), or NaN) is the one
float without a sign.
"""

from __future__ import annotations

import enum

import ml_dtypes
import numpy as np


class DType(str, enum.Enum):
    FLOAT32 = "float32"
    FLOAT64 = "float64"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    INT8 = "int8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    UINT8 = "uint8"
    BOOL = "bool"
    UINT16 = "uint16"
    UINT32 = "uint32"
    UINT64 = "uint64"
    FLOAT8_E4M3FN = "float8_e4m3fn"
    FLOAT8_E4M3FNUZ = "float8_e4m3fnuz"
    FLOAT8_E5M2 = "float8_e5m2"
    FLOAT8_E5M2FNUZ = "float8_e5m2fnuz"
    FLOAT8_E8M0FNU = "float8_e8m0fnu"
    INT4 = "int4"
    UINT4 = "uint4"
    INT2 = "int2"
    UINT2 = "uint2"
    FLOAT4_E2M1FN = "float4_e2m1fn"

    def __str__(self) -> str:
        return self.value

    @property
    def numpy(self) -> np.dtype:
        """The NumPy dtype that stores this element type."""
        return _TO_NUMPY[self]

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

    @property
    def is_float(self) -> bool:
        return self in FLOAT_TYPES or self in NARROW_FLOAT_TYPES

    @property
    def is_integer(self) -> bool:
        return self in INTEGER_TYPES or self in SMALL_INTEGER_TYPES

    @property
    def is_signed(self) -> bool:
        return self in SIGNED_TYPES

    @property
    def is_narrow(self) -> bool:
        """A storage-only type: converted and moved, never computed in (see above)."""
        return self in NARROW_TYPES

    @classmethod
    def from_numpy(cls, dtype) -> DType:
        """The DType of a NumPy dtype (or anything `np.dtype` accepts)."""
        np_dtype = np.dtype(dtype)
        try:
            return _FROM_NUMPY[np_dtype]
        except KeyError:
            raise TypeError(f"ge-hub has no dtype for NumPy dtype {np_dtype}") from None

    @classmethod
    def parse(cls, value) -> DType:
        """Accept a DType, its name, or a NumPy dtype-like."""
        if isinstance(value, DType):
            return value
        if isinstance(value, str):
            try:
                return cls(value)
            except ValueError:
                names = ", ".join(d.value for d in cls)
                raise TypeError(f"unknown dtype {value!r}; expected one of {names}") from None
        return cls.from_numpy(value)


_TO_NUMPY = {
    DType.FLOAT32: np.dtype(np.float32),
    DType.FLOAT64: np.dtype(np.float64),
    DType.FLOAT16: np.dtype(np.float16),
    DType.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
    DType.INT8: np.dtype(np.int8),
    DType.INT16: np.dtype(np.int16),
    DType.INT32: np.dtype(np.int32),
    DType.INT64: np.dtype(np.int64),
    DType.UINT8: np.dtype(np.uint8),
    DType.BOOL: np.dtype(np.bool_),
    DType.UINT16: np.dtype(np.uint16),
    DType.UINT32: np.dtype(np.uint32),
    DType.UINT64: np.dtype(np.uint64),
    DType.FLOAT8_E4M3FN: np.dtype(ml_dtypes.float8_e4m3fn),
    DType.FLOAT8_E4M3FNUZ: np.dtype(ml_dtypes.float8_e4m3fnuz),
    DType.FLOAT8_E5M2: np.dtype(ml_dtypes.float8_e5m2),
    DType.FLOAT8_E5M2FNUZ: np.dtype(ml_dtypes.float8_e5m2fnuz),
    DType.FLOAT8_E8M0FNU: np.dtype(ml_dtypes.float8_e8m0fnu),
    DType.INT4: np.dtype(ml_dtypes.int4),
    DType.UINT4: np.dtype(ml_dtypes.uint4),
    DType.INT2: np.dtype(ml_dtypes.int2),
    DType.UINT2: np.dtype(ml_dtypes.uint2),
    DType.FLOAT4_E2M1FN: np.dtype(ml_dtypes.float4_e2m1fn),
}
_FROM_NUMPY = {v: k for k, v in _TO_NUMPY.items()}

FLOAT_TYPES = frozenset({DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.BFLOAT16})
SIGNED_INTEGER_TYPES = frozenset({DType.INT8, DType.INT16, DType.INT32, DType.INT64})
UNSIGNED_INTEGER_TYPES = frozenset({DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64})
INTEGER_TYPES = SIGNED_INTEGER_TYPES | UNSIGNED_INTEGER_TYPES
NUMERIC_TYPES = FLOAT_TYPES | INTEGER_TYPES
# Float8 with a sign bit (and NaN); the "fn" types have no inf, the "uz" ones no -0.
FLOAT8_TYPES = frozenset({DType.FLOAT8_E4M3FN, DType.FLOAT8_E4M3FNUZ, DType.FLOAT8_E5M2,
                          DType.FLOAT8_E5M2FNUZ})
NARROW_FLOAT_TYPES = FLOAT8_TYPES | {DType.FLOAT8_E8M0FNU, DType.FLOAT4_E2M1FN}
# Integers of fewer than 8 bits (one per byte in memory, as ml_dtypes stores them).
SMALL_INTEGER_TYPES = frozenset({DType.INT4, DType.UINT4, DType.INT2, DType.UINT2})
NARROW_TYPES = NARROW_FLOAT_TYPES | SMALL_INTEGER_TYPES
SIGNED_TYPES = FLOAT_TYPES | SIGNED_INTEGER_TYPES | FLOAT8_TYPES | {
    DType.FLOAT4_E2M1FN, DType.INT4, DType.INT2}
ALL_TYPES = frozenset(DType)
INDEX_TYPES = frozenset({DType.INT32, DType.INT64})
