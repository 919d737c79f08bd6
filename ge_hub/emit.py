"""Emission: turn a scheduled, kernel-selected graph into a Plan.

Packs each C kernel's attributes (its packer runs here, once), lets kernels that ask for
it re-lay-out their constant inputs (its prepacker runs here too; the result becomes one
more plan constant, read by that step in place of the original; the plan holds only the
constants its tensors read), plans memory
(`ge_hub.memory`), then lists tensors and steps as plain data. A graph output that no
kernel writes directly (a view, an input, a constant, a repeated value) gets a copy
step at the end.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Graph, Node, Value
from ge_hub.kernels.base import CKernel, Packed, PyKernel
from ge_hub.kernels.bounds import check_graph_inputs, pack_checked
from ge_hub.kernels.consumed import consumable, may_consume, released_rows
from ge_hub.memory import MemoryPlan, plan_memory
from ge_hub.plan import Event, KernelKind, Plan, Step, Storage, TensorSpec
from ge_hub.plugins import get_registry
from ge_hub.profiling_phases import phase
from ge_hub.registry import KernelSpec, Registry

COPY_KERNEL = "copy"


def _pack(kernel: KernelSpec, node, registry) -> Packed:
    impl = kernel.impl
    in_types = [None if v is None else v.type for v in node.inputs]
    out_types = [v.type for v in node.outputs]
    if isinstance(impl, CKernel):
        packed = pack_checked(impl.pack, node, in_types, out_types)
        if not isinstance(packed, Packed):
            raise TypeError(f"kernel {kernel.name!r}: packer returned {type(packed).__name__}, "
                            "expected Packed")
        return packed
    if isinstance(impl, PyKernel):
        from ge_hub.plan import encode_py_attrs

        # Python kernels (op references) take every attribute, defaults included.
        attrs = registry.get_op(node.op, node.domain).fill_attrs(node.attrs, node.name)
        return Packed(encode_py_attrs(attrs))
    raise TypeError(f"kernel {kernel.name!r} has unknown implementation {impl!r}")


def _prepack(kernel: KernelSpec, node: Node) -> dict[int, np.ndarray]:
    """The constant inputs the kernel wants in its own layout, checked."""
    impl = kernel.impl
    if not isinstance(impl, CKernel) or impl.prepack is None:
        return {}
    in_types = [None if v is None else v.type for v in node.inputs]
    with released_rows() as released:
        replaced = impl.prepack(node, in_types, [v.type for v in node.outputs])
    for index, value in enumerate(node.inputs):
        if value is not None and id(value.const) in released and index not in replaced:
            raise RuntimeError(f"kernel {kernel.name!r}: prepack freed input {index} of node "
                               f"{node.name!r} but did not replace it")
    for index, array in replaced.items():
        value = node.inputs[index] if 0 <= index < len(node.inputs) else None
        if value is None or value.const is None:
            raise ValueError(f"kernel {kernel.name!r}: prepack replaced input {index} of node "
                             f"{node.name!r}, which is not a constant")
        if not isinstance(array, np.ndarray):
            raise TypeError(f"kernel {kernel.name!r}: prepack returned "
                            f"{type(array).__name__} for input {index}, expected an ndarray")
        DType.from_numpy(array.dtype)  # raises for a dtype plans cannot carry
    return {index: np.ascontiguousarray(array) for index, array in replaced.items()}


def _let_go(value: Value) -> None:
    """Drop this (emission's own, optimized) graph's reference to a constant's data that
    only prepacked forms replace: its array becomes a zero-byte stand-in of the same
    dtype and shape (read-only), which is what anyone reading the optimized graph after
    emission (profiles read shapes) sees. The data itself is freed unless something else
    holds it (the model's own graph, when the caller keeps it)."""
    array = value.const
    value.const = np.broadcast_to(np.zeros((), array.dtype), array.shape)


def _last_reads(node: Node, unreplaced: dict[int, int]) -> list[np.ndarray]:
    """The constants this node reads for the last time that nothing outside the graph
    holds: its prepacker may free their memory as it packs them (ge_hub.kernels.consumed).
    Only a constant that the prepacker then replaces is let go; `_prepack` checks that it
    freed no other."""
    arrays = []
    for value in node.inputs:
        if value is None or value.const is None:
            continue
        uses = sum(v is value for v in node.inputs)
        if unreplaced.get(id(value)) == uses and may_consume(value.const, 1):
            arrays.append(value.const)
    return arrays


def _kind(kernel: KernelSpec) -> KernelKind:
    return KernelKind.C if isinstance(kernel.impl, CKernel) else KernelKind.PYTHON


def emit_plan(graph: Graph, registry: Registry | None = None) -> Plan:
    """The Plan of a graph whose nodes carry their kernels (`select_kernels`); `registry`
    is the compilation's (its context's), default the loaded plugins'."""
    registry = registry if registry is not None else get_registry()
    packed: dict[int, Packed] = {}
    inplace: dict[int, tuple] = {}
    prepacked: dict[int, dict[int, np.ndarray]] = {}
    check_graph_inputs(graph)  # sizes past ge_hub.ops.limits never reach the executor
    # Uses of each constant that a prepacked form does not replace (yet): at zero, the
    # graph's array is let go (the plan will not hold it), so that packing a model needs
    # about as much memory as its packed weights, not also all its original ones.
    unreplaced = {id(v): len(v.uses) for v in graph.constants}
    for value in graph.outputs:
        unreplaced[id(value)] = unreplaced.get(id(value), 0) + 1
    for node in graph.nodes:
        kernel = node.meta.get("kernel")
        if kernel is None:
            continue
        packed[id(node)] = _pack(kernel, node, registry)
        if isinstance(kernel.impl, CKernel):
            inplace[id(node)] = kernel.impl.inplace
            with consumable(_last_reads(node, unreplaced)):
                prepacked[id(node)] = _prepack(kernel, node)
            for index in prepacked[id(node)]:
                value = node.inputs[index]
                unreplaced[id(value)] -= 1
                if unreplaced[id(value)] == 0:
                    _let_go(value)
    with phase("plan_memory", "planning"):
        memory = plan_memory(graph, {k: p.scratch_bytes for k, p in packed.items()}, inplace)

    tensors: list[TensorSpec] = []
    index_of: dict[int, int] = {}

    def tensor(value: Value) -> int:
        if id(value) not in index_of:
            index_of[id(value)] = len(tensors)
            tensors.append(_spec(value, memory))
        return index_of[id(value)]

    constants = [v.const for v in graph.constants]

    def prepacked_tensor(node: Node, index: int, array: np.ndarray) -> int:
        constants.append(array)
        tensors.append(TensorSpec(f"{node.inputs[index].name}:packed:{node.name}",
                                  DType.from_numpy(array.dtype), tuple(array.shape),
                                  Storage.CONSTANT, 0, len(constants) - 1))
        return len(tensors) - 1

    def step_input(node: Node, index: int, value: Value | None) -> int:
        if value is None:
            return -1
        replaced = prepacked.get(id(node), {})
        if index in replaced:
            return prepacked_tensor(node, index, replaced[index])
        return tensor(value)

    steps: list[Step] = []
    subplans: list[Plan] = []  # control steps' compiled bodies (Packed.subplans)
    step_of: dict[int, int] = {}
    for node in graph.nodes:
        kernel = node.meta.get("kernel")
        if kernel is None:  # a view: no step, its output shares its input's memory
            continue
        step_of[id(node)] = len(steps)
        p = packed[id(node)]
        scratch = memory.scratch.get(id(node))
        steps.append(Step(
            node=node.name, op=node.qualified_op, kernel=kernel.name, kind=_kind(kernel),
            inputs=tuple(step_input(node, i, v) for i, v in enumerate(node.inputs)),
            outputs=tuple(tensor(v) for v in node.outputs),
            attrs=p.attrs,
            scratch_offset=scratch.offset if scratch else 0,
            scratch_bytes=p.scratch_bytes if scratch else 0,
            stream=node.meta.get("stream", 0), threads=node.meta.get("threads", 0),
            subplans=tuple(range(len(subplans), len(subplans) + len(p.subplans)))))
        subplans.extend(p.subplans)
    events = tuple(Event(step_of[id(waited)], step_of[id(node)])
                   for node in graph.nodes if id(node) in step_of
                   for waited in node.meta.get("wait", ()))

    copy_kernel, copy_kind = _copy_kernel(registry)
    outputs = [None] * len(graph.outputs)
    for j, value in enumerate(graph.outputs):
        if memory.location(value).storage is Storage.OUTPUT and memory.location(value).index == j:
            outputs[j] = tensor(value)
    for copy in memory.copies:
        source = copy.source
        out_index = len(tensors)
        tensors.append(TensorSpec(f"{source.name}:output{copy.output_index}",
                                  source.type.dtype, tuple(source.type.shape), Storage.OUTPUT,
                                  0, copy.output_index))
        outputs[copy.output_index] = out_index
        steps.append(Step(node=f"output:{graph.outputs[copy.output_index].name}",
                          op="Identity", kernel=copy_kernel, kind=copy_kind,
                          inputs=(tensor(source),), outputs=(out_index,),
                          attrs=b"" if copy_kind is KernelKind.C else _empty_py_attrs()))

    # Every graph input has a tensor, read by steps or not (the caller passes it anyway).
    input_indices = tuple(tensor(v) for v in graph.inputs)
    tensors, constants = _read_constants(tensors, constants)
    return Plan(
        tensors=tuple(tensors),
        steps=tuple(steps),
        inputs=input_indices,
        outputs=tuple(outputs),
        input_names=tuple(graph.input_names),
        output_names=tuple(graph.output_names),
        constants=tuple(constants),
        memory=memory.stats,
        events=events,
        subplans=tuple(subplans),
    )


def _read_constants(tensors: list[TensorSpec], constants: list[np.ndarray]
                    ) -> tuple[list[TensorSpec], list[np.ndarray]]:
    """Only the constants some tensor reads, renumbered: a graph constant that a kernel
    replaced by its prepacked form, or that no step reads, is not held by the plan (the
    graph it came from, or its source, still has it for planning other shapes)."""
    read = sorted({t.index for t in tensors if t.storage is Storage.CONSTANT})
    number = {old: new for new, old in enumerate(read)}
    return ([dataclasses.replace(t, index=number[t.index]) if t.storage is Storage.CONSTANT
             else t for t in tensors], [constants[i] for i in read])


def _spec(value: Value, memory: MemoryPlan) -> TensorSpec:
    loc = memory.location(value)
    shape = tuple(int(d) for d in value.type.shape)
    if loc.storage is Storage.ARENA:
        return TensorSpec(value.name, value.type.dtype, shape, Storage.ARENA,
                          loc.buffer.offset + loc.offset)
    return TensorSpec(value.name, value.type.dtype, shape, loc.storage, loc.offset, loc.index)


def _copy_kernel(registry: Registry) -> tuple[str, KernelKind]:
    kernel = registry.kernel_by_name(COPY_KERNEL)
    if kernel is not None:
        return kernel.name, _kind(kernel)
    return "reference:Identity", KernelKind.PYTHON


def _empty_py_attrs() -> bytes:
    from ge_hub.plan import encode_py_attrs

    return encode_py_attrs({})
