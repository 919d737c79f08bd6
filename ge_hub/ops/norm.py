"""Normalization ops: BatchNormalization (inference and training mode), LayerNormalization,
InstanceNormalization, MeanVarianceNormalization, LpNormalization, LRN, Hardmax
(the one-hot of the maximum along an axis), and ge_hub.SkipLayerNormalization (a residual
Add and the LayerNormalization after it, made by the `fuse_layer_norm` pass).

Statistics are computed in the work dtype of `ge_hub.ops.nn_common.work_dtype`, or in
LayerNormalization's stash type; every output is cast back to the dtype inference
promised.
"""

from __future__ import annotations

import numpy as np

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import TensorType
from ge_hub.ops import elementwise as elementwise_ops
from ge_hub.ops.inference import normalize_axes, normalize_axis
from ge_hub.ops.nn_common import (
    check_broadcasts_to,
    check_vector,
    dim_or_sym,
    in_work_dtype,
    output_count,
    work_dtype,
)
from ge_hub.ops.schema import FLOATS, REQUIRED, Attr, AttrKind, InferenceContext, Input, Output, op


def _channel_shape(x: np.ndarray) -> tuple[int, ...]:
    """Shape that lines a per-channel vector up with axis 1 of `x`."""
    return (x.shape[1], *([1] * (x.ndim - 2)))


def _infer_batch_norm(ctx: InferenceContext) -> list[TensorType]:
    x = ctx.input(0)
    ctx.require_rank(0, at_least=2)
    training = ctx.attrs["training_mode"]
    if training not in (0, 1):
        ctx.fail(f"attribute 'training_mode' must be 0 or 1, got {training}")
    outputs = output_count(ctx, 1)
    if outputs != 1 and not training:
        ctx.fail(f"outputs 'running_mean' and 'running_var' exist only in training mode, "
                 f"got {ctx.num_outputs} outputs")
    if ctx.attrs["epsilon"] < 0:
        ctx.fail(f"attribute 'epsilon' must be >= 0, got {ctx.attrs['epsilon']}")
    channels = dim_or_sym(ctx, x, 1, "C")
    for index in range(1, 5):
        check_vector(ctx, index, channels, "one per channel of 'X'")
    running = TensorType(ctx.input(3).dtype, (channels,))
    return [x] + [running] * (outputs - 1)


@op("BatchNormalization",
    inputs=[Input("X", FLOATS), Input("scale", FLOATS, "T1"), Input("B", FLOATS, "T1"),
            Input("input_mean", FLOATS, "T2"), Input("input_var", FLOATS, "T2")],
    outputs=[Output("Y"), Output("running_mean", optional=True),
             Output("running_var", optional=True)],
    infer=_infer_batch_norm,
    attrs=[Attr("epsilon", AttrKind.FLOAT, 1e-5), Attr("momentum", AttrKind.FLOAT, 0.9),
           Attr("training_mode", AttrKind.INT, 0)])
def batch_normalization(x, scale, b, mean, var, *, epsilon, momentum, training_mode):
    """Y = (X - mean) / sqrt(var + epsilon) * scale + B, per channel (axis 1).

    Inference mode uses input_mean and input_var. Training mode uses the batch's own
    statistics (mean and population variance over every axis but 1) and also returns
    running_mean = input_mean * momentum + batch mean * (1 - momentum), and running_var
    likewise from the batch variance."""
    if training_mode not in (0, 1):
        raise OpError(f"BatchNormalization: attribute 'training_mode' must be 0 or 1, "
                      f"got {training_mode}")
    work = np.result_type(work_dtype(x.dtype), work_dtype(scale.dtype),
                          work_dtype(mean.dtype))
    shape = _channel_shape(x)

    def per_channel(v):
        return v.astype(work).reshape(shape)

    data = x.astype(work)
    if training_mode:
        # Statistics in the work dtype: float32 at least, so float16 sums do not overflow.
        axes = (0, *range(2, x.ndim))
        batch_mean = data.mean(axis=axes)
        batch_var = np.square(data - batch_mean.reshape(shape)).mean(axis=axes)
        use_mean, use_var = batch_mean, batch_var
    else:
        use_mean, use_var = mean, var
    inv_std = 1.0 / np.sqrt(per_channel(use_var) + work.type(epsilon))
    y = ((data - per_channel(use_mean)) * inv_std * per_channel(scale)
         + per_channel(b)).astype(x.dtype)
    if not training_mode:
        return y
    keep = work.type(momentum)
    running_mean = mean.astype(work) * keep + batch_mean * (1 - keep)
    running_var = var.astype(work) * keep + batch_var * (1 - keep)
    return y, running_mean.astype(mean.dtype), running_var.astype(var.dtype)


STASH_TYPES = {1: DType.FLOAT32, 11: DType.FLOAT64}  # ONNX TensorProto element type codes


def _infer_layer_norm(ctx: InferenceContext) -> list[TensorType]:
    x = ctx.input(0)
    stash = STASH_TYPES.get(ctx.attrs["stash_type"])
    if stash is None:
        ctx.fail(f"attribute 'stash_type' must be 1 (float32) or 11 (float64), "
                 f"got {ctx.attrs['stash_type']}")
    if x.rank == 0:
        ctx.fail(f"input 'X' must have rank >= 1, got {x}")
    axis = normalize_axis(ctx, ctx.attrs["axis"], x.rank, "attribute 'axis'")
    if x.shape is not None:
        for index in (1, 2):
            if ctx.has_input(index):
                check_broadcasts_to(ctx, index, x.shape[axis:])
    stats_shape = None if x.shape is None else (*x.shape[:axis], *[1] * (x.rank - axis))
    return [x] + [TensorType(stash, stats_shape)] * (output_count(ctx, 1) - 1)


@op("LayerNormalization",
    inputs=[Input("X", FLOATS), Input("Scale", FLOATS), Input("B", FLOATS, optional=True)],
    outputs=[Output("Y"), Output("Mean", optional=True),
             Output("InvStdDev", optional=True)],
    infer=_infer_layer_norm,
    attrs=[Attr("axis", AttrKind.INT, -1), Attr("epsilon", AttrKind.FLOAT, 1e-5),
           Attr("stash_type", AttrKind.INT, 1)])
def layer_normalization(x, scale, b=None, *, axis, epsilon, stash_type):
    """Y = (X - mean) / sqrt(var + epsilon) * Scale + B, statistics over axes axis..-1,
    computed in the stash type; Mean and InvStdDev keep the reduced axes as size 1."""
    stash = STASH_TYPES[stash_type].numpy
    axes = tuple(range(axis % x.ndim, x.ndim))
    data = x.astype(stash)
    mean = data.mean(axis=axes, keepdims=True)
    centered = data - mean
    inv_std = 1.0 / np.sqrt((centered * centered).mean(axis=axes, keepdims=True)
                            + stash.type(epsilon))
    y = centered * inv_std * scale.astype(stash)
    if b is not None:
        y = y + b.astype(stash)
    return y.astype(x.dtype), mean, inv_std.astype(stash)


def _infer_instance_norm(ctx: InferenceContext) -> list[TensorType]:
    x = ctx.input(0)
    ctx.require_rank(0, at_least=3)
    channels = dim_or_sym(ctx, x, 1, "C")
    for index in (1, 2):
        check_vector(ctx, index, channels, "one per channel of 'input'")
    return [x]


@op("InstanceNormalization",
    inputs=[Input("input", FLOATS), Input("scale", FLOATS), Input("B", FLOATS)],
    outputs=[Output("output")], infer=_infer_instance_norm,
    attrs=[Attr("epsilon", AttrKind.FLOAT, 1e-5)])
def instance_normalization(x, scale, b, *, epsilon):
    """Y = (X - mean) / sqrt(var + epsilon) * scale + B, statistics per (n, c) over the
    spatial dims."""
    work = work_dtype(x.dtype)
    axes = tuple(range(2, x.ndim))
    data = x.astype(work)
    mean = data.mean(axis=axes, keepdims=True)
    centered = data - mean
    var = (centered * centered).mean(axis=axes, keepdims=True)
    shape = _channel_shape(x)
    y = (centered / np.sqrt(var + work.type(epsilon)) * scale.astype(work).reshape(shape)
         + b.astype(work).reshape(shape))
    return y.astype(x.dtype)


def _infer_lrn(ctx: InferenceContext) -> list[TensorType]:
    ctx.require_rank(0, at_least=3)
    if ctx.attrs["size"] < 1:
        ctx.fail(f"attribute 'size' must be >= 1, got {ctx.attrs['size']}")
    return [ctx.input(0)]


@op("LRN", inputs=[Input("X", FLOATS)], outputs=[Output("Y")], infer=_infer_lrn,
    attrs=[Attr("alpha", AttrKind.FLOAT, 1e-4), Attr("beta", AttrKind.FLOAT, 0.75),
           Attr("bias", AttrKind.FLOAT, 1.0), Attr("size", AttrKind.INT, REQUIRED)])
def lrn(x, *, alpha, beta, bias, size):
    """Local response normalization across channels: Y = X / (bias + alpha / size *
    sum of X^2 over the `size` channels around c) ^ beta."""
    work = work_dtype(x.dtype)
    squares = np.square(x.astype(work))
    channels = x.shape[1]
    below, above = (size - 1) // 2, size - 1 - (size - 1) // 2
    # Each window summed directly (not as a difference of running sums), so an inf or
    # NaN in one channel reaches only the windows that contain it.
    window_sums = np.zeros_like(squares)
    for c in range(channels):
        window_sums[:, c] = squares[:, max(0, c - below):min(channels, c + above + 1)].sum(axis=1)
    y = x.astype(work) / (work.type(bias) + work.type(alpha / size) * window_sums) ** beta
    return y.astype(x.dtype)


# --- Hardmax, LpNormalization -----------------------------------------------------------


def _infer_along_axis(ctx: InferenceContext) -> list[TensorType]:
    """Same type as the input; attribute 'axis' must fit its rank."""
    normalize_axis(ctx, ctx.attrs["axis"], ctx.input(0).rank, "attribute 'axis'")
    if "p" in ctx.attrs and ctx.attrs["p"] not in (1, 2):
        ctx.fail(f"attribute 'p' must be 1 or 2, got {ctx.attrs['p']}")
    return [ctx.input(0)]


@op("Hardmax", inputs=[Input("input", FLOATS)], outputs=[Output("output")],
    infer=_infer_along_axis, attrs=[Attr("axis", AttrKind.INT, -1)])
def hardmax(x, *, axis):
    """output = 1 at the first maximum along `axis` (a NaN counts as the maximum), 0 elsewhere."""
    if not -x.ndim <= axis < x.ndim:
        raise OpError(f"Hardmax: attribute 'axis' {axis} is out of range for rank {x.ndim}")
    winner = np.expand_dims(np.argmax(in_work_dtype(x), axis=axis), axis)
    positions = np.arange(x.shape[axis]).reshape([-1 if a == axis % x.ndim else 1
                                                  for a in range(x.ndim)])
    return (positions == winner).astype(x.dtype)


@op("LpNormalization", inputs=[Input("input", FLOATS)], outputs=[Output("output")],
    infer=_infer_along_axis, attrs=[Attr("axis", AttrKind.INT, -1), Attr("p", AttrKind.INT, 2)])
def lp_normalization(x, *, axis, p):
    """output = input / (L1 or L2 norm of input along `axis`); 0 where the norm is 0."""
    if p not in (1, 2):
        raise OpError(f"LpNormalization: attribute 'p' must be 1 or 2, got {p}")
    if not -x.ndim <= axis < x.ndim:
        raise OpError(f"LpNormalization: attribute 'axis' {axis} is out of range for rank "
                      f"{x.ndim}")
    work = in_work_dtype(x)
    if p == 1:
        norm = np.sum(np.abs(work), axis=axis, keepdims=True)
    else:
        norm = np.sqrt(np.sum(np.square(work), axis=axis, keepdims=True))
    # The spec defines 0/0 as 0 here; dividing by 1 instead keeps NumPy quiet.
    safe = np.where(norm == 0, 1, norm)
    return np.where(norm == 0, 0, work / safe).astype(x.dtype)


# --- MeanVarianceNormalization ----------------------------------------------------------

# The ONNX function body adds this to the standard deviation before dividing.
_MVN_EPSILON = 1e-9


def _infer_mvn(ctx: InferenceContext) -> list[TensorType]:
    normalize_axes(ctx, ctx.attrs["axes"], ctx.input(0).rank, "attribute 'axes'")
    return [ctx.input(0)]


@op("MeanVarianceNormalization", inputs=[Input("X", FLOATS)], outputs=[Output("Y")],
    infer=_infer_mvn, attrs=[Attr("axes", AttrKind.INTS, [0, 2, 3])])
def mean_variance_normalization(x, *, axes):
    """Y = (X - mean) / (std + 1e-9), mean and (population) std taken over `axes`."""
    for a in axes:
        if not -x.ndim <= a < x.ndim:
            raise OpError(f"MeanVarianceNormalization: attribute 'axes' {axes} is out of "
                          f"range for 'X' of rank {x.ndim}")
    work = in_work_dtype(x)
    axes = tuple(a % x.ndim for a in axes)
    centered = work - np.mean(work, axis=axes, keepdims=True)
    # E[(X - EX)^2] rather than E[X^2] - (EX)^2: the same value, never negative.
    std = np.sqrt(np.mean(np.square(centered), axis=axes, keepdims=True))
    return (centered / (std + _MVN_EPSILON)).astype(x.dtype)


# --- ge_hub.SkipLayerNormalization --------------------------------------------------------

# ge-hub's own domain for the internal ops fusion passes make (ge_hub.FusedConv's too).
FUSED_DOMAIN = "ge_hub"


def _infer_skip_layer_norm(ctx: InferenceContext) -> list[TensorType]:
    x, skip = ctx.input(0), ctx.input(1)
    if x.rank == 0:
        ctx.fail(f"input 'X' must have rank >= 1, got {x}")
    if x.shape is not None and skip.shape is not None and tuple(x.shape) != tuple(skip.shape):
        ctx.fail(f"input 'Skip' {skip} must have the shape of 'X' {x}")
    axis = normalize_axis(ctx, ctx.attrs["axis"], x.rank, "attribute 'axis'")
    if x.shape is not None:
        for index in (2, 3, 4):
            if ctx.has_input(index):
                check_broadcasts_to(ctx, index, x.shape[axis:])
    return [x] * output_count(ctx, 1)


@op("SkipLayerNormalization", domain=FUSED_DOMAIN,
    inputs=[Input("X", FLOATS), Input("Skip", FLOATS), Input("Scale", FLOATS),
            Input("B", FLOATS, optional=True), Input("Bias", FLOATS, optional=True)],
    outputs=[Output("Y"), Output("Sum", optional=True)], infer=_infer_skip_layer_norm,
    attrs=[Attr("axis", AttrKind.INT, -1), Attr("epsilon", AttrKind.FLOAT, 1e-5)])
def skip_layer_normalization(x, skip, scale, b=None, bias=None, *, axis, epsilon):
    """Y = LayerNormalization((X + Bias) + Skip, Scale, B): a residual Add (and the bias
    Add of the layer before it; omitted: none) and the LayerNormalization after it, as
    the nodes the `fuse_layer_norm` pass replaced compute them (float32 statistics).
    Skip has X's shape; Bias, Scale and B broadcast to the normalized axes axis..-1.
    Sum, when asked for, is (X + Bias) + Skip itself: a pre-norm block's residual
    stream, which the next block reads again."""
    if x.shape != skip.shape:
        raise OpError(f"ge_hub.SkipLayerNormalization: input 'Skip' has shape {skip.shape}, "
                      f"'X' has {x.shape}")
    total = x if bias is None else elementwise_ops.add(x, bias)
    total = elementwise_ops.add(total, skip)
    y = layer_normalization(total, scale, b, axis=axis, epsilon=epsilon, stash_type=1)[0]
    return y, total
