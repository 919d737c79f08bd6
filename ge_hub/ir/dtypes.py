"""Element types of ge-hub tensors and their mapping to NumPy.

`DType` is the one list of element types the IR, the op schemas, the plan and the
executor agree on. Its values are the NumPy names, so `DType("float32")` and
`DType.from_numpy(np.float32)` both work. bfloat16 comes from the `ml_dtypes`
package, which gives NumPy a real bfloat16 scalar type.
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
        return self in FLOAT_TYPES

    @property
    def is_integer(self) -> bool:
        return self in INTEGER_TYPES

    @property
    def is_signed(self) -> bool:
        return self in FLOAT_TYPES or self in SIGNED_INTEGER_TYPES

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
}
_FROM_NUMPY = {v: k for k, v in _TO_NUMPY.items()}

FLOAT_TYPES = frozenset({DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.BFLOAT16})
SIGNED_INTEGER_TYPES = frozenset({DType.INT8, DType.INT16, DType.INT32, DType.INT64})
UNSIGNED_INTEGER_TYPES = frozenset({DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64})
INTEGER_TYPES = SIGNED_INTEGER_TYPES | UNSIGNED_INTEGER_TYPES
NUMERIC_TYPES = FLOAT_TYPES | INTEGER_TYPES
ALL_TYPES = frozenset(DType)
INDEX_TYPES = frozenset({DType.INT32, DType.INT64})
