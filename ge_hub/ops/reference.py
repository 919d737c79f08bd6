"""The reference evaluator: run a graph node by node with each op's NumPy reference.

It is the oracle that executor, frontend and pass tests compare against, and what
constant folding runs; it is never the fast path. Inputs are checked before anything
runs (names, dtypes, ranks, static dims, one size per symbol), and a reference that
fails is reported with the node and op it belongs to.

    outputs = evaluate(graph, {"x": x})                    # the graph's outputs
    h, y = ReferenceEvaluator(graph).run([x], ["h", "y"])  # any value, by name

Subgraphs (the bodies of If/Loop-like ops) are attributes of their node, and their
nodes may read values of the enclosing graphs. While a node's reference runs, the
values the evaluator has computed so far, and those of every enclosing graph, are
visible through `current_scope()`; a control-flow reference runs its body with
`run_subgraph(body, inputs)`, which evaluates it with that scope as its outer values:

    @op("Repeat", ..., attrs=[Attr("body", AttrKind.GRAPH), Attr("times", AttrKind.INT)])
    def repeat(x, *, body, times):
        for _ in range(times):
            (x,) = run_subgraph(body, [x])
        return x
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ge_hub.errors import GeHubError, GraphError
from ge_hub.inputs import bind_inputs
from ge_hub.ir.graph import Graph, Node, Value, outer_values
from ge_hub.ir.types import TensorType


class EvaluationError(GeHubError, RuntimeError):
    """A node's NumPy reference failed or returned something its node does not declare.

    The message names the node and its op; the original exception is the `__cause__`.
    """


Environment = Mapping[Value, np.ndarray]

_EMPTY: Environment = {}
# The values visible to the reference that is running now (None: no evaluation running).
_scope: contextvars.ContextVar[Environment | None] = contextvars.ContextVar(
    "ge_hub_reference_scope", default=None)


def current_scope() -> Environment:
    """Values visible to the node whose reference is running: those computed so far in
    its graph and in every enclosing graph. Empty outside an evaluation."""
    scope = _scope.get()
    return _EMPTY if scope is None else scope


@contextlib.contextmanager
def outer_scope(values: Environment) -> Iterator[None]:
    """Make `values` the scope that references see while the block runs: for running a
    control-flow node's reference outside an evaluation (constant folding does)."""
    token = _scope.set(values)
    try:
        yield
    finally:
        _scope.reset(token)


def run_subgraph(graph: Graph, inputs: Mapping[str, Any] | Sequence[Any]) -> list[np.ndarray]:
    """Evaluate a subgraph from inside a reference, with the current scope as outer values."""
    return evaluate(graph, inputs, outer=current_scope())


def evaluate(graph: Graph, inputs: Mapping[str, Any] | Sequence[Any],
             output_names: Sequence[str] | None = None, *,
             outer: Environment | None = None) -> list[np.ndarray]:
    """Run `graph` on `inputs` (a dict by name or a list in input order).

    Returns the graph's outputs, or the values named in `output_names` (any value of the
    graph: inputs, constants and intermediate results too). `outer` gives the values of
    enclosing graphs that a subgraph reads.
    """
    return ReferenceEvaluator(graph).run(inputs, output_names, outer=outer)


class ReferenceEvaluator:
    """Evaluates one graph, as often as asked; looks up every op's schema up front."""

    def __init__(self, graph: Graph):
        from ge_hub.ops import get_schema

        if not isinstance(graph, Graph):
            raise TypeError(f"ReferenceEvaluator expects a Graph, got {type(graph).__name__}")
        self.graph = graph
        self._schemas = {id(node): get_schema(node.op, node.domain) for node in graph.nodes}
        self._values_by_name = {value.name: value for value in graph.values()}

    def run(self, inputs: Mapping[str, Any] | Sequence[Any],
            output_names: Sequence[str] | None = None, *,
            outer: Environment | None = None) -> list[np.ndarray]:
        """Evaluate the graph; see `evaluate`."""
        targets = self._targets(output_names)
        env: dict[Value, np.ndarray] = dict(self._bind_inputs(inputs))
        for value in self.graph.constants:
            env[value] = value.const
        scope = collections.ChainMap(env, outer if outer is not None else _EMPTY)
        needed = self._needed_nodes(targets)
        token = _scope.set(scope)
        try:
            for node in self.graph.nodes:
                if id(node) in needed:
                    self._run_node(node, scope)
        finally:
            _scope.reset(token)
        return [_read(scope, value, f"graph {self.graph.name!r} output") for value in targets]

    # -- what to compute -----------------------------------------------------------

    def _targets(self, output_names: Sequence[str] | None) -> list[Value]:
        if output_names is None:
            return list(self.graph.outputs)
        if isinstance(output_names, str):
            raise TypeError("output_names is a list of value names, got a single string "
                            f"{output_names!r}")
        targets = []
        for name in output_names:
            if name not in self._values_by_name:
                raise ValueError(f"graph {self.graph.name!r} has no value named {name!r} to "
                                 "output (output_names may name any input, constant or node "
                                 "output of the graph)")
            targets.append(self._values_by_name[name])
        return targets

    def _needed_nodes(self, targets: list[Value]) -> set[int]:
        """The nodes of this graph that the targets depend on (a subgraph's captured
        values count as reads of the node that owns the subgraph)."""
        owned = {id(node) for node in self.graph.nodes}
        needed: set[int] = set()
        stack = [v.producer for v in targets if v.producer is not None]
        while stack:
            node = stack.pop()
            if id(node) in needed or id(node) not in owned:
                continue
            needed.add(id(node))
            reads = [v for v in node.inputs if v is not None]
            for sub in node.subgraphs():
                reads.extend(outer_values(sub))
            stack.extend(v.producer for v in reads if v.producer is not None)
        return needed

    # -- inputs --------------------------------------------------------------------

    def _bind_inputs(self, inputs) -> list[tuple[Value, np.ndarray]]:
        return list(zip(self.graph.inputs, bind_inputs(self.graph, inputs)))

    # -- running -------------------------------------------------------------------

    def _run_node(self, node: Node, scope: collections.ChainMap) -> None:
        schema = self._schemas[id(node)]
        label = f"node {node.name!r} ({node.qualified_op})"
        args = [None if value is None else _read(scope, value, label) for value in node.inputs]
        try:
            results = schema.run_reference(args, node.attrs)
        except Exception as exc:
            raise EvaluationError(f"graph {self.graph.name!r}, {label}: the NumPy reference "
                                  f"failed: {type(exc).__name__}: {exc}") from exc
        if len(results) < len(node.outputs):
            raise EvaluationError(f"graph {self.graph.name!r}, {label}: the NumPy reference "
                                  f"returned {len(results)} outputs, the node has "
                                  f"{len(node.outputs)}")
        for value, array in zip(node.outputs, results):
            if not _fits(array, value.type):
                got = f"{array.dtype}{list(array.shape)}"
                raise EvaluationError(f"graph {self.graph.name!r}, {label}: the NumPy "
                                      f"reference gave {got} for output {value.name!r}, which "
                                      f"the graph types {value.type}")
            scope[value] = array


def _read(scope: Mapping[Value, np.ndarray], value: Value, reader: str) -> np.ndarray:
    try:
        return scope[value]
    except KeyError:
        raise GraphError(f"{reader} reads value {value.name!r}, which has no data here: it is "
                         "neither computed earlier in this graph nor given by an enclosing "
                         "one (run subgraphs through ge_hub.ops.reference.run_subgraph)") from None


def _fits(array: np.ndarray, declared: TensorType) -> bool:
    """Same dtype; same rank and equal static dims where the declared type knows them."""
    if array.dtype != declared.dtype.numpy:
        return False
    if declared.shape is None:
        return True
    if array.ndim != len(declared.shape):
        return False
    return all(not isinstance(d, int) or d == n for d, n in zip(declared.shape, array.shape))
