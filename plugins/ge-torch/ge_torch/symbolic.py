"""Symbolic sizes: PyTorch's sympy expressions as ge-hub `Sym` dims and shape tensors.

Under `dynamic=True` (or `torch.export` with dynamic shapes) a size is a `torch.SymInt`
whose `node.expr` is a sympy expression over size symbols (`s0`, `s1*4`). In the ge-hub
graph a dim becomes the same `Sym` expression (`Sym("s0")`, `Sym("4*s0")`), and a size a node needs
as data (a view's target shape, an arange's end) is computed in the graph from the
`Shape` of an input that carries the symbol. ge-hub folds those `Shape` computations to
constants when it specializes the graph for concrete input shapes, so every plan is as
static as if the sizes had been ints all along.

Only the arithmetic PyTorch emits for sizes is understood: integers, symbols, +, *,
integer powers, floor division, modulo, max and min. Anything else is `Unsupported`,
and the node that needs it runs in PyTorch.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy
import torch
from ge_hub.plugin import Dim, Sym, Value
from torch.utils._sympy import functions as torch_sympy

from ge_torch.errors import Unsupported

if TYPE_CHECKING:
    from ge_torch.context import ConvertContext


def as_expr(value: Any) -> Any:
    """A SymInt/SymFloat/SymBool as its sympy expression (an int when it is constant);
    anything else unchanged."""
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        expr = value.node.expr
        if expr.is_number:
            if expr.is_Integer:
                return int(expr)
            return bool(expr) if isinstance(value, torch.SymBool) else float(expr)
        return expr
    return value


def is_symbolic(value: Any) -> bool:
    return isinstance(value, sympy.Basic)


def as_dim(size: Any) -> Dim:
    """A torch size (int or SymInt) as a ge-hub dim: size symbols become `Sym`s of the same
    name and the arithmetic on them ge-hub's (4*s0 is the dim s0 * 4 that ge-hub's own
    shape inference computes); an expression ge-hub has no form for (Max, Min) is one
    symbol named by its text."""
    expr = as_expr(size)
    if isinstance(expr, int):
        return expr
    dim = _dim_of(expr)
    return Sym.named(str(expr)) if dim is None else dim


def _dim_of(expr) -> Dim | None:
    if expr.is_Integer:
        return int(expr)
    if isinstance(expr, sympy.Symbol):
        return Sym.named(str(expr))
    args = [_dim_of(a) for a in expr.args]
    if not args or None in args:
        return None
    if isinstance(expr, sympy.Add):
        return _fold(lambda a, b: a + b, args)
    if isinstance(expr, sympy.Mul):
        return _fold(lambda a, b: a * b, args)
    if isinstance(expr, (sympy.Pow, torch_sympy.PowByNatural)):
        base, exponent = args
        if isinstance(exponent, int) and exponent > 0:
            return _fold(lambda a, b: a * b, [base] * exponent)
    if isinstance(expr, (torch_sympy.FloorDiv, torch_sympy.CleanDiv)) and args[1] != 0:
        return args[0] // args[1]
    if isinstance(expr, torch_sympy.CeilDiv) and args[1] != 0:
        return (args[0] + args[1] - 1) // args[1]
    if isinstance(expr, (torch_sympy.PythonMod, torch_sympy.Mod, sympy.Mod)) and args[1] != 0:
        return args[0] % args[1]
    return None


@dataclasses.dataclass(frozen=True)
class SymbolSource:
    """Where a size symbol can be read at run time: dim `axis` of graph input `value`
    (which is argument `arg_index` of the compiled function), or, with `axis` None, the
    value itself: an int64 scalar input holding a SymInt argument."""

    value: Value
    arg_index: int
    axis: int | None


class SymbolTable:
    """The size symbols a graph's inputs carry, and how to compute expressions of them."""

    def __init__(self) -> None:
        self.sources: dict[sympy.Symbol, SymbolSource] = {}

    def add_input(self, value: Value, arg_index: int, sizes) -> None:
        """Record the symbols among the sizes of an input tensor."""
        for axis, size in enumerate(sizes):
            expr = as_expr(size)
            if isinstance(expr, sympy.Symbol) and expr not in self.sources:
                self.sources[expr] = SymbolSource(value, arg_index, axis)

    def add_scalar_input(self, value: Value, arg_index: int, symbol: sympy.Symbol) -> None:
        self.sources[symbol] = SymbolSource(value, arg_index, None)

    def bindings(self, args) -> dict[sympy.Symbol, int]:
        """Each symbol's value for the concrete arguments of one call."""
        return {sym: int(args[src.arg_index] if src.axis is None
                         else args[src.arg_index].shape[src.axis])
                for sym, src in self.sources.items()}

    def evaluate(self, expr, args) -> int:
        """The value of a size expression for one call's arguments."""
        if not is_symbolic(expr):
            return expr
        missing = expr.free_symbols - self.sources.keys()
        if missing:
            raise Unsupported(f"size symbols {sorted(map(str, missing))} are not the size "
                              "of any input")
        return int(expr.xreplace({s: sympy.Integer(v) for s, v in self.bindings(args).items()}))


def emit(cx: ConvertContext, expr) -> Value:
    """An int64 tensor of shape [1] holding the value of `expr` at run time."""
    if isinstance(expr, (int, np.integer)) or (isinstance(expr, sympy.Basic) and expr.is_Integer):
        return cx.const(np.array([int(expr)], dtype=np.int64))
    cached = cx.sym_cache.get(expr)
    if cached is not None:
        return cached
    value = _emit_uncached(cx, expr)
    cx.sym_cache[expr] = value
    return value


def _emit_uncached(cx: ConvertContext, expr) -> Value:
    if isinstance(expr, sympy.Symbol):
        source = cx.symbols.sources.get(expr)
        if source is None:
            raise Unsupported(f"size symbol {expr} is not the size of any input of the graph")
        if source.axis is None:
            return cx.op("Reshape", source.value, cx.ints([1]))
        return cx.op("Shape", source.value, start=source.axis, end=source.axis + 1)
    args = [emit(cx, a) for a in expr.args]
    if isinstance(expr, sympy.Add):
        return _fold(lambda a, b: cx.op("Add", a, b), args)
    if isinstance(expr, sympy.Mul):
        return _fold(lambda a, b: cx.op("Mul", a, b), args)
    if isinstance(expr, (sympy.Pow, torch_sympy.PowByNatural)):
        exponent = expr.args[1]
        if exponent.is_Integer and int(exponent) > 0:
            return _fold(lambda a, b: cx.op("Mul", a, b), [args[0]] * int(exponent))
    if isinstance(expr, (torch_sympy.FloorDiv, torch_sympy.CleanDiv)):
        # Sizes are non-negative, where truncating and flooring division agree.
        return cx.op("Div", args[0], args[1])
    if isinstance(expr, torch_sympy.CeilDiv):
        one = emit(cx, 1)
        return cx.op("Div", cx.op("Sub", cx.op("Add", args[0], args[1]), one), args[1])
    if isinstance(expr, (torch_sympy.PythonMod, torch_sympy.Mod, sympy.Mod)):
        return cx.op("Mod", args[0], args[1])
    if isinstance(expr, (sympy.Max, torch_sympy.Max)):
        return cx.op("Max", *args)
    if isinstance(expr, (sympy.Min, torch_sympy.Min)):
        return cx.op("Min", *args)
    raise Unsupported(f"size expression {expr} ({type(expr).__name__}) has no ge-hub form")


def _fold(combine, args: list):
    result = args[0]
    for arg in args[1:]:
        result = combine(result, arg)
    return result
