"""Tensor types: a dtype and a shape whose dims are ints or named symbols.

A symbolic dim is a `Sym` with a name ("N", "seq"). Shape inference that combines
symbols (Flatten of [N, C], Concat along a symbolic axis) builds a new `Sym` whose
name is the expression ("N*C"), so that two values computed the same way compare
equal. Shapes are specialized to ints before execution, so these expressions never
need evaluating.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Union

import numpy as np

from ge_hub.ir.dtypes import DType


@dataclasses.dataclass(frozen=True)
class Sym:
    """A named symbolic dimension."""

    name: str

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a symbolic dim needs a non-empty name, got {self.name!r}")

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Sym({self.name!r})"


Dim = Union[int, Sym]


def as_dim(dim) -> Dim:
    """Normalize a dim given as int, NumPy int, str (a symbol name) or Sym."""
    if isinstance(dim, Sym):
        return dim
    if isinstance(dim, str):
        return Sym(dim)
    if isinstance(dim, (int, np.integer)) and not isinstance(dim, bool):
        if dim < 0:
            raise ValueError(f"a dim must be >= 0, got {dim}")
        return int(dim)
    raise TypeError(f"a dim is an int or a symbol name, got {dim!r}")


def _wrap(dim: Dim) -> str:
    text = str(dim)
    return f"({text})" if isinstance(dim, Sym) and any(c in text for c in "+-*/") else text


def _factors(dim: Dim) -> tuple[int, list[str]]:
    """A dim as (integer coefficient, symbolic factors) of a product."""
    if isinstance(dim, int):
        return dim, []
    parts, depth, start, text = [], 0, 0, dim.name
    for i, c in enumerate(text):
        depth += (c == "(") - (c == ")")
        if c == "*" and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    coefficient, symbols = 1, []
    for part in parts:
        if part.isdigit():
            coefficient *= int(part)
        else:
            symbols.append(part if not any(c in part for c in "+-/") or part.startswith("(")
                           else f"({part})")
    return coefficient, symbols


def dim_mul(a: Dim, b: Dim) -> Dim:
    """a * b; a symbolic product is kept in one canonical form (sorted factors), so that
    the same product built in any order compares equal."""
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if a == 0 or b == 0:
        return 0
    ca, sa = _factors(a)
    cb, sb = _factors(b)
    coefficient, symbols = ca * cb, sorted(sa + sb)
    if not symbols:
        return coefficient
    return Sym("*".join(([str(coefficient)] if coefficient != 1 else []) + symbols))


def dim_add(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if a == 0:
        return b
    if b == 0:
        return a
    return Sym(f"{_wrap(a)}+{_wrap(b)}")


def dim_sub(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    if b == 0:
        return a
    return Sym(f"{_wrap(a)}-{_wrap(b)}")


def dim_floordiv(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    if b == 1:
        return a
    return Sym(f"{_wrap(a)}/{_wrap(b)}")


def dim_prod(dims: Iterable[Dim]) -> Dim:
    result: Dim = 1
    for d in dims:
        result = dim_mul(result, d)
    return result


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
        return {d.name for d in self.shape or () if isinstance(d, Sym)}

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
