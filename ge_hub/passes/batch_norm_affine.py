"""Inference BatchNormalization as the per-channel affine it is, for `fuse_elementwise`.

A BatchNormalization that no Conv or Gemm took (`fold_batch_norm`), such as DenseNet's
pre-activation BN after a Concat and before Relu, is y = x * a + b per channel with

    a = scale / sqrt(var + eps),   b = B - mean * a      (in float64, rounded to float32)

when its four statistics are constants. Written as Mul(x, a) and Add(., b) with [C, 1, ...]
constants it joins the elementwise group next to it (its Relu, the exporter's Mul/Add
scale layer), so BN, activation and all run in one pass over memory instead of two or
more. This is the same arithmetic as the BatchNormalization kernel's folded path
(core/kernels/norm.c). A BatchNormalization with no fusable neighbour is left as it is:
its own kernel is as fast as a two-op group.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Graph, Node
from ge_hub.ir.types import TensorType
from ge_hub.ops import get_schema


def _affine(node: Node) -> tuple[np.ndarray, np.ndarray] | None:
    """(a, b) as [C, 1, ...] float32 arrays for an inference BatchNormalization on a static
    float32 input with constant statistics; None for any other node."""
    if node.op != "BatchNormalization" or node.domain != "" or len(node.outputs) != 1:
        return None
    attrs = get_schema(node.op).fill_attrs(dict(node.attrs), node.name)
    if attrs.get("training_mode", 0):
        return None
    if len(node.inputs) != 5 or any(v is None or not v.is_constant for v in node.inputs[1:]):
        return None
    x = node.inputs[0].type
    if x.dtype is not DType.FLOAT32 or not x.is_static or len(x.shape) < 2:
        return None
    channels = x.shape[1]
    params = [np.asarray(v.const, np.float64).reshape(-1) for v in node.inputs[1:]]
    if any(p.size != channels for p in params):
        return None
    scale, bias, mean, var = params
    a = scale / np.sqrt(var + float(attrs["epsilon"]))
    b = bias - mean * a
    shape = [channels] + [1] * (len(x.shape) - 2)
    return a.astype(np.float32).reshape(shape), b.astype(np.float32).reshape(shape)


def lower_batch_norms(graph: Graph, joins: Callable[[Node], bool]) -> list[str]:
    """Rewrite each inference BatchNormalization next to a node `joins` accepts (its input's
    only reader, or its output's only reader) into Mul + Add; returns their names."""
    lowered = []
    for node in list(graph.nodes):
        affine = _affine(node)
        if affine is None:
            continue
        x, y = node.inputs[0], node.outputs[0]
        before = x.producer is not None and len(x.users) == 1 and joins(x.producer)
        after = len(y.users) == 1 and joins(y.users[0])
        if not (before or after):
            continue
        a, b = (graph.add_constant(c, prefix=f"{node.name}_{k}") for c, k in zip(affine, "ab"))
        out = TensorType(DType.FLOAT32, y.type.shape)
        mul = graph.add_node("Mul", [x, a], [out], before=node)
        add = graph.add_node("Add", [mul.outputs[0], b], [out], before=node)
        graph.replace_all_uses(y, add.outputs[0])
        # The result keeps its name (a graph output's name is its interface).
        name = y.name
        y.name = graph.unique_name(f"{name}_replaced")
        add.outputs[0].name = name
        graph.remove_node(node)
        lowered.append(node.name)
    return lowered
