"""Sliding-window geometry shared by Conv, ConvTranspose, the pools and their C-kernel
packers (`ge_hub.kernels.conv` and `ge_hub.kernels.pool`).

One description of a sliding window (`Window`): kernel, strides, dilations, explicit
pads and auto_pad, from which shape inference (on int or symbolic dims), the NumPy
references and the kernel packers all derive the output size and the padding really
used, so they can never disagree.

The references gather one strided view of the padded input per kernel position
(`window_views`) and combine the views with vectorized NumPy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from ge_hub.ir.types import Dim, TensorType, dim_add, dim_floordiv, dim_mul, dim_sub
from ge_hub.ops.limits import MAX_COORDINATE
from ge_hub.ops.nn_common import Fail
from ge_hub.ops.schema import InferenceContext

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


# -- per-axis attributes of ops that build no `Window` (Col2Im, MaxUnpool, DeformConv) --


def spatial_attr(fail, attrs, name: str, count: int, default: int) -> list[int]:
    """Spatial attribute `name` of a window op (dilations, strides: `default` 1; pads:
    `default` 0) with `count` entries, all `default` when absent; each checked."""
    values = attrs[name] or [default] * count
    if len(values) != count:
        fail(f"attribute {name!r} must have {count} values, got {values}")
    if any(v < (0 if default == 0 else 1) for v in values):
        fail(f"attribute {name!r} must be {'>= 0' if default == 0 else '>= 1'}, got {values}")
    return values


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
class Window:
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


def window(attrs: dict, spatial: int, kernel: Sequence[int], fail: Fail,
           ceil_mode: bool = False) -> Window:
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
    return Window(
        kernel=tuple(kernel),
        strides=ints("strides", spatial, 1, 1),
        dilations=ints("dilations", spatial, 1, 1),
        pads=ints("pads", 2 * spatial, 0, 0),
        auto_pad=auto_pad,
        ceil_mode=ceil_mode,
    )


def window_problem(window: Window, axis: int, size: int, out: int,
                   pads: tuple[int, int] | None = None) -> str | None:
    """Why the window's coordinates along `axis` break `limits.MAX_COORDINATE` (None when
    they keep it), naming the attribute at fault. `pads` are the (begin, end) pads really
    used, the explicit ones by default. Inference and the C kernels' packers
    (`ge_hub.kernels.bounds`) both check this: coordinates of 2**62 and more would wrap
    the kernels' int64 arithmetic, and no real model comes near 2**60."""
    limit = MAX_COORDINATE
    if pads is None:
        pads = (window.pads[axis], window.pads[axis + window.rank]) if window.pads else (0, 0)
    checks = (("attribute 'strides'", window.strides[axis]),
              ("attribute 'dilations'", window.dilations[axis]),
              ("attribute 'pads'", max(abs(p) for p in pads)),
              ("attributes 'kernel_shape' and 'dilations'", window.extent(axis)))
    for name, value in checks:
        if value > limit:
            return (f"{name} along spatial axis {axis}: {value}, more than the limit of "
                    "2**60 on window coordinates (ge_hub.ops.limits.MAX_COORDINATE)")
    # the windows cover [-begin, (out - 1) * stride + extent - begin); ConvTranspose also
    # spreads the input over (size - 1) * stride + extent
    span = max(out - 1, size - 1, 0) * window.strides[axis] + window.extent(axis)
    if span > limit:
        return (f"attributes 'strides' {list(window.strides)} and 'pads' {list(window.pads)} "
                f"make the windows along spatial axis {axis} span {span} cells, more than the "
                "limit of 2**60 on window coordinates (ge_hub.ops.limits.MAX_COORDINATE)")
    return None


def spatial_rank_from_attrs(attrs: dict) -> int | None:
    """The number of spatial dims implied by the window attributes, when any is given."""
    for name, per_axis in (("kernel_shape", 1), ("strides", 1), ("dilations", 1),
                           ("pads", 2), ("output_padding", 1)):
        value = attrs.get(name)
        if value is not None:
            return len(value) // per_axis
    return None


def out_spatial(ctx: InferenceContext, window: Window | None, x: TensorType,
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
        if isinstance(out, int) and isinstance(size, int):
            problem = window_problem(window, axis, size, out)
            if problem is not None:
                ctx.fail_limit(problem)
        dims.append(out)
    return dims


def pad_spatial(x: np.ndarray, before: Sequence[int], after: Sequence[int],
                value) -> np.ndarray:
    widths = [(0, 0), (0, 0)] + list(zip(before, after))
    return np.pad(x, widths, mode="constant", constant_values=value)


def window_views(padded: np.ndarray, window: Window, out_dims: Sequence[int]):
    """Yield (kernel position, view): for each kernel offset, the strided view of the
    padded input that it meets at every output position, shaped (N, C, *out_dims)."""
    for position in np.ndindex(*window.kernel):
        index = tuple(
            slice(k * d, k * d + (o - 1) * s + 1, s)
            for k, d, s, o in zip(position, window.dilations, window.strides, out_dims)
        )
        yield position, padded[(slice(None), slice(None), *index)]


def layout(window: Window, in_dims: Sequence[int]):
    """Output dims and (begin, end, overhang) pads of a window op on concrete input dims."""
    out_dims = [window.out_dim(a, in_dims[a], None) for a in range(window.rank)]
    pads = [window.used_pads(a, in_dims[a], out_dims[a]) for a in range(window.rank)]
    return out_dims, pads


def conv_transpose_layout(window: Window, attrs: dict, in_dims: Sequence[Dim]
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
