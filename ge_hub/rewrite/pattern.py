"""Patterns: small graphs of pattern nodes, built by calling `op.<OnnxName>(...)`.

A rule's pattern is a plain function `pattern(op, x, w, ...)`; each parameter after
`op` is a `Var` that matches any value (the same Var twice must match the same value).
`op.Conv(x, w, strides=[1, 1])` is a `PatternNode` for a Conv whose `strides` equal
[1, 1] (a schema default counts as given; a callable is a predicate on the value).
A Var can require a constant (`w.constant()`) or allow an absent optional input
(`b.optional()`); a Python number or NumPy array in an input position matches a
constant whose every element equals it (`op.Mul(x, 1.0)`). `_domain=` names the op's
domain, `_outputs=n` gives a node several outputs (returned as a tuple), and
`_other_inputs=True` lets the node have more inputs than the pattern lists.
`op.OneOf(["Reshape", "Flatten"], x, ...)` matches any of several ops.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

# Binary ops whose two inputs may be swapped without changing the result.
COMMUTATIVE = frozenset({"Add", "Mul", "Max", "Min", "Sum", "Mean", "And", "Or", "Xor",
                         "Equal", "BitwiseAnd", "BitwiseOr", "BitwiseXor"})


class Var:
    """A pattern variable: matches any value, once bound always the same value."""

    def __init__(self, name: str):
        self.name = name
        self.require_constant = False
        self.allow_absent = False

    def constant(self) -> Var:
        """Match only a constant value (its data are then `value.const`)."""
        self.require_constant = True
        return self

    def optional(self) -> Var:
        """Also match an absent optional input; the variable is then bound to None."""
        self.allow_absent = True
        return self

    def __repr__(self) -> str:
        return f"Var({self.name!r})"


@dataclasses.dataclass(eq=False)
class ConstLiteral:
    """An input position that must be a constant whose every element equals `value`."""

    value: Any

    def matches(self, array: np.ndarray) -> bool:
        try:
            return bool(array.size > 0 and np.all(array == self.value))
        except (TypeError, ValueError):
            return False


@dataclasses.dataclass(eq=False)
class PatternNode:
    ops: tuple[str, ...]
    domain: str
    inputs: list[Any]  # Var, PatternOutput, ConstLiteral or None (absent)
    attrs: dict[str, Any]
    num_outputs: int
    other_inputs: bool
    outputs: list[PatternOutput] = dataclasses.field(default_factory=list)

    @property
    def label(self) -> str:
        name = "|".join(self.ops)
        return f"{self.domain}.{name}" if self.domain else name

    @property
    def commutative(self) -> bool:
        return (not self.domain and len(self.inputs) == 2 and not self.other_inputs
                and all(op in COMMUTATIVE for op in self.ops))


@dataclasses.dataclass(eq=False)
class PatternOutput:
    node: PatternNode
    index: int

    def __repr__(self) -> str:
        return f"<output {self.index} of {self.node.label}>"


def _pattern_input(item):
    if item is None or isinstance(item, (Var, PatternOutput)):
        return item
    if isinstance(item, (int, float, bool, np.ndarray, np.generic)):
        return ConstLiteral(item)
    raise TypeError(f"a pattern input is a pattern variable, a pattern node's output, None "
                    f"or a number, got {type(item).__name__}")


class PatternBuilder:
    """The `op` handed to a pattern function: `op.Relu(x)` makes a pattern node."""

    def __init__(self) -> None:
        self.nodes: list[PatternNode] = []

    def _make(self, ops: Sequence[str], inputs, attrs) -> PatternOutput | tuple:
        domain = attrs.pop("_domain", "")
        num_outputs = int(attrs.pop("_outputs", 1))
        other_inputs = bool(attrs.pop("_other_inputs", False))
        bad = [k for k in attrs if k.startswith("_")]
        if bad:
            raise TypeError(f"unknown pattern option {bad[0]!r} "
                            "(known: _domain, _outputs, _other_inputs)")
        node = PatternNode(tuple(ops), domain, [_pattern_input(i) for i in inputs], attrs,
                           num_outputs, other_inputs)
        node.outputs = [PatternOutput(node, i) for i in range(num_outputs)]
        self.nodes.append(node)
        return node.outputs[0] if num_outputs == 1 else tuple(node.outputs)

    def OneOf(self, ops: Sequence[str], *inputs, **attrs):  # noqa: N802 (reads as an op)
        """A node matching any of `ops` (same domain)."""
        return self._make(list(ops), inputs, attrs)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *inputs, **attrs: self._make([name], inputs, attrs)


@dataclasses.dataclass(eq=False)
class Pattern:
    """A traced pattern: its variables (in parameter order), nodes and outputs."""

    vars: list[Var]
    nodes: list[PatternNode]
    outputs: list[PatternOutput]

    @classmethod
    def trace(cls, function: Callable[..., Any], rule_name: str) -> Pattern:
        params = list(inspect.signature(function).parameters)
        if not params:
            raise TypeError(f"rule {rule_name!r}: a pattern function takes `op` first")
        variables = [Var(name) for name in params[1:]]
        builder = PatternBuilder()
        try:
            result = function(builder, *variables)
        except TypeError as exc:
            raise TypeError(f"rule {rule_name!r}: its pattern is malformed: {exc}") from exc
        outputs = list(result) if isinstance(result, (tuple, list)) else [result]
        if not outputs or not all(isinstance(o, PatternOutput) for o in outputs):
            raise TypeError(f"rule {rule_name!r}: the pattern must return the output(s) of "
                            f"pattern nodes (op.X(...)), got {result!r}")
        used = {id(n) for n in builder.nodes}
        reachable = _reachable(outputs)
        if len(reachable) != len(used):
            raise TypeError(f"rule {rule_name!r}: every pattern node must lead to a pattern "
                            "output")
        return cls(variables, builder.nodes, outputs)


def _reachable(outputs: Sequence[PatternOutput]) -> set[int]:
    seen: set[int] = set()
    stack = [o.node for o in outputs]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.extend(i.node for i in node.inputs if isinstance(i, PatternOutput))
    return seen
