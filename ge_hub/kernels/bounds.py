"""Compile-time bounds checks for the C kernels: what a packer may hand to C.

The C kernels do their index arithmetic in int64 and trust the sizes in their attribute
blobs. So before any packer runs, `pack_checked` (called by `ge_hub.emit` for every C
kernel, built-in or plugin) checks that the node's input and output types keep the limits
of `ge_hub.ops.limits` (rank, elements per tensor), turns a value that does not fit a
blob's int64 slots into an error naming the node instead of a `struct.error`, and bounds
the scratch the packer asks for (`limits.MAX_SCRATCH_BYTES`). Packers of
sliding-window kernels also call `check_window`, which bounds the window's coordinates by
`limits.MAX_COORDINATE` so that the few additions the C does on them cannot wrap.

Every refusal is a `LimitError` (a `GraphError`) naming the node and the attribute, input
or output at fault.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from ge_hub.errors import LimitError
from ge_hub.ir.graph import Graph, Node
from ge_hub.ir.types import TensorType
from ge_hub.kernels.base import Packed, Packer
from ge_hub.ops import limits
from ge_hub.ops.window import Window, window_problem


def _where(node: Node) -> str:
    return f"{node.op} node {node.name!r}"


def refuse(node: Node, message: str):
    raise LimitError(f"{_where(node)}: {message}")


def _port_names(node: Node, kind: str, count: int) -> list[str]:
    from ge_hub.ops import get_schema

    try:
        schema = get_schema(node.op, node.domain)
    except LookupError:
        return [f"{kind} {i}" for i in range(count)]
    if kind == "input":
        return [f"input {schema.input_name(i)!r}" for i in range(count)]
    outputs = schema.outputs
    return [f"output {outputs[min(i, len(outputs) - 1)].name!r}" if outputs else f"output {i}"
            for i in range(count)]


def check_node_types(node: Node, input_types: Sequence[TensorType | None],
                     output_types: Sequence[TensorType]) -> None:
    """Every input and output type of `node` keeps the limits."""
    fail = lambda message: refuse(node, message)  # noqa: E731
    limits.check_types(input_types, _port_names(node, "input", len(input_types)), fail)
    limits.check_types(output_types, _port_names(node, "output", len(output_types)), fail)


def check_graph_inputs(graph: Graph) -> None:
    """Graph inputs get buffers even when no kernel reads them: they keep the limits too."""
    for value in graph.inputs:
        problem = limits.shape_problem(value.type)
        if problem is not None:
            raise LimitError(f"graph input {value.name!r} {value.type} {problem}")


def pack_checked(pack: Packer, node: Node, input_types: Sequence[TensorType | None],
                 output_types: Sequence[TensorType]) -> Packed:
    """`pack(node, input_types, output_types)`, once the types are known to keep the
    limits; a value too large for the blob's int64 slots is refused by node."""
    check_node_types(node, input_types, output_types)
    try:
        packed = pack(node, input_types, output_types)
    except struct.error as error:
        refuse(node, f"an attribute or size does not fit the kernel's int64 attribute blob "
                     f"({error})")
    scratch = getattr(packed, "scratch_bytes", 0)
    if isinstance(scratch, int) and scratch > limits.MAX_SCRATCH_BYTES:
        refuse(node, f"its kernel would need {scratch} bytes of scratch, more than the limit "
                     "of 16 * 2**40 (ge_hub.ops.limits.MAX_SCRATCH_BYTES)")
    return packed


def check_window(node: Node, window: Window, in_dims: Sequence[int], out_dims: Sequence[int],
                 pads: Sequence[Sequence[int]]) -> None:
    """The window's coordinates along each axis stay within `limits.MAX_COORDINATE`:
    pads as used (`pads[a]` = (begin, end, ...); ConvTranspose's may be negative),
    strides, dilations, the kernel's extent and the span the windows cover."""
    for axis in range(window.rank):
        problem = window_problem(window, axis, in_dims[axis], out_dims[axis],
                                 tuple(pads[axis][:2]))
        if problem is not None:
            refuse(node, problem)
