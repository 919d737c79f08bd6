"""The matcher: finds where a traced `Pattern` occurs in a graph.

Matching starts at a candidate node for the pattern's first output and walks the
pattern towards its inputs, binding pattern nodes to graph nodes and variables to
values; commutative binary ops try both operand orders (backtracking). Pattern outputs
not reached that way are matched next, against any node of the graph. Each graph node
matches at most one pattern node. Safety (escaping intermediates, cycles, types) is the
engine's business, not the matcher's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ge_hub.ir.graph import Graph, Node, Value
from ge_hub.rewrite.pattern import ConstLiteral, Pattern, PatternNode, PatternOutput, Var


class Match:
    """One occurrence of a pattern: the matched nodes (in pattern order), what each
    variable is bound to (a Value, or None for an absent optional input), and the graph
    values standing for the pattern's outputs."""

    def __init__(self, nodes: list[Node], values: dict[str, Value | None],
                 outputs: list[Value], attr_defaults: Callable[[Node], dict[str, Any]]):
        self.nodes = nodes
        self.values = values
        self.outputs = outputs
        self._attr_defaults = attr_defaults

    def node(self, op: str) -> Node:
        """The first matched node whose op is `op`."""
        for node in self.nodes:
            if node.op == op:
                return node
        raise KeyError(f"the match has no {op!r} node; it has {[n.op for n in self.nodes]}")

    def attrs(self, op_or_node: str | Node) -> dict[str, Any]:
        """A matched node's attributes with its schema's defaults filled in."""
        node = op_or_node if isinstance(op_or_node, Node) else self.node(op_or_node)
        return self._attr_defaults(node)

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes)


class _State:
    __slots__ = ("nodes", "owners", "vars")

    def __init__(self, nodes=None, owners=None, variables=None):
        self.nodes: dict[int, Node] = nodes or {}     # id(PatternNode) -> Node
        self.owners: dict[int, int] = owners or {}    # id(Node) -> id(PatternNode)
        self.vars: dict[int, Value | None] = variables or {}  # id(Var) -> value

    def bind_node(self, pnode: PatternNode, node: Node) -> _State:
        return _State({**self.nodes, id(pnode): node}, {**self.owners, id(node): id(pnode)},
                      self.vars)

    def bind_var(self, var: Var, value: Value | None) -> _State:
        return _State(self.nodes, self.owners, {**self.vars, id(var): value})


def attr_equal(got: Any, want: Any) -> bool:
    if isinstance(got, np.ndarray) or isinstance(want, np.ndarray):
        try:
            return bool(np.array_equal(np.asarray(got), np.asarray(want)))
        except (TypeError, ValueError):
            return False
    if isinstance(got, (list, tuple)) and isinstance(want, (list, tuple)):
        return len(got) == len(want) and all(attr_equal(a, b) for a, b in zip(got, want))
    return got == want


class Matcher:
    """Finds the occurrences of one pattern; `attrs_of(node)` gives a node's attributes
    with schema defaults (so that a constraint on a defaulted attribute works)."""

    def __init__(self, pattern: Pattern, attrs_of: Callable[[Node], dict[str, Any]]):
        self.pattern = pattern
        self.attrs_of = attrs_of
        self.root = pattern.outputs[0].node

    def candidates(self, node: Node) -> bool:
        return node.op in self.root.ops and node.domain == self.root.domain

    def matches_at(self, graph: Graph, node: Node) -> Iterator[Match]:
        """Every match whose first output's node is `node`."""
        first = self.pattern.outputs[0]
        if first.index >= len(node.outputs):
            return
        for state in self._output(first, node.outputs[first.index], _State()):
            for full in self._rest(graph, self.pattern.outputs[1:], state):
                yield self._finish(full)

    def _rest(self, graph: Graph, outputs: list[PatternOutput], state: _State):
        if not outputs:
            yield state
            return
        head, tail = outputs[0], outputs[1:]
        if id(head.node) in state.nodes:
            yield from self._rest(graph, tail, state)
            return
        for node in graph.nodes:
            if node.op in head.node.ops and head.index < len(node.outputs):
                for bound in self._output(head, node.outputs[head.index], state):
                    yield from self._rest(graph, tail, bound)

    def _finish(self, state: _State) -> Match:
        nodes = [state.nodes[id(p)] for p in self.pattern.nodes]
        values = {v.name: state.vars.get(id(v)) for v in self.pattern.vars}
        outputs = [state.nodes[id(o.node)].outputs[o.index] for o in self.pattern.outputs]
        return Match(nodes, values, outputs, self.attrs_of)

    # -- the walk ------------------------------------------------------------------

    def _output(self, pout: PatternOutput, value: Value, state: _State):
        node = value.producer
        if node is None or value.index != pout.index:
            return
        yield from self._node(pout.node, node, state)

    def _node(self, pnode: PatternNode, node: Node, state: _State):
        bound = state.nodes.get(id(pnode))
        if bound is not None:
            if bound is node:
                yield state
            return
        if id(node) in state.owners:
            return
        if node.op not in pnode.ops or node.domain != pnode.domain:
            return
        if len(node.outputs) < pnode.num_outputs:
            return
        if pnode.attrs:
            attrs = self.attrs_of(node)
            for key, want in pnode.attrs.items():
                got = attrs.get(key)
                ok = bool(want(got)) if callable(want) else attr_equal(got, want)
                if not ok:
                    return
        actual = list(node.inputs)
        wanted = len(pnode.inputs)
        if len(actual) > wanted and not pnode.other_inputs:
            if any(v is not None for v in actual[wanted:]):
                return
        actual = (actual + [None] * wanted)[:wanted]
        state = state.bind_node(pnode, node)
        orders = [actual]
        if pnode.commutative and actual[0] is not actual[1]:
            orders.append([actual[1], actual[0]])
        for order in orders:
            yield from self._inputs(pnode.inputs, order, state)

    def _inputs(self, pinputs: list, values: list, state: _State):
        if not pinputs:
            yield state
            return
        for bound in self._input(pinputs[0], values[0], state):
            yield from self._inputs(pinputs[1:], values[1:], bound)

    def _input(self, pin, value: Value | None, state: _State):
        if pin is None:
            if value is None:
                yield state
            return
        if isinstance(pin, ConstLiteral):
            if value is not None and value.is_constant and pin.matches(value.const):
                yield state
            return
        if isinstance(pin, Var):
            if value is None and not pin.allow_absent:
                return
            if value is not None and pin.require_constant and not value.is_constant:
                return
            if id(pin) in state.vars:
                if state.vars[id(pin)] is value:
                    yield state
                return
            yield state.bind_var(pin, value)
            return
        if value is not None:
            yield from self._output(pin, value, state)
