"""Neural-network ops: matrix products, convolution, pooling, normalization, Softmax,
Dropout, Resize and LRN.

Conv, ConvTranspose and the pools share one description of a sliding window
(`_Window`): kernel, strides, dilations, explicit pads and auto_pad, from which both
shape inference (on int or symbolic dims) and the NumPy references derive the output
size and the padding really used, so the two can never disagree.

The references favour clarity over speed: a window op gathers one strided view of the
padded input per kernel position and combines the views with vectorized NumPy. Floating
point work happens in float64 for float64 data and in float32 otherwise (float16 and
bfloat16 go through float32); every output is cast back to the dtype inference promised.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import Dim, TensorType, dim_add, dim_floordiv, dim_mul, dim_sub
from ge_hub.ops.inference import broadcast_shapes, normalize_axes, normalize_axis
from ge_hub.ops.schema import (
    BOOL,
    FLOATS,
    INT64,
    NUMERIC,
    REQUIRED,
    Attr,
    AttrKind,
    InferenceContext,
    Input,
    Output,
    op,
)

MATMUL_TYPES = FLOATS | {DType.INT32, DType.INT64}
AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")

Fail = Callable[[str], None]


# -- shared helpers ---------------------------------------------------------------------


def _is_float(dtype) -> bool:
    """True for float16/32/64 and bfloat16 (whose NumPy kind is 'V', not 'f')."""
    return DType.from_numpy(dtype).is_float


def _work_dtype(dtype) -> np.dtype:
    """The dtype a float reference computes in: float64 stays, the rest use float32."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def _reference_fail(op_name: str) -> Fail:
    """A `fail` for references called directly, without inference in front of them."""

    def fail(message: str):
        raise OpError(f"{op_name}: {message}")

    return fail


def _output_count(ctx: InferenceContext, required: int) -> int:
    """How many outputs the node asks for; optional trailing outputs default to absent."""
    available = len(ctx.schema.outputs)
    count = required if ctx.num_outputs is None else ctx.num_outputs
    if not required <= count <= available:
        names = ", ".join(o.name for o in ctx.schema.outputs)
        ctx.fail(f"expected {required} to {available} outputs ({names}), got {count}")
    return count


def _dim_or_sym(ctx: InferenceContext, t: TensorType, axis: int, hint: str) -> Dim:
    """Dim `axis` of `t`, or a fresh symbol when the rank of `t` is unknown."""
    return t.shape[axis] if t.shape is not None else ctx.new_sym(hint)


def _check_flag(ctx: InferenceContext, name: str) -> None:
    if ctx.attrs[name] not in (0, 1):
        ctx.fail(f"attribute {name!r} must be 0 or 1, got {ctx.attrs[name]}")


def _check_choice(ctx: InferenceContext, name: str, choices: Sequence[str]) -> None:
    if ctx.attrs[name] not in choices:
        ctx.fail(f"attribute {name!r} must be one of {', '.join(choices)}, "
                 f"got {ctx.attrs[name]!r}")


def _check_vector(ctx: InferenceContext, index: int, length: Dim, what: str) -> None:
    """Input `index` must be 1-D with `length` entries (one per channel, say)."""
    ctx.require_rank(index, 1)
    t = ctx.input(index)
    if t.shape is not None and isinstance(t.shape[0], int) and isinstance(length, int) \
            and t.shape[0] != length:
        name = ctx.schema.input_name(index)
        ctx.fail(f"input {name!r} must have {length} values ({what}), got {t}")


def _check_broadcasts_to(ctx: InferenceContext, index: int, target) -> None:
    """Input `index` must broadcast to `target` without growing it (unidirectional)."""
    t = ctx.input(index)
    if t is None or t.shape is None or target is None:
        return
    name = ctx.schema.input_name(index)
    target_text = str(TensorType(DType.FLOAT32, target)).removeprefix("float32")
    if len(t.shape) > len(target):
        ctx.fail(f"input {name!r} {t} has more dims than the shape {target_text} "
                 f"it must broadcast to")
    for dim, want in zip(t.shape[::-1], target[::-1]):
        if isinstance(dim, int) and isinstance(want, int) and dim not in (1, want):
            ctx.fail(f"input {name!r} {t} cannot be broadcast to {target_text}")


# -- symbolic window arithmetic --------------------------------------------------------


def _offset(dim: Dim, amount: int) -> Dim:
    """dim + amount, for an int or a symbolic dim."""
    return dim_add(dim, amount) if amount >= 0 else dim_sub(dim, -amount)


def _floor_div_plus_one(dim: Dim, amount: int, stride: int) -> Dim:
    """floor((dim + amount) / stride) + 1: the number of window positions."""
    if isinstance(dim, int):
        return (dim + amount) // stride + 1
    if stride == 1:
        return _offset(dim, amount + 1)
    return dim_add(dim_floordiv(_offset(dim, amount), stride), 1)


def _ceil_div(dim: Dim, stride: int) -> Dim:
    if isinstance(dim, int):
        return -(-dim // stride)
    if stride == 1:
        return dim
    return dim_floordiv(_offset(dim, stride - 1), stride)


@dataclasses.dataclass(frozen=True)
class _Window:
    """Where a sliding kernel lands along each spatial axis (Conv and the pools)."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]  # explicit pads in ONNX order: every begin, then every end
    auto_pad: str
    ceil_mode: bool = False

    @property
    def rank(self) -> int:
        return len(self.kernel)

    def extent(self, axis: int) -> int:
        """The span of the dilated kernel along `axis`."""
        return (self.kernel[axis] - 1) * self.dilations[axis] + 1

    def out_dim(self, axis: int, size: Dim, new_sym: Callable[[str], Dim]) -> Dim:
        """The number of window positions along `axis` over an input of `size`."""
        stride = self.strides[axis]
        if self.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            return _ceil_div(size, stride)
        if self.auto_pad == "VALID":
            return _floor_div_plus_one(size, -self.extent(axis), stride)
        begin, end = self.pads[axis], self.pads[axis + self.rank]
        span = begin + end - self.extent(axis)
        if not self.ceil_mode:
            return _floor_div_plus_one(size, span, stride)
        if isinstance(size, int):
            out = _floor_div_plus_one(size, span + stride - 1, stride)
            # ceil_mode: a last window that would start in the end padding is dropped
            # (ONNX and PyTorch agree), leaving the windows that start before it.
            if (out - 1) * stride >= size + begin:
                out = -(-(size + begin) // stride)
            return out
        if end + stride - 1 < self.extent(axis):  # the drop above can never happen
            return _floor_div_plus_one(size, span + stride - 1, stride)
        return new_sym("pool")

    def used_pads(self, axis: int, size: int, out: int) -> tuple[int, int, int]:
        """(begin, end, overhang) padding along `axis`: the explicit or automatic pads,
        plus the extra cells past them that ceil_mode windows reach into."""
        stride = self.strides[axis]
        if self.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            total = max(0, (out - 1) * stride + self.extent(axis) - size)
            # SAME_UPPER puts the odd cell at the end, SAME_LOWER at the beginning.
            begin = total // 2 if self.auto_pad == "SAME_UPPER" else total - total // 2
            end = total - begin
        elif self.auto_pad == "VALID":
            begin, end = 0, 0
        else:
            begin, end = self.pads[axis], self.pads[axis + self.rank]
        needed = (out - 1) * stride + self.extent(axis)
        return begin, end, max(0, needed - (size + begin + end))


def _window(attrs: dict, spatial: int, kernel: Sequence[int], fail: Fail,
            ceil_mode: bool = False) -> _Window:
    """Validate the window attributes of a Conv or pool node and fill their defaults."""

    def ints(name: str, count: int, default: int, at_least: int) -> tuple[int, ...]:
        value = attrs.get(name)
        if value is None:
            return (default,) * count
        if len(value) != count:
            fail(f"attribute {name!r} must have {count} values for {spatial} spatial "
                 f"dims, got {list(value)}")
        if any(v < at_least for v in value):
            fail(f"attribute {name!r} values must be >= {at_least}, got {list(value)}")
        return tuple(value)

    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad not in AUTO_PADS:
        fail(f"attribute 'auto_pad' must be one of {', '.join(AUTO_PADS)}, got {auto_pad!r}")
    if any(k < 1 for k in kernel):
        fail(f"attribute 'kernel_shape' values must be >= 1, got {list(kernel)}")
    return _Window(
        kernel=tuple(kernel),
        strides=ints("strides", spatial, 1, 1),
        dilations=ints("dilations", spatial, 1, 1),
        pads=ints("pads", 2 * spatial, 0, 0),
        auto_pad=auto_pad,
        ceil_mode=ceil_mode,
    )


def _spatial_rank_from_attrs(attrs: dict) -> int | None:
    """The number of spatial dims implied by the window attributes, when any is given."""
    for name, per_axis in (("kernel_shape", 1), ("strides", 1), ("dilations", 1),
                           ("pads", 2), ("output_padding", 1)):
        value = attrs.get(name)
        if value is not None:
            return len(value) // per_axis
    return None


def _out_spatial(ctx: InferenceContext, window: _Window | None, x: TensorType,
                 spatial: int) -> list[Dim]:
    """The output spatial dims of a window op; checks that concrete ones are >= 1."""
    dims: list[Dim] = []
    for axis in range(spatial):
        size = x.shape[axis + 2] if x.shape is not None else ctx.new_sym("in")
        if window is None:
            dims.append(ctx.new_sym("out"))
            continue
        out = window.out_dim(axis, size, ctx.new_sym)
        if isinstance(out, int) and out < 1:
            ctx.fail(f"input 'X' {x} is too small along spatial axis {axis}: kernel extent "
                     f"{window.extent(axis)}, stride {window.strides[axis]} and pads "
                     f"{list(window.pads)} give {out} output positions")
        dims.append(out)
    return dims


def _pad_spatial(x: np.ndarray, before: Sequence[int], after: Sequence[int],
                 value) -> np.ndarray:
    widths = [(0, 0), (0, 0)] + list(zip(before, after))
    return np.pad(x, widths, mode="constant", constant_values=value)


def _window_views(padded: np.ndarray, window: _Window, out_dims: Sequence[int]):
    """Yield (kernel position, view): for each kernel offset, the strided view of the
    padded input that it meets at every output position, shaped (N, C, *out_dims)."""
    for position in np.ndindex(*window.kernel):
        index = tuple(
            slice(k * d, k * d + (o - 1) * s + 1, s)
            for k, d, s, o in zip(position, window.dilations, window.strides, out_dims)
        )
        yield position, padded[(slice(None), slice(None), *index)]


def _layout(window: _Window, in_dims: Sequence[int]):
    """Output dims and (begin, end, overhang) pads of a window op on concrete input dims."""
    out_dims = [window.out_dim(a, in_dims[a], None) for a in range(window.rank)]
    pads = [window.used_pads(a, in_dims[a], out_dims[a]) for a in range(window.rank)]
    return out_dims, pads


# -- matrix products -------------------------------------------------------------------


def _infer_matmul(ctx: InferenceContext) -> list[TensorType]:
    a, b = ctx.input(0), ctx.input(1)
    for index, t in enumerate((a, b)):
        if t.rank == 0:
            ctx.fail(f"input {ctx.schema.input_name(index)!r} must have rank >= 1, got {t}")
    if a.shape is None or b.shape is None:
        return [TensorType(a.dtype, None)]
    a_shape = (1, *a.shape) if a.rank == 1 else a.shape
    b_shape = (*b.shape, 1) if b.rank == 1 else b.shape
    k_a, k_b = a_shape[-1], b_shape[-2]
    if isinstance(k_a, int) and isinstance(k_b, int) and k_a != k_b:
        ctx.fail(f"inner dims differ: input 'A' {a} has {k_a} columns, "
                 f"input 'B' {b} has {k_b} rows")
    batch = broadcast_shapes(ctx, [a_shape[:-2], b_shape[:-2]])
    shape = list(batch)
    if a.rank > 1:
        shape.append(a_shape[-2])
    if b.rank > 1:
        shape.append(b_shape[-1])
    return [TensorType(a.dtype, shape)]


@op("MatMul", inputs=[Input("A", MATMUL_TYPES), Input("B", MATMUL_TYPES)],
    outputs=[Output("Y")], infer=_infer_matmul)
def matmul(a, b):
    """Y = A @ B with NumPy matmul semantics (1-D promotion, broadcast batch dims)."""
    if _is_float(a.dtype) and a.dtype != np.float64:
        return np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(a.dtype)
    return np.matmul(a, b)


def _infer_gemm(ctx: InferenceContext) -> list[TensorType]:
    a, b = ctx.input(0), ctx.input(1)
    ctx.require_rank(0, 2)
    ctx.require_rank(1, 2)
    for name in ("transA", "transB"):
        _check_flag(ctx, name)
    m = ctx.new_sym("M") if a.shape is None else a.shape[1 if ctx.attrs["transA"] else 0]
    k_a = None if a.shape is None else a.shape[0 if ctx.attrs["transA"] else 1]
    k_b = None if b.shape is None else b.shape[1 if ctx.attrs["transB"] else 0]
    n = ctx.new_sym("N") if b.shape is None else b.shape[0 if ctx.attrs["transB"] else 1]
    if isinstance(k_a, int) and isinstance(k_b, int) and k_a != k_b:
        ctx.fail(f"inner dims differ: input 'A' {a} (transA={ctx.attrs['transA']}) gives "
                 f"K={k_a}, input 'B' {b} (transB={ctx.attrs['transB']}) gives K={k_b}")
    if ctx.has_input(2):
        _check_broadcasts_to(ctx, 2, (m, n))
    return [TensorType(a.dtype, (m, n))]


@op("Gemm",
    inputs=[Input("A", MATMUL_TYPES), Input("B", MATMUL_TYPES),
            Input("C", MATMUL_TYPES, optional=True)],
    outputs=[Output("Y")], infer=_infer_gemm,
    attrs=[Attr("alpha", AttrKind.FLOAT, 1.0), Attr("beta", AttrKind.FLOAT, 1.0),
           Attr("transA", AttrKind.INT, 0), Attr("transB", AttrKind.INT, 0)])
def gemm(a, b, c=None, *, alpha, beta, transA, transB):
    """Y = alpha * A' @ B' + beta * C, A' and B' optionally transposed, C broadcast."""
    a = a.T if transA else a
    b = b.T if transB else b
    if not _is_float(a.dtype):
        # Integer Gemm stays exact when alpha and beta are whole numbers.
        y = np.matmul(a.astype(np.int64), b.astype(np.int64))
        scaled = y * int(alpha) if float(alpha).is_integer() else np.trunc(y * alpha)
        if c is not None:
            scaled = scaled + (c.astype(np.int64) * int(beta) if float(beta).is_integer()
                               else np.trunc(c * beta))
        return np.asarray(scaled).astype(a.dtype)
    work = _work_dtype(a.dtype)
    y = alpha * np.matmul(a.astype(work), b.astype(work))
    if c is not None:
        y = y + beta * c.astype(work)
    return np.asarray(y, dtype=work).astype(a.dtype)


# -- convolution -----------------------------------------------------------------------


def _agreed_rank(ctx: InferenceContext, first: int, second: int) -> int | None:
    ranks = {ctx.input(i).rank for i in (first, second)} - {None}
    if len(ranks) > 1:
        a, b = ctx.input(first), ctx.input(second)
        ctx.fail(f"inputs {ctx.schema.input_name(first)!r} {a} and "
                 f"{ctx.schema.input_name(second)!r} {b} must have the same rank")
    return ranks.pop() if ranks else None


def _conv_kernel(ctx: InferenceContext, spatial: int) -> list[int] | None:
    """kernel_shape from the attribute or W's spatial dims; checks that they agree."""
    attr = ctx.attrs["kernel_shape"]
    w = ctx.input(1)
    w_kernel = None if w.shape is None else list(w.shape[2:])
    if attr is not None:
        if len(attr) != spatial:
            ctx.fail(f"attribute 'kernel_shape' must have {spatial} values, got {attr}")
        if w_kernel is not None and any(isinstance(d, int) and d != k
                                        for d, k in zip(w_kernel, attr)):
            ctx.fail(f"attribute 'kernel_shape' {attr} does not match input 'W' {w}")
        return list(attr)
    if w_kernel is not None and all(isinstance(d, int) for d in w_kernel):
        return w_kernel
    return None


def _infer_conv_common(ctx: InferenceContext, transposed: bool) -> list[TensorType]:
    x, w = ctx.input(0), ctx.input(1)
    ctx.require_rank(0, at_least=3)
    ctx.require_rank(1, at_least=3)
    rank = _agreed_rank(ctx, 0, 1)
    group = ctx.attrs["group"]
    if group < 1:
        ctx.fail(f"attribute 'group' must be >= 1, got {group}")
    spatial = rank - 2 if rank is not None else _spatial_rank_from_attrs(ctx.attrs)
    if spatial is None:
        return [TensorType(x.dtype, None)]
    kernel = _conv_kernel(ctx, spatial)
    window = None if kernel is None else _window(ctx.attrs, spatial, kernel, ctx.fail)

    channels = _dim_or_sym(ctx, x, 1, "C")
    # Conv W is (M, C/group, k...); ConvTranspose W is (C, M/group, k...).
    w_in = _dim_or_sym(ctx, w, 0 if transposed else 1, "C")
    w_out = _dim_or_sym(ctx, w, 1 if transposed else 0, "M")
    expected_in = w_in if transposed else dim_mul(w_in, group)
    if isinstance(channels, int) and isinstance(expected_in, int) and channels != expected_in:
        how = "W dim 0" if transposed else f"W dim 1 ({w_in}) x group ({group})"
        ctx.fail(f"input 'X' {x} has {channels} channels but input 'W' {w} expects "
                 f"{expected_in} ({how})")
    if isinstance(channels, int) and channels % group:
        ctx.fail(f"input 'X' channels ({channels}) must be divisible by group ({group})")
    out_channels = dim_mul(w_out, group) if transposed else w_out
    if isinstance(out_channels, int) and out_channels % group:
        ctx.fail(f"input 'W' {w} gives {out_channels} output channels, which must be "
                 f"divisible by group ({group})")
    if ctx.has_input(2):
        _check_vector(ctx, 2, out_channels, "one bias per output channel")

    batch = _dim_or_sym(ctx, x, 0, "N")
    if transposed:
        dims = _conv_transpose_spatial(ctx, window, x, spatial)
    else:
        dims = _out_spatial(ctx, window, x, spatial)
    return [TensorType(x.dtype, (batch, out_channels, *dims))]


def _infer_conv(ctx: InferenceContext) -> list[TensorType]:
    return _infer_conv_common(ctx, transposed=False)


CONV_ATTRS = [
    Attr("auto_pad", AttrKind.STRING, "NOTSET"),
    Attr("dilations", AttrKind.INTS, None),
    Attr("group", AttrKind.INT, 1),
    Attr("kernel_shape", AttrKind.INTS, None),
    Attr("pads", AttrKind.INTS, None),
    Attr("strides", AttrKind.INTS, None),
]


@op("Conv",
    inputs=[Input("X", FLOATS), Input("W", FLOATS), Input("B", FLOATS, optional=True)],
    outputs=[Output("Y")], infer=_infer_conv, attrs=CONV_ATTRS)
def conv(x, w, b=None, *, auto_pad, dilations, group, kernel_shape, pads, strides):
    """N-D grouped convolution (cross-correlation) of X (N,C,...) with W (M,C/group,k...),
    plus bias B (M)."""
    attrs = dict(auto_pad=auto_pad, dilations=dilations, pads=pads, strides=strides)
    window = _window(attrs, x.ndim - 2, kernel_shape or w.shape[2:], _reference_fail("Conv"))
    out_dims, pads_used = _layout(window, x.shape[2:])
    work = _work_dtype(x.dtype)
    padded = _pad_spatial(x.astype(work), [p[0] for p in pads_used],
                          [p[1] + p[2] for p in pads_used], 0)
    n, c = x.shape[:2]
    m = w.shape[0]
    taps = int(np.prod(window.kernel))
    # columns[n, c, tap, out...]: the input each kernel tap sees at each output position.
    columns = np.stack([view for _, view in _window_views(padded, window, out_dims)], axis=2)
    columns = columns.reshape(n, group, (c // group) * taps, -1)
    weights = w.astype(work).reshape(group, m // group, (c // group) * taps)
    y = np.matmul(weights, columns).reshape(n, m, *out_dims)
    if b is not None:
        y = y + b.astype(work).reshape(m, *([1] * len(out_dims)))
    return y.astype(x.dtype)


def _conv_transpose_layout(window: _Window, attrs: dict, in_dims: Sequence[Dim]
                           ) -> tuple[list[Dim], list[tuple[int, int]] | None]:
    """Output spatial dims and (begin, end) pads of ConvTranspose (pads None when they
    depend on a symbolic input dim). Pads may come out negative when output_shape asks
    for more than the full transposed convolution gives: the output then grows zeros."""
    spatial = window.rank
    output_padding = attrs.get("output_padding") or [0] * spatial
    output_shape = attrs.get("output_shape")
    if output_shape is not None:
        output_shape = list(output_shape)[-spatial:]
    dims: list[Dim] = []
    pads: list[tuple[int, int]] | None = []
    for axis in range(spatial):
        size, stride = in_dims[axis], window.strides[axis]
        # The full (uncropped) output is stride * size + grow cells.
        grow = output_padding[axis] + window.extent(axis) - stride
        full = _offset(dim_mul(size, stride), grow)
        if output_shape is None and window.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            target: Dim = dim_mul(size, stride)
        elif output_shape is not None:
            target = output_shape[axis]
        else:
            begin, end = window.pads[axis], window.pads[axis + spatial]
            if window.auto_pad == "VALID":
                begin, end = 0, 0
            dims.append(_offset(dim_mul(size, stride), grow - begin - end))
            if pads is not None:
                pads.append((begin, end))
            continue
        dims.append(target)
        if isinstance(full, int) and isinstance(target, int) and pads is not None:
            total = full - target
            # The spec splits like Conv's SAME: SAME_UPPER keeps the odd cell at the end.
            begin = total // 2 if window.auto_pad == "SAME_UPPER" else total - total // 2
            pads.append((begin, total - begin))
        else:
            pads = None
    return dims, pads


def _conv_transpose_spatial(ctx: InferenceContext, window: _Window | None, x: TensorType,
                            spatial: int) -> list[Dim]:
    attrs = ctx.attrs
    # output_shape may also be given in full, batch and channel dims included.
    for name, lengths in (("output_padding", (spatial,)),
                          ("output_shape", (spatial, spatial + 2))):
        value = attrs[name]
        if value is not None and len(value) not in lengths:
            ctx.fail(f"attribute {name!r} must have {spatial} values, got {value}")
        if value is not None and any(v < 0 for v in value):
            ctx.fail(f"attribute {name!r} values must be >= 0, got {value}")
    in_dims = [x.shape[a + 2] if x.shape is not None else ctx.new_sym("in")
               for a in range(spatial)]
    if window is None:
        output_shape = attrs["output_shape"]
        if output_shape is not None:
            return list(output_shape)[-spatial:]
        return [ctx.new_sym("out") for _ in range(spatial)]
    dims, _ = _conv_transpose_layout(window, attrs, in_dims)
    for axis, d in enumerate(dims):
        if isinstance(d, int) and d < 1:
            ctx.fail(f"input 'X' {x} gives {d} output positions along spatial axis {axis} "
                     f"with pads {list(window.pads)}")
    return dims


def _infer_conv_transpose(ctx: InferenceContext) -> list[TensorType]:
    return _infer_conv_common(ctx, transposed=True)


def _crop_or_extend(full: np.ndarray, begins: Sequence[int], out_dims: Sequence[int]):
    """full[..., begin : begin + out] along each spatial axis, zeros outside `full`."""
    for axis, (begin, out) in enumerate(zip(begins, out_dims)):
        size = full.shape[axis + 2]
        before, after = max(0, -begin), max(0, begin + out - size)
        if before or after:
            widths = [(0, 0)] * full.ndim
            widths[axis + 2] = (before, after)
            full = np.pad(full, widths)
        index = [slice(None)] * full.ndim
        index[axis + 2] = slice(begin + before, begin + before + out)
        full = full[tuple(index)]
    return full


@op("ConvTranspose",
    inputs=[Input("X", FLOATS), Input("W", FLOATS), Input("B", FLOATS, optional=True)],
    outputs=[Output("Y")], infer=_infer_conv_transpose,
    attrs=[*CONV_ATTRS, Attr("output_padding", AttrKind.INTS, None),
           Attr("output_shape", AttrKind.INTS, None)])
def conv_transpose(x, w, b=None, *, auto_pad, dilations, group, kernel_shape, output_padding,
                   output_shape, pads, strides):
    """N-D grouped transposed convolution of X (N,C,...) with W (C,M/group,k...), plus
    bias B (M): every input cell scatters its kernel-weighted copy into the output."""
    attrs = dict(auto_pad=auto_pad, dilations=dilations, pads=pads, strides=strides,
                 output_padding=output_padding, output_shape=output_shape)
    window = _window(attrs, x.ndim - 2, kernel_shape or w.shape[2:],
                     _reference_fail("ConvTranspose"))
    in_dims = x.shape[2:]
    out_dims, pads_used = _conv_transpose_layout(window, attrs, in_dims)
    work = _work_dtype(x.dtype)
    n, c = x.shape[:2]
    m = w.shape[1] * group
    grouped_x = x.astype(work).reshape(n, group, c // group, -1)
    grouped_w = w.astype(work).reshape(group, c // group, m // group, -1)
    # contributions[n, g, m, tap, p]: what input cell p sends through kernel tap `tap`.
    contributions = np.einsum("ngcp,gcmt->ngmtp", grouped_x, grouped_w)
    full_dims = [(i - 1) * s + e for i, s, e in
                 zip(in_dims, window.strides, map(window.extent, range(window.rank)))]
    full = np.zeros((n, m, *full_dims), dtype=work)
    for tap, position in enumerate(np.ndindex(*window.kernel)):
        index = tuple(slice(k * d, k * d + (i - 1) * s + 1, s)
                      for k, d, s, i in zip(position, window.dilations, window.strides, in_dims))
        full[(slice(None), slice(None), *index)] += \
            contributions[:, :, :, tap].reshape(n, m, *in_dims)
    y = _crop_or_extend(full, [p[0] for p in pads_used], out_dims)
    if b is not None:
        y = y + b.astype(work).reshape(m, *([1] * len(out_dims)))
    return y.astype(x.dtype)


# -- pooling ---------------------------------------------------------------------------


POOL_TYPES = FLOATS
MAXPOOL_TYPES = FLOATS | {DType.INT8, DType.UINT8}

POOL_ATTRS = [
    Attr("auto_pad", AttrKind.STRING, "NOTSET"),
    Attr("ceil_mode", AttrKind.INT, 0),
    Attr("dilations", AttrKind.INTS, None),
    Attr("kernel_shape", AttrKind.INTS, REQUIRED),
    Attr("pads", AttrKind.INTS, None),
    Attr("strides", AttrKind.INTS, None),
]


def _infer_pool(ctx: InferenceContext) -> list[TensorType]:
    x = ctx.input(0)
    ctx.require_rank(0, at_least=3)
    kernel = ctx.attrs["kernel_shape"]
    spatial = len(kernel)
    if x.rank is not None and x.rank - 2 != spatial:
        ctx.fail(f"attribute 'kernel_shape' {kernel} has {spatial} values but input 'X' "
                 f"{x} has {x.rank - 2} spatial dims")
    _check_flag(ctx, "ceil_mode")
    for flag in ("storage_order", "count_include_pad"):
        if flag in ctx.attrs:
            _check_flag(ctx, flag)
    window = _window(ctx.attrs, spatial, kernel, ctx.fail, bool(ctx.attrs["ceil_mode"]))
    shape = (_dim_or_sym(ctx, x, 0, "N"), _dim_or_sym(ctx, x, 1, "C"),
             *_out_spatial(ctx, window, x, spatial))
    y = TensorType(x.dtype, shape)
    if ctx.schema.name == "MaxPool" and _output_count(ctx, 1) == 2:
        return [y, y.with_dtype(DType.INT64)]
    return [y]


def _pool_window(op_name: str, x, auto_pad, ceil_mode, dilations, kernel_shape, pads,
                 strides) -> _Window:
    attrs = dict(auto_pad=auto_pad, dilations=dilations, pads=pads, strides=strides)
    return _window(attrs, x.ndim - 2, kernel_shape, _reference_fail(op_name), bool(ceil_mode))


@op("MaxPool", inputs=[Input("X", MAXPOOL_TYPES)],
    outputs=[Output("Y"), Output("Indices", optional=True)], infer=_infer_pool,
    attrs=[*POOL_ATTRS, Attr("storage_order", AttrKind.INT, 0)])
def max_pool(x, *, auto_pad, ceil_mode, dilations, kernel_shape, pads, storage_order,
             strides):
    """Y = max of X over each (dilated) kernel window, padding ignored; Indices = flat
    index into X of each maximum (first on ties; spatial dims column-major when
    storage_order=1). NaN propagates."""
    window = _pool_window("MaxPool", x, auto_pad, ceil_mode, dilations, kernel_shape, pads,
                          strides)
    in_dims = x.shape[2:]
    out_dims, pads_used = _layout(window, in_dims)
    # int8/uint8 are exact in float32; -inf padding loses to every real value.
    work = _work_dtype(x.dtype)
    begins, ends = [p[0] for p in pads_used], [p[1] + p[2] for p in pads_used]
    padded = _pad_spatial(x.astype(work), begins, ends, -np.inf)
    positions, views = zip(*_window_views(padded, window, out_dims))
    stacked = np.stack(views)  # (taps, N, C, *out)
    y = np.max(stacked, axis=0)  # NaN propagates
    # The winner is the first tap inside X that holds the maximum (or a NaN); looking
    # only inside X keeps an input of -inf from losing to the -inf padding.
    inside = _pad_spatial(np.ones((1, 1, *in_dims), dtype=bool), begins, ends, False)
    inside = np.stack([view for _, view in _window_views(inside, window, out_dims)])
    winner = np.argmax(((stacked == y) | np.isnan(stacked)) & inside, axis=0)

    # The input coordinate of the winning tap along each spatial axis.
    positions = np.array(positions)  # (taps, spatial)
    flat_spatial = np.zeros(winner.shape, dtype=np.int64)
    axis_order = range(window.rank) if storage_order == 0 else reversed(range(window.rank))
    for axis in axis_order:
        starts = np.arange(out_dims[axis]) * window.strides[axis] - pads_used[axis][0]
        shape = [1] * (window.rank + 2)
        shape[axis + 2] = out_dims[axis]
        coord = starts.reshape(shape) + positions[winner, axis] * window.dilations[axis]
        flat_spatial = flat_spatial * in_dims[axis] + coord
    n, c = x.shape[:2]
    plane = int(np.prod(in_dims))
    base = (np.arange(n)[:, None] * c + np.arange(c)[None, :]) * plane
    indices = base.reshape(n, c, *([1] * window.rank)) + flat_spatial
    return y.astype(x.dtype), indices.astype(np.int64)


@op("AveragePool", inputs=[Input("X", POOL_TYPES)], outputs=[Output("Y")],
    infer=_infer_pool, attrs=[*POOL_ATTRS, Attr("count_include_pad", AttrKind.INT, 0)])
def average_pool(x, *, auto_pad, ceil_mode, count_include_pad, dilations, kernel_shape, pads,
                 strides):
    """Y = mean of X over each (dilated) kernel window; the divisor counts the padding
    only when count_include_pad=1, and never the cells past it that ceil_mode reaches."""
    window = _pool_window("AveragePool", x, auto_pad, ceil_mode, dilations, kernel_shape,
                          pads, strides)
    in_dims = x.shape[2:]
    out_dims, pads_used = _layout(window, in_dims)
    work = _work_dtype(x.dtype)
    begins = [p[0] for p in pads_used]
    padded = _pad_spatial(x.astype(work), begins, [p[1] + p[2] for p in pads_used], 0)
    # counted[...]: 1 where a cell counts towards the divisor.
    counted = np.ones((1, 1, *in_dims), dtype=work)
    if count_include_pad:
        counted = _pad_spatial(counted, begins, [p[1] for p in pads_used], 1)
        counted = _pad_spatial(counted, [0] * window.rank, [p[2] for p in pads_used], 0)
    else:
        counted = _pad_spatial(counted, begins, [p[1] + p[2] for p in pads_used], 0)
    total = sum(view for _, view in _window_views(padded, window, out_dims))
    count = sum(view for _, view in _window_views(counted, window, out_dims))
    return (total / count).astype(x.dtype)


def _infer_global_pool(ctx: InferenceContext) -> list[TensorType]:
    x = ctx.input(0)
    ctx.require_rank(0, at_least=2)
    if x.shape is None:
        return [x]
    return [x.with_shape((*x.shape[:2], *([1] * (x.rank - 2))))]


@op("GlobalAveragePool", inputs=[Input("X", FLOATS)], outputs=[Output("Y")],
    infer=_infer_global_pool)
def global_average_pool(x):
    """Y[n, c, 1, ...] = mean of X[n, c] over all spatial dims."""
    axes = tuple(range(2, x.ndim))
    return np.mean(x.astype(_work_dtype(x.dtype)), axis=axes, keepdims=True).astype(x.dtype)


@op("GlobalMaxPool", inputs=[Input("X", FLOATS)], outputs=[Output("Y")],
    infer=_infer_global_pool)
def global_max_pool(x):
    """Y[n, c, 1, ...] = max of X[n, c] over all spatial dims; NaN propagates."""
    axes = tuple(range(2, x.ndim))
    return np.max(x.astype(_work_dtype(x.dtype)), axis=axes, keepdims=True).astype(x.dtype)


# -- normalization ---------------------------------------------------------------------


def _channel_shape(x: np.ndarray) -> tuple[int, ...]:
    """Shape that lines a per-channel vector up with axis 1 of `x`."""
    return (x.shape[1], *([1] * (x.ndim - 2)))


def _infer_batch_norm(ctx: InferenceContext) -> list[TensorType]:
    x = ctx.input(0)
    ctx.require_rank(0, at_least=2)
    if ctx.attrs["training_mode"] != 0:
        ctx.fail(f"attribute 'training_mode' must be 0 (only inference is supported), "
                 f"got {ctx.attrs['training_mode']}")
    if _output_count(ctx, 1) != 1:
        ctx.fail(f"outputs 'running_mean' and 'running_var' exist only in training mode, "
                 f"got {ctx.num_outputs} outputs")
    if ctx.attrs["epsilon"] < 0:
        ctx.fail(f"attribute 'epsilon' must be >= 0, got {ctx.attrs['epsilon']}")
    channels = _dim_or_sym(ctx, x, 1, "C")
    for index in range(1, 5):
        _check_vector(ctx, index, channels, "one per channel of 'X'")
    return [x]


@op("BatchNormalization",
    inputs=[Input("X", FLOATS), Input("scale", FLOATS, "T1"), Input("B", FLOATS, "T1"),
            Input("input_mean", FLOATS, "T2"), Input("input_var", FLOATS, "T2")],
    outputs=[Output("Y"), Output("running_mean", optional=True),
             Output("running_var", optional=True)],
    infer=_infer_batch_norm,
    attrs=[Attr("epsilon", AttrKind.FLOAT, 1e-5), Attr("momentum", AttrKind.FLOAT, 0.9),
           Attr("training_mode", AttrKind.INT, 0)])
def batch_normalization(x, scale, b, mean, var, *, epsilon, momentum, training_mode):
    """Inference mode: Y = (X - mean) / sqrt(var + epsilon) * scale + B, per channel
    (axis 1)."""
    del momentum  # only used to update running statistics in training mode
    if training_mode:
        raise OpError("BatchNormalization: attribute 'training_mode' must be 0 (only "
                      f"inference is supported), got {training_mode}")
    work = np.result_type(_work_dtype(x.dtype), _work_dtype(scale.dtype),
                          _work_dtype(mean.dtype))
    shape = _channel_shape(x)

    def per_channel(v):
        return v.astype(work).reshape(shape)

    inv_std = 1.0 / np.sqrt(per_channel(var) + work.type(epsilon))
    y = (x.astype(work) - per_channel(mean)) * inv_std * per_channel(scale) + per_channel(b)
    return y.astype(x.dtype)


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
                _check_broadcasts_to(ctx, index, x.shape[axis:])
    stats_shape = None if x.shape is None else (*x.shape[:axis], *[1] * (x.rank - axis))
    return [x] + [TensorType(stash, stats_shape)] * (_output_count(ctx, 1) - 1)


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
    channels = _dim_or_sym(ctx, x, 1, "C")
    for index in (1, 2):
        _check_vector(ctx, index, channels, "one per channel of 'input'")
    return [x]


@op("InstanceNormalization",
    inputs=[Input("input", FLOATS), Input("scale", FLOATS), Input("B", FLOATS)],
    outputs=[Output("output")], infer=_infer_instance_norm,
    attrs=[Attr("epsilon", AttrKind.FLOAT, 1e-5)])
def instance_normalization(x, scale, b, *, epsilon):
    """Y = (X - mean) / sqrt(var + epsilon) * scale + B, statistics per (n, c) over the
    spatial dims."""
    work = _work_dtype(x.dtype)
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
    work = _work_dtype(x.dtype)
    squares = np.square(x.astype(work))
    channels = x.shape[1]
    below, above = (size - 1) // 2, size - 1 - (size - 1) // 2
    # A cumulative sum over channels gives every window sum by one subtraction.
    cumulative = np.concatenate([np.zeros_like(squares[:, :1]), np.cumsum(squares, axis=1)],
                                axis=1)
    first = np.clip(np.arange(channels) - below, 0, channels)
    last = np.clip(np.arange(channels) + above + 1, 0, channels)
    window_sums = cumulative[:, last] - cumulative[:, first]
    y = x.astype(work) / (work.type(bias) + work.type(alpha / size) * window_sums) ** beta
    return y.astype(x.dtype)


# -- softmax ---------------------------------------------------------------------------


def _infer_softmax(ctx: InferenceContext) -> list[TensorType]:
    x = ctx.input(0)
    if x.rank == 0:
        ctx.fail(f"input 'input' must have rank >= 1, got {x}")
    normalize_axis(ctx, ctx.attrs["axis"], x.rank, "attribute 'axis'")
    return [x]


def _shifted(x, axis):
    """X minus its max along `axis`, in the work dtype: exp of it cannot overflow."""
    data = x.astype(_work_dtype(x.dtype))
    return data - np.max(data, axis=axis, keepdims=True)


@op("Softmax", inputs=[Input("input", FLOATS)], outputs=[Output("output")],
    infer=_infer_softmax, attrs=[Attr("axis", AttrKind.INT, -1)])
def softmax(x, *, axis):
    """output = exp(x) / sum(exp(x)) along `axis`."""
    e = np.exp(_shifted(x, axis))
    return (e / np.sum(e, axis=axis, keepdims=True)).astype(x.dtype)


@op("LogSoftmax", inputs=[Input("input", FLOATS)], outputs=[Output("output")],
    infer=_infer_softmax, attrs=[Attr("axis", AttrKind.INT, -1)])
def log_softmax(x, *, axis):
    """output = x - log(sum(exp(x))) along `axis`."""
    shifted = _shifted(x, axis)
    return (shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))).astype(x.dtype)


# -- dropout ---------------------------------------------------------------------------


def _infer_dropout(ctx: InferenceContext) -> list[TensorType]:
    x = ctx.input(0)
    for index in (1, 2):
        if ctx.has_input(index):
            ctx.require_rank(index, 0)
    ratio = ctx.const(1)
    if ratio is not None and not 0.0 <= float(ratio) < 1.0:
        ctx.fail(f"input 'ratio' must be in [0, 1), got {float(ratio)}")
    y = [x]
    if _output_count(ctx, 1) == 2:
        y.append(x.with_dtype(DType.BOOL))
    return y


@op("Dropout",
    inputs=[Input("data", FLOATS), Input("ratio", FLOATS, "T1", optional=True),
            Input("training_mode", BOOL, "T2", optional=True)],
    outputs=[Output("output"), Output("mask", optional=True)], infer=_infer_dropout,
    attrs=[Attr("seed", AttrKind.INT, None)])
def dropout(data, ratio=None, training_mode=None, *, seed):
    """Inference: output = data, mask all True. Training: each element is zeroed with
    probability `ratio` (NumPy generator seeded with `seed`), the rest scaled by
    1 / (1 - ratio)."""
    ratio = 0.5 if ratio is None else float(ratio)
    if training_mode is None or not bool(training_mode) or ratio == 0.0:
        return data.copy(), np.ones(data.shape, dtype=np.bool_)
    if not 0.0 <= ratio < 1.0:
        raise OpError(f"Dropout: input 'ratio' must be in [0, 1), got {ratio}")
    keep = np.random.default_rng(seed).random(data.shape) >= ratio
    work = _work_dtype(data.dtype)
    output = np.where(keep, data.astype(work) / work.type(1.0 - ratio), work.type(0))
    return output.astype(data.dtype), keep


# -- resize ----------------------------------------------------------------------------


RESIZE_MODES = ("nearest", "linear", "cubic")
COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                    "align_corners", "asymmetric", "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
ASPECT_POLICIES = ("stretch", "not_larger", "not_smaller")


def _given(ctx: InferenceContext, index: int) -> bool:
    """An optional Resize input counts as given unless absent or empty (older exporters
    pass an empty tensor for 'absent')."""
    if not ctx.has_input(index):
        return False
    shape = ctx.input(index).shape
    return not (shape is not None and 0 in shape)


def _scaled_dim(ctx: InferenceContext, dim: Dim, scale: float) -> Dim:
    if isinstance(dim, int):
        return int(np.floor(dim * np.float64(scale)))
    if float(scale).is_integer():
        return dim_mul(dim, int(scale))
    return ctx.new_sym("resize")


def _round_half_up(value: float) -> int:
    return int(np.floor(value + 0.5))


def _aspect_scale(policy: str, ratios: Sequence[float]) -> float:
    return min(ratios) if policy == "not_larger" else max(ratios)


def _infer_resize(ctx: InferenceContext) -> list[TensorType]:
    x, attrs = ctx.input(0), ctx.attrs
    _check_choice(ctx, "mode", RESIZE_MODES)
    _check_choice(ctx, "coordinate_transformation_mode", COORDINATE_MODES)
    _check_choice(ctx, "nearest_mode", NEAREST_MODES)
    _check_choice(ctx, "keep_aspect_ratio_policy", ASPECT_POLICIES)
    _check_flag(ctx, "exclude_outside")
    if attrs["antialias"] != 0:
        ctx.fail(f"attribute 'antialias' must be 0 (antialiasing is not supported), "
                 f"got {attrs['antialias']}")
    with_scales, with_sizes = _given(ctx, 2), _given(ctx, 3)
    if with_scales == with_sizes:
        ctx.fail("exactly one of inputs 'scales' and 'sizes' must be given, got "
                 + ("both" if with_scales else "neither"))
    index = 2 if with_scales else 3
    ctx.require_rank(index, 1)
    if x.rank is None:
        return [TensorType(x.dtype, None)]
    axes = normalize_axes(ctx, attrs["axes"] if attrs["axes"] is not None else range(x.rank),
                          x.rank, "attribute 'axes'")
    t = ctx.input(index)
    name = ctx.schema.input_name(index)
    if t.shape is not None and isinstance(t.shape[0], int) and t.shape[0] != len(axes):
        ctx.fail(f"input {name!r} must have {len(axes)} values (one per resized axis), "
                 f"got {t}")
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize" and \
            not _given(ctx, 1):
        ctx.fail("input 'roi' is required when coordinate_transformation_mode is "
                 "'tf_crop_and_resize'")
    shape = list(x.shape)
    values = ctx.const(index)
    if values is None:
        for a in axes:
            shape[a] = ctx.new_sym("resize")
        return [TensorType(x.dtype, shape)]
    values = values.reshape(-1).tolist()
    if any(v <= 0 if with_scales else v < 0 for v in values):
        ctx.fail(f"input {name!r} values must be {'> 0' if with_scales else '>= 0'}, "
                 f"got {values}")
    policy = attrs["keep_aspect_ratio_policy"]
    if with_scales:
        for a, s in zip(axes, values):
            shape[a] = _scaled_dim(ctx, shape[a], s)
    elif policy == "stretch":
        for a, s in zip(axes, values):
            shape[a] = int(s)
    elif all(isinstance(shape[a], int) and shape[a] > 0 for a in axes):
        scale = _aspect_scale(policy, [s / shape[a] for a, s in zip(axes, values)])
        for a in axes:
            shape[a] = _round_half_up(scale * shape[a])
    else:
        for a in axes:
            shape[a] = ctx.new_sym("resize")
    return [TensorType(x.dtype, shape)]


def _cubic_kernel(distance: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with coefficient `a`, at |distance| < 2."""
    d = np.abs(distance)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0))


@dataclasses.dataclass(frozen=True)
class _AxisResize:
    """How Resize maps one axis: `out` cells, at `scale`, over a resized `length` that
    is scale * input size (fractional when it comes from a scale, as ONNX's reference
    and conformance data have it) or exactly `out` for stretched `sizes`."""

    out: int
    scale: np.float32
    length: np.float32


def _source_coords(mode: str, plan: _AxisResize, size: int, roi: tuple) -> np.ndarray:
    """Where each output cell along one axis samples the input (float32, like ONNX
    Runtime, so that nearest-neighbour ties round the same way)."""
    f32 = np.float32
    x = np.arange(plan.out, dtype=f32)
    scale, length = plan.scale, plan.length
    if mode == "half_pixel":
        return (x + f32(0.5)) / scale - f32(0.5)
    if mode == "half_pixel_symmetric":
        adjustment = f32(plan.out) / length
        offset = f32(size) / f32(2) * (f32(1) - adjustment)
        return offset + (x + f32(0.5)) / scale - f32(0.5)
    if mode == "pytorch_half_pixel":
        return (x + f32(0.5)) / scale - f32(0.5) if length > 1 else np.zeros(plan.out, f32)
    if mode == "align_corners":
        return x * f32(size - 1) / (length - f32(1)) if length != 1 else np.zeros(plan.out, f32)
    if mode == "asymmetric":
        return x / scale
    start, end = f32(roi[0]), f32(roi[1])
    if length > 1:
        return start * f32(size - 1) + x * (end - start) * f32(size - 1) / (length - f32(1))
    return np.full(plan.out, f32(0.5) * (start + end) * f32(size - 1), dtype=f32)


def _nearest_index(coords: np.ndarray, mode: str) -> np.ndarray:
    if mode == "round_prefer_floor":
        return np.ceil(coords - np.float32(0.5))
    if mode == "round_prefer_ceil":
        return np.floor(coords + np.float32(0.5))
    return np.floor(coords) if mode == "floor" else np.ceil(coords)


def _resize_axis(data: np.ndarray, axis: int, coords: np.ndarray, attrs: dict) -> np.ndarray:
    """Interpolate `data` along one axis at source coordinates `coords`; neighbours
    past the edges repeat the edge cell."""
    size = data.shape[axis]
    if attrs["mode"] == "nearest":
        index = np.clip(_nearest_index(coords, attrs["nearest_mode"]), 0, size - 1)
        return np.take(data, index.astype(np.int64), axis=axis)
    base = np.floor(coords)
    t = (coords - base).astype(np.float64)
    if attrs["mode"] == "linear":
        offsets = np.array([0, 1])
        weights = np.stack([1 - t, t])
    else:
        offsets = np.array([-1, 0, 1, 2])
        weights = _cubic_kernel(offsets[:, None] - t[None, :], attrs["cubic_coeff_a"])
    taps = base.astype(np.int64)[None, :] + offsets[:, None]  # (taps, out)
    if attrs["exclude_outside"]:
        weights = np.where((taps >= 0) & (taps < size), weights, 0.0)
        weights = weights / weights.sum(axis=0, keepdims=True)
    taps = np.clip(taps, 0, size - 1)
    shape = [1] * data.ndim
    shape[axis] = len(coords)
    return sum(np.take(data, taps[j], axis=axis) * weights[j].reshape(shape)
               for j in range(len(offsets)))


def _resize_plan(shape, axes, scales, sizes, policy) -> list[_AxisResize]:
    """How each resized axis maps, as the ONNX spec derives it from scales or sizes."""
    f32 = np.float32
    if policy == "stretch" and scales is None:
        return [_AxisResize(int(n), f32(n) / f32(shape[a]), f32(n)) for a, n in zip(axes, sizes)]
    if scales is None:
        scale = _aspect_scale(policy, [n / shape[a] for a, n in zip(axes, sizes)])
        scales = [scale] * len(axes)
        outs = [_round_half_up(scale * shape[a]) for a in axes]
    else:
        outs = [int(np.floor(shape[a] * np.float64(s))) for a, s in zip(axes, scales)]
    return [_AxisResize(out, f32(s), f32(s) * f32(shape[a]))
            for a, s, out in zip(axes, scales, outs)]


@op("Resize",
    inputs=[Input("X", NUMERIC, "T1"),
            Input("roi", FLOATS, "T2", optional=True, decides_shape=True),
            Input("scales", frozenset({DType.FLOAT32}), "S", optional=True,
                  decides_shape=True),
            Input("sizes", INT64, "I", optional=True, decides_shape=True)],
    outputs=[Output("Y")], infer=_infer_resize,
    attrs=[Attr("antialias", AttrKind.INT, 0), Attr("axes", AttrKind.INTS, None),
           Attr("coordinate_transformation_mode", AttrKind.STRING, "half_pixel"),
           Attr("cubic_coeff_a", AttrKind.FLOAT, -0.75),
           Attr("exclude_outside", AttrKind.INT, 0),
           Attr("extrapolation_value", AttrKind.FLOAT, 0.0),
           Attr("keep_aspect_ratio_policy", AttrKind.STRING, "stretch"),
           Attr("mode", AttrKind.STRING, "nearest"),
           Attr("nearest_mode", AttrKind.STRING, "round_prefer_floor")])
def resize(x, roi=None, scales=None, sizes=None, **attrs):
    """Y = X resampled along `axes` to `sizes` or by `scales` (nearest, linear or cubic,
    separably per axis); integer data is rounded to nearest after interpolation."""
    if attrs["antialias"]:
        raise OpError("Resize: attribute 'antialias' must be 0 (antialiasing is not "
                      f"supported), got {attrs['antialias']}")
    rank = x.ndim
    axes = [a % rank for a in attrs["axes"]] if attrs["axes"] is not None else list(range(rank))
    scales = None if scales is None or scales.size == 0 else scales.reshape(-1).tolist()
    sizes = None if sizes is None or sizes.size == 0 else sizes.reshape(-1).tolist()
    plan = _resize_plan(x.shape, axes, scales, sizes, attrs["keep_aspect_ratio_policy"])
    transform = attrs["coordinate_transformation_mode"]
    roi = None if roi is None or roi.size == 0 else roi.reshape(-1).tolist()
    # Nearest only gathers, so it keeps the data as it is (int64 stays exact).
    interpolating = attrs["mode"] != "nearest"
    work = _work_dtype(x.dtype) if _is_float(x.dtype) else np.dtype(np.float64)
    data = x.astype(work) if interpolating else x
    outside = np.zeros((1,) * rank, dtype=bool)
    for i, (a, axis_plan) in enumerate(zip(axes, plan)):
        box = (0.0, 1.0) if roi is None else (roi[i], roi[i + len(axes)])
        coords = _source_coords(transform, axis_plan, x.shape[a], box)
        out = axis_plan.out
        if out == x.shape[a] and np.array_equal(coords, np.arange(out)):
            continue  # the identity map: leave the axis untouched
        data = _resize_axis(data, a, coords, attrs)
        if transform == "tf_crop_and_resize":
            # TF CropAndResize: samples outside the input take extrapolation_value.
            shape = [1] * rank
            shape[a] = out
            outside = outside | ((coords < 0) | (coords > x.shape[a] - 1)).reshape(shape)
    if transform == "tf_crop_and_resize":
        data = np.where(outside, np.asarray(attrs["extrapolation_value"], dtype=work), data)
    if not _is_float(x.dtype) and data.dtype != x.dtype:
        info = np.iinfo(x.dtype)
        data = np.clip(np.rint(data), info.min, info.max)
    return data.astype(x.dtype)
