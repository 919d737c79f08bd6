"""Plans as the JSON of a `.ghm` file's plans section, and back.

A plan (`ge_hub.plan.Plan`) is already plain data; this module only spells it as JSON:
tensors and steps as fixed-order lists, attribute blobs in base64, and each constant as a
reference {dtype, shape, offset, nbytes} into the file, resolved by the reader to a
read-only `np.frombuffer` view of the mapped file. Decoding checks every field's type and
every index and size before a Plan is built; what the C core checks again (tensor extents
inside their buffers, step arity) it checks too, so that a malformed file is refused by
name here, not deep in the executor.

Streams (`ge_hub.passes.schedule`) ride in optional keys, so that a file written before
them still loads (one stream) and a reader that predates them still runs a newer file
correctly, one step after another in plan order (its arena offsets are safe for that
too): "step_threads" (one 0/1 per step; each step row already carries its stream),
"events" ([signal, wait] step pairs) and "memory_serial" (the arena and lower bound
the plan would need on one stream).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ge_hub.errors import OfflineModelError
from ge_hub.ir.dtypes import DType
from ge_hub.ops.limits import MAX_ELEMENTS, MAX_RANK
from ge_hub.plan import (
    ARENA_ALIGNMENT,
    Event,
    KernelKind,
    MemoryStats,
    Plan,
    Step,
    Storage,
    TensorSpec,
)

# A constant reference: {section ("graph" or "data"), offset in it, dtype, shape, nbytes}.
ConstantRef = dict


def nested(plan: Plan):
    """The plan, then every sub-plan inside it (control-flow bodies), depth first."""
    yield plan
    for sub in plan.subplans:
        yield from nested(sub)


# How deep sub-plans (control-flow bodies) may nest in a file.
MAX_SUBPLAN_DEPTH = 16


def encode_plan(plan: Plan, key: tuple, name: str, rules: dict[str, int],
                constant_refs: Callable[[Plan], list[ConstantRef]]) -> dict[str, Any]:
    """The JSON of a profile's plan; `constant_refs(plan)` stores the constants of a plan
    (this one, then each of its sub-plans) and gives their references."""
    shapes, values = split_key(key, len(plan.inputs))
    return {
        "profile": name,
        "shapes": [list(s) for s in shapes],
        "values": [base64.b64encode(v).decode("ascii") for v in values],
        "rules": dict(rules),
        **encode_body(plan, constant_refs),
    }


def encode_body(plan: Plan, constant_refs: Callable[[Plan], list[ConstantRef]]) -> dict:
    """A plan without its profile. Sub-plans (the bodies of C control steps) ride in an
    optional "subplans" key, each encoded the same way, and a control step's row has an
    11th field, the indices of its sub-plans; a file without control steps is unchanged."""
    body = {
        "tensors": [[t.name, t.dtype.value, list(t.shape), t.storage.value, t.offset, t.index]
                    for t in plan.tensors],
        "steps": [[s.node, s.op, s.kernel, s.kind.value, list(s.inputs), list(s.outputs),
                   base64.b64encode(s.attrs).decode("ascii"), s.scratch_offset,
                   s.scratch_bytes, s.stream, *([list(s.subplans)] if s.subplans else [])]
                  for s in plan.steps],
        "inputs": list(plan.inputs),
        "outputs": list(plan.outputs),
        "input_names": list(plan.input_names),
        "output_names": list(plan.output_names),
        "constants": constant_refs(plan),
        "memory": [plan.memory.arena_bytes, plan.memory.lower_bound_bytes,
                   plan.memory.naive_bytes],
        **_encode_streams(plan),
    }
    if plan.subplans:
        body["subplans"] = [encode_body(sub, constant_refs) for sub in plan.subplans]
    return body


def _encode_streams(plan: Plan) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if any(s.threads for s in plan.steps):
        fields["step_threads"] = [s.threads for s in plan.steps]
    if plan.events:
        fields["events"] = [[e.signal, e.wait] for e in plan.events]
    if plan.memory.serial_arena_bytes is not None:
        fields["memory_serial"] = [plan.memory.serial_arena_bytes,
                                   plan.memory.serial_lower_bound_bytes]
    return fields


def split_key(key: tuple, n_inputs: int) -> tuple[list[tuple[int, ...]], list[bytes]]:
    """A CompiledModel cache key: the input shapes, then the bytes of the inputs whose
    values the plan was specialized on."""
    return [tuple(s) for s in key[:n_inputs]], [bytes(v) for v in key[n_inputs:]]


class Reader:
    def __init__(self, where: str):
        self.where = where

    def fail(self, message: str) -> OfflineModelError:
        return OfflineModelError(f"{self.where}: {message}")

    def field(self, obj: Any, key: str, kind: type | tuple) -> Any:
        if not isinstance(obj, dict) or key not in obj:
            raise self.fail(f"missing field {key!r}")
        return self.check(obj[key], kind, key)

    def check(self, value: Any, kind: type | tuple, what: str) -> Any:
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.fail(f"{what} has the wrong type ({type(value).__name__})")
        return value

    def int(self, value: Any, what: str, low: int = 0, high: int = 1 << 62) -> int:
        self.check(value, int, what)
        if not low <= value <= high:
            raise self.fail(f"{what} {value} is out of range [{low}, {high}]")
        return value

    def ints(self, value: Any, what: str, low: int = 0, high: int = 1 << 62) -> tuple[int, ...]:
        self.check(value, list, what)
        return tuple(self.int(v, what, low, high) for v in value)

    def str(self, value: Any, what: str) -> str:
        return self.check(value, str, what)

    def dtype(self, value: Any, what: str) -> DType:
        try:
            return DType(self.str(value, what))
        except ValueError:
            raise self.fail(f"{what}: unknown dtype {value!r:.40}") from None

    def shape(self, value: Any, what: str) -> tuple[int, ...]:
        shape = self.ints(value, f"{what} shape", 0, MAX_ELEMENTS)
        if len(shape) > MAX_RANK:
            raise self.fail(f"{what} has rank {len(shape)}, past the limit {MAX_RANK}")
        if math.prod(shape) > MAX_ELEMENTS:  # exact: Python ints
            raise self.fail(f"{what} has more than {MAX_ELEMENTS} elements")
        return shape

    def blob(self, value: Any, what: str) -> bytes:
        try:
            return base64.b64decode(self.str(value, what), validate=True)
        except (binascii.Error, ValueError):
            raise self.fail(f"{what} is not base64") from None


def _decode_streams(r: Reader, obj: dict, steps: list[Step]
                    ) -> tuple[list[Step], tuple[Event, ...], tuple[int, ...]]:
    """The optional stream keys, checked: (steps with their threads, events, the serial
    memory figures or none)."""
    n = len(steps)
    for i, step in enumerate(steps):
        if step.stream >= max(n, 1):
            raise r.fail(f"step {i} stream {step.stream} is out of range [0, {max(n, 1) - 1}]")
    if "step_threads" in obj:
        threads = r.ints(obj["step_threads"], "step threads", 0, 1)
        if len(threads) != n:
            raise r.fail(f"step threads lists {len(threads)} steps, the plan has {n}")
        steps = [dataclasses.replace(s, threads=t) for s, t in zip(steps, threads)]
    events = []
    for i, pair in enumerate(r.check(obj.get("events", []), list, "events")):
        pair = r.ints(pair, f"event {i}", 0, max(n - 1, 0))
        if len(pair) != 2 or pair[0] >= pair[1]:
            raise r.fail(f"event {i} must be [signal, wait] with signal < wait, got "
                         f"{list(pair)!r:.40}")
        events.append(Event(*pair))
    serial: tuple[int, ...] = ()
    if "memory_serial" in obj:
        serial = r.ints(obj["memory_serial"], "memory_serial")
        if len(serial) != 2:
            raise r.fail("memory_serial must hold 2 sizes")
    return steps, tuple(events), serial


def decode_plan(obj: Any, where: str,
                constant: Callable[[DType, tuple[int, ...], dict, int, str], np.ndarray]
                ) -> tuple[str, tuple, Plan, dict[str, int]]:
    """(profile name, cache key, Plan, rule counts) from one plans-section entry.

    `constant(dtype, shape, {section, offset}, nbytes, where)` resolves a constant
    reference to its array (checking that it lies inside the file)."""
    r = Reader(where)
    if not isinstance(obj, dict):
        raise r.fail("a plan must be a JSON object")
    name = r.str(r.field(obj, "profile", str), "profile")
    r = Reader(f"{where} (profile {name!r})")
    plan = decode_body(r, obj, constant, 0)
    shapes = tuple(r.shape(s, "profile input") for s in r.field(obj, "shapes", list))
    values = tuple(r.blob(v, "profile value") for v in r.field(obj, "values", list))
    rules = r.field(obj, "rules", dict)
    for rule, count in rules.items():
        r.int(count, f"rule {rule!r} count")
    if len(shapes) != len(plan.inputs) or shapes != plan.signature:
        raise r.fail(f"the profile's shapes {[list(s) for s in shapes]} are not its plan's "
                     f"input shapes {[list(s) for s in plan.signature]}")
    return name, shapes + values, plan, dict(rules)


def decode_body(r: Reader, obj: Any, constant, depth: int) -> Plan:
    """A Plan from what `_encode_body` wrote, its sub-plans included."""
    if not isinstance(obj, dict):
        raise r.fail("a plan must be a JSON object")
    subplans = []
    for i, sub in enumerate(r.check(obj.get("subplans", []), list, "subplans")):
        if depth >= MAX_SUBPLAN_DEPTH:
            raise r.fail(f"sub-plans nest deeper than {MAX_SUBPLAN_DEPTH}")
        subplans.append(decode_body(Reader(f"{r.where}: sub-plan {i}"), sub, constant,
                                     depth + 1))
    constants = []
    for i, ref in enumerate(r.field(obj, "constants", list)):
        what = f"constant {i}"
        dtype = r.dtype(r.field(ref, "dtype", str), what)
        shape = r.shape(r.field(ref, "shape", list), what)
        section = r.str(r.field(ref, "section", str), f"{what} section")
        offset = r.int(r.field(ref, "offset", int), f"{what} offset")
        nbytes = r.int(r.field(ref, "nbytes", int), f"{what} nbytes")
        expected = math.prod(shape) * dtype.itemsize
        if nbytes != expected:
            raise r.fail(f"{what}: {nbytes} bytes for {dtype.value} {list(shape)} "
                         f"(expected {expected})")
        constants.append(constant(dtype, shape, {"section": section, "offset": offset},
                                  nbytes, f"{r.where}: {what}"))
    memory = r.ints(r.field(obj, "memory", list), "memory")
    if len(memory) != 3:
        raise r.fail("memory must hold 3 sizes")
    arena = memory[0]
    n_inputs = len(r.field(obj, "inputs", list))
    n_outputs = len(r.field(obj, "outputs", list))
    tensors = []
    for i, row in enumerate(r.field(obj, "tensors", list)):
        what = f"tensor {i}"
        if not isinstance(row, list) or len(row) != 6:
            raise r.fail(f"{what} must be a list of 6 fields")
        t_name = r.str(row[0], f"{what} name")
        dtype = r.dtype(row[1], what)
        shape = r.shape(row[2], what)
        try:
            storage = Storage(r.str(row[3], f"{what} storage"))
        except ValueError:
            raise r.fail(f"{what}: unknown storage {row[3]!r:.40}") from None
        offset = r.int(row[4], f"{what} offset")
        index = r.int(row[5], f"{what} index")
        spec = TensorSpec(t_name, dtype, shape, storage, offset, index)
        limit = {Storage.ARENA: arena}.get(storage)
        if storage is Storage.CONSTANT:
            if index >= len(constants):
                raise r.fail(f"{what} reads constant {index} of {len(constants)}")
            limit = constants[index].nbytes
        elif storage is Storage.INPUT and index >= n_inputs:
            raise r.fail(f"{what} is input {index} of {n_inputs}")
        elif storage is Storage.OUTPUT and index >= n_outputs:
            raise r.fail(f"{what} is output {index} of {n_outputs}")
        if limit is not None and offset + spec.nbytes > limit:
            raise r.fail(f"{what} ({spec.nbytes} bytes at offset {offset}) lies outside its "
                         f"{storage.value} buffer of {limit} bytes")
        tensors.append(spec)
    n = len(tensors)
    steps = []
    for i, row in enumerate(r.field(obj, "steps", list)):
        what = f"step {i}"
        if not isinstance(row, list) or len(row) not in (10, 11):
            raise r.fail(f"{what} must be a list of 10 fields (11 for a control step)")
        try:
            kind = KernelKind(r.str(row[3], f"{what} kind"))
        except ValueError:
            raise r.fail(f"{what}: unknown kernel kind {row[3]!r:.40}") from None
        scratch_offset = r.int(row[7], f"{what} scratch offset")
        scratch_bytes = r.int(row[8], f"{what} scratch bytes")
        if scratch_offset + scratch_bytes > arena:
            raise r.fail(f"{what}: scratch [{scratch_offset}, {scratch_offset + scratch_bytes})"
                         f" lies outside the {arena}-byte arena")
        steps.append(Step(
            node=r.str(row[0], f"{what} node"), op=r.str(row[1], f"{what} op"),
            kernel=r.str(row[2], f"{what} kernel"), kind=kind,
            inputs=r.ints(row[4], f"{what} inputs", -1, n - 1),
            outputs=r.ints(row[5], f"{what} outputs", 0, n - 1),
            attrs=r.blob(row[6], f"{what} attrs"),
            scratch_offset=scratch_offset, scratch_bytes=scratch_bytes,
            stream=r.int(row[9], f"{what} stream"),
            subplans=r.ints(row[10], f"{what} sub-plans", 0, len(subplans) - 1)
            if len(row) == 11 else ()))
    # The executor allocates the whole arena when it is built: it may be no larger than
    # its tensors and scratch reach, rounded to the alignment (as the memory planner makes
    # it, one alignment unit at least), so that an edited size cannot make a run allocate
    # without bound.
    reach = max([ARENA_ALIGNMENT]
                + [t.offset + t.nbytes for t in tensors if t.storage is Storage.ARENA]
                + [s.scratch_offset + s.scratch_bytes for s in steps])
    if arena > -(-reach // ARENA_ALIGNMENT) * ARENA_ALIGNMENT:
        raise r.fail(f"the arena of {arena} bytes is larger than its tensors and scratch "
                     f"reach ({reach} bytes)")
    inputs = r.ints(obj["inputs"], "inputs", 0, n - 1)
    outputs = r.ints(obj["outputs"], "outputs", 0, n - 1)
    input_names = tuple(r.str(v, "input name") for v in r.field(obj, "input_names", list))
    output_names = tuple(r.str(v, "output name") for v in r.field(obj, "output_names", list))
    steps, events, serial = _decode_streams(r, obj, steps)
    return Plan(tensors=tuple(tensors), steps=tuple(steps), inputs=inputs, outputs=outputs,
                input_names=input_names, output_names=output_names,
                constants=tuple(constants), memory=MemoryStats(*memory, *serial),
                events=events, subplans=tuple(subplans))
