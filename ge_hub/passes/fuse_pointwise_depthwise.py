"""Fuse a bf16 pointwise Conv and the depthwise Conv reading it into one
`ge_hub.PointwiseDepthwise` step (the `fuse_pointwise_depthwise` pass):

    FusedConv(FusedConv(X, W1, B1, act1), W2, B2, act2)  ->  PointwiseDepthwise(X, W1, B1,
                                                              W2, B2, act1, act2)

where the first is a pointwise Conv (1x1, stride 1, unpadded, ungrouped) whose product the
precision pass marked bf16, and the second a depthwise Conv (group = its channels) that
is the only reader of the first one's output. That is how MobileNetV2's, MobileNetV3's
and EfficientNet's blocks begin (expand, then filter each channel), and the intermediate
is their widest tensor: MobileNetV2's first expansion writes 4.8 MB that the depthwise
step reads straight back, and both steps ran at the speed of memory. The fused kernel
(core/kernels/conv_pointwise_depthwise.c) computes it a band of rows at a time and filters
each band while it is in cache, so it is never stored.

Neither Conv may have a residual input; an absent bias becomes zeros. Only pointwise
Convs marked bf16 are fused: the fused kernel's product is the bf16 one, so the pass runs
after `assign_precision` and changes nothing in fp32 plans. The new node is marked bf16.
"""

from __future__ import annotations

import numpy as np

from ge_hub.ir.dtypes import DType
from ge_hub.kernels.conv_pointwise_depthwise import depthwise_geometry
from ge_hub.kernels.nn_bf16 import BF16, BF16_MIN_K
from ge_hub.ops.conv import FUSED_DOMAIN
from ge_hub.ops.window import layout, window
from ge_hub.passes import PassResult
from ge_hub.rewrite import Rule, apply
from ge_hub.rewrite.engine import CREATED_BY

NAME = "fuse_pointwise_depthwise"
# Fused only where the intermediate, per image, is well past a core's L2 (1 MiB on Zen 4)
# and the last-level cache serves it slowly. Measured in MobileNetV2, bf16, one thread,
# fused against the two steps, alternating runs (this host's timings move by 10-20%
# between runs): 16 -> 96 at 112x112 (4.8 MB) 0.56-0.66 ms against 0.68-0.98; 24 -> 144
# at 56x56 (1.8 MB) 0.24-0.28 against 0.23-0.29 (stride 2), 0.37-0.42 against 0.35-0.41
# (stride 1); 96 -> 576 at 14x14 (0.45 MB) 0.10-0.12 against 0.10-0.11: no gain there.
MIN_HIDDEN_BYTES = 2 << 20
RULE = f"{NAME}.expand_filter"
EPILOGUE_ATTRS = ("activation", "alpha", "beta")


def _pattern(op, x, w1, b1, z1, w2, b2, z2):
    hidden = op.FusedConv(x, w1.constant(), b1.constant().optional(), z1.optional(),
                          _domain=FUSED_DOMAIN)
    return op.FusedConv(hidden, w2.constant(), b2.constant().optional(), z2.optional(),
                        _domain=FUSED_DOMAIN)


def _nodes(match):
    """(the pointwise node, the depthwise node) of a match."""
    first, second = match.nodes
    return (first, second) if second.inputs[0] is first.outputs[0] else (second, first)


def _is_pointwise(attrs, x_shape, w1_shape) -> bool:
    if list(w1_shape[2:]) != [1, 1] or attrs["group"] != 1:
        return False
    one = window(attrs, 2, (1, 1), _raise)
    out_dims, pads = layout(one, list(x_shape[2:]))
    return list(out_dims) == list(x_shape[2:]) and all(p[0] == 0 for p in pads)


def _raise(message: str):
    raise ValueError(message)


def _check(ctx, x, w1, b1, z1, w2, b2, z2, match):
    if z1 is not None or z2 is not None:
        return ctx.reject("a Conv with a residual input (the fused kernel takes none)")
    pointwise, depthwise = _nodes(match)
    if pointwise.meta.get("precision") != BF16:
        return ctx.reject("the pointwise product is not marked bf16 (the fused kernel's "
                          "product is bf16)")
    t = x.type
    if t.dtype is not DType.FLOAT32 or t.rank != 4 or not t.is_static:
        return ctx.reject(f"input {t}: the fused kernel takes static float32 [N, C, H, W]")
    e, c = w1.type.shape[0], w1.type.shape[1]
    if c < BF16_MIN_K:
        return ctx.reject(f"{c} input channels: the bf16 product needs {BF16_MIN_K}")
    hidden = e * t.shape[2] * t.shape[3] * 4
    if hidden < MIN_HIDDEN_BYTES:
        return ctx.reject(f"the pointwise output ({hidden} bytes per image) is below "
                          f"MIN_HIDDEN_BYTES ({MIN_HIDDEN_BYTES}): nothing to save")
    if not _is_pointwise(match.attrs(pointwise), t.shape, w1.type.shape):
        return ctx.reject("the first Conv is not pointwise (1x1, stride 1, no padding, "
                          "one group)")
    attrs = match.attrs(depthwise)
    w2_shape = w2.type.shape
    if attrs["group"] != e or list(w2_shape[:2]) != [e, 1]:
        return ctx.reject(f"the second Conv is not depthwise over the {e} channels")
    kernel = attrs["kernel_shape"] or list(w2_shape[2:])
    if depthwise_geometry(attrs, t.shape[2:], kernel) is None:
        return ctx.reject(f"a depthwise window the fused kernel does not take "
                          f"(kernel {list(kernel)}, strides {attrs['strides']}, pads "
                          f"{attrs['pads']})")
    return True


def _fuse(op, x, w1, b1, z1, w2, b2, z2, match):
    pointwise, depthwise = _nodes(match)
    first = match.attrs(pointwise)
    zeros = np.zeros(w1.type.shape[0], np.float32)
    window_attrs = {k: v for k, v in depthwise.attrs.items() if k not in EPILOGUE_ATTRS}
    second = match.attrs(depthwise)
    return op.PointwiseDepthwise(
        x, w1, b1 if b1 is not None else op.constant(zeros), w2,
        b2 if b2 is not None else op.constant(zeros), _domain=FUSED_DOMAIN,
        pointwise_activation=first["activation"], pointwise_alpha=first["alpha"],
        pointwise_beta=first["beta"], activation=second["activation"],
        alpha=second["alpha"], beta=second["beta"], **window_attrs)


RULES = [Rule(_pattern, _fuse, check=_check, name=RULE,
              doc="a bf16 pointwise FusedConv and the depthwise FusedConv reading it -> "
                  "PointwiseDepthwise")]


def fuse_pointwise_depthwise(graph, ctx=None) -> PassResult:
    """Apply the rule, then mark what it made bf16 (the rewrite engine makes new nodes
    without the marks of the ones they replace)."""
    graph, count = apply(graph, RULES, ctx)
    for node in graph.nodes:
        if node.op == "PointwiseDepthwise" and node.meta.get(CREATED_BY) == RULE:
            node.meta["precision"] = BF16
    return PassResult(graph, count > 0)
