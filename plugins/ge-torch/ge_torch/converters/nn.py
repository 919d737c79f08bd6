"""Neural-network ATen ops: convolution, pooling, normalization, softmax, resampling.

Each keeps the op whole where ge-hub has it (Conv, MaxPool, LayerNormalization, ...),
so that ge-hub's kernels and fusions see the layer and not its arithmetic. Pooling with
`ceil_mode` is only handed over when it changes nothing, or when ge-hub's output size is
PyTorch's (the two frameworks disagree about windows that start in the right padding).
"""

from __future__ import annotations

import operator

import numpy as np
import torch

from ge_torch import symbolic
from ge_torch.context import ConvertContext, rank
from ge_torch.converters import converter

aten = torch.ops.aten


def _float_input(node) -> str | None:
    val = node.meta.get("val")
    if isinstance(val, (tuple, list)):
        val = val[0]
    if val is not None and not val.dtype.is_floating_point:
        return f"{node.target} of a {val.dtype} tensor"
    return None


def _users_of_outputs(node) -> set[int]:
    """Which outputs of a multi-output node are read (through getitem)."""
    used = set()
    for user in node.users:
        if user.op == "call_function" and user.target is operator.getitem:
            used.add(user.args[1])
        else:
            used.update(range(8))  # the tuple itself escapes: every output counts
    return used


def _only_first_output(node) -> str | None:
    if _users_of_outputs(node) - {0}:
        return f"{node.target}: only its first output has a ge-hub equivalent"
    return _float_input(node)


def _repeat(values, n: int) -> list[int]:
    values = [int(v) for v in (values if isinstance(values, (list, tuple)) else [values])]
    return values * n if len(values) == 1 else values


# --- convolution --------------------------------------------------------------------


@converter(aten.convolution.default, check=_float_input)
def convolution(cx, node, x, weight, bias, stride, padding, dilation, transposed,
                output_padding, groups):
    spatial = rank(x) - 2
    pads = _repeat(padding, spatial)
    attrs = dict(strides=_repeat(stride, spatial), pads=pads + pads,
                 dilations=_repeat(dilation, spatial), group=int(groups))
    if not transposed:
        return cx.op("Conv", x, weight, bias, **attrs)
    out_pad = _repeat(output_padding, spatial)
    return cx.op("ConvTranspose", x, weight, bias, output_padding=out_pad, **attrs)


# --- pooling ------------------------------------------------------------------------


def _pool_attrs(kernel, stride, padding, spatial: int) -> dict:
    kernel = _repeat(kernel, spatial)
    stride = _repeat(stride, spatial) if stride else kernel  # [] means "the kernel size"
    pads = _repeat(padding, spatial)
    return dict(kernel_shape=kernel, strides=stride, pads=pads + pads)


def _check_out_shape(cx: ConvertContext, y, what: str):
    """Fail when ge-hub's output size is not PyTorch's (ceil_mode corner cases)."""
    want = cx.out_sizes(0 if isinstance(cx.meta(), (tuple, list)) else None)
    got = list(y.type.shape or ())
    if len(got) != len(want) or any(isinstance(g, int) and isinstance(w, int) and g != w
                                    for g, w in zip(got, want)):
        cx.fail(f"{what}: ge-hub's output shape {got} is not PyTorch's {want}")
    return y


@converter(aten.max_pool2d_with_indices.default, aten.max_pool1d_with_indices.default,
           aten.max_pool3d_with_indices.default, check=_only_first_output)
def max_pool_with_indices(cx, node, x, kernel_size, stride=(), padding=0, dilation=1,
                          ceil_mode=False):
    spatial = rank(x) - 2
    y = cx.op("MaxPool", x, dilations=_repeat(dilation, spatial), ceil_mode=int(ceil_mode),
              **_pool_attrs(kernel_size, stride, padding, spatial))
    return _check_out_shape(cx, y, "max pool"), None


@converter(aten.max_pool2d.default, check=_float_input)
def max_pool(cx, node, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return max_pool_with_indices(cx, node, x, kernel_size, stride, padding, dilation,
                                 ceil_mode)[0]


@converter(aten.avg_pool2d.default, aten.avg_pool1d.default, aten.avg_pool3d.default,
           check=_float_input)
def avg_pool(cx, node, x, kernel_size, stride=(), padding=0, ceil_mode=False,
             count_include_pad=True, divisor_override=None):
    if divisor_override is not None:
        cx.fail("avg_pool with divisor_override")
    spatial = rank(x) - 2
    attrs = _pool_attrs(kernel_size, stride, padding, spatial)
    y = cx.op("AveragePool", x, count_include_pad=int(count_include_pad), **attrs)
    # With ceil_mode, the last window's divisor differs between the frameworks; hand the
    # op over only when ceil_mode adds no window.
    return _check_out_shape(cx, y, "average pool (ceil_mode adds a window)")


@converter(aten._adaptive_avg_pool2d.default, aten.adaptive_avg_pool2d.default,
           check=_float_input)
def adaptive_avg_pool2d(cx, node, x, output_size):
    output_size = _repeat(output_size, 2)
    if output_size == [1, 1]:
        return cx.op("GlobalAveragePool", x)
    in_sizes = [symbolic.as_expr(s) for s in cx.meta(node.args[0]).shape[-2:]]
    if not all(isinstance(s, int) and s % o == 0 for s, o in zip(in_sizes, output_size)):
        cx.fail(f"adaptive pooling of {in_sizes} to {output_size} with uneven windows")
    kernel = [s // o for s, o in zip(in_sizes, output_size)]
    return cx.op("AveragePool", x, kernel_shape=kernel, strides=kernel)


# --- normalization ------------------------------------------------------------------


def _per_channel(cx: ConvertContext, value, channels, fill: float):
    if value is not None:
        return value
    if not isinstance(channels, int):
        cx.fail("normalization without affine weights over a symbolic channel count")
    return cx.const(np.full(channels, fill, dtype=cx.out_dtype.numpy))


@converter(aten._native_batch_norm_legit_no_training.default, check=_only_first_output)
def batch_norm_inference(cx, node, x, weight, bias, running_mean, running_var, momentum, eps):
    channels = symbolic.as_expr(cx.meta(node.args[0]).shape[1])
    y = cx.op("BatchNormalization", x, _per_channel(cx, weight, channels, 1.0),
              _per_channel(cx, bias, channels, 0.0), running_mean, running_var,
              epsilon=float(eps))
    return y, None, None


def _inference_batch_norm(node) -> str | None:
    if node.args[5]:
        return "batch norm in training mode (it updates running statistics)"
    return _only_first_output(node)


@converter(aten.native_batch_norm.default, check=_inference_batch_norm)
def native_batch_norm(cx, node, x, weight, bias, running_mean, running_var, training,
                      momentum, eps):
    return batch_norm_inference(cx, node, x, weight, bias, running_mean, running_var,
                                momentum, eps)


@converter(aten._native_batch_norm_legit.no_stats, check=_only_first_output)
def batch_norm_batch_statistics(cx, node, x, weight, bias, training, momentum, eps):
    # Normalization by the batch's own statistics (no running statistics to update):
    # what instance norm decomposes to.
    dtype = cx.out_dtype
    axes = cx.ints([0, *range(2, rank(x))])
    mean = cx.op("ReduceMean", x, axes, keepdims=1)
    centered = cx.op("Sub", x, mean)
    variance = cx.op("ReduceMean", cx.op("Mul", centered, centered), axes, keepdims=1)
    std = cx.op("Sqrt", cx.op("Add", variance, cx.scalar(eps, dtype)))
    y = cx.op("Div", centered, std)
    per_channel = cx.ints([-1] + [1] * (rank(x) - 2))
    if weight is not None:
        y = cx.op("Mul", y, cx.op("Reshape", weight, per_channel))
    if bias is not None:
        y = cx.op("Add", y, cx.op("Reshape", bias, per_channel))
    return y, None, None


@converter(aten.native_layer_norm.default, check=_float_input)
def native_layer_norm(cx, node, x, normalized_shape, weight, bias, eps):
    axis = -len(normalized_shape)
    if weight is None:
        shape = [symbolic.as_expr(s) for s in normalized_shape]
        if not all(isinstance(s, int) for s in shape):
            cx.fail("layer norm without weight over a symbolic shape")
        weight = cx.const(np.ones(shape, dtype=cx.out_dtype.numpy))
    used = _users_of_outputs(node)
    outputs = 3 if used - {0} else 1
    results = cx.op("LayerNormalization", x, weight, bias, axis=axis, epsilon=float(eps),
                    outputs=outputs)
    return tuple(results) + (None,) * (3 - outputs)


@converter(aten.native_group_norm.default, check=_only_first_output)
def native_group_norm(cx, node, x, weight, bias, n, channels, hxw, group, eps):
    dtype = cx.out_dtype
    group = int(group)
    # Normalize each (sample, group) over its channels and positions: an instance norm
    # of the [N, G, rest] view, then the per-channel affine transform.
    grouped = cx.op("Reshape", x, cx.ints([0, group, -1]))
    ones = cx.const(np.ones(group, dtype=dtype.numpy))
    zeros = cx.const(np.zeros(group, dtype=dtype.numpy))
    normed = cx.op("InstanceNormalization", grouped, ones, zeros, epsilon=float(eps))
    y = cx.op("Reshape", normed, cx.op("Shape", x))
    affine_shape = cx.ints([-1] + [1] * (rank(x) - 2))
    if weight is not None:
        y = cx.op("Mul", y, cx.op("Reshape", weight, affine_shape))
    if bias is not None:
        y = cx.op("Add", y, cx.op("Reshape", bias, affine_shape))
    return y, None, None


# --- softmax ------------------------------------------------------------------------


def _softmax_check(node) -> str | None:
    if node.args[2]:
        return "softmax with half_to_float"
    return _float_input(node)


@converter(aten._softmax.default, check=_softmax_check)
def softmax(cx, node, x, dim, half_to_float=False):
    return cx.op("Softmax", x, axis=int(dim))


@converter(aten._log_softmax.default, check=_softmax_check)
def log_softmax(cx, node, x, dim, half_to_float=False):
    return cx.op("LogSoftmax", x, axis=int(dim))


# --- resampling ---------------------------------------------------------------------


def _resize(cx: ConvertContext, x, mode: str, transform: str, scales):
    spatial = rank(x) - 2
    extra = dict(nearest_mode="floor") if mode == "nearest" else {}
    if scales and all(s is not None for s in scales):
        # Given scale factors: PyTorch maps coordinates with 1/scale, as Resize does with
        # its `scales` input (and the output size is floor(in * scale) in both).
        factors = cx.const(np.array([1.0, 1.0, *_repeat_floats(scales, spatial)],
                                    dtype=np.float32))
        return cx.op("Resize", x, None, factors, None, mode=mode,
                     coordinate_transformation_mode=transform, **extra)
    sizes = cx.shape(cx.out_sizes())
    return cx.op("Resize", x, None, None, sizes, mode=mode,
                 coordinate_transformation_mode=transform, **extra)


def _repeat_floats(values, n: int) -> list[float]:
    values = [float(v) for v in values]
    return values * n if len(values) == 1 else values


@converter(aten.upsample_nearest2d.vec, aten.upsample_nearest1d.vec,
           aten.upsample_nearest3d.vec, check=_float_input)
def upsample_nearest_vec(cx, node, x, output_size, scale_factors):
    # src = floor(dst * in / out): "asymmetric" coordinates, rounded down.
    return _resize(cx, x, "nearest", "asymmetric", scale_factors)


@converter(aten.upsample_nearest2d.default, check=_float_input)
def upsample_nearest2d(cx, node, x, output_size, scales_h=None, scales_w=None):
    return _resize(cx, x, "nearest", "asymmetric", [scales_h, scales_w])


@converter(aten.upsample_bilinear2d.vec, aten.upsample_linear1d.vec,
           aten.upsample_trilinear3d.vec, check=_float_input)
def upsample_linear_vec(cx, node, x, output_size, align_corners, scale_factors):
    if align_corners:
        return _resize(cx, x, "linear", "align_corners", None)
    return _resize(cx, x, "linear", "half_pixel", scale_factors)


@converter(aten.upsample_bilinear2d.default, check=_float_input)
def upsample_bilinear2d(cx, node, x, output_size, align_corners, scales_h=None,
                        scales_w=None):
    if align_corners:
        return _resize(cx, x, "linear", "align_corners", None)
    return _resize(cx, x, "linear", "half_pixel", [scales_h, scales_w])

