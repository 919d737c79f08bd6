"""The precision pass: which products run in bf16 (the `precision` compile option).

    fp32    (the default) nothing changes: every op computes in fp32, exactly as before.
    bf16    every product (Conv, FusedConv, ConvTranspose, Gemm, MatMul, Attention) is
            marked bf16: bf16 inputs, fp32 sums.
    mixed   like bf16, but the products whose results numerically sensitive ops read are
            kept accurate: a product read (through layout-only ops) by Softmax,
            LogSoftmax, Exp, Log, Pow, Sqrt, a normalization or a reduction; and the last
            layer (a product from which a graph output is reached without another
            product). Kept accurate means bf16x3 where the product has a bf16x3 kernel
            (MatMul, Gemm and FusedMatMul with a constant weight), fp32 elsewhere.

The first layer (a product reading a graph input) was kept fp32 too until measured: bf16
rounds relatively, so the input's scale does not matter, and ResNet-18's error against
fp32 was 7.5e-4 with its stem in fp32, 7.3e-4 with it in bf16 (the median over five
inputs; bf16 2.4e-3), MobileNetV2's 2.2e-4 either way, while the fp32 stem took ResNet-18
in mixed from 2.68 to 3.51 ms (two threads, AMX Xeon; bf16 2.31). What bounds ResNet-18's
error is its last layer: with the final Gemm in bf16 too, 2.45e-3.

bf16x3 is three bf16 products standing for one fp32 product: each operand split into a
high and a low bf16 part (x = hi + lo to about 16 bits of mantissa), hi hi + lo hi + hi lo
summed in fp32, so its error is about 2^-16 relative where bf16's is 2^-8, on the bf16
micro-kernels at three times bf16's depth (two to three times fp32's speed: BERT-base's
[128, 768] x [768, 768] one thread on the AMX Xeon, fp32 1.0 ms, bf16x3 0.40, bf16 0.19;
its [128, 3072] x [3072, 768] 4.3, 1.8 and 0.64 ms). PyTorch's float32_matmul_precision
"high" is the same idea.

`precision_ops` ({node name or op type: "fp32", "bf16" or "bf16x3"}) forces single nodes
or whole op types, in any mode but fp32; a node name wins over its op type, and a fused
op answers to the op it fuses too ("Conv" covers FusedConv, "MatMul" FusedMatMul). A node
forced or marked bf16x3 whose kernel has no such variant runs fp32.

The mark is `node.meta["precision"]`. It is not a conversion node: the bf16 kernels
(ge_hub.kernels.nn_bf16) round their constant weights once at compile time and their
activations as they pack them (the packing the product does anyway), and store fp32, so
the conversions are folded into the neighbouring loads and stores and no conversion step
exists in the plan. Activations between steps stay fp32, so in every mode the ops
outside the products (the sensitive ones included) compute in fp32; the one exception is
precision bf16 on AMX, where the `channels_last` pass runs chains of Convs on bf16
channels-last activations (ge_hub/passes/channels_last.py), as OpenVINO keeps its bf16
activations, with a Cast and a Transpose where a chain meets the other ops. A marked product
whose kernel has no bf16 variant for its shapes (Attention, a Conv with fewer than 16
values per output, a ConvTranspose with fewer than 16 input channels per group or weights
fed at run time) runs fp32 (a MatMul of two activations whose batch dims broadcast only
in part runs in bf16 as the StridedMatMul `fold_matmul_views` makes of it); a plan says
which steps ran in bf16 (`ge_hub.precision_report.step_precision`, `summary()`).
"""

from __future__ import annotations

from collections.abc import Mapping

from ge_hub.ir.graph import Graph, Node
from ge_hub.passes import PassResult
from ge_hub.passes.context import PassContext

MODES = ("fp32", "bf16", "mixed")
# What a product can be marked (node.meta["precision"]).
MARKS = ("fp32", "bf16", "bf16x3")
PRODUCT_OPS = frozenset({"Conv", "FusedConv", "ConvTranspose", "Gemm", "MatMul", "FusedMatMul",
                         "Attention", "PointwiseDepthwise", "StridedMatMul", "FusedConvNHWC"})
# The op a fused product answers to in `precision_ops`, besides its own.
FUSED_OF = {"FusedConv": "Conv", "FusedMatMul": "MatMul", "PointwiseDepthwise": "Conv",
            "StridedMatMul": "MatMul", "FusedConvNHWC": "Conv"}
SENSITIVE_OPS = frozenset({"Softmax", "LogSoftmax", "Exp", "Log", "Pow", "Sqrt", "Reciprocal",
                           "BatchNormalization", "InstanceNormalization", "GroupNormalization",
                           "LayerNormalization", "SkipLayerNormalization",
                           "LpNormalization", "MeanVarianceNormalization", "RMSNormalization",
                           "SimplifiedLayerNormalization", "LRN", "GlobalAveragePool",
                           "GlobalLpPool", "CumSum", "Einsum"})
# Ops that move values without computing: a product read through them is read directly.
LAYOUT_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose",
                        "Dropout"})


def check_precision_options(options: Mapping) -> None:
    """Refuse a bad `precision` or `precision_ops` option, naming it."""
    mode = options.get("precision", "fp32")
    if mode not in MODES:
        raise ValueError(f"unknown precision {mode!r}; known: {', '.join(MODES)}")
    forced = options.get("precision_ops") or {}
    if not isinstance(forced, Mapping):
        raise ValueError("precision_ops must map node names or op types to one of "
                         f"{', '.join(map(repr, MARKS))}, got {type(forced).__name__}")
    for key, value in forced.items():
        if value not in MARKS:
            raise ValueError(f"precision_ops[{key!r}] must be one of "
                             f"{', '.join(map(repr, MARKS))}, got {value!r}")


def is_product(node: Node) -> bool:
    return node.op in PRODUCT_OPS


def _sensitive(node: Node) -> bool:
    return node.op in SENSITIVE_OPS or node.op.startswith("Reduce") or "Norm" in node.op


def _readers(node: Node):
    """The nodes reading `node`'s outputs, looking through layout-only ops; and whether a
    graph output is among what they reach that way."""
    found, reaches_output, todo, seen = [], False, list(node.outputs), set()
    while todo:
        value = todo.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if node.graph is not None and any(value is out for out in node.graph.outputs):
            reaches_output = True
        for user in value.users:
            if user.op in LAYOUT_OPS:
                todo.extend(user.outputs)
            else:
                found.append(user)
    return found, reaches_output


def _reaches_output_without_product(graph: Graph) -> set[int]:
    """ids of the nodes from which a graph output is reached through no product."""
    outputs = {id(v) for v in graph.outputs}
    marked: set[int] = set()
    for node in reversed(graph.nodes):  # topological order: readers come later
        if any(id(v) in outputs for v in node.outputs) or any(
                id(user) in marked and not is_product(user)
                for v in node.outputs for user in v.users):
            marked.add(id(node))
    return marked


def mixed_keeps_accurate(node: Node, graph: Graph, last: set[int]) -> str | None:
    """Why `mixed` keeps this product accurate (bf16x3 or fp32), or None."""
    readers, _ = _readers(node)
    sensitive = [r for r in readers if _sensitive(r)]
    if sensitive:
        return f"read by {sensitive[0].op}"
    if id(node) in last:
        return "last layer"
    return None


def assign_precision(graph: Graph, ctx: PassContext | None = None) -> PassResult:
    """Mark each product node bf16, bf16x3 or fp32 (`node.meta["precision"]`)."""
    options = ctx.options if ctx is not None else {}
    check_precision_options(options)
    mode = options.get("precision", "fp32")
    forced = dict(options.get("precision_ops") or {})
    if mode == "fp32":
        return PassResult(graph, False)
    last = _reaches_output_without_product(graph) if mode == "mixed" else set()
    for node in graph.nodes:
        if not is_product(node):
            continue
        choice = (forced.get(node.name) or forced.get(node.op)
                  or forced.get(FUSED_OF.get(node.op, node.op)))
        if choice is None:
            keep = mode == "mixed" and mixed_keeps_accurate(node, graph, last) is not None
            choice = "bf16x3" if keep else "bf16"
        node.meta["precision"] = choice
    return PassResult(graph, True)
