"""GraphBuilder: the scope in which ES calls add inputs, constants, nodes and outputs.

Builders form a stack held in a context variable: `with es.GraphBuilder("g") as gb:`
pushes `gb`, and every `es.*` call inside the block adds to the innermost builder.
Leaving the block pops it and builds the graph: it must have outputs, and it is
verified (`Graph.verify`). A builder entered inside another builds a subgraph (an
If/Loop body); its calls may read tensors of the builders enclosing it, which the IR
then records as the subgraph's outer-scope values (`ge_hub.ir.graph.outer_values`).

Errors about the builder itself (no outputs, duplicate names, a call outside any
builder) are `GraphError`s; errors about one op call are `OpError`s (`ge_hub.es.calls`).
"""

from __future__ import annotations

import contextvars
from typing import Any

import numpy as np

from ge_hub.errors import GraphError
from ge_hub.es.tensor import Tensor
from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Graph, Value, outer_values
from ge_hub.ir.types import TensorType

# The builders whose `with` blocks are open, outermost first. A tuple, so that every
# context (thread, task) sees its own stack and a pushed stack is never mutated.
_active: contextvars.ContextVar[tuple[GraphBuilder, ...]] = contextvars.ContextVar(
    "ge_hub_es_builders", default=())


class GraphBuilder:
    """Builds one `Graph` from ES calls; use it as a context manager.

        with es.GraphBuilder("mlp") as gb:
            x = es.input("x", "float32", ["N", 784])
            gb.output(es.relu(x), "y")
        graph = gb.graph

    The graph is verified when the block ends without an exception (or on `build()`).
    """

    def __init__(self, name: str = "main"):
        self._graph = Graph(name)
        self._state = "new"  # new -> open -> built; "failed" when the block raised
        self._token: contextvars.Token | None = None
        self._children: list[GraphBuilder] = []  # builders entered inside this one
        self._chosen_node_names: set[str] = set()  # given with `name=`; never renamed

    @property
    def name(self) -> str:
        return self._graph.name

    @property
    def graph(self) -> Graph:
        """The graph; verified once the `with` block has ended (or `build()` ran)."""
        return self._graph

    @property
    def is_built(self) -> bool:
        return self._state == "built"

    def __repr__(self) -> str:
        return f"GraphBuilder({self.name!r}, {self._state})"

    # -- the with block ----------------------------------------------------------

    def __enter__(self) -> GraphBuilder:
        if self._state != "new":
            raise GraphError(f"builder {self.name!r} was already used ({self._state}); "
                             "a GraphBuilder builds one graph, make a new one")
        stack = _active.get()
        if stack:
            stack[-1]._children.append(self)
        self._token = _active.set(stack + (self,))
        self._state = "open"
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        _active.reset(self._token)
        self._token = None
        if exc_type is not None:
            self._fail()
            return False
        try:
            self.build()
        except BaseException:
            self._fail()
            raise
        return False

    def build(self) -> Graph:
        """Finish the graph: check it has outputs, verify it, and return it.

        A subgraph that reads tensors of enclosing builders can only be verified in
        place, as the attribute of a node: the enclosing builder verifies it then.
        """
        if self._state == "built":
            return self._graph
        self.check_open("build")
        if not self._graph.outputs:
            raise GraphError(f"builder {self.name!r} has no outputs: call "
                             "es.output(tensor, name) (or gb.output) before the block ends")
        self._check_children_attached()
        if not outer_values(self._graph):
            self._graph.verify()
        self._state = "built"
        return self._graph

    def _check_children_attached(self) -> None:
        """A finished subgraph that captured this graph's tensors must be some node's
        attribute: otherwise those tensors would list readers that are in no graph."""
        attached = {id(g) for g in _subgraphs_within(self._graph)}
        for child in self._children:
            if child._state != "built" or id(child.graph) in attached:
                continue
            captured = [v.name for v in outer_values(child.graph)]
            if captured:
                raise GraphError(
                    f"builder {self.name!r}: subgraph {child.name!r} reads the enclosing "
                    f"tensors {', '.join(map(repr, captured))} but no node of {self.name!r} "
                    "uses it as an attribute; pass it to the op it is the body of")

    def _fail(self) -> None:
        """Mark the builder failed and drop its reads of enclosing builders' values, so
        that the enclosing graphs do not list readers that will never be in a graph."""
        self._state = "failed"
        roots = [self._graph, *(child.graph for child in self._children)]
        for graph in [g for root in roots for g in (root, *_subgraphs_within(root))]:
            owned = _owned_values(graph)
            for node in graph.nodes:
                for index, value in enumerate(node.inputs):
                    if value is not None and value not in owned:
                        node.set_input(index, None)

    def check_open(self, what: str) -> None:
        """Raise unless ES calls may still add to this builder's graph."""
        if self._state == "built":
            raise GraphError(f"{what}: builder {self.name!r} is already built; "
                             "its graph can no longer change")
        if self._state == "failed":
            raise GraphError(f"{what}: builder {self.name!r} failed; make a new one")

    # -- inputs, constants, outputs ---------------------------------------------

    def input(self, name: str, dtype: Any, shape=None) -> Tensor:
        """A graph input; `shape` holds ints and symbol names (None: unknown rank)."""
        self.check_open("es.input")
        self._check_new_name(name, "input")
        value = self._graph.add_input(name, TensorType(dtype, shape))
        return Tensor(value, self)

    def const(self, value: Any, dtype: Any = None, name: str | None = None) -> Tensor:
        """A constant from a NumPy array, a Python number or a (nested) list.

        Python floats become float32 and Python ints int64 unless `dtype` says otherwise.
        """
        self.check_open("es.const")
        if name is not None:
            self._check_new_name(name, "constant")
        array = constant_array(value, None if dtype is None else DType.parse(dtype))
        return Tensor(self._graph.add_constant(array, name), self)

    def output(self, tensor: Tensor, name: str | None = None) -> None:
        """Make `tensor` a graph output named `name` (default: the tensor's own name)."""
        self.check_open("es.output")
        if not isinstance(tensor, Tensor):
            raise TypeError(f"es.output expects an ES tensor, got {type(tensor).__name__}")
        if not self.can_read(tensor):
            raise GraphError(f"es.output: tensor {tensor.name!r} belongs to builder "
                             f"{tensor.builder.name!r}, not to {self.name!r} or a builder "
                             "enclosing it")
        value = tensor.value
        name = value.name if name is None else name
        if name in self._graph.output_names:
            raise GraphError(f"builder {self.name!r}: duplicate output name {name!r}")
        if name != value.name:
            value = self._renamed(value, name)
        self._graph.set_outputs([*self._graph.outputs, value])

    def _renamed(self, value, name: str):
        """`value` under the output name `name`.

        A node output of this graph that is not yet an output is renamed in place. A graph
        input, a constant, an outer-scope value or a value already output keeps its name,
        and an Identity node gives the output its own.
        """
        if any(v.name == name for v in self._graph.values()):
            raise GraphError(f"builder {self.name!r}: duplicate output name {name!r}: a "
                             "value of the graph already has it")
        for node in self._graph.nodes:
            if node.name == name:
                if name in self._chosen_node_names:
                    raise GraphError(f"builder {self.name!r}: output name {name!r} is the "
                                     "name given to a node; values and nodes share names")
                # A generated node name ("neg") yields to the output name the user chose.
                node.name = self._graph.unique_name(name)
        producer = value.producer
        if producer is None or producer.graph is not self._graph or value in self._graph.outputs:
            from ge_hub.ops import get_schema

            out_types = get_schema("Identity").infer_types([value.type], {})
            value = self._graph.add_node("Identity", [value], out_types).outputs[0]
        # The graph has no public rename. Node and value names may coincide (the verifier
        # keeps them apart), and `unique_name` reserves `name` so that it is never handed
        # out again; when it was reserved already, it is no current value's name (checked
        # above), and no later one's either.
        self._graph.unique_name(name)
        value.name = name
        return value

    def add_node(self, schema, inputs, output_types, attrs, name: str | None):
        """Add a node of `schema` (already checked by the caller) to the graph."""
        node = self._graph.add_node(schema.name, inputs, output_types, attrs,
                                    domain=schema.domain, name=name)
        if name is not None:
            self._chosen_node_names.add(name)
        return node

    def _check_new_name(self, name: str, what: str) -> None:
        if not isinstance(name, str) or not name:
            raise GraphError(f"builder {self.name!r}: an {what} name must be a non-empty "
                             f"string, got {name!r}")
        if any(v.name == name for v in self._graph.values()) or any(
                n.name == name for n in self._graph.nodes):
            raise GraphError(f"builder {self.name!r}: duplicate {what} name {name!r}: "
                             "a value or node of the graph already has it")

    def can_read(self, tensor: Tensor) -> bool:
        """Whether ES calls in this builder may read `tensor`: its own, or an enclosing
        open builder's (outer-scope capture)."""
        if tensor.builder is self:
            return True
        stack = _active.get()
        if self not in stack:
            return False
        return tensor.builder in stack[: stack.index(self)]


def _subgraphs_within(graph: Graph) -> list[Graph]:
    """Every subgraph hanging from a node of `graph`, at any depth."""
    found: list[Graph] = []
    for node in graph.nodes:
        for sub in node.subgraphs():
            found += [sub, *_subgraphs_within(sub)]
    return found


def _owned_values(graph: Graph) -> set[Value]:
    return set(graph.values())


def active_builders() -> tuple[GraphBuilder, ...]:
    """The open builders, outermost first."""
    return _active.get()


def current_builder(what: str) -> GraphBuilder:
    """The innermost open builder, or a `GraphError` saying `what` needs one."""
    stack = _active.get()
    if not stack:
        raise GraphError(f"{what} was called outside any GraphBuilder; build graphs inside "
                         "`with es.GraphBuilder(name) as gb:`")
    builder = stack[-1]
    builder.check_open(what)
    return builder


def constant_array(value: Any, dtype: DType | None = None) -> np.ndarray:
    """A NumPy array for a constant; Python floats default to float32, ints to int64."""
    if isinstance(value, Tensor):
        raise TypeError(f"a constant needs data, got the ES tensor {value.name!r}")
    if dtype is not None:
        return np.asarray(value, dtype=dtype.numpy)
    array = np.asarray(value)
    if isinstance(value, (np.ndarray, np.generic)):
        DType.from_numpy(array.dtype)  # reject dtypes ge-hub has no name for
        return array
    if array.dtype.kind == "f":
        return array.astype(np.float32)
    if array.dtype.kind in "iu":
        return array.astype(np.int64)
    if array.dtype.kind == "b":
        return array
    raise TypeError(f"cannot make a constant from {value!r} (NumPy dtype {array.dtype})")


# Module-level forms that act on the innermost builder.

def input(name: str, dtype: Any, shape=None) -> Tensor:  # noqa: A001 - mirrors ES's API
    """A graph input of the innermost builder; see `GraphBuilder.input`."""
    return current_builder("es.input").input(name, dtype, shape)


def const(value: Any, dtype: Any = None, name: str | None = None) -> Tensor:
    """A constant of the innermost builder; see `GraphBuilder.const`."""
    return current_builder("es.const").const(value, dtype, name)


def output(tensor: Tensor, name: str | None = None) -> None:
    """Make `tensor` an output of the innermost builder; see `GraphBuilder.output`."""
    current_builder("es.output").output(tensor, name)
