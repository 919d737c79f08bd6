"""Concat without a copy: its inputs are written straight into their slices of its output.

A Concat whose output is contiguous per input (every dimension before the axis is 1:
channels of a batch-1 NCHW map, rows of a matrix) only copies each input, whole, to its
own byte range of the output. When the step that produces each input can write that
range itself, the copy is work for nothing: SqueezeNet's fire modules, Inception's
blocks, DenseNet's first concat of each layer and ShuffleNet's channel splits all spend
a full pass over their feature maps on it. GE plans such a Concat as "no task": its
inputs' memory is laid out back to back, and the Concat runs no step. This pass marks
the Concats that qualify; the memory planner (`ge_hub.memory`) then places each input at
its offset inside the Concat's output buffer, the scheduler (`ge_hub.passes.schedule`)
treats the Concat's readers as readers of every input's producer, and emission writes no
step for it.

A Concat qualifies when:
- every shape involved is static and every dimension before the axis is 1;
- it has at least two inputs, all distinct, none empty, of the output's dtype;
- each input is written by a step (or by another such Concat), is no graph output (the
  caller's array is its memory), and is no other qualifying Concat's input (a value
  lives in one place).

Marked on the node: `meta["kernel"] = None` (no step) and `meta["concat_offsets"]`, the
byte offset of each input inside the output.
"""

from __future__ import annotations

import math

from ge_hub.ir.graph import Graph, Node, Value
from ge_hub.passes import PassResult

NAME = "concat_in_place"


def concat_offsets(node: Node) -> tuple[int, ...] | None:
    """The byte offset of each input inside a Concat's output when the Concat runs as
    back-to-back writes, None when it is a step (or no Concat)."""
    return node.meta.get("concat_offsets")


def concat_in_place(graph: Graph) -> PassResult:
    outputs = {id(v) for v in graph.outputs}
    claimed: set[int] = set()
    changed = False
    for node in graph.nodes:
        offsets = _offsets(node, outputs, claimed)
        if offsets is None:
            continue
        claimed.update(id(v) for v in node.inputs)
        node.meta["kernel"] = None
        node.meta["concat_offsets"] = offsets
        changed = True
    return PassResult(graph, changed)


def _offsets(node: Node, graph_outputs: set[int], claimed: set[int]) -> tuple[int, ...] | None:
    if node.op != "Concat" or node.domain or node.meta.get("kernel") is None:
        return None
    (out,) = node.outputs
    inputs = node.inputs
    if len(inputs) < 2 or any(v is None for v in inputs):
        return None
    if len({id(v) for v in inputs}) != len(inputs) or not _static(out):
        return None
    rank = len(out.type.shape)
    axis = node.attrs.get("axis")
    if not isinstance(axis, int) or not -rank <= axis < rank:
        return None
    axis %= rank
    if math.prod(out.type.shape[:axis]) != 1:
        return None
    offsets = []
    offset = 0
    for value in inputs:
        if not (_static(value) and value.type.dtype == out.type.dtype and value.type.nbytes > 0
                and _written_by_a_step(value) and id(value) not in graph_outputs
                and id(value) not in claimed):
            return None
        offsets.append(offset)
        offset += value.type.nbytes
    if offset != out.type.nbytes:  # inference says otherwise: leave it to the kernel
        return None
    return tuple(offsets)


def _static(value: Value) -> bool:
    return getattr(value.type, "is_static", False)  # tensors only, not sequences


def _written_by_a_step(value: Value) -> bool:
    producer = value.producer
    if producer is None:  # a graph input or a constant: its memory is not the arena's
        return False
    return producer.meta.get("kernel") is not None or concat_offsets(producer) is not None
