"""Run chains of bf16 Convs on channels-last tensors (the `channels_last` pass).

Where the bf16 products run on AMX tiles, a Conv's tiles read 16 positions of 32 channels
each and hold its output the same way round: positions by channels. On NCHW tensors every
such Conv turns its input around as it converts it to bf16 and turns each output tile back
before storing it; in ResNet-18 those two steps took as long as the products (64 channels
at 56x56: 0.26 ms a layer, 0.10 of it the products). So where two or more such Convs are
neighbours (one reads what the other writes, as input or residual), this pass makes each
a `ge_hub.FusedConvNHWC`: the same Conv, bias, residual and activation on (N, H, W, C)
tensors, which its kernel (core/kernels/conv.c, NN_CONV_NHWC_BF16_CL) converts and stores
in the order the tiles use. A Transpose is put where the chain meets the rest of the
graph (one per value and direction: ResNet's MaxPool output in, its last Conv's output
out to GlobalAveragePool).

A Conv or FusedConv is taken when the precision pass marked it bf16, the bf16
micro-kernel is AMX (`ge_hub.kernels.conv.nhwc_bf16_pays`), its shapes are static and
2-D, its output is not a graph output, and the channels-last kernel fits it
(`ge_hub.kernels.conv.nhwc_cl_fits`: constant weights, one group, a multiple of 32 input
channels, strides of 1 or 2, an activation the AMX store applies). A Conv that would be
alone (no neighbour taken) stays as it is: its two Transposes would cost what it saves.
Nothing changes in fp32 plans, nor on CPUs without AMX.
"""

from __future__ import annotations

from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Graph, Node, Value
from ge_hub.ir.types import TensorType
from ge_hub.kernels import conv as conv_kernels
from ge_hub.ops.conv import FUSED_DOMAIN, to_channels_last
from ge_hub.passes import PassResult
from ge_hub.passes.context import PassContext

NAME = "channels_last"
TO_CHANNELS_LAST = [0, 2, 3, 1]
TO_CHANNELS_FIRST = [0, 3, 1, 2]
FUSED_ATTRS = {"activation": "", "alpha": 0.0, "beta": 0.0}


def _static_4d(value: Value | None) -> bool:
    shape = None if value is None else value.type.shape
    return shape is not None and len(shape) == 4 and all(isinstance(d, int) for d in shape)


def _fits(node: Node, graph: Graph) -> bool:
    """Whether `node` can become a FusedConvNHWC."""
    is_conv = node.op == "Conv" and node.domain == ""
    is_fused = node.op == "FusedConv" and node.domain == FUSED_DOMAIN
    if not (is_conv or is_fused) or node.meta.get("precision") != "bf16":
        return False
    x, out = node.inputs[0], node.outputs[0]
    z = node.inputs[3] if is_fused and len(node.inputs) > 3 else None
    if not _static_4d(x) or not _static_4d(out) or (z is not None and not _static_4d(z)) \
            or any(out is v for v in graph.outputs):
        return False
    types = [TensorType(x.type.dtype, to_channels_last(x.type.shape)),
             *(v.type if v is not None else None for v in node.inputs[1:3])]
    out_type = TensorType(out.type.dtype, to_channels_last(out.type.shape))
    return conv_kernels.supports_fused_conv_nhwc(node, types, [out_type])


def _read_values(node: Node) -> list[Value]:
    """The activations a Conv reads: X, and a FusedConv's residual Z."""
    reads = [node.inputs[0]]
    if node.op == "FusedConv" and len(node.inputs) > 3 and node.inputs[3] is not None:
        reads.append(node.inputs[3])
    return reads


def _chains(graph: Graph) -> set[int]:
    """ids of the Convs to convert: those that fit and have a neighbour that fits."""
    fitting = {id(n) for n in graph.nodes if _fits(n, graph)}
    kept = set()
    for node in graph.nodes:
        if id(node) not in fitting:
            continue
        producers = [v.producer for v in _read_values(node) if v.producer is not None]
        readers = node.outputs[0].users
        if any(id(p) in fitting for p in producers) or any(id(r) in fitting for r in readers):
            kept.add(id(node))
    return kept


def _add(graph: Graph, op: str, value: Value, out_type: TensorType, attrs: dict,
         before: Node) -> Value:
    return graph.add_node(op, [value], [out_type], attrs, before=before).outputs[0]


def convert_to_channels_last(graph: Graph, ctx: PassContext | None = None) -> PassResult:
    """Make neighbouring AMX bf16 Convs FusedConvNHWC, with Transposes (and Casts) at the
    chain's edges."""
    mode = ctx.options.get("precision", "fp32") if ctx is not None else "fp32"
    if mode != "bf16" or not conv_kernels.nhwc_bf16_pays():
        return PassResult(graph, False)
    kept = _chains(graph)
    if not kept:
        return PassResult(graph, False)
    channels_last: dict[int, Value] = {}  # id of an NCHW value -> its channels-last twin

    def twin(value: Value, before: Node) -> Value:
        """`value` rounded to bf16 (halving what the Transpose moves), then turned."""
        if id(value) not in channels_last:
            shape = value.type.shape
            rounded = _add(graph, "Cast", value, TensorType(DType.BFLOAT16, shape),
                           {"to": DType.BFLOAT16}, before)
            channels_last[id(value)] = _add(
                graph, "Transpose", rounded,
                TensorType(DType.BFLOAT16, to_channels_last(shape)),
                {"perm": TO_CHANNELS_LAST}, before)
        return channels_last[id(value)]

    replaced = []
    for node in list(graph.nodes):
        if id(node) not in kept:
            continue
        inputs = [twin(node.inputs[0], node), *node.inputs[1:3]]
        reads = _read_values(node)
        if len(reads) > 1:
            inputs += [None] * (3 - len(inputs)) + [twin(reads[1], node)]
        out = node.outputs[0]
        attrs = {**FUSED_ATTRS, **node.attrs}
        new = graph.add_node("FusedConvNHWC", inputs,
                             [TensorType(DType.BFLOAT16, to_channels_last(out.type.shape))],
                             attrs, domain=FUSED_DOMAIN, before=node)
        new.meta.update(node.meta)
        channels_last[id(out)] = new.outputs[0]
        others = [(user, index) for user, index in out.uses if id(user) not in kept]
        if others:  # read by the rest of the graph: turned back once for all of them
            turned = _add(graph, "Transpose", new.outputs[0],
                          TensorType(DType.BFLOAT16, out.type.shape),
                          {"perm": TO_CHANNELS_FIRST}, node)
            back = _add(graph, "Cast", turned, out.type, {"to": out.type.dtype}, node)
            for user, index in others:
                user.set_input(index, back)
        replaced.append(node)
    for node in reversed(replaced):  # readers before the Convs they read
        graph.remove_node(node)
    return PassResult(graph, True)
