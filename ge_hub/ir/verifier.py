"""The graph verifier: `verify(graph)` checks every IR invariant or raises `GraphError`.

The compiler runs it between passes in debug mode, and tests run it after every edit,
so its messages name the graph (with the node and attribute a subgraph hangs from), and
the offending node (name and op) or value.

What is checked, per graph and recursively for subgraphs:

- ownership: every node and value is owned once; `node.graph` is the graph; names are
  non-empty strings, unique in the graph (values and nodes share one namespace, as
  `Graph.unique_name` keeps them);
- links: a node output's producer and index point back at it; graph inputs and node
  outputs carry no constant data; constants' data match their declared type;
- SSA and order: every node input is a value defined before the node (a graph input, a
  constant, an earlier node's output, or a value of an enclosing scope), or None where
  the op declares the input optional; graph outputs are defined;
- uses: every value's `uses` list is exactly the set of (node, index) that read it;
- schemas: the op is registered, attributes and input dtypes fit its schema, and the
  recorded output types agree with what the schema infers (a symbolic dim on either
  side is compatible with anything).

The IR knows the structure only; the schema check is the ops layer's
(`ge_hub.ops.verify.check_node`), which `ge_hub.ops` installs here when it is imported
(as `import ge_hub` does), at the place in the walk where each node is checked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ge_hub.errors import GraphError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Graph, Node, Value
from ge_hub.ir.types import TensorType

# check(node, where, schemas): the schema check of one node (see the module docstring).
NodeCheck = Callable[[Node, str, "Callable[[str, str], Any] | None"], None]
_node_check: NodeCheck | None = None


def install_node_check(check: NodeCheck) -> None:
    """Make `check` the schema check run on every node `verify` walks."""
    global _node_check
    _node_check = check


def verify(graph: Graph, schemas: Callable[[str, str], Any] | None = None) -> None:
    """Check every invariant of `graph` and its subgraphs; raise `GraphError` on the first
    broken one.

    `schemas(op, domain)` looks up the schema each node is checked against; the compiler
    passes its context's registry (`ctx.registry.get_op`), so a compilation against an
    isolated registry is verified against that registry. Default: the loaded plugins'.
    """
    if not isinstance(graph, Graph):
        raise GraphError(f"verify expects a Graph, got {type(graph).__name__}")
    checker = _Verifier(schemas)
    checker.check_graph(graph, outer=(), where=f"graph {graph.name!r}")
    checker.check_uses()


def types_compatible(recorded: TensorType, inferred: TensorType) -> bool:
    """Equal dtypes; equal ranks where both are known; equal dims where both are ints."""
    if recorded.dtype != inferred.dtype:
        return False
    if recorded.shape is None or inferred.shape is None:
        return True
    if len(recorded.shape) != len(inferred.shape):
        return False
    return all(a == b for a, b in zip(recorded.shape, inferred.shape)
               if isinstance(a, int) and isinstance(b, int))


def node_label(node: Any) -> str:
    if not isinstance(node, Node):
        return f"<{type(node).__name__} object>"
    return f"node {node.name!r} ({node.qualified_op})"


class _Verifier:
    """One verification run over a graph tree; remembers what it saw for the uses check."""

    def __init__(self, schemas: Callable[[str, str], Any] | None = None) -> None:
        self.schemas = schemas
        # Everything owned anywhere in the tree, to check `uses` once at the end.
        self.value_owner: dict[int, tuple[Value, str]] = {}
        self.node_ids: set[int] = set()
        self.reads: list[tuple[Value, Node, int]] = []  # (value, reader, input index)
        self.graph_stack: list[int] = []
        self.graph_ids: dict[int, str] = {}

    # -- one graph ---------------------------------------------------------------

    def check_graph(self, graph: Graph, outer: tuple[frozenset[int], ...], where: str) -> None:
        if id(graph) in self.graph_ids:
            first = self.graph_ids[id(graph)]
            if id(graph) in self.graph_stack:
                raise GraphError(f"{where}: contains itself as a subgraph (a cycle)")
            raise GraphError(f"{where}: the same Graph object is also {first}; "
                             "a node owns its subgraphs, so each must be a separate object")
        self.graph_ids[id(graph)] = where
        self.graph_stack.append(id(graph))
        try:
            self._check_graph(graph, outer, where)
        finally:
            self.graph_stack.pop()

    def _check_graph(self, graph: Graph, outer: tuple[frozenset[int], ...], where: str) -> None:
        positions = self._check_ownership(graph, where)
        defined: set[int] = set()
        for value in graph.inputs:
            if value.const is not None:
                raise GraphError(f"{where}: graph input {value.name!r} carries constant data; "
                                 "constants belong in graph.constants")
            defined.add(id(value))
        for value in graph.constants:
            self._check_constant(value, where)
            defined.add(id(value))
        for node in graph.nodes:
            self._check_node_inputs(node, graph, defined, outer, positions, where)
            # Snapshot what the node's bodies may read only for nodes that have bodies:
            # a snapshot per node made verifying n nodes quadratic.
            subgraphs = list(_subgraph_attrs(node))
            visible = (*outer, frozenset(defined)) if subgraphs else outer
            for key, sub in subgraphs:
                self.check_graph(sub, visible, f"graph {sub.name!r} (attribute {key!r} of "
                                               f"{node_label(node)} in {where})")
            self._check_schema(node, where)
            defined.update(id(out) for out in node.outputs)
        for index, value in enumerate(graph.outputs):
            if value is None:
                raise GraphError(f"{where}: graph output {index} is None")
            if id(value) not in defined and not any(id(value) in scope for scope in outer):
                raise GraphError(f"{where}: graph output {index} {_value_label(value)} is not "
                                 "defined in this graph or an enclosing one")

    def _check_ownership(self, graph: Graph, where: str) -> dict[int, int]:
        """Names, ownership and producer links; returns each node output's node position."""
        # Values and nodes share one namespace, as `Graph.unique_name` keeps them.
        names: dict[str, str] = {}

        def claim(name: str, role: str) -> None:
            if name in names:
                raise GraphError(f"{where}: name {name!r} is used twice ({names[name]} "
                                 f"and {role})")
            names[name] = role

        def own(value: Any, role: str) -> None:
            if not isinstance(value, Value):
                raise GraphError(f"{where}: {role} is a {type(value).__name__}, not a Value")
            if not isinstance(value.name, str) or not value.name:
                raise GraphError(f"{where}: {role} has no name ({value.name!r})")
            claim(value.name, role)
            if id(value) in self.value_owner:
                raise GraphError(f"{where}: value {value.name!r} ({role}) is also owned "
                                 f"elsewhere, in {self.value_owner[id(value)][1]}")
            if not isinstance(value.type, TensorType):
                raise GraphError(f"{where}: value {value.name!r} has type {value.type!r}, "
                                 "expected a TensorType")
            if not isinstance(value.uses, list):
                raise GraphError(f"{where}: value {value.name!r} has uses {value.uses!r}, "
                                 "expected a list")
            self.value_owner[id(value)] = (value, where)

        for value in graph.inputs:
            own(value, f"graph input {getattr(value, 'name', '?')!r}")
            if value.producer is not None:
                raise GraphError(f"{where}: graph input {value.name!r} claims producer "
                                 f"{node_label(value.producer)}")
        for value in graph.constants:
            own(value, f"constant {getattr(value, 'name', '?')!r}")
            if value.producer is not None:
                raise GraphError(f"{where}: constant {value.name!r} claims producer "
                                 f"{node_label(value.producer)}")

        positions: dict[int, int] = {}
        for position, node in enumerate(graph.nodes):
            if not isinstance(node, Node):
                raise GraphError(f"{where}: nodes[{position}] is a {type(node).__name__}, "
                                 "not a Node")
            label = node_label(node)
            if id(node) in self.node_ids:
                raise GraphError(f"{where}: {label} appears twice in the node lists")
            self.node_ids.add(id(node))
            if not isinstance(node.name, str) or not node.name:
                raise GraphError(f"{where}: nodes[{position}] ({node.qualified_op}) has no "
                                 f"name ({node.name!r})")
            claim(node.name, label)
            if node.graph is not graph:
                owner = node.graph.name if isinstance(node.graph, Graph) else None
                raise GraphError(f"{where}: {label} has node.graph = {owner!r}, "
                                 "not this graph")
            if not isinstance(node.op, str) or not node.op:
                raise GraphError(f"{where}: {label} has no op name")
            for index, out in enumerate(node.outputs):
                own(out, f"output {index} of {label}")
                if out.producer is not node or out.index != index:
                    got = f"{node_label(out.producer)} output {out.index}" \
                        if out.producer is not None else "no producer"
                    raise GraphError(f"{where}: value {out.name!r} is output {index} of "
                                     f"{label}, but records {got}")
                if out.const is not None:
                    raise GraphError(f"{where}: value {out.name!r}, output {index} of {label}, "
                                     "carries constant data")
                positions[id(out)] = position
        return positions

    def _check_constant(self, value: Value, where: str) -> None:
        data = value.const
        if not isinstance(data, np.ndarray):
            raise GraphError(f"{where}: constant {value.name!r} has no NumPy data "
                             f"(got {type(data).__name__})")
        try:
            actual = TensorType(DType.from_numpy(data.dtype), data.shape)
        except TypeError:
            raise GraphError(f"{where}: constant {value.name!r} has data of NumPy dtype "
                             f"{data.dtype}, which ge-hub does not support") from None
        if actual != value.type:
            raise GraphError(f"{where}: constant {value.name!r} is declared {value.type} "
                             f"but its data is {actual}")

    def _check_node_inputs(self, node: Node, graph: Graph, defined: set[int],
                           outer: tuple[frozenset[int], ...], positions: dict[int, int],
                           where: str) -> None:
        label = node_label(node)
        for index, value in enumerate(node.inputs):
            if value is None:
                continue  # whether it may be omitted is the schema's question
            if not isinstance(value, Value):
                raise GraphError(f"{where}: {label} input {index} is a "
                                 f"{type(value).__name__}, not a Value")
            self.reads.append((value, node, index))
            if id(value) in defined or any(id(value) in scope for scope in outer):
                continue
            if value.producer is node:
                raise GraphError(f"{where}: {label} input {index} reads its own output "
                                 f"{value.name!r}")
            if id(value) in positions:
                later = graph.nodes[positions[id(value)]]
                raise GraphError(f"{where}: {label} input {index} reads {value.name!r}, which "
                                 f"{node_label(later)} produces later: nodes are not in "
                                 "topological order")
            raise GraphError(f"{where}: {label} input {index} reads {_value_label(value)}, "
                             "which is not defined in this graph or an enclosing one")

    def _check_schema(self, node: Node, where: str) -> None:
        if _node_check is None:
            raise GraphError(f"{where}: cannot check {node_label(node)} against its op "
                             "schema: no schema check is installed (ge_hub.ops installs it)")
        _node_check(node, where, self.schemas)

    # -- the whole tree ----------------------------------------------------------

    def check_uses(self) -> None:
        """Every value's `uses` is exactly the (node, index) pairs that read it."""
        for value, where in self.value_owner.values():
            recorded: set[tuple[int, int]] = set()
            for use in value.uses:
                if not (isinstance(use, tuple) and len(use) == 2):
                    raise GraphError(f"{where}: value {value.name!r} has a malformed use "
                                     f"{use!r}; expected (node, input index)")
                user, index = use
                if id(user) not in self.node_ids:
                    raise GraphError(f"{where}: value {value.name!r} lists a dangling user, "
                                     f"{node_label(user)}, which is not in the graph")
                if not (isinstance(index, int) and 0 <= index < len(user.inputs)):
                    raise GraphError(f"{where}: value {value.name!r} lists a use as input "
                                     f"{index} of {node_label(user)}, which has "
                                     f"{len(user.inputs)} inputs")
                if user.inputs[index] is not value:
                    raise GraphError(f"{where}: value {value.name!r} lists a use as input "
                                     f"{index} of {node_label(user)}, but that input is "
                                     f"{_value_label(user.inputs[index])}")
                if (id(user), index) in recorded:
                    raise GraphError(f"{where}: value {value.name!r} lists its use as input "
                                     f"{index} of {node_label(user)} twice")
                recorded.add((id(user), index))
        for value, user, index in self.reads:
            owner = self.value_owner.get(id(value))
            if owner is not None and (user, index) not in value.uses:
                raise GraphError(f"{owner[1]}: {node_label(user)} reads value "
                                 f"{value.name!r} as input {index}, but the value's uses "
                                 "do not record it")


def _subgraph_attrs(node: Node):
    """(attribute label, Graph) for every subgraph attribute, lists of graphs included."""
    for key, attr in node.attrs.items():
        if isinstance(attr, Graph):
            yield key, attr
        elif isinstance(attr, (list, tuple)):
            for i, item in enumerate(attr):
                if isinstance(item, Graph):
                    yield f"{key}[{i}]", item


def _value_label(value: Any) -> str:
    if not isinstance(value, Value):
        return repr(value)
    if value.producer is not None:
        return f"{value.name!r} (output {value.index} of {node_label(value.producer)})"
    return f"{value.name!r}"
