"""Run chains of bf16 Convs on channels-last bf16 activations (the `channels_last` pass).

Where the bf16 products run on AMX tiles, a Conv's tiles read 16 positions of 32 channels
each and hold its output the same way round: positions by channels. On NCHW float32
tensors every such Conv turns its input around as it rounds it to bf16, turns each output
tile back before storing it, and moves 4 bytes a value in and out of memory (input,
residual, output), which bounds ResNet's layers at 56x56 more than the products do. In
plans compiled with precision bf16 this pass makes chains of such Convs (one reads what
another writes, as input or residual) `ge_hub.FusedConvNHWC` steps on (N, H, W, C)
bfloat16 activations, the way OpenVINO's CPU plugin keeps its bf16 activations
channels-last: the grid a Conv reads is a copy of its input's rows, its tiles are stored
as they are, and every activation moves half the bytes. Where the chain meets the rest of
the graph each value is turned once: in by a `ge_hub.ToChannelsLast` (a Transpose and a
Cast to bf16 in one pass; ResNet's 3-channel input), out by a Transpose and a Cast back to
float32 (its last Conv's output, to GlobalAveragePool). A MaxPool between chained Convs
(ResNet's, after its stem) joins the chain as a `ge_hub.MaxPoolNHWC`.

The activations between a chain's Convs are then rounded to bf16 (sums, bias, residual and
activation stay fp32 within each Conv): ResNet-18's output error against fp32 went from
1.97e-3 to 2.37e-3 (OpenVINO's default: 3.0e-3). It runs for precision mixed too, whose
accurate Convs (marked bf16x3, run fp32) stay out of the chains as GE's mixed precision
keeps its fp16 ops' activations fp16 and its fp32 ops' fp32: ResNet-18 in mixed (its stem
still kept fp32 then), one thread on the AMX Xeon, 9.0 -> 6.8 ms (bf16: 3.6), error
against fp32 6.9e-4 -> 7.5e-4 (the median over five inputs; bf16's 2.4e-3); light
ResNet-50 in mixed 1.15x of bf16's time (was 1.36x in bench.precision).

Depthwise Convs marked bf16 join the chains too (a FusedConvNHWC with one group per
channel, core/kernels/conv_depthwise_nhwc.c: fp32 weights and sums over bf16 inputs), so
that MobileNetV2 is one chain from its input to its last 1x1 Conv, its projections read
and write bf16 channels-last and its expansions read their input as the AMX tiles do:
bf16, one thread on the AMX Xeon, 2.64 -> 2.40 ms; two threads 1.98 -> 1.60 (in one
process, alternating; `fuse_pointwise_depthwise`, which ran before this pass, now runs
after it and takes the pairs the chains leave). In mixed, two threads, 2.14 -> 1.72 ms
(bf16: 1.60), its error against fp32 2.2e-4 -> 2.4e-4 (bf16's 1.8e-3; the median over
five inputs): what bounds it is the classifier, which mixed keeps accurate.

A chain's values hold a multiple of 32 channels (`padded_channels`: a position's channels
are the AMX depth block), zeros past their own: a Conv that writes one gets zero weight
rows and zero bias (its padded outputs are its activation of 0), a Conv that reads one
zero weight columns (so the padded channels' values, finite, add nothing), a depthwise
Conv zero kernels; the value turned out of the chain is sliced back to its channels.
MobileNetV2's 16, 24 and 144 channels become 32, 32 and 160. A chain may not read a
value from outside whose channels need padding (ToChannelsLast turns a value as it is).

A Conv or FusedConv is taken when the precision pass marked it bf16, the bf16
micro-kernel is AMX (`ge_hub.kernels.conv.nhwc_bf16_pays`), its shapes are static and
2-D, its output is not a graph output, and a channels-last kernel fits it
(`ge_hub.kernels.conv.nhwc_cl_fits`: constant weights, one group, padded input channels
or a stem's 1 to 4, strides of 1 or 2, an activation the AMX store applies; or, for a
depthwise Conv, `ge_hub.kernels.conv_depthwise_nhwc.fits_depthwise_nhwc`); and its chain
has MIN_CONVS_PER_EDGE Convs or more per value turned at its edges (chains of Convs
first, then joined through MaxPools where they still pass: `_chains`). Nothing changes in
fp32 plans, nor on CPUs without AMX.
"""

from __future__ import annotations

import collections

import numpy as np

from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Graph, Node, Value
from ge_hub.ir.types import TensorType
from ge_hub.kernels import conv as conv_kernels
from ge_hub.kernels.conv_depthwise_nhwc import fits_depthwise_nhwc
from ge_hub.kernels.nn_bf16 import BF16_KB
from ge_hub.kernels.nn_common import filled_attrs
from ge_hub.ops.conv import FUSED_DOMAIN, to_channels_last
from ge_hub.passes import PassResult
from ge_hub.passes.context import PassContext

NAME = "channels_last"
TO_CHANNELS_FIRST = [0, 3, 1, 2]
FUSED_ATTRS = {"activation": "", "alpha": 0.0, "beta": 0.0}
# A chain is converted only with this many Convs (or more) per value turned in or out at
# its edges (a pass over the value each, which costs what a Conv or two saves): ResNet-18's
# chain of 19 Convs has 2 such values. MobileNetV2's chains, while its depthwise Convs
# stayed out of them (as in mixed plans), were each block's projection and the next
# block's expansion: 2 or 3 Convs with 2 or 3 values each, and converting them all took it
# from 2.73 to 4.00 ms (bf16, one thread, alternating in one process).
MIN_CONVS_PER_EDGE = 4


def _static_4d(value: Value | None) -> bool:
    shape = None if value is None else value.type.shape
    return shape is not None and len(shape) == 4 and all(isinstance(d, int) for d in shape)


def padded_channels(channels: int) -> int:
    """The channels a chain's value holds: a multiple of BF16_KB (the depth block the AMX
    path reads, a position's channels at a time), zeros past its own (weights padded with
    zero rows make them, weights padded with zero columns read them); a stem's input, at
    most STEM_CHANNELS, as it is."""
    if channels <= conv_kernels.STEM_CHANNELS:
        return channels
    return -(-channels // BF16_KB) * BF16_KB


def _cl_shape(shape, channels: int | None = None) -> tuple:
    """An NCHW shape channels-last, its channels padded (or `channels`)."""
    n, c, *spatial = shape
    return (n, *spatial, padded_channels(c) if channels is None else channels)


def _is_depthwise(node: Node) -> bool:
    """A Conv with one kernel per channel: W (C, 1, kh, kw) over X's C channels, C groups."""
    x, w = node.inputs[0].type.shape, node.inputs[1].type.shape if node.inputs[1] else None
    group = filled_attrs(node)["group"]
    return w is not None and len(w) == 4 and group > 1 and w[1] == 1 and w[0] == group \
        and x is not None and len(x) == 4 and x[1] == group


def _fits(node: Node, graph: Graph) -> bool:
    """Whether `node` can become a FusedConvNHWC on padded channels."""
    is_conv = node.op == "Conv" and node.domain == ""
    is_fused = node.op == "FusedConv" and node.domain == FUSED_DOMAIN
    if not (is_conv or is_fused) or node.meta.get("precision") != "bf16":
        return False
    x, out = node.inputs[0], node.outputs[0]
    z = node.inputs[3] if is_fused and len(node.inputs) > 3 else None
    if not _static_4d(x) or not _static_4d(out) or (z is not None and not _static_4d(z)) \
            or any(out is v for v in graph.outputs) or node.inputs[1] is None \
            or node.inputs[1].const is None:
        return False
    if _is_depthwise(node):  # its own kernel: fp32 sums over bf16 activations
        bf16 = DType.BFLOAT16  # on padded channels: more than a stem's
        return x.type.shape[1] > conv_kernels.STEM_CHANNELS and fits_depthwise_nhwc(
            node, [TensorType(bf16, _cl_shape(x.type.shape, x.type.shape[1])),
                   *(v.type if v is not None else None for v in node.inputs[1:3])],
            [TensorType(bf16, _cl_shape(out.type.shape, out.type.shape[1]))])
    w = node.inputs[1].type.shape
    channels = padded_channels(x.type.shape[1])
    types = [TensorType(x.type.dtype, _cl_shape(x.type.shape)),
             TensorType(node.inputs[1].type.dtype, (w[0], channels, *w[2:])),
             node.inputs[2].type if len(node.inputs) > 2 and node.inputs[2] is not None
             else None]
    out_type = TensorType(out.type.dtype, _cl_shape(out.type.shape))
    return conv_kernels.supports_fused_conv_nhwc(node, types, [out_type])


def _pool_fits(node: Node, graph: Graph) -> bool:
    """Whether `node` can become a MaxPoolNHWC: a 2-D float32 MaxPool with static shapes
    and no Indices, whose output is not a graph output."""
    if node.op != "MaxPool" or node.domain != "" or len(node.outputs) != 1:
        return False
    x, out = node.inputs[0], node.outputs[0]
    return _static_4d(x) and _static_4d(out) and x.type.dtype == DType.FLOAT32 \
        and not any(out is v for v in graph.outputs)


def _is_pool(node: Node) -> bool:
    return node.op == "MaxPool"


def _read_values(node: Node) -> list[Value]:
    """The activations a Conv reads: X, and a FusedConv's residual Z (a MaxPool: X)."""
    reads = [node.inputs[0]]
    if node.op == "FusedConv" and len(node.inputs) > 3 and node.inputs[3] is not None:
        reads.append(node.inputs[3])
    return reads


def _passing(graph: Graph, members: list[Node]) -> set[int]:
    """ids of `members` in the chains they make (joined where one reads what another
    writes) that have at least MIN_CONVS_PER_EDGE Convs per value crossing their edge
    (turned in or out)."""
    chain_of = {id(n): id(n) for n in members}

    def root(key: int) -> int:
        while chain_of[key] != key:
            chain_of[key] = chain_of[chain_of[key]]
            key = chain_of[key]
        return key

    for node in members:
        for value in _read_values(node):
            if value.producer is not None and id(value.producer) in chain_of:
                chain_of[root(id(node))] = root(id(value.producer))
    convs: dict[int, int] = collections.Counter(root(id(n)) for n in members
                                                if not _is_pool(n))
    edges: dict[int, set[int]] = collections.defaultdict(set)
    for node in members:
        chain = root(id(node))
        for value in _read_values(node):  # read from outside the chain: turned in
            if value.producer is None or id(value.producer) not in chain_of:
                edges[chain].add(id(value))
        if any(id(user) not in chain_of for user in node.outputs[0].users):
            edges[chain].add(id(node.outputs[0]))  # read outside: turned out
    return {id(n) for n in members
            if convs[root(id(n))] >= MIN_CONVS_PER_EDGE * max(1, len(edges[root(id(n))]))}


def _chains(graph: Graph) -> set[int]:
    """ids of the Convs and MaxPools to convert: the chains of Convs that pass the edge
    rule, then, where the chain they make still passes it, the MaxPools that fit and the
    Convs beyond them joined to those chains (ResNet's MaxPool and stem: its chain then
    starts at the graph's input, 3 channels, instead of the pool's 64 x 56 x 56 output).
    Where a MaxPool joins chains that do not pass together (its output read by a chain
    and by a Conv that stays NCHW) the Convs' chains are taken alone. A node that would
    read a value from outside its chain whose channels need padding (ToChannelsLast
    turns a value as it is) is left out, and the chains found again without it."""
    convs = [n for n in graph.nodes if _fits(n, graph)]
    pools = [n for n in graph.nodes if _pool_fits(n, graph)]
    while True:
        kept = _passing(graph, convs) | _passing(graph, convs + pools)
        unpadded = {id(n) for n in convs + pools if id(n) in kept and any(
            (v.producer is None or id(v.producer) not in kept)
            and padded_channels(v.type.shape[1]) != v.type.shape[1] for v in _read_values(n))}
        if not unpadded:
            return kept
        convs = [n for n in convs if id(n) not in unpadded]
        pools = [n for n in pools if id(n) not in unpadded]


def _padded_weights(graph: Graph, node: Node, channels: int) -> tuple[list, dict]:
    """W and B (and the group) of `node` for padded input and output channels: zero rows
    for the output channels past its own, zero columns for the input channels past X's
    (a depthwise Conv: zero kernels, one group per padded channel)."""
    w = np.asarray(node.inputs[1].const)
    b = node.inputs[2] if len(node.inputs) > 2 else None
    outputs = padded_channels(w.shape[0])
    depthwise = _is_depthwise(node)
    columns = 1 if depthwise else channels
    if w.shape[0] == outputs and w.shape[1] == columns:
        return [node.inputs[1], b], {}
    padded = np.zeros((outputs, columns, *w.shape[2:]), w.dtype)
    padded[:w.shape[0], :w.shape[1]] = w
    weights = [graph.add_constant(padded, prefix=f"{node.name}_w"), None]
    if b is not None:
        bias = np.zeros(outputs, b.const.dtype)
        bias[:b.const.shape[0]] = b.const
        weights[1] = graph.add_constant(bias, prefix=f"{node.name}_b")
    return weights, ({"group": outputs} if depthwise else {})


def _add_named(graph: Graph, name: str, op: str, *args, **kwargs) -> Node:
    """add_node named after the Conv it replaces (so that profiles and errors still say
    which layer ran), or by op where the graph has that name already."""
    try:
        return graph.add_node(op, *args, name=name, **kwargs)
    except ValueError:  # add_node refuses a taken name before it changes anything
        return graph.add_node(op, *args, **kwargs)


def _add(graph: Graph, op: str, value: Value, out_type: TensorType, attrs: dict,
         before: Node) -> Value:
    return graph.add_node(op, [value], [out_type], attrs, before=before).outputs[0]


def _turned_back(graph: Graph, value: Value, out_type: TensorType, before: Node) -> Value:
    """A chain's channels-last bf16 `value` as the NCHW `out_type` it stands for: turned
    around, cast, and its padded channels sliced off."""
    n, *spatial, held = value.type.shape
    turned = _add(graph, "Transpose", value, TensorType(DType.BFLOAT16, (n, held, *spatial)),
                  {"perm": TO_CHANNELS_FIRST}, before)
    back = _add(graph, "Cast", turned, TensorType(out_type.dtype, turned.type.shape),
                {"to": out_type.dtype}, before)
    if held == out_type.shape[1]:
        return back
    bounds = [graph.add_constant(np.array([v], np.int64), prefix="channels")
              for v in (0, out_type.shape[1], 1)]
    return graph.add_node("Slice", [back, *bounds], [out_type], {}, before=before).outputs[0]


def convert_to_channels_last(graph: Graph, ctx: PassContext | None = None) -> PassResult:
    """Make neighbouring AMX bf16 Convs FusedConvNHWC, with Transposes (and Casts) at the
    chain's edges."""
    mode = ctx.options.get("precision", "fp32") if ctx is not None else "fp32"
    if mode not in ("bf16", "mixed") or not conv_kernels.nhwc_bf16_pays():
        return PassResult(graph, False)
    kept = _chains(graph)
    if not kept:
        return PassResult(graph, False)
    channels_last: dict[int, Value] = {}  # id of an NCHW value -> its channels-last twin

    def twin(value: Value, before: Node) -> Value:
        """`value` turned channels-last and rounded to bf16 in one step."""
        if id(value) not in channels_last:
            shape = to_channels_last(value.type.shape)
            node = graph.add_node("ToChannelsLast", [value], [TensorType(DType.BFLOAT16, shape)],
                                  {"to": DType.BFLOAT16}, domain=FUSED_DOMAIN, before=before)
            channels_last[id(value)] = node.outputs[0]
        return channels_last[id(value)]

    replaced = []
    for node in list(graph.nodes):
        if id(node) not in kept:
            continue
        out = node.outputs[0]
        out_type = TensorType(DType.BFLOAT16, _cl_shape(out.type.shape))
        if _is_pool(node):
            attrs = {k: v for k, v in node.attrs.items() if k != "storage_order"}
            new = _add_named(graph, f"{node.name}_nhwc", "MaxPoolNHWC",
                             [twin(node.inputs[0], node)], [out_type], attrs,
                             domain=FUSED_DOMAIN, before=node)
        else:
            x = twin(node.inputs[0], node)
            weights, changed = _padded_weights(graph, node, x.type.shape[3])
            inputs = [x, *weights]
            reads = _read_values(node)
            if len(reads) > 1:
                inputs.append(twin(reads[1], node))
            while inputs[-1] is None:
                inputs.pop()
            attrs = {**FUSED_ATTRS, **node.attrs, **changed}
            new = _add_named(graph, f"{node.name}_nhwc", "FusedConvNHWC", inputs, [out_type],
                             attrs, domain=FUSED_DOMAIN, before=node)
        new.meta.update(node.meta)
        channels_last[id(out)] = new.outputs[0]
        others = [(user, index) for user, index in out.uses if id(user) not in kept]
        if others:  # read by the rest of the graph: turned back once for all of them
            back = _turned_back(graph, new.outputs[0], out.type, node)
            for user, index in others:
                user.set_input(index, back)
        replaced.append(node)
    for node in reversed(replaced):  # readers before the Convs they read
        graph.remove_node(node)
    return PassResult(graph, True)
