"""Neural-network ops: convolutions, pooling, normalizations, matmul, softmax, resize,
padding.

Paddle describes padding as `paddings` (2 values: the same before and after each
spatial dim; 4: before and after per dim, dim by dim) and `padding_algorithm`
(EXPLICIT, SAME, VALID); ONNX as `pads` (all befores, then all afters) or `auto_pad`.
Paddle's SAME puts the odd pixel after, ONNX's SAME_UPPER. Channel-last layouts
(`data_format` NHWC) are converted by transposes around the core op, which works in NCHW.
"""

from __future__ import annotations

import numpy as np

from ge_paddle.converters.table import converts


def _error(cv, op, message):
    from ge_paddle.convert import PaddleConversionError

    return PaddleConversionError(f"{op.describe()}: {message}")


def _channel_last(op) -> bool:
    return str(op.attrs.get("data_format", op.attrs.get("data_layout", "NCHW"))) \
        in ("NHWC", "NDHWC", "NLC")


def _to_nchw(cv, x):
    rank = x.type.rank
    return cv.one("Transpose", [x], {"perm": [0, rank - 1, *range(1, rank - 1)]})


def _to_nhwc(cv, x):
    rank = x.type.rank
    return cv.one("Transpose", [x], {"perm": [0, *range(2, rank), 1]})


def _pads(cv, op, spatial: int) -> dict:
    """ONNX padding attributes for a Paddle op's paddings and padding_algorithm."""
    algorithm = str(op.attrs.get("padding_algorithm", "EXPLICIT")).upper()
    if algorithm == "SAME":
        return {"auto_pad": "SAME_UPPER"}
    if algorithm == "VALID":
        return {"pads": [0] * (2 * spatial)}
    paddings = [int(p) for p in op.attrs.get("paddings", [0] * spatial)]
    if len(paddings) == spatial:
        return {"pads": paddings + paddings}
    if len(paddings) == 2 * spatial:
        return {"pads": paddings[0::2] + paddings[1::2]}
    raise _error(cv, op, f"{len(paddings)} paddings for {spatial} spatial dims")


def _spatial(cv, op, x) -> int:
    if x.type.rank is None or x.type.rank < 3:
        raise _error(cv, op, f"input of rank {x.type.rank}; a batch, channels and at least "
                             "one spatial dim are needed")
    return x.type.rank - 2


@converts("conv2d", "depthwise_conv2d", "conv3d", "conv1d")
def conv(cv, op):
    x, weight = cv.input(op, 0), cv.input(op, 1)
    last = _channel_last(op)
    if last:
        x = _to_nchw(cv, x)
    spatial = _spatial(cv, op, x)
    attrs = {"strides": [int(s) for s in op.attrs.get("strides", [1] * spatial)],
             "dilations": [int(d) for d in op.attrs.get("dilations", [1] * spatial)],
             "group": int(op.attrs.get("groups", 1)), **_pads(cv, op, spatial)}
    y = cv.one("Conv", [x, weight], attrs)
    return _to_nhwc(cv, y) if last else y


@converts("conv2d_transpose", "depthwise_conv2d_transpose", "conv3d_transpose")
def conv_transpose(cv, op):
    x, weight = cv.input(op, 0), cv.input(op, 1)
    last = _channel_last(op)
    if last:
        x = _to_nchw(cv, x)
    spatial = _spatial(cv, op, x)
    attrs = {"strides": [int(s) for s in op.attrs.get("strides", [1] * spatial)],
             "dilations": [int(d) for d in op.attrs.get("dilations", [1] * spatial)],
             "group": int(op.attrs.get("groups", 1)), **_pads(cv, op, spatial)}
    output_padding = [int(p) for p in op.attrs.get("output_padding", [])]
    if output_padding:
        attrs["output_padding"] = output_padding
    output_size = None
    if cv.has_input(op, 2):
        output_size = [int(v) for v in cv.const(op, 2, "output_size")]
    elif op.attrs.get("output_size"):
        output_size = [int(v) for v in op.attrs["output_size"]]
    if output_size:
        attrs["output_shape"] = output_size
    y = cv.one("ConvTranspose", [x, weight], attrs)
    return _to_nhwc(cv, y) if last else y


@converts("pool2d", "pool3d")
def pool(cv, op):
    x = cv.input(op, 0)
    last = _channel_last(op)
    if last:
        x = _to_nchw(cv, x)
    spatial = _spatial(cv, op, x)
    if cv.has_input(op, 1):
        kernel = [int(k) for k in cv.const(op, 1, "kernel size")]
    else:
        kernel = [int(k) for k in op.attrs.get("ksize", op.attrs.get("kernel_size", []))]
    if len(kernel) == 1:
        kernel = kernel * spatial
    kind = str(op.attrs.get("pooling_type", "max"))
    if kind not in ("max", "avg"):
        raise _error(cv, op, f"pooling_type {kind!r}")
    in_dims = x.type.shape[2:]
    if op.attrs.get("global_pooling") or (op.attrs.get("adaptive") and all(k == 1
                                                                         for k in kernel)):
        y = cv.one("GlobalMaxPool" if kind == "max" else "GlobalAveragePool", [x])
        return _to_nhwc(cv, y) if last else y
    if op.attrs.get("adaptive"):
        if not all(isinstance(d, int) for d in in_dims):
            raise _error(cv, op, f"adaptive pooling over spatial dims {list(in_dims)}, which "
                                 "are not static")
        if not all(d % k == 0 for d, k in zip(in_dims, kernel)):
            y = _adaptive_windows(cv, x, kind, in_dims, kernel)
            return _to_nhwc(cv, y) if last else y
        # Adaptive pooling is plain pooling when each output cell covers an equal window.
        window = [d // k for d, k in zip(in_dims, kernel)]
        attrs = {"kernel_shape": window, "strides": window}
    else:
        strides = [int(s) for s in op.attrs.get("strides", [1] * spatial)]
        attrs = {"kernel_shape": kernel, "strides": strides, **_pads(cv, op, spatial),
                 "ceil_mode": int(bool(op.attrs.get("ceil_mode", False)))}
    if kind == "avg":
        attrs["count_include_pad"] = 0 if op.attrs.get("exclusive", True) else 1
        y = cv.one("AveragePool", [x], attrs)
    else:
        y = cv.emit("MaxPool", [x], attrs, num_outputs=1)[0]
    return _to_nhwc(cv, y) if last else y


def _adaptive_windows(cv, x, kind, in_dims, out_dims):
    """Adaptive pooling with unequal windows: output cell i of a dim of size `size`
    covers [floor(i * size / out), ceil((i + 1) * size / out)). A mean or max over a box
    is one over each of its dims in turn, so each spatial dim is reduced window by window
    and the windows concatenated: sum(out_dims) slices, not their product."""
    reduce = "ReduceMax" if kind == "max" else "ReduceMean"
    y = x
    for position, (size, out) in enumerate(zip(in_dims, out_dims)):
        axis = 2 + position
        cells = []
        for i in range(out):
            start, end = (i * size) // out, -((-(i + 1) * size) // out)
            window = cv.one("Slice", [y, cv.ints([start]), cv.ints([end]), cv.ints([axis])])
            cells.append(cv.one(reduce, [window, cv.ints([axis])], {"keepdims": 1}))
        y = cells[0] if len(cells) == 1 else cv.one("Concat", cells, {"axis": axis})
    return y


@converts("max_pool2d_with_index", "max_pool3d_with_index")
def max_pool_with_index(cv, op):
    """Max pooling that also returns argmax positions (adaptive_max_pool2d); only the
    values are converted, reading the mask is refused when something does."""
    op.attrs.setdefault("pooling_type", "max")
    return [pool(cv, op), None]


@converts("batch_norm", "batch_norm_")
def batch_norm(cv, op):
    # PIR operands: x, mean, variance, scale, bias (legacy programs are normalized to it).
    x, mean, variance = cv.input(op, 0), cv.input(op, 1), cv.input(op, 2)
    scale, bias = cv.input(op, 3, optional=True), cv.input(op, 4, optional=True)
    channels = mean.type.shape
    if scale is None:
        scale = cv.constant(np.ones(channels, x.type.dtype.numpy))
    if bias is None:
        bias = cv.constant(np.zeros(channels, x.type.dtype.numpy))
    last = _channel_last(op) and x.type.rank and x.type.rank > 2
    if last:
        x = _to_nchw(cv, x)
    y = cv.emit("BatchNormalization", [x, scale, bias, mean, variance],
                {"epsilon": float(op.attrs.get("epsilon", 1e-5))}, num_outputs=1)[0]
    return [_to_nhwc(cv, y) if last else y]


@converts("layer_norm")
def layer_norm(cv, op):
    x = cv.input(op, 0)
    scale, bias = cv.input(op, 1, optional=True), cv.input(op, 2, optional=True)
    axis = int(op.attrs.get("begin_norm_axis", 1))
    rank = x.type.rank
    normalized = list(x.type.shape[axis:])
    if not all(isinstance(d, int) for d in normalized):
        raise _error(cv, op, f"normalizes over dims {normalized}, which are not static")
    dtype = x.type.dtype.numpy
    scale = cv.constant(np.ones(normalized, dtype)) if scale is None \
        else cv.one("Reshape", [scale, cv.ints(normalized)])
    bias = cv.constant(np.zeros(normalized, dtype)) if bias is None \
        else cv.one("Reshape", [bias, cv.ints(normalized)])
    y = cv.emit("LayerNormalization", [x, scale, bias],
                {"axis": axis - rank if rank else axis,
                 "epsilon": float(op.attrs.get("epsilon", 1e-5))}, num_outputs=1)[0]
    return [y, None, None]


@converts("group_norm")
def group_norm(cv, op):
    x = cv.input(op, 0)
    scale, bias = cv.input(op, 1, optional=True), cv.input(op, 2, optional=True)
    groups = int(op.attrs["groups"])
    if _channel_last(op):
        raise _error(cv, op, "channel-last group_norm")
    channels = x.type.shape[1]
    if not isinstance(channels, int) or x.type.rank is None:
        raise _error(cv, op, "needs a static channel count")
    epsilon = float(op.attrs.get("epsilon", 1e-5))
    grouped = cv.one("Reshape", [x, cv.ints([0, groups, -1])])
    mean = cv.one("ReduceMean", [grouped, cv.ints([2])], {"keepdims": 1})
    centred = cv.one("Sub", [grouped, mean])
    variance = cv.one("ReduceMean", [cv.one("Mul", [centred, centred]), cv.ints([2])],
                      {"keepdims": 1})
    eps = cv.constant(np.asarray(epsilon, x.type.dtype.numpy))
    normed = cv.one("Div", [centred, cv.one("Sqrt", [cv.one("Add", [variance, eps])])])
    y = cv.one("Reshape", [normed, cv.one("Shape", [x])])
    extra = list(range(1, x.type.rank - 1))
    if scale is not None:
        y = cv.one("Mul", [y, cv.one("Unsqueeze", [scale, cv.ints(extra)])])
    if bias is not None:
        y = cv.one("Add", [y, cv.one("Unsqueeze", [bias, cv.ints(extra)])])
    return [y, None, None]


@converts("instance_norm")
def instance_norm(cv, op):
    x = cv.input(op, 0)
    scale, bias = cv.input(op, 1, optional=True), cv.input(op, 2, optional=True)
    channels = x.type.shape[1]
    dtype = x.type.dtype.numpy
    scale = scale if scale is not None else cv.constant(np.ones([channels], dtype))
    bias = bias if bias is not None else cv.constant(np.zeros([channels], dtype))
    y = cv.one("InstanceNormalization", [x, scale, bias],
               {"epsilon": float(op.attrs.get("epsilon", 1e-5))})
    return [y, None, None]


@converts("matmul", "matmul_v2")
def matmul(cv, op):
    x, y = cv.input(op, 0), cv.input(op, 1)
    operands = []
    for value, flag in ((x, "transpose_x"), (y, "transpose_y")):
        if op.attrs.get(flag) and value.type.rank and value.type.rank >= 2:
            rank = value.type.rank
            value = cv.one("Transpose", [value],
                           {"perm": [*range(rank - 2), rank - 1, rank - 2]})
        operands.append(value)
    return cv.one("MatMul", operands)


@converts("softmax")
def softmax(cv, op):
    return cv.one("Softmax", [cv.input(op, 0)], {"axis": int(op.attrs.get("axis", -1))})


@converts("log_softmax")
def log_softmax(cv, op):
    return cv.one("LogSoftmax", [cv.input(op, 0)], {"axis": int(op.attrs.get("axis", -1))})


@converts("bilinear_interp", "nearest_interp", "linear_interp", "bicubic_interp",
          "trilinear_interp", "bilinear_interp_v2", "nearest_interp_v2")
def interpolate(cv, op):
    x = cv.input(op, 0)
    last = _channel_last(op)
    if last:
        x = _to_nchw(cv, x)
    spatial = _spatial(cv, op, x)
    method = str(op.attrs.get("interp_method", op.name.split(".")[-1].split("_")[0]))
    mode = {"bilinear": "linear", "linear": "linear", "trilinear": "linear",
            "nearest": "nearest", "bicubic": "cubic"}.get(method)
    if mode is None:
        raise _error(cv, op, f"interp_method {method!r}")
    align_corners = bool(op.attrs.get("align_corners", False))
    attrs = {"mode": mode}
    if align_corners:
        attrs["coordinate_transformation_mode"] = "align_corners"
    elif mode == "nearest" or int(op.attrs.get("align_mode", 0)) == 1:
        attrs["coordinate_transformation_mode"] = "asymmetric"
    else:
        attrs["coordinate_transformation_mode"] = "half_pixel"
    if mode == "nearest":
        attrs["nearest_mode"] = "round_prefer_ceil" if align_corners else "floor"
    if mode == "cubic":
        attrs["cubic_coeff_a"] = -0.75
    sizes = None
    if cv.has_input(op, 1):
        sizes = [int(v) for v in cv.const(op, 1, "out_size")]
    elif cv.has_input(op, 2):
        sizes = [int(v) for v in cv.const(op, 2, "size_tensor")]
    else:
        names = {1: ["out_w"], 2: ["out_h", "out_w"], 3: ["out_d", "out_h", "out_w"]}[spatial]
        given = [int(op.attrs.get(n, -1)) for n in names]
        if all(g > 0 for g in given):
            sizes = given
    scales = None
    if sizes is None:
        if cv.has_input(op, 3):
            scale_values = [float(v) for v in cv.const(op, 3, "scale_tensor")]
        else:
            scale_values = [float(v) for v in op.attrs.get("scale", [])]
        if not scale_values or any(s <= 0 for s in scale_values):
            raise _error(cv, op, "neither an output size nor scales")
        if len(scale_values) == 1:
            scale_values = scale_values * spatial
        in_dims = x.type.shape[2:]
        if all(isinstance(d, int) for d in in_dims):
            # Paddle's output size is floor(in * scale), with the scale used as given.
            sizes = [int(d * s) for d, s in zip(in_dims, scale_values)]
            if attrs["coordinate_transformation_mode"] != "align_corners":
                scales = [1.0, 1.0, *scale_values]
        else:
            scales = [1.0, 1.0, *scale_values]
    if scales is not None:
        y = cv.one("Resize", [x, None, cv.constant(np.asarray(scales, np.float32))], attrs)
    else:
        full = [x.type.shape[0], x.type.shape[1], *sizes]
        if all(isinstance(d, int) for d in full):
            size_value = cv.ints(full)
        else:
            size_value = cv.one("Concat", [cv.one("Slice", [cv.one("Shape", [x]), cv.ints([0]),
                                                            cv.ints([2])]), cv.ints(sizes)],
                                {"axis": 0})
        y = cv.one("Resize", [x, None, None, size_value], attrs)
    return _to_nhwc(cv, y) if last else y


@converts("pad3d")
def pad3d(cv, op):
    x = cv.input(op, 0)
    if cv.has_input(op, 1):
        paddings = [int(v) for v in cv.const(op, 1, "paddings")]
    else:
        paddings = [int(v) for v in op.attrs.get("paddings", [])]
    mode = str(op.attrs.get("mode", "constant"))
    core_mode = {"constant": "constant", "reflect": "reflect", "replicate": "edge",
                 "circular": "wrap"}.get(mode)
    if core_mode is None or len(paddings) != 6 or x.type.rank != 5:
        raise _error(cv, op, f"mode {mode!r} with paddings {paddings}")
    # [left, right, top, bottom, front, back] over W, H, D.
    (w0, w1, h0, h1, d0, d1) = paddings
    if _channel_last(op):
        pads = [0, d0, h0, w0, 0, 0, d1, h1, w1, 0]
    else:
        pads = [0, 0, d0, h0, w0, 0, 0, d1, h1, w1]
    value = cv.constant(np.asarray(op.attrs.get("pad_value", op.attrs.get("value", 0.0)),
                                   x.type.dtype.numpy))
    return cv.one("Pad", [x, cv.ints(pads), value], {"mode": core_mode})


@converts("pad")
def pad(cv, op):
    x = cv.input(op, 0)
    paddings = [int(v) for v in op.attrs.get("paddings", [])]
    rank = x.type.rank
    if len(paddings) != 2 * rank:
        raise _error(cv, op, f"{len(paddings)} paddings for rank {rank}")
    pads = paddings[0::2] + paddings[1::2]
    value = cv.input(op, 1, optional=True)
    if value is None:
        value = cv.constant(np.asarray(op.attrs.get("pad_value", 0.0), x.type.dtype.numpy))
    return cv.one("Pad", [x, cv.ints(pads), value], {"mode": "constant"})


@converts("legacy_matmul")
def legacy_matmul(cv, op):
    """The legacy `matmul` op: optional transposes, then a scale by `alpha`."""
    op.attrs["transpose_x"] = op.attrs.get("transpose_X", False)
    op.attrs["transpose_y"] = op.attrs.get("transpose_Y", False)
    y = matmul(cv, op)
    alpha = float(op.attrs.get("alpha", 1.0))
    if alpha != 1.0:
        y = cv.one("Mul", [y, cv.constant(np.asarray(alpha, y.type.dtype.numpy))])
    return y


@converts("legacy_mul")
def legacy_mul(cv, op):
    """The legacy `mul` op (old fc layers): both operands flattened to matrices at
    x_num_col_dims / y_num_col_dims, multiplied, the result given X's leading dims."""
    x, y = cv.input(op, 0), cv.input(op, 1)
    x_cols = int(op.attrs.get("x_num_col_dims", 1))
    y_cols = int(op.attrs.get("y_num_col_dims", 1))
    if x.type.rank != x_cols + 1:
        x = cv.one("Reshape", [x, cv.ints([0] * x_cols + [-1])])
    if y.type.rank != 2:
        y = cv.one("Reshape", [y, cv.ints([int(np.prod(y.type.shape[:y_cols])), -1])])
    return cv.one("MatMul", [x, y])
