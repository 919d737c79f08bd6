"""The conv family's kernels (float32): Conv, ConvTranspose and ge_hub.FusedConv (a Conv
with its residual Add and activation applied as outputs are stored); their C lives in
core/kernels/conv.c and conv_winograd.c (GEMMs by nn_gemm_packed.c and the BLAS).

The packer picks the convolution path at compile time (pointwise, im2col, depthwise,
Winograd, packed GEMM) and lays constant weights out for it (`prepack_conv`). Window
geometry comes from `ge_hub.ops.window`, the helpers the ops' shape inference and NumPy
references use, so kernel, inference and reference cannot disagree about where a window
lands.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import TensorType
from ge_hub.kernels import cpu, nn_bf16
from ge_hub.kernels.base import CKernel, Packed, pack_values
from ge_hub.kernels.bounds import check_window
from ge_hub.kernels.nn_common import (
    F32,
    FLOAT_BYTES,
    all_static,
    c_kernel,
    filled_attrs,
    node_fail,
    numel_of,
    spatial_ok,
    window_ints,
)
from ge_hub.ops.conv import CONV_ACTIVATIONS, FUSED_DOMAIN, to_channels_first
from ge_hub.ops.window import conv_transpose_layout as _conv_transpose_layout
from ge_hub.ops.window import layout as _layout
from ge_hub.ops.window import window as _window
from ge_hub.registry import KernelSpec

# Conv paths (NN_CONV_* in conv.c).
CONV_POINTWISE, CONV_IM2COL, CONV_DEPTHWISE, CONV_WINOGRAD, CONV_PACKED = 0, 1, 2, 3, 4
# The packed path in bf16, for nodes the precision pass marked (ge_hub.kernels.nn_bf16).
CONV_PACKED_BF16 = 5
# At most FEW_MAX_CHANNELS input channels per group (the 3-channel stems): the depthwise
# kernel's spans over every input plane of the group, W as given (NN_FEW_MAX_CHANNELS,
# conv_depthwise.h). A GEMM of depth cg * taps (27 for a 3x3 stem) cannot pay for packing
# its columns. Windows as the direct depthwise kernel's (DEPTHWISE_MAX_*).
CONV_FEW_CHANNELS = 6
# The bf16 path with its depth tap-major over pairs of channels (core/kernels/
# conv_pairs_bf16.h): an even number of channels per group and more than one tap. The
# input is converted once into bf16 channel pairs (in the scratch, after the panels) and
# packing copies their words; the weights are packed with the same depth order. With
# unit stride and cg a multiple of 32, a micro-kernel that reads B in place (AMX) loads
# them from a padded grid instead (_pairs_grid_bytes: the scratch it needs).
CONV_PAIRS_BF16 = 7
# Rows whose padding to 16 words adds more than 1/GRID_MAX_WASTE of their width are not read
# in place (NN_GRID_MAX_WASTE, conv_pairs_bf16.h).
GRID_MAX_WASTE = 6
# Nor grids past this many bytes (NN_GRID_MAX_BYTES).
GRID_MAX_BYTES = 2 << 20
# Winograd F(2x2, 3x3) with its 16 products in bf16 (fp32 sums): U rounded to bf16 once at
# compile time, V as the input transform writes it (core/kernels/conv_winograd.c, u_bf16).
# A direct bf16 product cannot go faster than the CPU's bf16 multiply rate, and on a 3x3
# layer Winograd does 16 products per 2x2 outputs instead of 36. Its error is that of the
# rounding of U and V, not of the weights and inputs: ResNet-18's 3x3 layers in NumPy,
# 1.5x the direct bf16 product's. It is taken where fp32 Winograd is (_winograd_fits).
CONV_WINOGRAD_BF16 = 9
# bf16 from a channels-last grid, where the bf16 micro-kernel is AMX (core/kernels/
# conv_nhwc_bf16.h, nhwc_bf16_pays): more than one tap, strides of 1 or 2, one group, a
# multiple of 32 input channels, an epilogue the AMX store applies itself (none, Relu,
# Clip, Gelu). The input is converted once per call onto a zero-padded grid of positions
# that hold their channels together (_nhwc_grid_bytes: the scratch; with a stride, cut
# into phase planes), whose runs of 16 positions are the AMX tiles' rows: a kernel
# column's shift moves a tile by whole rows, where the channel-pair grid (CONV_PAIRS_BF16)
# moves it across its cache lines. The weight is packed as nn_bf16's packed B (panels of
# 32 output channels), its depth tap-major as CONV_PAIRS_BF16's.
CONV_NHWC_BF16 = 10
NHWC_ACTIVATIONS = ("", "Relu", "Clip", "Gelu")
# CONV_NHWC_BF16 on channels-last tensors (ge_hub.FusedConvNHWC, the `channels_last`
# pass): the grid converted from X's positions in order and C stored as the AMX tiles hold
# it, so neither side turns the layout around; 1x1 windows too. The only path of that op.
CONV_NHWC_BF16_CL = 11
# Its stems: channels-last X of at most STEM_CHANNELS channels (ResNet's 3 -> 64 7x7
# stride-2 first layer), whose depth is the window's rows, each a block of STEM_PIXELS
# pixels of 4 values (conv_nhwc_bf16.h, stem_width): no dilation, windows at most
# STEM_PIXELS wide.
STEM_CHANNELS, STEM_PIXELS = 4, 8
BF16_PATHS = (CONV_PACKED_BF16, CONV_PAIRS_BF16, CONV_WINOGRAD_BF16, CONV_NHWC_BF16,
              CONV_NHWC_BF16_CL)
# Few channels on both sides, computed straight from the input (core/kernels/
# conv_direct.c): tiles of DIRECT_OC output channels by three 16-wide row vectors, the
# weights packed as [group][block][cg][kh][kw][DIRECT_OC].
CONV_DIRECT = 8
DIRECT_OC, DIRECT_MAX_K = 8, 7
# Where it is taken (one thread, Zen 4): layers of at most this many channels on each
# side, whose packed path gathers columns for as long as its few output channels take to
# multiply them. Stride 2: the tiny detector of bench.detection_models, 16 -> 32 channels
# from 64x64, 150 -> 123 us in the model; 32 -> 64, 136 -> 128 us. Stride 1 where
# Winograd does not apply (fewer than 16 channels on a side, or 5x5 and 7x7 windows):
# 3x3 8 -> 16 at 64x64 222 -> 159 us, 16 -> 8 296 -> 130 us, 15 -> 32 at 32x32 183 ->
# 129 us, 5x5 8 -> 16 440 -> 303 us, 7x7 6 -> 12 at 56x56 418 -> 366 us, 8 -> 64 even.
# Not 1x1 windows of stride 1, which the packed path reads in place (8 -> 16 at 64x64:
# 23 us there, 33 us here), nor layers Winograd takes, faster still (16 channels at
# 64x64: 172 us against 207 us here). Nor stems of up to FEW_MAX_CHANNELS channels: the
# few-channel path is 20-25% faster on one thread (MobileNetV2's 3 -> 32 from 224x224:
# 350-370 us against 445-450 us here; conv.c runs those here on several threads), and the
# packed path on 7x7 ones (ResNet's 3 -> 64 from 224x224: 2.96 ms against 4.0 ms here).
DIRECT_MAX_CHANNELS = 64
DIRECT_MIN_WIDTH = 16
FEW_MAX_CHANNELS = 4
DEPTHWISE_MAX_K, DEPTHWISE_MAX_STRIDE, DEPTHWISE_MAX_SPAN = 7, 8, 129
# The packed GEMM's panel sizes (NN_PACK_MR, NN_PACK_NR in core/kernels/nn_gemm_packed.h):
# constant Conv weights are laid out here as its packed A.
PACK_MR, PACK_NR, PACK_KC = 12, 32, 256
# The packed path gathers the input patches of at most this many floats at a time.
PACKED_MAX_FLOATS = 1 << 18
# The bf16 paths pack at most this many bf16 values of columns at a time (1 MiB): twice
# the fp32 budget's values, as many bytes as fp32 columns would take twice over. A block
# of ResNet-18's 512 x 4608 layers then holds both panels of its 49 positions, so the
# 4.7 MB weight is read once per call instead of once per panel (1.86 -> 1.75 ms a layer).
BF16_PACKED_MAX_VALUES = 1 << 19
# The im2col buffer holds at most this many floats; larger convolutions are done in
# blocks of output positions, which also keeps each block's columns in cache.
IM2COL_MAX_FLOATS = 1 << 18
# Winograd F(2x2, 3x3) pays off once its 16 products are real GEMMs: enough channels
# on both sides and enough 2x2 output tiles. Measured against the packed path on
# ResNet-18's 3x3 layers, it wins down to the 7x7 maps of 512 channels (16 tiles: one
# narrow panel), whose direct product wastes a third of a second 32-wide panel. Its
# transformed tiles are processed in blocks whose buffers (16 * (Cg + Mg) floats per
# tile) stay within this many floats (half a core's L2).
WINOGRAD_MIN_CHANNELS = 16
WINOGRAD_MIN_TILES = 16
WINOGRAD_MAX_FLOATS = 1 << 17
# With enough blocks, Winograd runs up to this many of them side by side, each slot's
# blocks on one thread in its own scratch area, instead of splitting every stage of a
# block over the pool (three barriers a block, which small channel counts cannot pay for;
# and each stage reads what every thread wrote in the one before, which costs most where
# the threads' cores share no cache). So a layer whose tiles fill two or more panels is
# cut into as many blocks, even below the budget: the tiny detector's 64-channel 16x16
# layers (64 tiles, one block by the budget) ran 78 us at 2 threads in two blocks where
# the two vCPUs shared a cache, and 105-107 us where they did not, against 78-91 and
# 116-173 us in one block (each block's buffers also in its thread's own workspace).
WINOGRAD_SLOTS = 4

def _conv_window(node, input_types):
    attrs = filled_attrs(node)
    x, w = input_types[0].shape, input_types[1].shape
    kernel = attrs["kernel_shape"] or w[2:]
    return attrs, _window(attrs, len(x) - 2, kernel, node_fail(node))


@dataclasses.dataclass(frozen=True)
class ConvPlan:
    """How one Conv node runs: the path, and the sizes its blob and scratch carry."""

    path: int
    n: int
    c: int
    m: int
    group: int
    has_bias: int
    block: int
    winograd_block: int
    winograd_slots: int
    scratch: int
    window_ints: list


def _conv_plan(node, input_types) -> ConvPlan:
    channels_last = node.op == "FusedConvNHWC"
    if channels_last:  # planned as the FusedConv it is, on channels-first shapes
        x_type = input_types[0]
        input_types = [TensorType(x_type.dtype, to_channels_first(x_type.shape)),
                       *input_types[1:]]
    attrs, window = _conv_window(node, input_types)
    x, w = input_types[0].shape, input_types[1].shape
    n, c, m, group = x[0], x[1], w[0], attrs["group"]
    in_dims = list(x[2:])
    out_dims, pads = _layout(window, in_dims)
    check_window(node, window, in_dims, out_dims, pads)
    begins = [p[0] for p in pads]
    has_bias = int(len(input_types) > 2 and input_types[2] is not None)
    taps = numel_of(window.kernel)
    out_size = numel_of(out_dims)
    cg, mg = c // group, m // group
    rows = cg * taps
    winograd_block = winograd_slots = 0
    weights_known = len(node.inputs) > 1 and node.inputs[1] is not None \
        and node.inputs[1].const is not None
    bf16_packed = weights_known and node.meta.get("precision") == "bf16" \
        and rows >= nn_bf16.BF16_MIN_K
    # Whole panels of output positions, as many as fit the budget (at least one).
    packed_block = PACK_NR * min(max(1, PACKED_MAX_FLOATS // (rows * PACK_NR)),
                                 -(-out_size // PACK_NR))
    if channels_last:
        scratch = nhwc_cl_fits(node, window, in_dims, out_dims, begins, cg, group)
        if not scratch:
            node_fail(node)("no kernel runs this channels-last Conv (it needs constant "
                            "weights, one group, a multiple of 32 input channels (or 1 to "
                            f"{STEM_CHANNELS} under an undilated window at most {STEM_PIXELS} "
                            "wide), strides of 1 or 2 and an activation among "
                            f"{NHWC_ACTIVATIONS})")
        path, block = CONV_NHWC_BF16_CL, PACK_NR
    elif group == c == m:
        path, block, scratch = CONV_DEPTHWISE, 1, 0
    elif _few_channels_fits(window, cg) and not bf16_packed:
        # a stem marked bf16 takes the bf16 packed path below: MobileNetV2's 3x3 one (3 -> 32
        # from 224x224) ran 218-224 us there against 283 us here on one thread, 109 against
        # 169 us (the direct kernel) on two (Zen 4, one-layer models, p20)
        path, block, scratch = CONV_FEW_CHANNELS, 1, 0
    elif weights_known and node.meta.get("precision") != "bf16" \
            and _direct_fits(window, cg, mg, out_dims, begins):
        path, block, scratch = CONV_DIRECT, 1, 0
    elif weights_known and node.meta.get("precision") == "bf16" \
            and _winograd_fits(window, cg, mg, out_dims) and bf16_winograd_pays() \
            and np.isfinite(node.inputs[1].const).all():
        winograd_block, winograd_slots = _winograd_blocks(cg, mg, out_dims)
        path, block = CONV_WINOGRAD_BF16, PACK_NR
        scratch = winograd_slots * _winograd_bf16_area_bytes(cg, mg, winograd_block)
    elif bf16_packed and group == 1 and nhwc_bf16_pays() \
            and attrs.get("activation", "") in NHWC_ACTIVATIONS \
            and (grid := _nhwc_grid_bytes(window, in_dims, out_dims, begins, cg, rows)):
        path, block, scratch = CONV_NHWC_BF16, PACK_NR, grid
    elif bf16_packed:
        # whole panels of bf16 columns, as many as BF16_PACKED_MAX_VALUES allows
        kp = nn_bf16.depth(rows)
        block = PACK_NR * min(max(1, BF16_PACKED_MAX_VALUES // (kp * PACK_NR)),
                              -(-out_size // PACK_NR))
        path = CONV_PACKED_BF16
        scratch = -(-kp * block * 2 // 64) * 64  # conv.c: conv_bf16_scratch_bytes
        if cg % 2 == 0 and taps > 1:
            path = CONV_PAIRS_BF16
            scratch += max(cg * numel_of(in_dims) * 2,
                           _pairs_grid_bytes(window, in_dims, out_dims, begins, cg, rows))
    elif weights_known and _winograd_fits(window, cg, mg, out_dims) \
            and np.isfinite(node.inputs[1].const).all():
        winograd_block, winograd_slots = _winograd_blocks(cg, mg, out_dims)
        area = 16 * (cg * -(-winograd_block // PACK_NR) * PACK_NR + mg * winograd_block)
        # (the scratch also fits the packed path's columns: files written before run
        # that path for data holding inf or NaN)
        path, block = CONV_WINOGRAD, packed_block
        scratch = max(rows * block, winograd_slots * area) * FLOAT_BYTES
    elif weights_known:
        path, block, scratch = CONV_PACKED, packed_block, rows * packed_block * FLOAT_BYTES
    elif taps == 1 and list(out_dims) == in_dims and all(s == 1 for s in window.strides) \
            and not any(begins):
        path, block, scratch = CONV_POINTWISE, 1, 0
    else:
        block = max(1, min(out_size, IM2COL_MAX_FLOATS // rows))
        path, scratch = CONV_IM2COL, rows * block * FLOAT_BYTES
    return ConvPlan(path, n, c, m, group, has_bias, block, winograd_block, winograd_slots,
                    scratch, window_ints(in_dims, out_dims, window.kernel, window.strides,
                                          window.dilations, begins))


def _pairs_grid_bytes(window, in_dims, out_dims, begins, cg: int, rows: int) -> int:
    """Scratch for CONV_PAIRS_BF16 read in place (conv_pairs_bf16.h's conv_pairs_grid and
    conv_pairs_grid_bytes, where the micro-kernel reads B in place): the input as channel
    pairs on a zero-padded grid of rows a multiple of 16 words, once per kernel column,
    then one offset per depth block; 0 where the window cannot be read so (not 2-D, a
    stride, cg not a multiple of 32, negative padding, narrow rows)."""
    if len(in_dims) != 2 or any(s != 1 for s in window.strides) or cg % 32 \
            or any(b < 0 for b in begins):
        return 0
    grid_rows, width = (out + (k - 1) * d for out, k, d
                        in zip(out_dims, window.kernel, window.dilations))
    pitch = -(-width // 16) * 16
    if grid_rows < in_dims[0] + begins[0] or width < in_dims[1] + begins[1] \
            or (pitch - width) * GRID_MAX_WASTE > width:
        return 0
    plane = -(-(grid_rows * pitch + nn_bf16.BF16_NR) // 16) * 16
    grid_bytes = window.kernel[1] * (cg // 2) * plane * 4  # a copy per kernel column
    if grid_bytes > GRID_MAX_BYTES:
        return 0
    return grid_bytes + nn_bf16.depth(rows) // nn_bf16.BF16_KB * 8


def nhwc_cl_fits(node, window, in_dims, out_dims, begins, cg: int, group: int) -> int:
    """The scratch of CONV_NHWC_BF16_CL for this node, 0 where that path cannot run it
    (the `channels_last` pass converts only FusedConvs it fits)."""
    weights_known = len(node.inputs) > 1 and node.inputs[1] is not None \
        and node.inputs[1].const is not None
    rows = cg * math.prod(window.kernel)
    if not weights_known or group != 1 or rows < nn_bf16.BF16_MIN_K \
            or filled_attrs(node).get("activation", "") not in NHWC_ACTIVATIONS:
        return 0
    return _nhwc_grid_bytes(window, in_dims, out_dims, begins, cg, rows, channels_last=True)


def _nhwc_grid_bytes(window, in_dims, out_dims, begins, cg: int, rows: int,
                     channels_last: bool = False) -> int:
    """Scratch for CONV_NHWC_BF16 (conv_nhwc_bf16.h's conv_nhwc_grid_of and
    conv_nhwc_grid_bytes): the padded input as stride_h x stride_w phase planes of
    positions of cg bf16 values, then NR + (k_w - 1) d_w / stride_w positions of slack
    (64-byte aligned), then one offset per depth block; 0 where the window does not fit the
    path (not 2-D, one tap unless `channels_last`, a stride past 2, cg not a multiple of
    32, negative padding)."""
    if len(in_dims) != 2 or any(s not in (1, 2) for s in window.strides) \
            or any(b < 0 for b in begins):
        return 0
    (sy, sx), (kh, kw), (dy, dx) = window.strides, window.kernel, window.dilations
    if channels_last and cg <= STEM_CHANNELS:
        return _stem_grid_bytes(window, out_dims)
    if cg % nn_bf16.BF16_KB or kh * kw < (1 if channels_last else 2):
        return 0
    plane = (out_dims[0] + (kh - 1) * dy // sy) * (out_dims[1] + (kw - 1) * dx // sx)
    slack = nn_bf16.BF16_NR + (kw - 1) * dx // sx
    grid_bytes = -(-(sy * sx * plane + slack) * cg * 2 // 64) * 64
    return grid_bytes + nn_bf16.depth(rows) // nn_bf16.BF16_KB * 8


def _stem_grid_bytes(window, out_dims) -> int:
    """Scratch for a stem's grid (conv_nhwc_bf16.h, stem_width: channels-last X of at most
    STEM_CHANNELS channels): stride_h row-phase planes of rows of pitch * stride_w pixels
    of 4 bf16 values, then (BF16_NR + STEM_PIXELS) * stride_w pixels of slack (64-byte
    aligned), then one offset per row of the window (its depth blocks); 0 where the window
    does not fit (dilated, wider than STEM_PIXELS)."""
    (sy, sx), (kh, kw) = window.strides, window.kernel
    if any(d != 1 for d in window.dilations) or kw > STEM_PIXELS:
        return 0
    width = (out_dims[1] + (STEM_PIXELS - 1) // sx) * sx
    plane = (out_dims[0] + (kh - 1) // sy) * width
    slack = (nn_bf16.BF16_NR + STEM_PIXELS) * sx
    return -(-(sy * plane + slack) * 4 * 2 // 64) * 64 + kh * 8


def stem_weights(weights: np.ndarray) -> np.ndarray:
    """A stem's (M, cg, kh, kw) weight as the (kh * 32, M) B of its product: (kx, c) of
    window row ky at depth ky * 32 + kx * 4 + c, zeros elsewhere (conv_nhwc_bf16.h)."""
    m, cg, kh, kw = weights.shape
    b = np.zeros((kh, STEM_PIXELS, 4, m), np.float32)
    b[:, :kw, :cg, :] = weights.transpose(2, 3, 1, 0)
    return b.reshape(kh * nn_bf16.BF16_KB, m)


def nhwc_bf16_pays() -> bool:
    """Whether bf16 Convs that fit CONV_NHWC_BF16 take it in this process: where the bf16
    products run on AMX tiles (its micro-kernel; the others would run its layout in plain
    C). One thread on an AMX Xeon, ResNet-18's 3x3 layers in ge-hub profile, against the
    channel-pair grid: see core/kernels/conv_nhwc_bf16.h."""
    return cpu.bf16_micro_kernel() == "amx"


def _winograd_blocks(cg: int, mg: int, out_dims) -> tuple[int, int]:
    """Winograd's tiles per block and scratch slots: about equal blocks, as large as the
    budget allows, in whole panels of tiles; and at least one per slot while there are
    whole panels for them (see WINOGRAD_SLOTS)."""
    tiles = math.prod((d + 1) // 2 for d in out_dims)
    blocks = max(-(-tiles // max(1, WINOGRAD_MAX_FLOATS // (16 * (cg + mg)))),
                 min(WINOGRAD_SLOTS, tiles // PACK_NR))
    block = min(tiles, -(-tiles // (blocks * PACK_NR)) * PACK_NR)
    return block, min(WINOGRAD_SLOTS, -(-tiles // block))


def _winograd_bf16_area_bytes(cg: int, mg: int, block: int) -> int:
    """One scratch area of the bf16 Winograd path (nn_winograd_bf16_scratch_bytes): V in
    bf16 pair-row panels over the depth padded to BF16_KB, then M in fp32."""
    v_values = 16 * -(-block // PACK_NR) * PACK_NR * nn_bf16.depth(cg)
    return -(-(v_values * 2 + 16 * mg * block * FLOAT_BYTES) // 64) * 64


def pack_conv(node, input_types, output_types) -> Packed:
    plan = _conv_plan(node, input_types)
    ints = [plan.path, plan.n, plan.c, plan.m, plan.group, plan.has_bias, plan.block,
            plan.winograd_block, plan.winograd_slots, *plan.window_ints]
    return Packed(pack_values(ints), scratch_bytes=plan.scratch)


def prepack_conv(node, input_types, output_types) -> dict[int, np.ndarray]:
    """The weights of the packed and Winograd paths, laid out for their GEMMs (see
    core/kernels/conv.c): the packed path's as the packed A of every group, (groups,
    floats); Winograd's as its transformed kernels U, then the sign of every weight (int8
    -1, 0 or +1 in (M, C/group, 3, 3) order, padded to whole floats), which decide the
    outputs that read an inf or NaN (conv.c, winograd_nonfinite). Written straight into
    the one array the plan keeps, a slice at a time, so that packing a layer needs little
    more memory than its result."""
    plan = _conv_plan(node, input_types)
    if plan.path not in (CONV_PACKED, CONV_WINOGRAD, CONV_DIRECT, *BF16_PATHS):
        return {}
    mg = plan.m // plan.group
    weights = np.asarray(node.inputs[1].const, dtype=np.float32).reshape(plan.group, mg, -1)
    if plan.path == CONV_DIRECT:
        return {1: _direct_weights(weights)}
    if plan.path == CONV_PACKED_BF16:  # bf16 values as uint16 (core/kernels/nn_gemm_bf16.h)
        return {1: nn_bf16.pack_a(weights)}
    if plan.path == CONV_WINOGRAD_BF16:
        return {1: _winograd_bf16_weights(weights.reshape(plan.group, mg, -1, 3, 3))}
    if plan.path == CONV_NHWC_BF16_CL and plan.c <= STEM_CHANNELS:
        return {1: nn_bf16.pack_b(stem_weights(weights.reshape(node.inputs[1].const.shape)))}
    if plan.path in (CONV_NHWC_BF16, CONV_NHWC_BF16_CL):  # packed B: (taps * channels, M)
        cg = plan.c // plan.group
        tap_major = weights.reshape(mg, cg, -1).transpose(0, 2, 1).reshape(mg, -1)
        return {1: nn_bf16.pack_b(tap_major.T)}
    if plan.path == CONV_PAIRS_BF16:  # the depth tap-major: (channels, taps) -> (taps, channels)
        cg = plan.c // plan.group
        tap_major = weights.reshape(plan.group, mg, cg, -1).transpose(0, 1, 3, 2)
        return {1: nn_bf16.pack_a(tap_major.reshape(plan.group, mg, -1))}
    k = weights.shape[2]
    if plan.path == CONV_PACKED:
        packed = np.empty((plan.group, _packed_floats(mg, k)), np.float32)
        _pack_panels_into(packed, weights)
        return {1: packed}
    cg = k // 9
    u_floats = plan.group * 16 * _packed_floats(mg, cg)
    out = np.empty(u_floats + -(-plan.m * k // 4), np.float32)
    _winograd_kernels_into(out[:u_floats].reshape(plan.group, 16, -1),
                           weights.reshape(plan.group, mg, cg, 3, 3))
    signs = out[u_floats:].view(np.int8)
    signs[plan.m * k:] = 0
    signs[:plan.m * k] = np.sign(weights.reshape(-1))
    return {1: out}


def _packed_floats(rows: int, k: int) -> int:
    """Floats of one (rows, k) matrix as the packed GEMM's A: whole panels of PACK_MR."""
    return -(-rows // PACK_MR) * PACK_MR * k


def _pack_panels(a: np.ndarray) -> np.ndarray:
    """(groups, rows, k) matrices as the packed GEMM's A: (groups, floats)."""
    out = np.empty((a.shape[0], _packed_floats(a.shape[1], a.shape[2])), np.float32)
    _pack_panels_into(out, a)
    return out


def _pack_panels_into(out: np.ndarray, a: np.ndarray) -> None:
    """Write (groups, rows, k) matrices into `out` (groups, floats; rows of it may be
    strided) as the packed GEMM's A (core/kernels/nn_gemm_packed.h), one flat run per
    group: k in slices of PACK_KC, each slice holding every panel of PACK_MR rows (zero
    rows past the end) for its values of k, one panel after another."""
    groups, rows, k = a.shape
    panels, full = -(-rows // PACK_MR), rows // PACK_MR
    for k0 in range(0, k, PACK_KC):
        kw = min(PACK_KC, k - k0)
        dest = out[:, panels * PACK_MR * k0:panels * PACK_MR * (k0 + kw)]
        dest = dest.reshape(groups, panels, kw, PACK_MR)
        if not np.may_share_memory(dest, out):  # reshape had to copy: a bug, not data
            raise AssertionError("packed panels would not land in the output")
        dest[:, :full] = a[:, :full * PACK_MR, k0:k0 + kw].reshape(
            groups, full, PACK_MR, kw).transpose(0, 1, 3, 2)
        if full < panels:
            dest[:, full] = 0.0
            dest[:, full, :, :rows - full * PACK_MR] = \
                a[:, full * PACK_MR:, k0:k0 + kw].transpose(0, 2, 1)


# Winograd F(2x2, 3x3)'s kernel transform: U = G g G^T (core/kernels/conv_winograd.c).
_WINOGRAD_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])


def _winograd_kernels_into(out: np.ndarray, weights: np.ndarray) -> None:
    """(groups, mg, cg, 3, 3) kernels -> `out` (groups, 16, floats): for each group and
    each of the 16 positions xi = (i, j) of the 4x4 transform, U[xi] (mg x cg) as the
    packed GEMM's A. Each U[xi] is summed in float64 and rounded once."""
    groups, mg, cg = weights.shape[:3]
    for i in range(4):
        for j in range(4):
            u = np.zeros((groups, mg, cg), np.float64)
            for k in range(3):
                for m in range(3):
                    factor = _WINOGRAD_G[i, k] * _WINOGRAD_G[j, m]
                    if factor:
                        u += factor * weights[:, :, :, k, m]
            _pack_panels_into(out[:, 4 * i + j], u.astype(np.float32))


def _winograd_bf16_weights(weights: np.ndarray) -> np.ndarray:
    """(groups, mg, cg, 3, 3) kernels -> the bf16 Winograd path's W (uint16): per group
    the 16 U[xi] (summed in float64, rounded once to bf16) as nn_gemm_bf16.h's packed A,
    then the sign of every weight (int8, as the fp32 path's, padded to whole uint16)."""
    groups, mg, cg = weights.shape[:3]
    u = np.einsum("ik,gmckl,jl->gijmc", _WINOGRAD_G, weights.astype(np.float64), _WINOGRAD_G)
    packed = nn_bf16.pack_a(u.astype(np.float32).reshape(groups * 16, mg, cg)).reshape(-1)
    signs = np.zeros(-(-weights.size // 2) * 2, np.int8)
    signs[:weights.size] = np.sign(weights.reshape(-1))
    return np.concatenate([packed, signs.view(np.uint16)])


def _winograd_kernels(weights: np.ndarray) -> np.ndarray:
    """(groups, mg, cg, 3, 3) kernels -> U as the packed GEMM's A: (groups, 16, floats)."""
    groups, mg, cg = weights.shape[:3]
    out = np.empty((groups, 16, _packed_floats(mg, cg)), np.float32)
    _winograd_kernels_into(out, weights)
    return out


def _few_channels_fits(window, cg: int) -> bool:
    """A 1-D or 2-D window the direct kernel takes, over at most FEW_MAX_CHANNELS input
    channels per group, cg * taps at most DEPTHWISE_MAX_K squared (nn_conv_few_channels_fits)."""
    return (cg <= FEW_MAX_CHANNELS and len(window.kernel) <= 2
            and cg * math.prod(window.kernel) <= DEPTHWISE_MAX_K ** 2
            and all(k <= DEPTHWISE_MAX_K for k in window.kernel)
            and all(1 <= s <= DEPTHWISE_MAX_STRIDE for s in window.strides)
            and all((k - 1) * d + 1 <= DEPTHWISE_MAX_SPAN
                    for k, d in zip(window.kernel, window.dilations)))


def _direct_weights(weights: np.ndarray) -> np.ndarray:
    """(groups, mg, cg * taps) weights as the direct kernel reads them: per group,
    ceil(mg / DIRECT_OC) blocks of (cg * taps, DIRECT_OC), channels past mg zero."""
    groups, mg, k = weights.shape
    blocks = -(-mg // DIRECT_OC)
    padded = np.zeros((groups, blocks * DIRECT_OC, k), np.float32)
    padded[:, :mg] = weights
    return np.ascontiguousarray(
        padded.reshape(groups, blocks, DIRECT_OC, k).transpose(0, 1, 3, 2)).reshape(-1)


def _direct_geometry(window, begins) -> bool:
    """A window the direct kernel takes (nn_conv_direct_fits): 1-D or 2-D, kernel at most
    DIRECT_MAX_K a side, strides 1 or 2, no dilation, pads smaller than the kernel."""
    return (len(window.kernel) <= 2 and all(k <= DIRECT_MAX_K for k in window.kernel)
            and all(s in (1, 2) for s in window.strides)
            and all(d == 1 for d in window.dilations)
            and all(0 <= b < k for b, k in zip(begins, window.kernel)))


def _direct_fits(window, cg: int, mg: int, out_dims, begins) -> bool:
    """Whether the direct kernel beats the other paths: few channels on both sides, rows
    of at least a vector's worth of outputs, and stride 2 along the rows, or stride 1
    where Winograd does not take the layer and the window is more than 1x1 (see
    DIRECT_*)."""
    if not (_direct_geometry(window, begins) and FEW_MAX_CHANNELS < cg <= DIRECT_MAX_CHANNELS
            and mg <= DIRECT_MAX_CHANNELS and out_dims[-1] >= DIRECT_MIN_WIDTH):
        return False
    if window.strides[-1] == 2:
        return True
    return math.prod(window.kernel) > 1 and not _winograd_fits(window, cg, mg, out_dims)


def bf16_winograd_pays() -> bool:
    """Whether bf16 3x3 Convs take Winograd in this process: not where the bf16 products
    run on AMX tiles. Winograd F(2x2, 3x3) does 2.25x fewer multiplies for input and output
    transforms in fp32 AVX-512; AMX makes the multiplies so cheap that the transforms cost
    more than they save. One thread on an AMX Xeon, interleaved, against the packed bf16
    path: 3x3 with 64 channels at 56x56 0.61 -> 0.43 ms, 512 at 7x7 0.55 -> 0.39, ResNet-18
    9.8 -> 7.9 ms. With AVX512-BF16 (Zen 4) Winograd stays ahead: 256 channels at 14x14
    0.72 ms against 1.17 on the packed path."""
    return cpu.bf16_micro_kernel() != "amx"


def _winograd_fits(window, cg: int, mg: int, out_dims) -> bool:
    """A 2-D 3x3 convolution with stride 1 and dilation 1, large enough to gain."""
    tiles = math.prod((d + 1) // 2 for d in out_dims)
    return (window.kernel == (3, 3) and window.strides == (1, 1) and window.dilations == (1, 1)
            and min(cg, mg) >= WINOGRAD_MIN_CHANNELS and tiles >= WINOGRAD_MIN_TILES)


def pack_fused_conv(node, input_types, output_types) -> Packed:
    """ge_hub.FusedConv: the Conv blob (its path chosen as for a Conv), then ints
    activation (its position in ge_hub.ops.conv.CONV_ACTIVATIONS), has_residual, then
    floats alpha, beta (core/kernels/conv.c, ge_conv_fused_f32)."""
    conv = pack_conv(node, input_types[:3], output_types)
    attrs = filled_attrs(node)
    has_residual = int(len(input_types) > 3 and input_types[3] is not None)
    extra = pack_values([CONV_ACTIVATIONS.index(attrs["activation"]), has_residual],
                        [attrs["alpha"], attrs["beta"]])
    return Packed(conv.attrs + extra, scratch_bytes=conv.scratch_bytes)


def _conv_transpose_blob(node, input_types) -> tuple[list[int], list[int], int, int]:
    """The ConvTranspose blob's head (N, C, M, group, has_bias), its window ints, and the
    columns' rows (M/group * taps) and cells (the input's spatial size)."""
    attrs, window = _conv_window(node, input_types)
    x, w = input_types[0].shape, input_types[1].shape
    n, c, group = x[0], x[1], attrs["group"]
    mg = w[1]
    in_dims = list(x[2:])
    out_dims, pads = _conv_transpose_layout(window, attrs, in_dims)
    check_window(node, window, in_dims, out_dims, pads)
    has_bias = int(len(input_types) > 2 and input_types[2] is not None)
    window_part = window_ints(in_dims, out_dims, window.kernel, window.strides,
                              window.dilations, [p[0] for p in pads])
    return ([n, c, mg * group, group, has_bias], window_part, mg * numel_of(window.kernel),
            numel_of(in_dims))


def pack_conv_transpose(node, input_types, output_types) -> Packed:
    head, window_part, rows, cells = _conv_transpose_blob(node, input_types)
    return Packed(pack_values(head + window_part), scratch_bytes=rows * cells * FLOAT_BYTES)


# ConvTranspose in bf16 (CONV_TRANSPOSE_BF16, core/kernels/conv.c): for a node the
# precision pass marked, with constant weights and at least BF16_MIN_K input channels per
# group, the columns (M/group * taps x input cells) = W_g^T @ X_g run on the bf16 product
# (W_g^T prepacked as its bf16 A, X_g's rows packed per call, `block` cells at a time, as
# many as BF16_PACKED_MAX_VALUES allows); col2im adds them into Y in fp32 as before.
CONV_TRANSPOSE_BF16 = "ge_nn_conv_transpose_bf16"


def _conv_transpose_bf16_block(cg: int, cells: int) -> int:
    kp = nn_bf16.depth(cg)
    return PACK_NR * min(max(1, BF16_PACKED_MAX_VALUES // (kp * PACK_NR)), -(-cells // PACK_NR))


def pack_conv_transpose_bf16(node, input_types, output_types) -> Packed:
    head, window_part, rows, cells = _conv_transpose_blob(node, input_types)
    cg = head[1] // head[3]
    block = _conv_transpose_bf16_block(cg, cells)
    columns = -(-rows * cells * FLOAT_BYTES // 64) * 64
    panels = -(-nn_bf16.depth(cg) * block * 2 // 64) * 64
    return Packed(pack_values(head + [block] + window_part), scratch_bytes=columns + panels)


def prepack_conv_transpose_bf16(node, input_types, output_types) -> dict[int, np.ndarray]:
    """W (C, M/group, k...) as each group's W_g^T (M/group * taps x C/group) in the bf16
    packed-A layout (nn_gemm_bf16.h)."""
    head, _, rows, _ = _conv_transpose_blob(node, input_types)
    group = head[3]
    weights = np.asarray(node.inputs[1].const, dtype=np.float32).reshape(group, -1, rows)
    return {1: nn_bf16.pack_a(weights.transpose(0, 2, 1))}


def supports_conv_transpose_bf16(node, input_types, output_types) -> bool:
    return (node.meta.get("precision") == "bf16" and len(node.inputs) > 1
            and node.inputs[1] is not None and node.inputs[1].const is not None
            and supports_conv_transpose(node, input_types, output_types)
            and input_types[0].shape[1] // filled_attrs(node)["group"] >= nn_bf16.BF16_MIN_K)


def supports_conv(node, input_types, output_types) -> bool:
    return spatial_ok(input_types) and numel_of(output_types[0].shape) > 0


# The C kernel of ge_hub.FusedConvNHWC (core/kernels/conv.c).
CONV_NHWC_KERNEL = "ge_conv_nhwc_bf16"
# ge_hub.ToChannelsLast from float32 to bfloat16 (core/kernels/conv_nhwc_bf16.c).
TO_CHANNELS_LAST_KERNEL = "ge_to_channels_last_bf16"


def pack_to_channels_last(node, input_types, output_types) -> Packed:
    return Packed(pack_values([int(d) for d in input_types[0].shape]))


def supports_to_channels_last(node, input_types, output_types) -> bool:
    return (all_static(input_types) and len(input_types[0].shape) == 4
            and input_types[0].dtype == F32 and output_types[0].dtype == DType.BFLOAT16)


def supports_fused_conv_nhwc(node, input_types, output_types) -> bool:
    """A FusedConvNHWC that CONV_NHWC_BF16_CL runs (else the reference runs it, counted):
    X (and Z, and so Y) float32 or bfloat16, W and B float32, and a window the path fits."""
    if not supports_conv(node, input_types, output_types) or len(input_types[0].shape) != 4 \
            or input_types[0].dtype not in (F32, DType.BFLOAT16) \
            or any(t is not None and t.dtype != F32 for t in input_types[1:3]):
        return False
    x = TensorType(input_types[0].dtype, to_channels_first(input_types[0].shape))
    attrs, window = _conv_window(node, [x, *input_types[1:]])
    in_dims = list(x.shape[2:])
    out_dims, pads = _layout(window, in_dims)
    return bool(nhwc_cl_fits(node, window, in_dims, out_dims, [p[0] for p in pads],
                             x.shape[1] // attrs["group"], attrs["group"]))


def supports_conv_transpose(node, input_types, output_types) -> bool:
    if not supports_conv(node, input_types, output_types):
        return False
    attrs, window = _conv_window(node, input_types)
    out_dims, pads = _conv_transpose_layout(window, attrs, list(input_types[0].shape[2:]))
    # pads is None only for symbolic dims, which specialization has already removed.
    return pads is not None and list(out_dims) == list(output_types[0].shape[2:])


# -- registrations ----------------------------------------------------------------------

KERNELS = [
    KernelSpec(op="Conv", name="ge_nn_conv_f32", dtypes=(F32, F32),
               impl=CKernel("ge_nn_conv_f32", pack=pack_conv, supports=supports_conv,
                            prepack=prepack_conv)),
    c_kernel("ConvTranspose", "ge_nn_conv_transpose_f32", (F32, F32), pack_conv_transpose,
            supports_conv_transpose),
    # Ahead of the fp32 kernel, for the nodes the precision pass marked bf16.
    KernelSpec(op="ConvTranspose", name=CONV_TRANSPOSE_BF16, dtypes=(F32, F32), priority=1,
               impl=CKernel(CONV_TRANSPOSE_BF16, pack=pack_conv_transpose_bf16,
                            supports=supports_conv_transpose_bf16,
                            prepack=prepack_conv_transpose_bf16)),
    # The residual Z is read after the output tiles are written, so it never shares
    # the output's memory (no inplace).
    KernelSpec(op="FusedConv", domain=FUSED_DOMAIN, name="ge_conv_fused_f32",
               dtypes=(F32, F32),
               impl=CKernel("ge_conv_fused_f32", pack=pack_fused_conv, supports=supports_conv,
                            prepack=prepack_conv)),
    KernelSpec(op="ToChannelsLast", domain=FUSED_DOMAIN, name=TO_CHANNELS_LAST_KERNEL,
               impl=CKernel(TO_CHANNELS_LAST_KERNEL, pack=pack_to_channels_last,
                            supports=supports_to_channels_last)),
    # FusedConv's blob, its path CONV_NHWC_BF16_CL; X, Z and Y float32 or bfloat16.
    KernelSpec(op="FusedConvNHWC", domain=FUSED_DOMAIN, name=CONV_NHWC_KERNEL,
               impl=CKernel(CONV_NHWC_KERNEL, pack=pack_fused_conv,
                            supports=supports_fused_conv_nhwc, prepack=prepack_conv)),
]
