"""Tensor: the handle ES calls take and return, one IR `Value` plus the builder it is in.

Python operators build nodes of the core op set: `+ - * / @ **` and unary `-` are
Add, Sub, Mul, Div, MatMul, Pow and Neg, with the reflected forms (`1.0 - x` is
Sub(1.0, x)). A Python number on the other side becomes a constant of this tensor's
dtype (`x + 1.0` for a float16 `x` adds a float16 constant).

`==` and `hash` are left alone: tensors are dict keys and set members by identity, and
comparisons are written `es.equal(a, b)`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Value
from ge_hub.ir.types import Dim, TensorType

if TYPE_CHECKING:
    from ge_hub.es.builder import GraphBuilder

# What may stand on the other side of a Python operator: it becomes a constant.
_OPERAND_TYPES = (bool, int, float, list, tuple, np.ndarray, np.generic)


class _Operators:
    """How an operator applies its core op: `call(op, *args)`, the ES function of `op`.
    The ES functions are made by modules that import this one (`ge_hub.es.calls`,
    `ge_hub.es.namespace`); the namespace installs `call` when imported, which importing
    any part of `ge_hub.es` does."""

    call: Callable[..., Any]


_operators = _Operators()


def install_operator_call(call: Callable[..., Any]) -> None:
    """Make `call(op, *args)` what Tensor's Python operators apply."""
    _operators.call = call


class Tensor:
    """A value of the graph a `GraphBuilder` is building."""

    __slots__ = ("value", "builder")

    # NumPy must not treat a Tensor as an object scalar and broadcast over it:
    # `np.float32(2) * x` then falls back to `Tensor.__rmul__`.
    __array_ufunc__ = None

    def __init__(self, value: Value, builder: GraphBuilder):
        self.value = value
        self.builder = builder

    @property
    def type(self) -> TensorType:
        return self.value.type

    @property
    def dtype(self) -> DType:
        return self.value.type.dtype

    @property
    def shape(self) -> tuple[Dim, ...] | None:
        return self.value.type.shape

    @property
    def rank(self) -> int | None:
        return self.value.type.rank

    @property
    def name(self) -> str:
        return self.value.name

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, {self.type})"

    def __bool__(self) -> bool:
        raise TypeError(f"ES tensor {self.name!r} has no truth value while the graph is "
                        "being built; use es.where / es.if_ for data-dependent choices")

    # -- operators ---------------------------------------------------------------

    def __add__(self, other: Any):
        return _binary("Add", self, other)

    def __radd__(self, other: Any):
        return _binary("Add", other, self)

    def __sub__(self, other: Any):
        return _binary("Sub", self, other)

    def __rsub__(self, other: Any):
        return _binary("Sub", other, self)

    def __mul__(self, other: Any):
        return _binary("Mul", self, other)

    def __rmul__(self, other: Any):
        return _binary("Mul", other, self)

    def __truediv__(self, other: Any):
        return _binary("Div", self, other)

    def __rtruediv__(self, other: Any):
        return _binary("Div", other, self)

    def __matmul__(self, other: Any):
        return _binary("MatMul", self, other)

    def __rmatmul__(self, other: Any):
        return _binary("MatMul", other, self)

    def __pow__(self, other: Any):
        return _binary("Pow", self, other)

    def __rpow__(self, other: Any):
        return _binary("Pow", other, self)

    def __neg__(self):
        return _operators.call("Neg", self)


def _binary(op: str, left: Any, right: Any):
    for operand in (left, right):
        if not isinstance(operand, (Tensor, *_OPERAND_TYPES)):
            return NotImplemented
    return _operators.call(op, left, right)
