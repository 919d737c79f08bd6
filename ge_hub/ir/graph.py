"""Graph, Node and Value: the plain objects every part of ge-hub passes around.

Ownership, written down once:

- A `Graph` owns its `Node`s (a list kept in topological order), its input `Value`s,
  its constant `Value`s and the list of output `Value`s (which point at values it owns).
- A `Node` owns its output `Value`s; its inputs are references (an omitted optional
  input is `None`). Attributes are plain Python data, NumPy arrays, `DType`s or
  subgraphs (`Graph`), which the node owns.
- A `Value` knows its producer (the node and output index, or None for graph inputs and
  constants) and its users as `(node, input_index)` pairs. Constants carry NumPy data in
  `Value.const`; they are never nodes hidden in attributes.

All mutation goes through Graph/Node methods so that producer and user links stay
consistent; `graph.verify()` checks that they did.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from ge_hub.errors import GraphError
from ge_hub.ir.types import TensorType


class _Methods:
    """Graph.verify, Graph.copy and str(graph) are written in modules that import this
    one (`ge_hub.ir.verifier`, `ge_hub.ir.serialize`, `ge_hub.ir.printer`); the package
    (`ge_hub/ir/__init__.py`, which runs before any Graph exists) hands them in through
    `install_methods`, so that no module of the IR imports a module that imports it."""

    verify: Callable[..., None]
    clone: Callable[[Graph], Graph]
    format_graph: Callable[[Graph], str]


_methods = _Methods()


def install_methods(*, verify: Callable[..., None], clone: Callable[[Graph], Graph],
                    format_graph: Callable[[Graph], str]) -> None:
    _methods.verify, _methods.clone, _methods.format_graph = verify, clone, format_graph


class Value:
    """An SSA value: a graph input, a constant, or one output of a node."""

    __slots__ = ("name", "type", "producer", "index", "uses", "const", "__weakref__")

    def __init__(self, name: str, type: TensorType, *, const: np.ndarray | None = None):
        self.name = name
        self.type = type
        self.producer: Node | None = None
        self.index = 0
        self.uses: list[tuple[Node, int]] = []
        self.const = const

    @property
    def is_constant(self) -> bool:
        return self.const is not None

    @property
    def users(self) -> list[Node]:
        """The distinct nodes that read this value, in first-use order."""
        return list(dict.fromkeys(node for node, _ in self.uses))

    def __repr__(self) -> str:
        return f"Value({self.name!r}, {self.type})"


class Node:
    """One operation: `op` in `domain` ('' is the core op set) applied to inputs."""

    __slots__ = ("op", "domain", "name", "inputs", "outputs", "attrs", "graph", "meta")

    def __init__(self, op: str, domain: str = "", name: str = ""):
        self.op = op
        self.domain = domain
        self.name = name
        self.inputs: list[Value | None] = []
        self.outputs: list[Value] = []
        self.attrs: dict[str, Any] = {}
        self.graph: Graph | None = None
        # Free-form annotations for passes (kernel choice, stream); never serialized.
        self.meta: dict[str, Any] = {}

    @property
    def qualified_op(self) -> str:
        return f"{self.domain}.{self.op}" if self.domain else self.op

    def set_input(self, index: int, value: Value | None) -> None:
        old = self.inputs[index]
        if old is not None:
            old.uses.remove((self, index))
        self.inputs[index] = value
        if value is not None:
            value.uses.append((self, index))

    def subgraphs(self) -> Iterator[Graph]:
        for attr in self.attrs.values():
            if isinstance(attr, Graph):
                yield attr
            elif isinstance(attr, (list, tuple)):
                yield from (a for a in attr if isinstance(a, Graph))

    def __repr__(self) -> str:
        return f"Node({self.qualified_op}, name={self.name!r})"


class Graph:
    """A function from named inputs to named outputs, as a list of nodes."""

    def __init__(self, name: str = "main"):
        self.name = name
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.constants: list[Value] = []
        self.nodes: list[Node] = []
        self.attrs: dict[str, Any] = {}
        self._names: set[str] = set()
        self._counter = itertools.count()

    # -- naming ------------------------------------------------------------------

    def unique_name(self, prefix: str) -> str:
        """A name not yet used by any value or node of this graph."""
        if prefix not in self._names:
            self._names.add(prefix)
            return prefix
        while True:
            name = f"{prefix}_{next(self._counter)}"
            if name not in self._names:
                self._names.add(name)
                return name

    def _claim(self, name: str) -> str:
        if name in self._names:
            raise ValueError(f"graph {self.name!r} already has a value or node named {name!r}")
        self._names.add(name)
        return name

    # -- building ----------------------------------------------------------------

    def add_input(self, name: str, type: TensorType) -> Value:
        value = Value(self._claim(name), type)
        self.inputs.append(value)
        return value

    def add_constant(self, array, name: str | None = None, *, prefix: str = "const") -> Value:
        """A constant value; named `name` exactly, or a fresh name starting with `prefix`."""
        array = np.asarray(array)
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        # Constants are immutable: passes share them freely.
        array.setflags(write=False)
        value = Value(self._claim(name) if name else self.unique_name(prefix),
                      TensorType.of(array), const=array)
        self.constants.append(value)
        return value

    def add_node(
        self,
        op: str,
        inputs: Sequence[Value | None],
        output_types: Sequence[TensorType],
        attrs: dict[str, Any] | None = None,
        *,
        domain: str = "",
        name: str | None = None,
        output_names: Sequence[str] | None = None,
        before: Node | None = None,
    ) -> Node:
        """Append a node (or insert it before `before`) and create its outputs."""
        # Check everything that can fail before changing anything, so that an error
        # leaves the graph as it was: no names claimed, no uses recorded on the inputs.
        given = [n for n in (name, *(output_names or ())) if n]
        clashes = [n for i, n in enumerate(given) if n in self._names or n in given[:i]]
        if clashes:
            raise ValueError(f"graph {self.name!r} already has a value or node named "
                             f"{clashes[0]!r}")
        if output_names is not None and len(output_names) != len(output_types):
            raise ValueError(f"{len(output_names)} output names for {len(output_types)} outputs")
        position = len(self.nodes) if before is None else self.nodes.index(before)
        # Given output names are claimed first so that a default node name avoids them.
        out_names = None if output_names is None else [self._claim(n) for n in output_names]
        node = Node(op, domain, self._claim(name) if name else self.unique_name(op.lower()))
        node.attrs = dict(attrs or {})
        node.graph = self
        if out_names is None:
            out_names = [self.unique_name(f"{node.name}_out{i}" if len(output_types) > 1
                                          else node.name) for i in range(len(output_types))]
        for i, (out_name, out_type) in enumerate(zip(out_names, output_types)):
            value = Value(out_name, out_type)
            value.producer, value.index = node, i
            node.outputs.append(value)
        for value in inputs:
            node.inputs.append(None)
            node.set_input(len(node.inputs) - 1, value)
        self.nodes.insert(position, node)
        return node

    def set_outputs(self, values: Iterable[Value]) -> None:
        self.outputs = list(values)

    # -- editing -----------------------------------------------------------------

    def replace_all_uses(self, old: Value, new: Value) -> None:
        """Point every reader of `old` (nodes and graph outputs) at `new`."""
        for node, index in list(old.uses):
            node.set_input(index, new)
        self.outputs = [new if v is old else v for v in self.outputs]

    def remove_node(self, node: Node) -> None:
        """Remove a node whose outputs are no longer read."""
        for out in node.outputs:
            if out.uses or out in self.outputs:
                raise GraphError(f"cannot remove node {node.name!r}: "
                                 f"output {out.name!r} is still used")
        for index in range(len(node.inputs)):
            node.set_input(index, None)
        detach_captures(node)
        self.nodes.remove(node)
        node.graph = None

    def remove_unused_constants(self) -> None:
        live = {id(v) for v in self.outputs}
        self.constants = [c for c in self.constants if c.uses or id(c) in live]

    # -- queries -----------------------------------------------------------------

    @property
    def input_names(self) -> list[str]:
        return [v.name for v in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [v.name for v in self.outputs]

    def values(self) -> Iterator[Value]:
        """Every value this graph owns: inputs, constants, then node outputs in order."""
        yield from self.inputs
        yield from self.constants
        for node in self.nodes:
            yield from node.outputs

    def find_value(self, name: str) -> Value:
        for value in self.values():
            if value.name == name:
                return value
        raise KeyError(f"graph {self.name!r} has no value named {name!r}")

    def find_node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"graph {self.name!r} has no node named {name!r}")

    def topological_sort(self) -> None:
        """Reorder nodes so every node comes after the producers of its inputs."""
        order: list[Node] = []
        state: dict[int, int] = {}  # 1 = on stack, 2 = done
        owned = {id(n) for n in self.nodes}
        for root in self.nodes:
            stack = [(root, False)]
            while stack:
                node, expanded = stack.pop()
                key = id(node)
                if expanded:
                    state[key] = 2
                    order.append(node)
                    continue
                if state.get(key) == 2:
                    continue
                if state.get(key) == 1:
                    raise GraphError(f"graph {self.name!r} has a cycle through node {node.name!r}")
                state[key] = 1
                stack.append((node, True))
                for value in reversed(node_reads(node)):
                    producer = value.producer
                    if producer is not None and id(producer) in owned:
                        if state.get(id(producer)) == 1:
                            raise GraphError(
                                f"graph {self.name!r} has a cycle through node {producer.name!r}")
                        if state.get(id(producer)) != 2:
                            stack.append((producer, False))
        self.nodes = order

    def verify(self, schemas=None) -> None:
        """Check every invariant; raise `GraphError` naming the culprit. `schemas(op,
        domain)` finds the schemas nodes are checked against (default: the registry of
        the loaded plugins; the compiler passes its context's)."""
        _methods.verify(self, schemas)

    def copy(self) -> Graph:
        """A deep copy (constants' data are shared: they are read-only)."""
        return _methods.clone(self)

    def __str__(self) -> str:
        return _methods.format_graph(self)

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, nodes={len(self.nodes)})"


def node_reads(node: Node) -> list[Value]:
    """Every value a node reads, including outer-scope values read by its subgraphs."""
    reads = [v for v in node.inputs if v is not None]
    for sub in node.subgraphs():
        reads.extend(outer_values(sub))
    return reads



def detach_captures(node: Node) -> None:
    """Drop the reads that `node`'s subgraphs make of enclosing graphs' values.

    For a node leaving its graph (or giving up its subgraphs): those values would
    otherwise keep listing readers that are in no graph.
    """
    for sub in list(node.subgraphs()):
        detach_outer_reads(sub)


def detach_outer_reads(graph: Graph, owned: frozenset[int] = frozenset()) -> None:
    """Drop the reads that `graph` (a subgraph being discarded) and the subgraphs within
    it make of values they do not own; `owned` adds values of graphs around it that
    count as its own."""
    owned = owned | {id(v) for v in graph.values()}
    for node in graph.nodes:
        for index, value in enumerate(node.inputs):
            if value is not None and id(value) not in owned:
                node.set_input(index, None)
        for sub in node.subgraphs():
            detach_outer_reads(sub, owned)


def outer_values(graph: Graph) -> list[Value]:
    """Values a (sub)graph reads that it does not own: its captures from enclosing scopes."""
    owned = {id(v) for v in graph.values()}
    seen: dict[int, Value] = {}
    for node in graph.nodes:
        for value in node_reads(node):
            if id(value) not in owned:
                seen.setdefault(id(value), value)
    for value in graph.outputs:
        if id(value) not in owned:
            seen.setdefault(id(value), value)
    return list(seen.values())


