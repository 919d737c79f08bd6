"""Fold an inference BatchNormalization into the Conv before it.

    y = scale * (conv(x, W) + b - mean) / sqrt(var + eps) + bias
      = conv(x, W * k) + (b - mean) * k + bias,      k = scale / sqrt(var + eps)

When the convolution's weights and bias and all four BatchNormalization parameters are
constants and the convolution's output feeds only this BatchNormalization, the pair
becomes one Conv with new constant weights: one pass over the activation instead of two.
"""

from __future__ import annotations

import numpy as np

from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Graph, Node
from ge_hub.passes import PassResult


def _foldable(graph: Graph, bn: Node) -> Node | None:
    if bn.op != "BatchNormalization" or bn.domain or len(bn.outputs) != 1:
        return None
    if bn.attrs.get("training_mode", 0):
        return None
    x = bn.inputs[0]
    conv = x.producer
    if conv is None or conv.op != "Conv" or conv.domain or len(x.uses) != 1:
        return None
    if any(v is x for v in graph.outputs):
        return None
    if x.type.dtype is not DType.FLOAT32:
        return None
    if not all(v is not None and v.is_constant for v in bn.inputs[1:5]):
        return None
    if not conv.inputs[1].is_constant:
        return None
    if len(conv.inputs) > 2 and conv.inputs[2] is not None and not conv.inputs[2].is_constant:
        return None
    return conv


def fold_batch_norm(graph: Graph) -> PassResult:
    changed = False
    for bn in list(graph.nodes):
        conv = _foldable(graph, bn)
        if conv is None:
            continue
        scale, bias, mean, var = (v.const.astype(np.float64) for v in bn.inputs[1:5])
        epsilon = float(bn.attrs.get("epsilon", 1e-5))
        k = scale / np.sqrt(var + epsilon)
        weight = conv.inputs[1].const
        has_bias = len(conv.inputs) > 2 and conv.inputs[2] is not None
        old_bias = conv.inputs[2].const.astype(np.float64) if has_bias else 0.0
        shape = (-1,) + (1,) * (weight.ndim - 1)
        new_weight = (weight.astype(np.float64) * k.reshape(shape)).astype(weight.dtype)
        new_bias = ((old_bias - mean) * k + bias).astype(weight.dtype)

        conv.set_input(1, graph.add_constant(new_weight, prefix=f"{conv.name}_w"))
        bias_value = graph.add_constant(new_bias, prefix=f"{conv.name}_b")
        if has_bias:
            conv.set_input(2, bias_value)
        else:
            conv.inputs.append(None)
            conv.set_input(2, bias_value)
        folded, result = bn.outputs[0], conv.outputs[0]
        was_output = folded in graph.outputs
        graph.replace_all_uses(folded, result)
        graph.remove_node(bn)
        if was_output:
            result.name = folded.name  # graph outputs keep their names
        changed = True
    if changed:
        graph.remove_unused_constants()
    return PassResult(graph, changed)
