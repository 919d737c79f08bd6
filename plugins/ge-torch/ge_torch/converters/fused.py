"""PyTorch's fused inference kernels, spelled out in ge-hub ops.

In eval mode under `no_grad`, `nn.TransformerEncoderLayer` and `nn.MultiheadAttention`
take a "fast path" that calls one fused ATen op per layer (`_transformer_encoder_layer_fwd`,
`_native_multi_head_attention`). These ops have no decomposition, so they are written out
here with PyTorch's semantics: the query pre-scaled by 1/sqrt(head_dim) after its bias, a
boolean mask (True = masked out; a float mask counts as True where it is non-zero) whose
kind `mask_type` says how it broadcasts, and rows with every key masked giving zeros
instead of NaN.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from ge_hub.plugin import DType

from ge_torch.context import ConvertContext, rank
from ge_torch.converters import converter

aten = torch.ops.aten

# mask_type: 0 = attention mask [T, T]; 1 = key padding mask [B, T]; 2 = any mask that
# broadcasts to [B, heads, T, T].
SRC_MASK, KEY_PADDING_MASK, MERGED_MASK = 0, 1, 2


def _linear(cx: ConvertContext, x, weight, bias):
    """x @ weight.T + bias (ge-hub folds the transpose of a constant weight)."""
    y = cx.op("MatMul", x, cx.op("Transpose", weight, perm=[1, 0]))
    return y if bias is None else cx.op("Add", y, bias)


def _masked_softmax(cx: ConvertContext, scores, mask, mask_type):
    if mask is None:
        return cx.op("Softmax", scores, axis=-1)
    masked = cx.cast(mask, DType.BOOL)
    if mask_type == KEY_PADDING_MASK:
        masked = cx.op("Unsqueeze", masked, cx.ints([1, 2]))  # [B, 1, 1, T]
    elif mask_type not in (SRC_MASK, MERGED_MASK):
        cx.fail(f"attention mask_type {mask_type}")
    minus_inf = cx.scalar(-np.inf, scores.type.dtype)
    probs = cx.op("Softmax", cx.op("Where", masked, minus_inf, scores), axis=-1)
    # A row whose keys are all masked is NaN after the softmax; PyTorch gives zeros.
    all_masked = cx.op("ReduceMin", cx.cast(masked, DType.INT32), cx.ints([-1]), keepdims=1)
    zero = cx.scalar(0, scores.type.dtype)
    return cx.op("Where", cx.cast(all_masked, DType.BOOL), zero, probs)


def _attention(cx: ConvertContext, x, embed_dim, heads, qkv_weight, qkv_bias, proj_weight,
               proj_bias, mask, mask_type):
    """Self-attention of x [B, T, D] as `_native_multi_head_attention` computes it."""
    if rank(x) != 3 or embed_dim % heads:
        cx.fail(f"attention over {x.type} with {heads} heads")
    head_dim = embed_dim // heads
    qkv = _linear(cx, x, qkv_weight, qkv_bias)
    q, k, v = cx.op("Split", qkv, cx.ints([embed_dim] * 3), axis=2, outputs=3)
    split_heads = cx.ints([0, 0, heads, head_dim])
    q, k, v = (cx.op("Transpose", cx.op("Reshape", t, split_heads), perm=[0, 2, 1, 3])
               for t in (q, k, v))
    q = cx.op("Mul", q, cx.scalar(1.0 / math.sqrt(head_dim), q.type.dtype))
    scores = cx.op("MatMul", q, cx.op("Transpose", k, perm=[0, 1, 3, 2]))
    probs = _masked_softmax(cx, scores, mask, mask_type)
    context = cx.op("Transpose", cx.op("MatMul", probs, v), perm=[0, 2, 1, 3])
    context = cx.op("Reshape", context, cx.ints([0, 0, embed_dim]))
    return _linear(cx, context, proj_weight, proj_bias)


def _layer_norm(cx: ConvertContext, x, weight, bias, eps):
    return cx.op("LayerNormalization", x, weight, bias, axis=-1, epsilon=float(eps))


def _float_input(node) -> str | None:
    val = node.args[0].meta.get("val")
    if val is not None and val.dtype not in (torch.float32, torch.float64):
        return f"{node.target} of a {val.dtype} tensor"
    return None


@converter(aten._transformer_encoder_layer_fwd.default, check=_float_input)
def transformer_encoder_layer(cx, node, src, embed_dim, num_heads, qkv_weight, qkv_bias,
                              proj_weight, proj_bias, use_gelu, norm_first, eps,
                              norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2,
                              ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None,
                              mask_type=None):
    x = src
    if norm_first:
        x = _layer_norm(cx, x, norm_weight_1, norm_bias_1, eps)
    x = _attention(cx, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                   mask, mask_type)
    x = cx.op("Add", x, src)
    if not norm_first:
        x = _layer_norm(cx, x, norm_weight_1, norm_bias_1, eps)
    residual = x
    if norm_first:
        x = _layer_norm(cx, x, norm_weight_2, norm_bias_2, eps)
    hidden = _linear(cx, x, ffn_weight_1, ffn_bias_1)
    hidden = cx.op("Gelu", hidden) if use_gelu else cx.op("Relu", hidden)
    x = cx.op("Add", _linear(cx, hidden, ffn_weight_2, ffn_bias_2), residual)
    if not norm_first:
        x = _layer_norm(cx, x, norm_weight_2, norm_bias_2, eps)
    return x


def _self_attention_only(node) -> str | None:
    query, key, value = node.args[:3]
    if not (query is key is value):
        return "multi-head attention whose query, key and value differ"
    users = {u.args[1] for u in node.users if u.op == "call_function"
             and len(u.args) > 1 and isinstance(u.args[1], int)}
    if users - {0}:
        return "multi-head attention whose attention weights are read"
    return _float_input(node)


@converter(aten._native_multi_head_attention.default, check=_self_attention_only)
def native_multi_head_attention(cx, node, query, key, value, embed_dim, num_head, qkv_weight,
                                qkv_bias, proj_weight, proj_bias, mask=None,
                                need_weights=True, average_attn_weights=True, mask_type=None):
    out = _attention(cx, query, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight,
                     proj_bias, mask, mask_type)
    return out, None
