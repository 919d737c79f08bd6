"""A model that runs in segments (`ge_hub.segments`), as the "segments" key of a `.ghm`
file's plans section, and back.

A model whose shapes depend on values it computes is cut into segments, each planned for
the sizes it is actually given. The file keeps what running it needs without compiling:

    {"segments": [{"inputs": [...], "outputs": [...], "value_inputs": [...],
                   "graph": null | constant reference to a `.gehub` graph, as uint8}],
     "entries":  [{"segment": i, "shapes": [[...]], "values": [[numpy dtype, base64]],
                   "plan": plan body (`ge_hub.offline.plans.encode_body`),
                   "inputs": [...], "outputs": [...],
                   "cuts": [[op, names, positions, axes, [[dtype, shape]...]]],
                   "constants": [[name, constant reference]], "tail": j | null,
                   "folded": {op: count}, "value_inputs": [...]}]}

Segment 0 is the model's own graph (the file's graph section); a later segment (a tail,
the part of the graph after a cut) keeps its graph in the data section when the file is
portable, read only if a size that no stored plan covers has to be planned. Each entry is
one segment plan, keyed as the running model keys it: the segment, its input shapes and
the values it was specialized on. The loaded model runs the stored plans in C, with no
frontend, compiler or NumPy reference; other sizes are planned from the stored graphs
(portable files) or refused when compiling is off.
"""

from __future__ import annotations

import base64
import collections
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ge_hub.errors import OfflineModelError
from ge_hub.ir import serialize, symbolic
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import TensorType
from ge_hub.offline.plans import Reader, decode_body, encode_body, nested
from ge_hub.plan import Plan
from ge_hub.segments import Cut, SegmentedModel, SegmentEntry, SegmentGraph


def plans_of(segmented: SegmentedModel) -> list[Plan]:
    """Every segment plan (and its sub-plans) the model holds."""
    return [sub for _, _, _, entry in segmented.entries() for sub in nested(entry.plan)]


def encode(segmented: SegmentedModel, store: Callable[[np.ndarray], dict],
           constant_refs: Callable[[Plan], list[dict]], portable: bool) -> dict[str, Any]:
    """The "segments" document. `store(array)` stores an array in the file and gives its
    reference; `constant_refs(plan)` does so for a plan's constants."""
    held = segmented.entries()
    order: dict[int, SegmentGraph] = {id(segmented.root): segmented.root}
    for segment, _, _, entry in held:
        order.setdefault(id(segment), segment)
        if entry.tail is not None:
            order.setdefault(id(entry.tail), entry.tail)
    index = {key: i for i, key in enumerate(order)}
    segments = []
    for i, segment in enumerate(order.values()):
        graph = None
        if portable and i > 0:  # segment 0's graph is the file's graph section
            graph = store(np.frombuffer(serialize.dumps(segment.graph), np.uint8))
        segments.append({"inputs": list(segment.input_names),
                         "outputs": list(segment.output_names),
                         "value_inputs": list(segment.value_inputs), "graph": graph})
    entries = []
    for segment, shapes, values, entry in held:
        for name, array in entry.constants.items():
            _storable(name, array)
        entries.append({
            "segment": index[id(segment)],
            "shapes": [list(s) for s in shapes],
            "values": [[dtype, base64.b64encode(data).decode("ascii")]
                       for dtype, data in values],
            "plan": encode_body(entry.plan, constant_refs),
            "inputs": list(entry.input_names),
            "outputs": list(entry.output_names),
            "cuts": [[c.op, list(c.names), list(c.positions), list(c.axes),
                      [[t.dtype.value, [symbolic.to_json(d) for d in t.shape]]
                       for t in c.bound_types]] for c in entry.cuts],
            "constants": [[name, store(np.ascontiguousarray(array))]
                          for name, array in entry.constants.items()],
            "tail": None if entry.tail is None else index[id(entry.tail)],
            "folded": dict(entry.folded),
            "value_inputs": list(entry.value_inputs),
        })
    return {"segments": segments, "entries": entries}


def _storable(name: str, array) -> None:
    if not isinstance(array, np.ndarray):
        raise ValueError(f"segment constant {name!r} is a {type(array).__name__}, not an array")
    try:
        DType.from_numpy(array.dtype)
    except (TypeError, ValueError):
        raise ValueError(f"segment constant {name!r} has dtype {array.dtype}, which an "
                         "offline file cannot hold") from None


def summary(document: dict[str, Any]) -> dict[str, Any]:
    """What `ge-hub inspect` and the metadata say of the segments (from the document)."""
    cuts = collections.Counter(c[0] for e in document["entries"] for c in e["cuts"])
    return {"segments": len(document["segments"]), "plans": len(document["entries"]),
            "cut_ops": dict(cuts)}


def restore(document: Any, where: str, constant, options, registry, resolver, *,
            root_loader, portable: bool, allow_compile: bool,
            check: Callable[[list[tuple[str, Plan]]], None]) -> SegmentedModel:
    """A SegmentedModel running the stored segment plans. `constant(dtype, shape, ref,
    nbytes, where)` resolves a constant reference (checked against the file),
    `root_loader()` gives the model's graph, and `check([(label, plan)])` checks the
    kernels the plans name before any is resolved."""
    from ge_hub.executor import Executor

    r = Reader(f"{where}: segments")
    if not isinstance(document, dict):
        raise r.fail("must be a JSON object")
    segment_docs = r.field(document, "segments", list)
    if not segment_docs:
        raise r.fail("no segment")
    segments = []
    for i, doc in enumerate(segment_docs):
        rs = Reader(f"{where}: segment {i}")
        inputs = _names(rs, rs.field(doc, "inputs", list), "input")
        outputs = _names(rs, rs.field(doc, "outputs", list), "output")
        value_inputs = _names(rs, rs.field(doc, "value_inputs", list), "value input")
        if not set(value_inputs) <= set(inputs):
            raise rs.fail(f"value inputs {list(value_inputs)!r:.80} are not among its inputs")
        ref = doc.get("graph")
        if i == 0:
            loader = root_loader if portable else None
        elif ref is None:
            loader = None
        else:
            loader = _graph_loader(rs, ref, constant, inputs)
        segments.append(SegmentGraph(None, value_inputs, outputs, input_names=inputs,
                                     loader=loader))
    model = SegmentedModel(None, options, registry, resolver, root=segments[0],
                           allow_compile=allow_compile)
    decoded = []
    for i, doc in enumerate(r.field(document, "entries", list)):
        re = Reader(f"{where}: segment plan {i}")
        segment = segments[re.int(re.field(doc, "segment", int), "segment", 0,
                                  len(segments) - 1)]
        plan = decode_body(re, re.field(doc, "plan", dict), constant, 0)
        shapes = tuple(re.shape(s, "input") for s in re.field(doc, "shapes", list))
        if len(shapes) != len(segment.input_names):
            raise re.fail(f"{len(shapes)} input shapes for a segment of "
                          f"{len(segment.input_names)} inputs")
        values = []
        for pair in re.field(doc, "values", list):
            if not isinstance(pair, list) or len(pair) != 2:
                raise re.fail("a value must be [dtype, base64 bytes]")
            values.append((re.str(pair[0], "value dtype"), re.blob(pair[1], "value")))
        inputs = _names(re, re.field(doc, "inputs", list), "input")
        outputs = _names(re, re.field(doc, "outputs", list), "output")
        if len(inputs) != len(plan.inputs) or len(outputs) != len(plan.outputs):
            raise re.fail(f"names {len(inputs)} inputs and {len(outputs)} outputs, its plan "
                          f"has {len(plan.inputs)} and {len(plan.outputs)}")
        if not set(inputs) <= set(segment.input_names):
            raise re.fail("reads values its segment does not take")
        if plan.signature != tuple(shapes[segment.input_names.index(n)] for n in inputs):
            raise re.fail("its plan's input shapes are not the entry's")
        cuts = tuple(_cut(re, c, len(outputs)) for c in re.field(doc, "cuts", list))
        constants = {}
        for pair in re.field(doc, "constants", list):
            if not isinstance(pair, list) or len(pair) != 2:
                raise re.fail("a constant must be [name, reference]")
            name = re.str(pair[0], "constant name")
            constants[name] = _array(re, pair[1], constant)
        tail = re.field(doc, "tail", (int, type(None)))
        if tail is not None:
            tail = segments[re.int(tail, "tail", 1, len(segments) - 1)]
        folded = collections.Counter({re.str(op, "op"): re.int(n, f"folded {op!r:.20}")
                                      for op, n in re.field(doc, "folded", dict).items()})
        value_inputs = _names(re, re.field(doc, "value_inputs", list), "value input")
        decoded.append((re, segment, shapes, tuple(values),
                        (plan, inputs, outputs, cuts, constants, tail, folded, value_inputs)))
    _check_names(r, segments, decoded)
    check([(f"segment plan {i}", sub) for i, (_, _, _, _, fields) in enumerate(decoded)
           for sub in nested(fields[0])])
    for re, segment, shapes, values, fields in decoded:
        try:
            executor = Executor(fields[0], resolver)
        except (ValueError, LookupError, TypeError) as exc:
            raise re.fail(str(exc)) from None
        model.pin(segment, shapes, values, SegmentEntry(fields[0], executor, *fields[1:]))
    return model


def _check_names(r: Reader, segments: list[SegmentGraph], decoded: list) -> None:
    """What running looks up by name is there, on every path the stored plans can take:
    the tails form no cycle (running would never end), a segment's inputs are model
    inputs or values that every stored plan leading to it produced, and a plan that ends
    the run leaves the model's outputs. Each cut's bound buffers are the plan outputs it
    names (their dtype and shape, and an int64 [1] count after them)."""
    # A tail's outputs are some of its parent's (ge_hub.segments): a segment planned anew
    # writes values by these names, and the run returns the first segment's.
    model_outputs = set(segments[0].output_names)
    for index, segment in enumerate(segments):
        stray = [n for n in segment.output_names if n not in model_outputs]
        if stray:
            raise r.fail(f"segment {index} names outputs {stray!r:.80} that are not the "
                         "model's")
    position = {id(segment): i for i, segment in enumerate(segments)}
    by_segment: dict[int, list] = collections.defaultdict(list)
    for item in decoded:
        by_segment[position[id(item[1])]].append(item)
    available: dict[int, set[str]] = {0: set(segments[0].input_names)}
    for index in _in_order(r, segments, by_segment, position):
        if index not in available:  # no stored plan leads here: nothing runs it
            continue
        have = available[index]
        missing = [n for n in segments[index].input_names if n not in have]
        if missing:
            raise r.fail(f"segment {index} reads {missing!r:.80}, which the plans before "
                         "it do not all produce")
        for re, _, _, _, (_, _, outputs, cuts, constants, tail, *_) in by_segment[index]:
            made = have | set(outputs) | set(constants) | {
                n for c in cuts for n in c.names if n}
            if tail is None:
                missing = [n for n in segments[0].output_names if n not in made]
                if missing:
                    raise re.fail(f"ends the run without the model outputs {missing!r:.80}")
            else:
                after = position[id(tail)]
                available[after] = made if after not in available else available[after] & made
    for re, _, _, _, (plan, _, _, cuts, *_) in decoded:
        for cut in cuts:
            for t, position in zip(cut.bound_types, cut.positions):
                spec = plan.tensors[plan.outputs[position]]
                if spec.dtype != t.dtype or tuple(spec.shape) != tuple(t.shape):
                    raise re.fail(f"a cut's bound {t} is not its plan output {position} "
                                  f"({spec.dtype.value}{list(spec.shape)})")
            count = plan.tensors[plan.outputs[cut.positions[-1]]]
            # exactly what the kernel writes: outputs are allocated at their stored shapes
            if count.dtype.value != "int64" or tuple(count.shape) != (1,):
                raise re.fail(f"a cut's count (plan output {cut.positions[-1]}) must be "
                              f"int64 [1], not {count.dtype.value}{list(count.shape)!r:.40}")


def _in_order(r: Reader, segments: list[SegmentGraph], by_segment: dict[int, list],
              position: dict[int, int]) -> list[int]:
    """The segments in an order where each comes after every segment whose stored plans
    lead to it (Kahn's algorithm); a cycle of tails is refused."""
    edges = {i: {position[id(item[4][5])] for item in by_segment.get(i, ())
                 if item[4][5] is not None} for i in range(len(segments))}
    incoming = collections.Counter(t for targets in edges.values() for t in targets)
    ready = [i for i in range(len(segments)) if not incoming[i]]
    order = []
    while ready:
        index = ready.pop()
        order.append(index)
        for target in edges[index]:
            incoming[target] -= 1
            if not incoming[target]:
                ready.append(target)
    if len(order) != len(segments):
        raise r.fail("its segments' tails form a cycle: running would never end")
    return order


def _names(r: Reader, values: list, what: str) -> tuple[str, ...]:
    names = tuple(r.str(v, f"{what} name") for v in values)
    if len(set(names)) != len(names):
        raise r.fail(f"{what} names repeat")
    return names


def _array(r: Reader, ref: Any, constant) -> np.ndarray:
    dtype = r.dtype(r.field(ref, "dtype", str), "constant")
    shape = r.shape(r.field(ref, "shape", list), "constant")
    nbytes = r.int(r.field(ref, "nbytes", int), "constant nbytes")
    if nbytes != math.prod(shape) * dtype.itemsize:
        raise r.fail(f"constant of {nbytes} bytes for {dtype.value} {list(shape)}")
    return constant(dtype, shape, {"section": r.str(r.field(ref, "section", str), "section"),
                                   "offset": r.int(r.field(ref, "offset", int), "offset")},
                    nbytes, r.where)


def _graph_loader(r: Reader, ref: Any, constant, inputs: tuple[str, ...]):
    data = _array(r, ref, constant)
    if data.dtype != np.uint8 or data.ndim != 1:
        raise r.fail("its graph must be stored as uint8 bytes")

    def load():
        try:
            graph = serialize.loads(memoryview(data))
        except Exception as exc:  # noqa: BLE001 (any decoding failure is a bad file)
            raise OfflineModelError(f"{r.where}: its graph is malformed: {exc}") from None
        if tuple(graph.input_names) != inputs:
            raise OfflineModelError(f"{r.where}: its graph's inputs {graph.input_names} are "
                                    f"not the segment's {list(inputs)}")
        graph.verify()
        return graph

    return load


def _cut(r: Reader, row: Any, n_outputs: int) -> Cut:
    if not isinstance(row, list) or len(row) != 5:
        raise r.fail("a cut must be [op, names, positions, axes, bound types]")
    op = r.str(row[0], "cut op")
    names = tuple(None if n is None else r.str(n, "cut name")
                  for n in r.check(row[1], list, "cut names"))
    positions = r.ints(row[2], "cut positions", 0, max(n_outputs - 1, 0))
    axes = tuple(None if a is None else r.int(a, "cut axis", 0, 64)
                 for a in r.check(row[3], list, "cut axes"))
    types = []
    for t in r.check(row[4], list, "cut types"):
        if not isinstance(t, list) or len(t) != 2:
            raise r.fail("a cut type must be [dtype, shape]")
        try:
            shape = tuple(symbolic.from_json(d) for d in r.check(t[1], list, "cut shape"))
        except (TypeError, ValueError) as exc:
            raise r.fail(f"cut shape: {exc}") from None
        types.append(TensorType(r.dtype(t[0], "cut dtype"), shape))
    if len(positions) != len(names) + 1 or len(types) != len(names) or \
            len(axes) != len(names):
        raise r.fail("a cut's names, positions, axes and types disagree in length")
    for t, axis in zip(types, axes):
        if not t.is_static or (axis is not None and axis >= len(t.shape)):
            raise r.fail(f"a cut's bound type {t} or its axis {axis} is malformed")
    return Cut(op, names, positions, axes, tuple(types))
