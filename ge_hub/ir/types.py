"""Tensor types: a dtype and a shape whose dims are ints or symbolic dims.

A symbolic dim is a `Sym` (`ge_hub.ir.symbolic`): a named symbol ("N", "seq") or an
expression over symbols that shape inference builds when it combines them (Flatten of
[N, C] gives N*C, Concat along a symbolic axis C+3), kept in a canonical form so that two
dims computed the same way compare equal. Shapes are specialized to ints before
execution; the `dim_*` functions are the arithmetic inference uses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import numpy as np

from ge_hub.ir import symbolic
from ge_hub.ir.dtypes import DType
from ge_hub.ir.symbolic import Dim, Sym

__all__ = ["Dim", "Sym", "TensorType", "as_dim", "dim_add", "dim_floordiv", "dim_mul",
           "dim_prod", "dim_sub"]


def as_dim(dim) -> Dim:
    """Normalize a dim given as int, NumPy int, str (a symbol name, or an expression such as
    "3*N": see `Sym`) or Sym."""
    if isinstance(dim, Sym):
        return dim
    if isinstance(dim, str):
        return Sym(dim)
    if isinstance(dim, (int, np.integer)) and not isinstance(dim, bool):
        if dim < 0:
            raise ValueError(f"a dim must be >= 0, got {dim}")
        return int(dim)
    raise TypeError(f"a dim is an int or a symbol name, got {dim!r}")


def dim_mul(a: Dim, b: Dim) -> Dim:
    """a * b; a symbolic product has one canonical form, so that the same product built in
    any order compares equal."""
    return symbolic.mul(a, b)


def dim_add(a: Dim, b: Dim) -> Dim:
    return symbolic.add(a, b)


def dim_sub(a: Dim, b: Dim) -> Dim:
    return symbolic.sub(a, b)


def dim_floordiv(a: Dim, b: Dim) -> Dim:
    return symbolic.floordiv(a, b)


def dim_prod(dims: Iterable[Dim]) -> Dim:
    return symbolic.prod(dims)


@dataclasses.dataclass(frozen=True)
class TensorType:
    """The type of a value: element dtype and shape (None when the rank is unknown)."""

    dtype: DType
    shape: tuple[Dim, ...] | None

    def __init__(self, dtype, shape=None):
        object.__setattr__(self, "dtype", DType.parse(dtype))
        if shape is not None:
            shape = tuple(as_dim(d) for d in shape)
        object.__setattr__(self, "shape", shape)

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def is_static(self) -> bool:
        """True when every dim is a concrete int."""
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    @property
    def numel(self) -> int:
        if not self.is_static:
            raise ValueError(f"{self} has no static element count")
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    @property
    def symbols(self) -> set[str]:
        """The names of the symbols the shape's dims depend on."""
        return {name for d in self.shape or () if isinstance(d, Sym) for name in d.symbols}

    def with_shape(self, shape) -> TensorType:
        return TensorType(self.dtype, shape)

    def with_dtype(self, dtype) -> TensorType:
        return TensorType(dtype, self.shape)

    def __str__(self) -> str:
        if self.shape is None:
            return f"{self.dtype}[?]"
        return f"{self.dtype}[{','.join(str(d) for d in self.shape)}]"

    @classmethod
    def of(cls, array: np.ndarray) -> TensorType:
        """The type of a concrete NumPy array."""
        return cls(DType.from_numpy(array.dtype), array.shape)
