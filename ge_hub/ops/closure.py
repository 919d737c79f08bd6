"""Closure: a node and its subgraphs, made one self-contained graph that a plan can carry.

A plan is plain data, and a Python step gets its node's attributes as JSON; a body
`Graph` that reads values of the graphs around it is neither. So before kernels are
chosen, the compiler (`ge_hub.passes.lower_control_flow`) turns each node that has
subgraphs (If, Loop, Scan) into a Closure:

- the node is copied alone into a graph of its own, its frame
  (`ge_hub.ir.closure.frame_node`), whose inputs are every value the node reads, the
  outer values its bodies capture included;
- the Closure node reads those same values as ordinary inputs, so dead-code
  elimination, liveness and memory planning keep them alive, and the executor hands
  them in;
- its `graph` attribute is the frame serialized (`ge_hub.ir.serialize`, base64 text).

Its outputs are the frame's. The reference evaluates the frame; the built-in kernel
(`ge_hub.kernels.control`) does too, with bodies compiled once their shapes repeat.
Closure is ge-hub's own op (ONNX has none); it appears only in compiled graphs.
"""

from __future__ import annotations

import base64
import binascii
import functools

from ge_hub.errors import SerializationError
from ge_hub.ir.graph import Graph
from ge_hub.ir.types import TensorType
from ge_hub.ops.schema import ANY, Attr, AttrKind, InferenceContext, Input, Output, op


def encode_frame(frame: Graph) -> str:
    """The text a Closure's `graph` attribute holds for `frame`."""
    from ge_hub.ir.serialize import dumps

    return base64.b64encode(dumps(frame)).decode("ascii")


@functools.lru_cache(maxsize=256)
def decode_frame(text: str) -> Graph:
    """The frame a Closure's `graph` attribute holds (cached: callers must not change it)."""
    from ge_hub.ir.serialize import loads

    try:
        frame = loads(base64.b64decode(text.encode("ascii"), validate=True))
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise SerializationError(f"a Closure's graph attribute is not base64 text: {exc}") \
            from None
    if len(frame.nodes) != 1:
        raise SerializationError(f"a Closure's frame holds one node, this one holds "
                                 f"{len(frame.nodes)}")
    return frame


def _infer_closure(ctx: InferenceContext) -> list[TensorType]:
    from ge_hub.ops import get_schema

    try:
        frame = decode_frame(ctx.attrs["graph"])
    except SerializationError as exc:
        ctx.fail(f"attribute 'graph': {exc}")
    if len(ctx.input_types) != len(frame.inputs):
        ctx.fail(f"its frame takes {len(frame.inputs)} inputs, the node has "
                 f"{len(ctx.input_types)}")
    given = {}
    for index, (value, t) in enumerate(zip(frame.inputs, ctx.input_types)):
        if t is None or t.dtype != value.type.dtype:
            ctx.fail(f"input {index} must be {value.type.dtype} (frame input "
                     f"{value.name!r}), got {t}")
        given[id(value)] = (t, ctx.const(index))
    (node,) = frame.nodes
    ins = [None if v is None else given[id(v)] for v in node.inputs]
    return get_schema(node.op, node.domain).infer_types(
        [None if i is None else i[0] for i in ins], node.attrs,
        consts=[None if i is None else i[1] for i in ins], num_outputs=len(node.outputs),
        node_name=ctx.node_name)


@op("Closure",
    inputs=[Input("reads", ANY, type_var=None, optional=True, variadic=True)],
    outputs=[Output("outputs", variadic=True)],
    attrs=[Attr("graph", AttrKind.STRING)],
    infer=_infer_closure)
def closure(*reads, graph):
    """Evaluate the frame on the values the node reads; its outputs."""
    from ge_hub.ops.reference import evaluate

    return tuple(evaluate(decode_frame(graph), list(reads)))
