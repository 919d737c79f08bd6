"""Specialize a graph to concrete input shapes, folding shape computations on the way.

The compiler plans memory for one input signature at a time, so every dim must be an
int. This pass binds each input's symbolic dims to the given sizes and re-infers every
node in order. A node whose inputs are all constants is evaluated with its NumPy
reference and replaced by constants, and `Shape`/`Size` of a now-static tensor become
constants: that is what lets a Reshape whose target shape is computed in the graph
(`Shape -> Gather -> Concat -> Reshape`, as exporters write it) get an exact type. Ops
whose output length depends on data (NonZero, Compress, Unique, NonMaxSuppression) are
exact the same way: once the values their `decides_shape` inputs are computed from are
specialized, those inputs fold into constants and so does the node (Compress, whose
data input only moves, keeps its node with an exact type).

An If whose condition is now a constant is replaced by the nodes of the branch it takes.
A node's subgraphs (If/Loop/Scan bodies) are copied to read the specialized values they
capture; such a node is folded when everything it reads, captures included, is
constant, and when its shapes still depend on data the error names everything it reads
(see `ge_hub.passes.lower_control_flow` for what the runtime does with that).
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence

import numpy as np

from ge_hub.errors import GraphError, ValueDependentShapeError
from ge_hub.ir.graph import Graph, Value, detach_outer_reads, node_reads, outer_values
from ge_hub.ir.serialize import clone
from ge_hub.ir.types import Sym, TensorType
from ge_hub.ops import get_schema
from ge_hub.passes import PassResult
from ge_hub.reference import outer_scope

# Folding is for shape arithmetic and small constant expressions; a huge constant
# computation (a weight transpose) is folded too, but never beyond this many elements,
# so compiling cannot blow up memory.
MAX_FOLD_ELEMENTS = 1 << 24
GENERATOR_OPS = frozenset({"ConstantOfShape"})


def bind_input_shapes(graph: Graph, input_shapes: Mapping[str, Sequence[int]]) -> dict[Sym, int]:
    """Check the given shapes against the inputs' types; return symbolic dim -> size (an
    expression dim at an input, N*C, is bound as a whole, like a symbol)."""
    bindings: dict[Sym, int] = {}
    unknown = set(input_shapes) - set(graph.input_names)
    if unknown:
        raise ValueError(f"input_shapes names unknown inputs {sorted(unknown)}; "
                         f"the graph's inputs are {graph.input_names}")
    for value in graph.inputs:
        declared = value.type.shape
        given = input_shapes.get(value.name)
        if given is None:
            if not value.type.is_static:
                raise ValueError(f"input {value.name!r} has symbolic shape {value.type}; "
                                 "give its concrete shape")
            continue
        given = [int(d) for d in given]
        if declared is not None and len(declared) != len(given):
            raise ValueError(f"input {value.name!r}: expected rank {len(declared)} "
                             f"({value.type}), got shape {given}")
        for axis, (want, got) in enumerate(zip(declared or (), given)):
            if isinstance(want, int) and want != got:
                raise ValueError(f"input {value.name!r}: dim {axis} must be {want} "
                                 f"({value.type}), got shape {given}")
            if isinstance(want, Sym):
                bound = bindings.setdefault(want, got)
                if bound != got:
                    raise ValueError(f"input {value.name!r}: dim {axis} is symbol "
                                     f"{want.name!r}, already bound to {bound}, got {got}")
    return bindings


class Split:
    """What `specialize_shapes(..., split=Split())` leaves for a later segment (see
    `ge_hub.segments`): instead of raising ValueDependentShapeError, a node whose output
    shapes depend on run-time values is deferred, and so is every node reading a deferred
    value. `deferred` lists them (nodes of the graph given or of an If branch inlined into
    it, in order); `aliases` maps an inlined If's outputs to its branch's; `mapping` maps
    id(value of the graph given) to its counterpart in the specialized graph (a constant
    when it folded), for every value that was not deferred. The specialized graph's
    outputs are the graph outputs that were not deferred."""

    def __init__(self):
        self.deferred: list = []
        self.deferred_values: set[int] = set()
        self.mapping: dict[int, Value] = {}
        self.schemas: dict[int, object] = {}  # id(deferred node) -> its schema
        # id(output of an If whose branch was inlined) -> the branch's output value
        self.aliases: dict[int, Value] = {}


def specialize_shapes(graph: Graph, input_shapes: Mapping[str, Sequence[int]],
                      input_values: Mapping[str, np.ndarray] | None = None,
                      ctx=None, split: Split | None = None) -> PassResult:
    """Specialize to `input_shapes`; inputs named in `input_values` are also specialized
    to those values: they stay graph inputs (the caller passes them), but every node reads
    the constant instead, so shapes computed from them are exact. Schemas come from the
    pass context's registry (the global one without a context). With `split`, nodes whose
    shapes depend on run-time values are deferred instead of refused (see `Split`)."""
    lookup = ctx.registry.get_op if ctx is not None else get_schema
    bind_input_shapes(graph, input_shapes)
    input_values = input_values or {}
    new = Graph(graph.name)
    new.attrs = dict(graph.attrs)
    mapping: dict[int, Value] = {}

    for value in graph.inputs:
        shape = input_shapes.get(value.name, value.type.shape)
        fresh = new.add_input(value.name, TensorType(value.type.dtype, shape))
        if value.name in input_values:
            data = np.asarray(input_values[value.name], dtype=value.type.dtype.numpy)
            fresh = new.add_constant(data.copy(), prefix=f"{value.name}_value")
        mapping[id(value)] = fresh
    for value in graph.constants:
        mapping[id(value)] = new.add_constant(value.const, value.name)

    pending: collections.deque = collections.deque(graph.nodes)
    while pending:
        node = pending.popleft()
        if isinstance(node, _BranchOutputs):
            _alias_outputs(node, mapping, split)
            continue
        if split is not None and any(
                id(v) in split.deferred_values for v in node_reads(node) if v is not None):
            _defer(split, node, lookup)
            continue
        inputs = [None if v is None else mapping[id(v)] for v in node.inputs]
        if node.op == "If" and not node.domain and inputs[0] is not None and \
                inputs[0].is_constant and inputs[0].const.size == 1:
            # A decided If is its branch: its nodes join the graph (a value-dependent
            # shape inside, NonMaxSuppression under torchvision's "no boxes?" test,
            # is then cut like any other).
            branch = node.attrs["then_branch" if inputs[0].const.reshape(-1)[0]
                                else "else_branch"]
            for value in branch.constants:
                mapping[id(value)] = new.add_constant(value.const, prefix=value.name)
            pending.extendleft(reversed([*branch.nodes, _BranchOutputs(node, branch)]))
            continue
        # Subgraphs are copied to read the specialized values they capture.
        captures = {v: mapping[id(v)] for sub in node.subgraphs() for v in outer_values(sub)}
        attrs = {key: _copy_subgraphs(value, captures) for key, value in node.attrs.items()}
        schema = lookup(node.op, node.domain)
        types = [None if v is None else v.type for v in inputs]
        consts = [None if v is None else v.const for v in inputs]
        try:
            out_types = schema.infer_types(types, attrs, consts=consts,
                                           num_outputs=len(node.outputs), node_name=node.name)
        except ValueError as exc:
            raise GraphError(f"while specializing shapes: {exc}") from exc
        out_types = out_types[: len(node.outputs)]
        folded = _try_fold(node, schema, inputs, attrs, list(captures.values()), out_types)
        if folded is not None:
            for sub in _subgraphs(attrs):  # the copies are dropped: so are their reads
                detach_outer_reads(sub)
            for old, array in zip(node.outputs, folded):
                mapping[id(old)] = new.add_constant(array, prefix=old.name)
            continue
        if not all(t.is_static for t in out_types) and split is not None:
            for sub in _subgraphs(attrs):
                detach_outer_reads(sub)
            _defer(split, node, lookup)
            continue
        if not all(t.is_static for t in out_types):
            sources = _shape_sources(node, schema, inputs, captures)
            error = ValueDependentShapeError(
                f"node {node.name!r} ({node.qualified_op}) still has symbolic output types "
                f"{[str(t) for t in out_types]} after binding the input shapes; a shape it "
                f"depends on is computed from input values at run time "
                f"({', '.join(sources) or 'its data'})", sources)
            error.op = node.qualified_op  # what the runtime decides how to run it by
            raise error
        copy = new.add_node(node.op, inputs, out_types, attrs, domain=node.domain,
                            name=_fresh(new, node.name),
                            output_names=[_fresh(new, v.name) for v in node.outputs])
        for old, fresh in zip(node.outputs, copy.outputs):
            mapping[id(old)] = fresh

    if split is not None:
        split.mapping = mapping
        new.set_outputs(mapping[id(v)] for v in graph.outputs if id(v) in mapping)
    else:
        new.set_outputs(mapping[id(v)] for v in graph.outputs)
    new.remove_unused_constants()
    return PassResult(new, True)


class _BranchOutputs:
    """Marks the end of an inlined If branch: the If's outputs are the branch's."""

    def __init__(self, node, branch: Graph):
        self.node, self.branch = node, branch


def _alias_outputs(marker: _BranchOutputs, mapping: dict[int, Value], split) -> None:
    for old, inner in zip(marker.node.outputs, marker.branch.outputs):
        if split is not None:
            split.aliases[id(old)] = inner
            if id(inner) in split.deferred_values:
                split.deferred_values.add(id(old))
                continue
        mapping[id(old)] = mapping[id(inner)]


def _fresh(graph: Graph, name: str) -> str:
    """`name`, or a fresh one when an inlined branch's name is taken already."""
    fresh, index = name, 0
    while fresh in graph._names:
        index += 1
        fresh = f"{name}_{index}"
    return fresh


def _defer(split: Split, node, lookup) -> None:
    split.deferred.append(node)
    split.schemas[id(node)] = lookup(node.op, node.domain)
    split.deferred_values.update(id(v) for v in node.outputs if v is not None)


def _shape_sources(node, schema, inputs, captures) -> tuple[str, ...]:
    """Names of the values whose contents decide the node's output shapes: its inputs
    marked `decides_shape` that are not constants yet; failing those, for a node with
    subgraphs (a Loop whose trip count the body decides), everything it reads."""
    sources = tuple(
        old.name for index, (old, fresh) in enumerate(zip(node.inputs, inputs))
        if fresh is not None and not fresh.is_constant
        and schema.formal_input(index).decides_shape)
    if sources or not any(node.subgraphs()):
        return sources
    reads = [(old, fresh) for old, fresh in zip(node.inputs, inputs) if fresh is not None]
    reads += list(captures.items())
    return tuple(dict.fromkeys(old.name for old, fresh in reads if not fresh.is_constant))


def _copy_subgraphs(value, captures: dict[Value, Value]):
    if isinstance(value, Graph):
        return clone(value, outer=captures)
    if isinstance(value, list) and any(isinstance(v, Graph) for v in value):
        return [_copy_subgraphs(v, captures) for v in value]
    return value


def _subgraphs(attrs: dict) -> list[Graph]:
    found = []
    for value in attrs.values():
        found += [v for v in (value if isinstance(value, list) else [value])
                  if isinstance(v, Graph)]
    return found


def _try_fold(node, schema, inputs, attrs, captured, out_types) -> list[np.ndarray] | None:
    if node.op in ("Shape", "Size") and not node.domain and inputs[0].type.is_static:
        # Only the input's shape matters: evaluate on a zero-strided dummy. Of uint8, not
        # the input's dtype: as_strided cannot make views of ml_dtypes' narrow types.
        dummy = np.lib.stride_tricks.as_strided(
            np.zeros(1, np.uint8), inputs[0].type.shape, (0,) * len(inputs[0].type.shape))
        return list(schema.run_reference([dummy], node.attrs))[: len(node.outputs)]
    present = [v for v in inputs if v is not None]
    if not present or not all(v.is_constant for v in [*present, *captured]):
        return None
    if node.op in ("RandomNormal", "RandomUniform", "Dropout"):
        return None
    # A generated tensor (ConstantOfShape) costs the same memory as a constant as it does
    # as an intermediate, and folding it saves refilling it on every run: no size cap.
    if node.op not in GENERATOR_OPS and any(
            t.is_static and t.numel > MAX_FOLD_ELEMENTS for t in out_types):
        return None
    arrays = [None if v is None else v.const for v in inputs]
    # A body reads the constants it captures through the scope, as in an evaluation.
    with outer_scope({v: v.const for v in captured}):
        results = schema.run_reference(arrays, attrs)[: len(node.outputs)]
    # asarray, not ascontiguousarray: that one makes a scalar a 1-element vector.
    return [np.asarray(r, order="C") for r in results]
