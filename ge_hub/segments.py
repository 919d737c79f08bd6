"""Segmented plans: running a graph whose shapes depend on values computed at run time.

A plan has static shapes. When some shape depends on a value the graph computes (the
length of NonZero, Compress, Unique or NonMaxSuppression; a Reshape, Expand, Tile, Slice
or Pad whose shape input is computed; TopK's K; Range's bounds; ConstantOfShape's
shape), the graph is cut there into segments, each a static plan run by the C executor:

- `specialize_shapes(..., split=Split())` specializes for the input shapes and defers
  every node whose output shape is not static yet, with everything downstream of it.
  What is left, the head, becomes a plan.
- A deferred node that reads only head values (the frontier) is either
  - a data-dependent op with a bounded form (`ge_hub.ops.select_bounded`): it joins the
    head as its last step, a C kernel that writes its outputs at their real shape inside
    a bound-sized buffer and their real length in an extra `count` output; or
  - an op whose shape follows from the values of small inputs (its `decides_shape`
    inputs: a shape, K, Range's bounds; for a node with subgraphs, everything it reads):
    those values are head outputs, and the next segment specializes on them.
- The rest, the tail, is a graph whose inputs are the values crossing the cut. After
  the head runs, the bounded outputs are viewed at their real shapes (no copy) and the
  tail is planned, the same way, for the shapes (and deciding values) actually produced.

Values computed before a cut are computed once, by the executor; NumPy computes nothing
at run time. Shape arithmetic on static shapes (`Shape -> Gather -> Concat`) and nodes
computed only from a segment's deciding values still fold at plan time, as in any plan;
`SegmentedModel.summary()` counts those as `folded_ops`, with the segments.

Plans are cached per (segment graph, input shapes, deciding values) in one LRU of at
most `max_cached_plans` entries (the compile option; default `DEFAULT_MAX_SEGMENT_PLANS`,
more than an unsegmented model's 8, as one run uses several):
a model whose data-dependent lengths take many values replans a segment for each new
length once, then runs from the cache while the lengths repeat within the bound.
"""

from __future__ import annotations

import collections
import math
import threading
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from ge_hub.compiler import compile_plan
from ge_hub.errors import ProfileNotCompiledError, ValueDependentShapeError
from ge_hub.ir.graph import Graph, Value, node_reads, outer_values
from ge_hub.ir.types import Sym, TensorType
from ge_hub.ops.select_bounded import BOUNDED_FORMS, dynamic_axes, nms_bound, real_shapes
from ge_hub.passes.context import PassContext
from ge_hub.passes.specialize_shapes import Split, _copy_subgraphs, specialize_shapes
from ge_hub.plan import KernelKind, Plan

DEFAULT_MAX_SEGMENT_PLANS = 32


class _Cut(NamedTuple):
    """A bounded data-dependent node at the end of a head: where its outputs are."""

    op: str
    names: tuple[str | None, ...]  # the original node's output names (None: unused)
    positions: tuple[int, ...]  # their head output positions, then the count's
    axes: tuple[int | None, ...]
    bound_types: tuple[TensorType, ...]


class _SegmentGraph:
    """A graph planned segment by segment; `value_inputs` are the inputs whose values
    its plans specialize on (a growing set: found while planning).

    A segment restored from an offline file (`restore`) may hold no graph yet: only its
    input and output names, and a `loader` that gives the graph when a new shape must be
    planned (None: the file kept no graph, and such a shape is refused)."""

    def __init__(self, graph: Graph | None, value_inputs: Sequence[str] = (),
                 output_names: Sequence[str] | None = None, *,
                 input_names: Sequence[str] | None = None, loader=None):
        self._graph = graph
        self._loader = loader
        self.input_names = tuple(graph.input_names if graph is not None else input_names)
        self.value_inputs: tuple[str, ...] = tuple(value_inputs)
        # the env names of the graph's outputs (a tail's may be named otherwise inside)
        self.output_names = tuple(graph.output_names if output_names is None
                                  else output_names)

    @property
    def graph(self) -> Graph:
        if self._graph is None:
            if self._loader is None:
                raise ProfileNotCompiledError("this segment's graph was not saved (a "
                                              "non-portable offline file): only the stored "
                                              "segment plans can run")
            self._graph = self._loader()
        return self._graph


class _Entry(NamedTuple):
    plan: Plan
    executor: Any
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]  # env names of the plan's outputs, by position
    cuts: tuple[_Cut, ...]
    constants: dict  # env name -> array: outputs of the segment that folded
    tail: _SegmentGraph | None
    folded: collections.Counter  # nodes folded from the deciding values, by op
    value_inputs: tuple[str, ...]


class SegmentedModel:
    """Runs a graph as a chain of static segments (see the module docstring)."""

    def __init__(self, graph: Graph | None, options: Mapping[str, Any], registry, resolver,
                 *, root: _SegmentGraph | None = None, allow_compile: bool = True):
        self.root = root if root is not None else _SegmentGraph(graph)
        self.allow_compile = allow_compile
        self._pinned: dict[tuple, _Entry] = {}  # restored from an offline file: kept
        self.options = dict(options)
        self.registry = registry
        self._resolver = resolver
        self._max = int(self.options.get("max_cached_plans", DEFAULT_MAX_SEGMENT_PLANS))
        if self._max < 1:
            raise ValueError(f"max_cached_plans must be at least 1, got {self._max}")
        self._cache: collections.OrderedDict[tuple, _Entry] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.compiles = 0
        self.last: tuple[_Entry, ...] = ()

    # -- running -----------------------------------------------------------------

    def run(self, names: Sequence[str], arrays: Sequence[np.ndarray],
            runner=None) -> list[np.ndarray]:
        """Run the segments in turn. `runner(index, entry, inputs) -> outputs`, when
        given, runs each segment's plan in place of `entry.executor.run(inputs)` (how
        profiles and dumps observe every segment's steps)."""
        env: dict[str, np.ndarray] = dict(zip(names, arrays))
        segment: _SegmentGraph | None = self.root
        used = []
        while segment is not None:
            entry = self._entry(segment, env)
            used.append(entry)
            inputs = [env[n] for n in entry.input_names]
            outputs = (entry.executor.run(inputs) if runner is None
                       else runner(len(used) - 1, entry, inputs))
            for name, array in zip(entry.output_names, outputs):
                env[name] = array
            env.update(entry.constants)
            for cut in entry.cuts:
                count = int(outputs[cut.positions[-1]][0])
                for name, position, shape in zip(
                        cut.names, cut.positions, real_shapes(cut.bound_types, cut.axes, count)):
                    if name is not None:
                        env[name] = _leading(outputs[position], shape)
            segment = entry.tail
        self.last = tuple(used)
        return [env[name] for name in self.root.output_names]

    def _entry(self, segment: _SegmentGraph, env: Mapping[str, np.ndarray]) -> _Entry:
        inputs = segment.input_names
        # the segment itself, not its id: a key keeps its graph alive (no reused ids)
        key = (segment, tuple(env[n].shape for n in inputs),
               tuple((env[n].dtype.str, env[n].tobytes()) for n in segment.value_inputs))
        with self._lock:
            entry = self._pinned.get(key) or self._cache.get(key)
            if entry is not None:
                if key in self._cache:
                    self._cache.move_to_end(key)
                return entry
        if not self.allow_compile:
            shapes = ", ".join(f"{n}: {list(env[n].shape)}" for n in inputs)
            raise ProfileNotCompiledError(
                f"no stored segment plan matches this segment's inputs ({shapes}) and "
                f"compiling is off; {len(self._pinned)} segment plans are stored")
        entry = self._plan(segment, env)
        key = key[:2] + (tuple((env[n].dtype.str, env[n].tobytes())
                               for n in segment.value_inputs),)  # value_inputs may grow
        with self._lock:
            self._cache[key] = entry
            self.compiles += 1
            while len(self._cache) > self._max:
                self._cache.popitem(last=False)
        return entry

    # -- planning ----------------------------------------------------------------

    def _plan(self, segment: _SegmentGraph, env: Mapping[str, np.ndarray]) -> _Entry:
        graph = segment.graph
        shapes = {n: env[n].shape for n in graph.input_names}
        values = {n: env[n] for n in segment.value_inputs}
        ctx = PassContext(self.options, self.registry)
        split = Split()
        head = specialize_shapes(graph, shapes, values, ctx, split=split).graph
        folded = folded_by_values(graph, segment.value_inputs)
        if not split.deferred:
            return self._compile(graph, shapes, values, ctx, graph.input_names,
                                 segment.output_names, (), {}, None, folded, segment)
        mapping = split.mapping
        deferred = {id(n) for n in split.deferred}
        frontier = [n for n in split.deferred
                    if not any(id(v) in split.deferred_values
                               for v in node_reads(n) if v is not None)]
        outputs: dict[str, Value] = {}  # env name -> head value, in output order
        cuts = []
        wanted: list[str] = []  # values the tail specializes on
        for node in frontier:
            if _boundable(node, mapping):
                cuts.append(_add_bounded(head, node, mapping, outputs))
                deferred.discard(id(node))
                continue
            schema = split.schemas[id(node)]
            reads = [(i, v) for i, v in enumerate(node.inputs) if v is not None
                     and not mapping[id(v)].is_constant
                     and schema.formal_input(i).decides_shape]
            names = [v.name for _, v in reads] or [
                v.name for v in node_reads(node) if v is not None
                and not mapping[id(v)].is_constant]
            wanted.extend(n for n in names if n not in wanted)
        inputs_wanted = [n for n in wanted if n in graph.input_names]
        if not cuts and wanted and len(inputs_wanted) == len(wanted):
            if set(wanted) <= set(segment.value_inputs):
                node = frontier[0]
                raise ValueDependentShapeError(
                    f"node {node.name!r} ({node.qualified_op}): its output shapes stay "
                    f"unknown even with the values of {wanted} known", tuple(wanted))
            # Only graph inputs decide: plan this segment again on their values.
            segment.value_inputs = tuple(dict.fromkeys((*segment.value_inputs, *wanted)))
            return self._plan(segment, env)
        if not cuts and not wanted:
            node = frontier[0]
            raise ValueDependentShapeError(
                f"node {node.name!r} ({node.qualified_op}) has output shapes that depend on "
                "run-time values the segmenter cannot cut at", ())
        tail_nodes = [n for n in split.deferred if id(n) in deferred]
        tail, crossing, tail_outputs = _tail_graph(graph, segment.output_names, tail_nodes,
                                                   mapping, split.aliases)
        for name, value in crossing.items():  # values the tail reads from this plan
            if name not in outputs and name not in graph.input_names:  # (not a cut's)
                outputs[name] = mapping[id(value)]
        constants = {}
        for value, name in zip(graph.outputs, segment.output_names):  # outputs done here
            new = mapping.get(id(value))
            if new is None or name in outputs:
                continue
            if new.is_constant:
                constants[name] = new.const
            elif value not in graph.inputs:
                outputs[name] = new
        head.set_outputs(outputs.values())
        tail_segment = None  # deferred nodes that feed no output need no segment
        if tail.outputs:
            tail_segment = _SegmentGraph(tail, [n for n in wanted if n in tail.input_names],
                                         tail_outputs)
        return self._compile(head, shapes, {}, ctx, head.input_names, tuple(outputs),
                             tuple(cuts), constants, tail_segment, folded, segment)

    def _compile(self, graph, shapes, values, ctx, input_names, output_names, cuts,
                 constants, tail, folded, segment) -> _Entry:
        from ge_hub.executor import Executor

        plan = compile_plan(graph, shapes, self.options, values, ctx)
        return _Entry(plan, Executor(plan, self._resolver), tuple(input_names),
                      tuple(output_names), cuts, constants, tail, folded,
                      segment.value_inputs)

    # -- offline files (ge_hub.offline.segments) ---------------------------------------

    def entries(self) -> list[tuple[_SegmentGraph, tuple, tuple, _Entry]]:
        """Every segment plan held, stored ones first: (segment, input shapes, deciding
        values as (dtype string, bytes) pairs, entry)."""
        with self._lock:
            items = list(self._pinned.items()) + [item for item in self._cache.items()
                                                  if item[0] not in self._pinned]
        return [(key[0], key[1], key[2], entry) for key, entry in items]

    def pin(self, segment: _SegmentGraph, shapes: tuple, values: tuple, entry: _Entry) -> None:
        """Keep a segment plan restored from a file (never evicted)."""
        self._pinned[(segment, shapes, values)] = entry

    # -- reporting -----------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """The segments of the latest run, added up (see CompiledModel.summary)."""
        entries = self.last
        steps = [s for e in entries for s in e.plan.steps]
        python = collections.Counter(s.op for s in steps if s.kind is not KernelKind.C)
        folded: collections.Counter = collections.Counter()
        for e in entries:
            folded.update(e.folded)
        return {
            "segments": len(entries),
            "cut_ops": dict(collections.Counter(c.op for e in entries for c in e.cuts)),
            "segment_plans": len(set(self._cache) | set(self._pinned)),
            "segment_compiles": self.compiles,
            "max_cached_plans": self._max,
            "steps": len(steps),
            "python_steps": sum(python.values()),
            "python_ops": dict(python),
            "specialized_on": list(dict.fromkeys(n for e in entries for n in e.value_inputs)),
            "folded_steps": sum(folded.values()),
            "folded_ops": dict(folded),
            "arena_bytes": sum(e.plan.memory.arena_bytes for e in entries),
            "lower_bound_bytes": sum(e.plan.memory.lower_bound_bytes for e in entries),
            "naive_bytes": sum(e.plan.memory.naive_bytes for e in entries),
        }

    @property
    def plans(self) -> list[Plan]:
        """The plans of the latest run's segments, in order."""
        return [e.plan for e in self.last]


def _leading(buffer: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """The leading elements of `buffer` viewed at `shape` (see select_bounded)."""
    size = math.prod(shape)  # (np.prod costs more than the rest of a segment switch)
    return buffer.reshape(-1)[:size].reshape(shape)


def _boundable(node, mapping) -> bool:
    """Whether the node runs as its bounded form: a data-dependent op whose inputs all have
    static shapes in the head (Unique only flattened)."""
    if node.domain or node.op not in BOUNDED_FORMS:
        return False
    if node.op == "Unique" and node.attrs.get("axis") is not None:
        return False
    return all(v is None or mapping[id(v)].type.is_static for v in node.inputs)


def _add_bounded(head: Graph, node, mapping, outputs: dict[str, Value]) -> _Cut:
    """The node's bounded form appended to the head; its outputs become head outputs."""
    from ge_hub.ops import get_schema

    form, _ = BOUNDED_FORMS[node.op]
    inputs = [None if v is None else mapping[id(v)] for v in node.inputs]
    for value in inputs:  # a constant only deferred nodes read was dropped from the head
        if value is not None and value.is_constant and \
                not any(value is c for c in head.constants):
            head.constants.append(value)
    attrs = dict(node.attrs)
    if node.op == "NonMaxSuppression":
        # A run-time max_output_boxes_per_class (not a constant here) bounds nothing.
        limit = inputs[2].const if len(inputs) > 2 and inputs[2] is not None else None
        attrs["bound"] = nms_bound(inputs[0].type.shape, inputs[1].type.shape, limit)
    schema = get_schema(form, "ge_hub")
    types = schema.infer_types([None if v is None else v.type for v in inputs], attrs,
                               consts=[None if v is None else v.const for v in inputs],
                               num_outputs=len(schema.outputs), node_name=node.name)
    bounded = head.add_node(form, inputs, types, attrs, domain="ge_hub",
                            name=None)
    names = tuple(v.name if v is not None else None for v in node.outputs)
    rank = inputs[0].type.rank
    axes = dynamic_axes(node.op, node.attrs, rank)
    positions = []
    for i, value in enumerate(bounded.outputs):
        key = names[i] if i < len(names) and names[i] is not None else \
            f"{bounded.name}:{i}"
        outputs[key] = value
        positions.append(list(outputs).index(key))
    count_position = positions[-1]
    kept = tuple(names[i] if i < len(names) else None for i in range(len(types) - 1))
    return _Cut(node.op, kept, (*positions[: len(types) - 1], count_position), axes,
                tuple(types[: len(types) - 1]))


def _tail_graph(graph: Graph, output_names: Sequence[str], nodes, mapping, aliases):
    """The deferred nodes as a graph of their own, reading constants as constants and
    what crosses the cut as inputs. Returns the graph, {input name: the value of `graph`
    (or of an inlined If branch) it stands for}, and its outputs' env names."""
    tail = Graph(f"{graph.name}_tail")
    tail.attrs = dict(graph.attrs)
    new: dict[int, Value] = {}
    produced = {id(v) for n in nodes for v in n.outputs if v is not None}
    crossing: dict[str, Value] = {}

    def resolve(value: Value) -> Value:
        while id(value) in aliases:  # an inlined If's output is its branch's
            value = aliases[id(value)]
        return value

    def read(value: Value) -> Value:
        value = resolve(value)
        if id(value) in new:
            return new[id(value)]
        if value.is_constant:
            made = tail.add_constant(value.const, prefix=value.name)
        else:
            head_value = mapping.get(id(value))
            if head_value is not None and head_value.is_constant:
                made = tail.add_constant(head_value.const, prefix=value.name)
            else:
                t = head_value.type if head_value is not None else value.type
                rank = t.rank if t.rank is not None else value.type.rank
                shape = None if rank is None else tuple(
                    Sym.named(f"{value.name}#{axis}") for axis in range(rank))
                made = tail.add_input(_free(tail, value.name), TensorType(t.dtype, shape))
                crossing[made.name] = value
        new[id(value)] = made
        return made

    for node in nodes:
        for value in node_reads(node):
            if value is not None and id(resolve(value)) not in produced:
                read(value)
        inputs = [None if v is None else read(v) for v in node.inputs]
        captures = {v: read(v) for sub in node.subgraphs() for v in outer_values(sub)}
        attrs = {key: _copy_subgraphs(value, captures) for key, value in node.attrs.items()}
        copy = tail.add_node(node.op, inputs, [v.type for v in node.outputs], attrs,
                             domain=node.domain, name=_free(tail, node.name),
                             output_names=[_free(tail, v.name) for v in node.outputs])
        for old, fresh in zip(node.outputs, copy.outputs):
            new[id(old)] = fresh
    outputs, names = [], []
    for value, name in zip(graph.outputs, output_names):
        if id(resolve(value)) in produced:
            outputs.append(new[id(resolve(value))])
            names.append(name)
    tail.set_outputs(outputs)
    return tail, crossing, names


def _free(graph: Graph, name: str) -> str:
    """`name`, or a fresh one when the tail has it already (an inlined branch's)."""
    fresh, index = name, 0
    while fresh in graph._names:
        index += 1
        fresh = f"{name}_{index}"
    return fresh


def folded_by_values(graph: Graph, input_names: Sequence[str]) -> collections.Counter:
    """Ops of the nodes that fold at plan time once the named graph inputs are constants:
    every node all of whose reads are constants or come from those inputs, and at least
    one of them from those inputs (plain constant folding is not counted)."""
    if not input_names:
        return collections.Counter()
    known = {id(v) for v in graph.constants}
    from_values = {id(graph.find_value(name)) for name in input_names}
    known |= from_values
    folded: collections.Counter = collections.Counter()
    for node in graph.nodes:
        reads = [v for v in node_reads(node) if v is not None]
        if not all(id(v) in known for v in reads):
            continue
        known.update(id(v) for v in node.outputs if v is not None)
        if any(id(v) in from_values for v in reads):
            from_values.update(id(v) for v in node.outputs if v is not None)
            folded[node.op] += 1
    return folded


# What ge_hub.offline.segments saves and restores.
SegmentGraph = _SegmentGraph
SegmentEntry = _Entry
Cut = _Cut
