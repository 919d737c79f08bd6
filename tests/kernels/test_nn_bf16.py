"""The bf16 products (core/kernels/nn_gemm_bf16.c, ge_hub/kernels/nn_bf16.py): each
micro-kernel variant (AMX, AVX512-BF16, plain C) against a float64 reference computed from
the same bf16-rounded inputs, at odd sizes and tails (rows, columns and depth that fill no
tile, several column blocks, groups), with FusedConv's epilogue; and the AMX permission
refused (simulated with GE_HUB_AMX_DENY=1), which must fall back without crashing."""

from __future__ import annotations

import contextlib
import functools
import math
import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ge_hub
from ge_hub import es, precision_report
from ge_hub.kernels import conv as conv_kernels
from ge_hub.kernels import nn_bf16, nn_strided
from ge_hub.ops.conv import FUSED_DOMAIN

BF16 = {"precision": "bf16"}

# name -> (x shape, w shape, attrs)
CONV_CASES = {
    "tails": ((1, 7, 9, 11), (37, 7, 3, 3), dict(pads=[1, 1, 1, 1])),
    "one_row": ((2, 5, 6, 7), (1, 5, 2, 2), {}),
    "stride2_groups": ((2, 6, 13, 9), (10, 3, 5, 5),
                       dict(strides=[2, 2], pads=[2, 1, 2, 1], group=2)),
    "deep": ((1, 70, 5, 7), (33, 70, 3, 3), dict(pads=[1, 1, 1, 1])),
    "pointwise_blocks": ((1, 24, 67, 65), (40, 24, 1, 1), {}),  # several column blocks
    "depth_16": ((1, 16, 8, 9), (18, 16, 1, 1), {}),  # the least depth the path takes
    # Pointwise, unit strides, no padding: the input read as the column matrix itself
    # (nn_bf16_pack_matrix), at an odd depth, with groups and several images.
    "pointwise_odd_groups": ((3, 34, 7, 5), (22, 17, 1, 1), dict(group=2)),
    # Pointwise but strided or padded: gathered like any window (pack_columns_bf16).
    "pointwise_stride2": ((1, 19, 11, 13), (9, 19, 1, 1), dict(strides=[2, 2])),
    "pointwise_padded": ((2, 20, 5, 6), (7, 20, 1, 1), dict(pads=[1, 0, 0, 2])),
    # More positions than one gathered chunk (8 panels of 32), odd depth, odd width.
    "gather_chunks": ((1, 5, 23, 19), (11, 5, 3, 3), dict(pads=[1, 1, 1, 1])),
    # Wider than the 16 kernel columns whose valid ranges the packer keeps.
    "wide_kernel": ((1, 2, 3, 20), (4, 2, 1, 17), dict(pads=[0, 8, 0, 8])),
    # Tap-major over channel pairs (an even number of channels per group, several taps:
    # CONV_PAIRS_BF16): strided (the copies that are not plain runs), dilated and padded
    # unevenly, groups on a 7x7 map (panels cut into five or six runs, a partial last
    # panel), and rows longer than a panel.
    "pairs_stride2": ((2, 6, 13, 9), (10, 6, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    # stride 2 with output rows wider than half a panel (the AVX-512 packer's second 16
    # positions) and a run cut by the padding on each side; then no padding, odd widths
    "pairs_stride2_wide": ((1, 4, 9, 75), (6, 4, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    "pairs_stride2_unpadded": ((1, 6, 8, 68), (5, 6, 2, 3), dict(strides=[2, 2])),
    "pairs_dilated": ((1, 6, 12, 17), (9, 6, 3, 2),
                      dict(dilations=[2, 3], pads=[2, 0, 1, 3])),
    "pairs_groups_7x7": ((1, 12, 7, 7), (40, 6, 3, 3), dict(pads=[1, 1, 1, 1], group=2)),
    "pairs_wide_rows": ((1, 6, 5, 70), (5, 6, 3, 3), dict(pads=[1, 1, 1, 1])),
    # A last panel of 1-8, 9-16 and 17-24 positions: the AVX512-BF16 kernel computes only
    # those columns (in ymm halves); pairs_groups_7x7's 49 and tails' 99 do too.
    "last_panel_24": ((1, 6, 4, 6), (20, 6, 3, 3), dict(pads=[1, 1, 1, 1])),
    "last_panel_8": ((1, 6, 5, 8), (20, 6, 3, 3), dict(pads=[1, 1, 1, 1])),
    "last_panel_12": ((1, 6, 4, 11), (20, 6, 3, 3), dict(pads=[1, 1, 1, 1])),
    # 3-channel stems of stride 2, which the few-channel path runs in fp32 (two images, an
    # odd width; ResNet's 7x7 with its padding of 3)
    "stem_3x3": ((2, 3, 17, 23), (10, 3, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    "stem_7x7": ((1, 3, 30, 27), (9, 3, 7, 7), dict(strides=[2, 2], pads=[3, 3, 3, 3])),
    # Stride 2 along the rows on the packed path (conv_stride2_bf16.h: rows of the column
    # matrix read straight from the input): output rows longer than a panel with pads on
    # both sides and an even kernel width (pairs of neighbouring taps, pairs across
    # channels), stride 2 along the rows only, and the widest kernel it takes (16 taps)
    "stride2_wide_rows": ((1, 3, 9, 140), (5, 3, 3, 4), dict(strides=[2, 2], pads=[1, 2, 1, 1])),
    "stride2_rows_only": ((2, 5, 6, 41), (4, 5, 2, 3), dict(strides=[1, 2], pads=[0, 1, 0, 0])),
    "stride2_kernel_16": ((1, 1, 3, 50), (3, 1, 1, 16), dict(strides=[2, 2], pads=[0, 8, 0, 7])),
    # a weight larger than its packed columns, in four blocks of rows (the last of 4): with
    # several threads, tasks own blocks of rows (split_m); 48 channels keep it off the
    # channels-last path on every CPU
    "pairs_weight_heavy": ((1, 48, 9, 9), (100, 48, 3, 3), dict(strides=[2, 2],
                                                                pads=[1, 1, 1, 1])),
    # more columns than one block packs (BF16_PACKED_MAX_VALUES / depth 288: 1820)
    "pairs_column_blocks": ((1, 32, 48, 47), (8, 32, 3, 3), dict(pads=[1, 1, 1, 1])),
    # Unit stride and channels per group a multiple of 32: where the micro-kernel reads B in
    # place (AMX, and the generic one), off the zero-padded grid (conv_pairs_bf16.h's
    # conv_pairs_grid, rows of 16 or 32 words here). Uneven pads and 40 output channels (a
    # block of 32 rows and one of 8); dilation and two images; groups and a 5x5 window; no
    # padding; rows longer than a block's 32 columns; one output row. Then a 7x7 map, whose
    # rows are too narrow for the grid (packed instead). Shapes that Winograd does not
    # take, so the path is the same on every CPU.
    "in_place_uneven": ((1, 32, 9, 15), (40, 32, 3, 2), dict(pads=[1, 0, 1, 1])),
    "in_place_dilated": ((2, 64, 7, 12), (20, 64, 3, 3), dict(dilations=[2, 2],
                                                              pads=[2, 2, 2, 2])),
    "in_place_groups_5x5": ((1, 64, 6, 26), (34, 32, 5, 5), dict(pads=[2, 2, 2, 2], group=2)),
    "in_place_unpadded": ((1, 32, 12, 45), (12, 32, 2, 3), {}),
    "in_place_wide_rows": ((1, 32, 3, 90), (24, 32, 1, 3), dict(pads=[0, 1, 0, 1])),
    "in_place_one_row": ((1, 32, 1, 15), (16, 32, 1, 2), {}),
    "narrow_rows_packed": ((1, 32, 7, 7), (20, 32, 3, 2), dict(pads=[1, 1, 1, 1])),
    # and a grid past NN_GRID_MAX_BYTES (2 copies x 32 pairs x 102 x 112 words): packed
    "large_grid_packed": ((1, 64, 100, 100), (8, 64, 3, 2), dict(pads=[1, 0, 1, 1])),
}


# The channels-last path (CONV_NHWC_BF16, core/kernels/conv_nhwc_bf16.h: unit stride, one
# group, a multiple of 32 input channels), which the planner takes only where the bf16
# micro-kernel is AMX; nhwc_path() forces it on any CPU, where the other micro-kernels run
# its layout in plain C. Uneven pads, a 3x2 window and 40 output channels (a block of 32
# rows of C and one of 8); dilation and two images; a 5x5 window; no padding, 100 output
# channels; rows longer than a block's 32 positions and 96 channels; one output row; two
# taps; 256 channels on a 7x7 map (a weight of several panels, the last block of
# positions mostly past the map).
NHWC_CASES = {
    "uneven": ((1, 32, 9, 15), (40, 32, 3, 2), dict(pads=[1, 0, 1, 1])),
    "dilated": ((2, 64, 7, 12), (20, 64, 3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2])),
    "window_5x5": ((1, 32, 6, 26), (34, 32, 5, 5), dict(pads=[2, 2, 2, 2])),
    "unpadded": ((1, 32, 12, 45), (100, 32, 2, 3), {}),
    "wide_rows": ((1, 96, 3, 90), (50, 96, 1, 3), dict(pads=[0, 1, 0, 1])),
    "one_row": ((1, 32, 1, 15), (16, 32, 1, 2), {}),
    "two_taps": ((1, 64, 5, 33), (24, 64, 2, 1), dict(pads=[1, 0, 0, 0])),
    "map_7x7": ((1, 256, 7, 7), (72, 256, 3, 3), dict(pads=[1, 1, 1, 1])),
    # Strides (the grid cut into phase planes): 2x2 with odd sizes, two images and a
    # partial block of output channels; along one axis each; no padding, so that the
    # stride leaves the last row and column unread; dilated.
    "stride2": ((2, 64, 15, 17), (40, 64, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    "stride2_rows": ((1, 32, 9, 40), (24, 32, 3, 3), dict(strides=[2, 1], pads=[1, 1, 1, 1])),
    "stride2_columns": ((1, 32, 11, 37), (16, 32, 2, 3), dict(strides=[1, 2], pads=[0, 1, 1, 0])),
    "stride2_unread": ((1, 32, 12, 13), (20, 32, 3, 3), dict(strides=[2, 2])),
    "stride2_dilated": ((1, 32, 14, 19), (36, 32, 2, 3), dict(strides=[2, 2], dilations=[2, 2],
                                                              pads=[1, 2, 0, 1])),
    # a weight larger than the grid, in five blocks of rows (the last of 2): with several
    # threads, tasks own blocks of rows (nn_gemm_bf16.c, split_m)
    "weight_heavy": ((1, 128, 6, 7), (130, 128, 3, 3), dict(pads=[1, 1, 1, 1])),
}


def nhwc_fits(x_shape, w_shape, attrs, activation) -> bool:
    """Where the planner takes CONV_NHWC_BF16 (if nhwc_bf16_pays): 2-D, several taps,
    strides of 1 or 2, one group, a multiple of 32 input channels, an epilogue the AMX
    store applies itself."""
    return (len(x_shape) == 4 and attrs.get("group", 1) == 1 and w_shape[1] % 32 == 0
            and w_shape[2] * w_shape[3] > 1
            and all(s in (1, 2) for s in attrs.get("strides", (1, 1)))
            and activation in conv_kernels.NHWC_ACTIVATIONS)


def expected_conv_path(x_shape, w_shape, attrs=None, activation="") -> int:
    """The bf16 path a Conv takes: channels-last where it fits on AMX, else tap-major over
    channel pairs where it can."""
    if conv_kernels.nhwc_bf16_pays() and nhwc_fits(x_shape, w_shape, attrs or {}, activation):
        return conv_kernels.CONV_NHWC_BF16
    if w_shape[1] % 2 == 0 and w_shape[2] * w_shape[3] > 1:
        return conv_kernels.CONV_PAIRS_BF16
    return conv_kernels.CONV_PACKED_BF16


@contextlib.contextmanager
def nhwc_path():
    """Plans made inside take CONV_NHWC_BF16 where it fits, whatever the micro-kernel (and
    not bf16 Winograd, which a CPU without AMX would prefer for 3x3 windows)."""
    pays, winograd = conv_kernels.nhwc_bf16_pays, conv_kernels.bf16_winograd_pays
    conv_kernels.nhwc_bf16_pays = lambda: True
    conv_kernels.bf16_winograd_pays = lambda: False
    try:
        yield
    finally:
        conv_kernels.nhwc_bf16_pays, conv_kernels.bf16_winograd_pays = pays, winograd


def run_nhwc_case(case, rng, activation="Relu", residual=True, bias=True):
    with nhwc_path():
        run_conv_case(case, rng, activation=activation, residual=residual, bias=bias,
                      cases=NHWC_CASES)

# ConvTranspose (ge_nn_conv_transpose_bf16): name -> (x shape, w shape, attrs)
CONV_TRANSPOSE_CASES = {
    # stride 2 with uneven pads and output_padding, two images, 7 output channels
    "stride2_padded": ((2, 20, 5, 6), (20, 7, 3, 3),
                       dict(strides=[2, 2], pads=[1, 0, 1, 1], output_padding=[1, 0])),
    # groups, dilation, depth 17 per group (odd, padded to 32)
    "groups_dilated": ((1, 34, 4, 7), (34, 3, 2, 3), dict(group=2, dilations=[2, 1])),
    # more input cells than one block packs (depth 40: 1 MiB / 64 values = 409 panels)
    "cell_blocks": ((1, 40, 110, 130), (40, 2, 2, 2), dict(strides=[2, 2])),
    # 1-D, a 4-tap kernel
    "one_d": ((3, 16, 33), (16, 5, 4), dict(strides=[3], pads=[1, 2])),
}

# name -> (x shape, w shape, op, attrs)
LINEAR_CASES = {
    "matmul_3d": ((5, 13, 70), (70, 45), "MatMul", {}),
    "matmul_vector": ((33,), (33, 17), "MatMul", {}),
    "matmul_depth_1": ((65, 1), (1, 31), "MatMul", {}),
    "matmul_tall": ((300, 96), (96, 64), "MatMul", {}),
    "gemm_trans_b": ((7, 100), (19, 100), "Gemm", dict(transB=1, alpha=0.5, beta=2.0)),
    "gemm": ((33, 31), (31, 50), "Gemm", dict(beta=1.0)),
    # one row (a classifier at batch 1): the AVX512-BF16 kernel's one-row pass, a depth of
    # several blocks with a partial last one, and a partial last panel
    "gemm_one_row": ((1, 301), (75, 301), "Gemm", dict(transB=1)),
}


# MatMul of two run-time inputs (ge_nn_matmul_act_bf16): a shape -> b shape
ACT_CASES = {
    "attention_scores": ((1, 4, 37, 19), (1, 4, 19, 45)),  # Q K^T: tails in m, k and n
    "attention_context": ((2, 3, 70, 33), (2, 3, 33, 16)),  # P V: three row blocks
    "shared_b": ((3, 5, 40), (40, 65)),                     # B one matrix for the batch
    "shared_a": ((9, 31), (2, 31, 7)),                      # A one matrix for the batch
    "deep": ((1, 40, 600), (1, 600, 1000)),                 # two column blocks of B
}


# ge_hub.StridedMatMul (ge_nn_matmul_strided_bf16): name -> (A's input shape, B's, A's view
# (offset, shape, strides), B's view, out_perm). Views as fold_matmul_views makes them.
STRIDED_CASES = {
    # a fused QKV projection [B, S, 3 H D]: Q read as [B, H, S, D], K as K^T [B, H, D, S]
    # (B's columns contiguous: K's rows), the result written as [B, S, H, D]
    "qkv_heads": ((2, 19, 72), (2, 19, 72), (0, (2, 3, 19, 8), (1368, 8, 72, 1)),
                  (24, (2, 3, 8, 19), (1368, 8, 1, 72)), (0, 2, 1, 3)),
    # odd depth and widths with offsets and row strides wider than the rows; B^T
    "odd_tails": ((40, 60), (50, 40), (63, (37, 35), (60, 1)), (5, (35, 45), (1, 40)), ()),
    # B with contiguous rows wider than its view, a depth of several blocks, one A row
    "deep_rows": ((3, 700), (600, 100), (50, (1, 600), (700, 1)),
                  (10, (600, 70), (100, 1)), ()),
    # batch dims broadcast from size 1 on either side, into a rank-4 product
    "broadcast": ((1, 4, 13, 20), (3, 1, 20, 9), (0, (1, 4, 13, 20), (1040, 260, 20, 1)),
                  (0, (3, 1, 20, 9), (180, 180, 9, 1)), (1, 0, 2, 3)),
    # a product big enough to be split over the pool: B^T packed from column offsets
    "wide_transposed": ((70, 110), (210, 120), (3, (64, 100), (110, 1)),
                        (7, (100, 200), (1, 120)), ()),
    # one column of Y (n 1) from a transposed B, k 1 from plain rows
    "one_column": ((5, 7), (1, 7), (0, (5, 7), (7, 1)), (0, (7, 1), (1, 7)), ()),
    "depth_1": ((6, 1), (1, 33), (0, (6, 1), (1, 1)), (0, (1, 33), (33, 1)), ()),
}


def view_of(x: np.ndarray, offset: int, shape, strides) -> np.ndarray:
    from ge_hub.ops.nn import view_indices

    flat = x.reshape(-1)
    return flat[view_indices(flat.size, offset, shape, strides)]


def strided_graph(a_in, b_in, a_view, b_view, out_perm=()):
    """One StridedMatMul of inputs a and b through the views (offset, shape, strides)."""
    attrs = {}
    for which, (offset, shape, strides) in (("a", a_view), ("b", b_view)):
        attrs.update({f"{which}_offset": offset, f"{which}_shape": list(shape),
                      f"{which}_strides": list(strides)})
    with es.GraphBuilder("g") as gb:
        ain = es.input("a", "float32", list(a_in))
        bin_ = es.input("b", "float32", list(b_in))
        es.output(es.op("StridedMatMul", ain, bin_, domain=FUSED_DOMAIN,
                        out_perm=list(out_perm), **attrs), "y")
    return gb.graph


def run_strided_case(case, rng):
    a_in, b_in, a_view, b_view, out_perm = STRIDED_CASES[case]
    a = rng.standard_normal(a_in).astype(np.float32)
    b = rng.standard_normal(b_in).astype(np.float32)
    model = ge_hub.compile(strided_graph(a_in, b_in, a_view, b_view, out_perm), options=BF16)
    (step,) = model.plan.steps
    assert step.kernel == nn_strided.BF16_KERNEL
    assert precision_report.step_precision(step) == "bf16"
    (got,) = model.run({"a": a, "b": b})
    va, vb = round64(view_of(a, *a_view)), round64(view_of(b, *b_view))
    want, scale = va @ vb, np.abs(va) @ np.abs(vb)
    if out_perm:
        want, scale = want.transpose(out_perm), scale.transpose(out_perm)
    assert got.shape == want.shape
    assert_fp32_sum_of(got, want, scale, a_view[1][-1])


def round64(a: np.ndarray) -> np.ndarray:
    return nn_bf16.round_bf16(a).astype(np.float64)


def conv2d64(x, w, b, strides=(1, 1), pads=(0, 0, 0, 0), group=1, dilations=(1, 1)):
    """A float64 2-D convolution (NCHW, OIHW)."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (h + pads[0] + pads[2] - (kh - 1) * dilations[0] - 1) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - (kw - 1) * dilations[1] - 1) // strides[1] + 1
    y = np.zeros((n, m, oh, ow))
    mg = m // group
    for g in range(group):
        for i in range(kh):
            for j in range(kw):
                i0, j0 = i * dilations[0], j * dilations[1]
                patch = xp[:, g * cg:(g + 1) * cg, i0:i0 + strides[0] * oh:strides[0],
                           j0:j0 + strides[1] * ow:strides[1]]
                y[:, g * mg:(g + 1) * mg] += np.einsum("nchw,mc->nmhw", patch,
                                                       w[g * mg:(g + 1) * mg, :, i, j])
    return y + (0 if b is None else b.reshape(1, -1, 1, 1))


def assert_fp32_sum_of(got, want, scale, depth):
    """|got - want| within fp32 rounding of a sum of `depth` products whose absolute
    values add up to `scale` (plus the epilogue's own rounding)."""
    bound = (depth + 4) * 2.0 ** -23 * scale + 1e-6
    err = np.abs(got.astype(np.float64) - want)
    assert (err <= bound).all(), f"max error {err.max()} (bound {bound.max()})"


def run_conv_case(case, rng, *, activation="Relu", residual=True, bias=True, cases=None):
    x_shape, w_shape, attrs = (CONV_CASES if cases is None else cases)[case]
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = (rng.standard_normal(w_shape) * (3.0 / np.prod(w_shape[1:])) ** 0.5).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32) if bias else None
    window = (attrs.get("strides", (1, 1)), attrs.get("pads", (0, 0, 0, 0)),
              attrs.get("group", 1), attrs.get("dilations", (1, 1)))
    want = conv2d64(round64(x), round64(w), None if b is None else b.astype(np.float64),
                    *window)
    scale = conv2d64(np.abs(round64(x)), np.abs(round64(w)),
                     None if b is None else np.abs(b.astype(np.float64)), *window)
    z = rng.standard_normal(want.shape).astype(np.float32) if residual else None
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", "float32", list(x.shape))
        zin = es.input("z", "float32", list(z.shape)) if residual else None
        y = es.op("FusedConv", xin, es.const(w), None if b is None else es.const(b), zin,
                  domain=FUSED_DOMAIN, activation=activation, alpha=0.0, beta=6.0, **attrs)
        es.output(y, "y")
    model = ge_hub.compile(gb.graph, options=BF16)
    (step,) = model.plan.steps
    assert struct.unpack_from("=q", step.attrs)[0] == expected_conv_path(x_shape, w_shape,
                                                                         attrs, activation)
    assert precision_report.step_precision(step) == "bf16"
    feeds = {"x": x, **({"z": z} if residual else {})}
    (got,) = model.run(feeds)
    want, scale = fused_epilogue(want, scale, z, activation)
    assert_fp32_sum_of(got, want, scale, w_shape[1] * w_shape[2] * w_shape[3])


def fused_epilogue(want, scale, z, activation):
    """FusedConv's epilogue on a float64 result and its magnitudes: the residual `z` (or
    None), then Relu, Clip(0, 6), Sigmoid or Gelu."""
    if z is not None:
        want, scale = want + z, scale + np.abs(z)
    if activation == "Relu":
        want = np.maximum(want, 0)
    elif activation == "Clip":
        want = np.clip(want, 0, 6)
    elif activation == "Sigmoid":  # 1/4-Lipschitz: the bound on the sum still holds
        want = 1.0 / (1.0 + np.exp(-want))
    elif activation == "Gelu":  # slope at most 1.13; erfc's approximation adds < 1e-7
        want, scale = gelu64(want), 1.13 * scale
    return want, scale


def run_conv_transpose_case(case, rng):
    from ge_hub.ops.conv import conv_transpose

    x_shape, w_shape, attrs = CONV_TRANSPOSE_CASES[case]
    group = attrs.get("group", 1)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = (rng.standard_normal(w_shape) * (3.0 / np.prod(w_shape[1:])) ** 0.5).astype(np.float32)
    b = rng.standard_normal(w_shape[1] * group).astype(np.float32)
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", "float32", list(x.shape))
        es.output(es.op("ConvTranspose", xin, es.const(w), es.const(b), **attrs), "y")
    model = ge_hub.compile(gb.graph, options=BF16)
    (step,) = model.plan.steps
    assert step.kernel == conv_kernels.CONV_TRANSPOSE_BF16
    assert precision_report.step_precision(step) == "bf16"
    (got,) = model.run({"x": x})
    full = dict(auto_pad="NOTSET", dilations=None, group=group, kernel_shape=None,
                output_padding=None, output_shape=None, pads=None, strides=None)
    full.update(attrs)
    want = conv_transpose(round64(x), round64(w), b.astype(np.float64), **full)
    scale = conv_transpose(np.abs(round64(x)), np.abs(round64(w)),
                           np.abs(b.astype(np.float64)), **full)
    assert_fp32_sum_of(got, want, scale, w_shape[0] // group + math.prod(w_shape[2:]))


def compile_linear(x_shape, w_shape, op, attrs, rng, options):
    """A MatMul or Gemm (with a bias C) of a random constant weight, compiled with
    `options` into one step: (model, x, w, c), x a random input."""
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    n = w_shape[0] if attrs.get("transB") else w_shape[1]
    c = rng.standard_normal(n).astype(np.float32) if op == "Gemm" else None
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", "float32", list(x.shape))
        ins = [xin, es.const(w)] + ([es.const(c)] if c is not None else [])
        es.output(es.op(op, *ins, **attrs), "y")
    return ge_hub.compile(gb.graph, options=options), x, w, c


def run_linear_case(case, rng):
    x_shape, w_shape, op, attrs = LINEAR_CASES[case]
    model, x, w, c = compile_linear(x_shape, w_shape, op, attrs, rng, BF16)
    (step,) = model.plan.steps
    assert precision_report.step_precision(step) == "bf16", step.kernel
    (got,) = model.run({"x": x})
    wt = w.T if attrs.get("transB") else w
    wr = round64(wt * np.float32(attrs.get("alpha", 1.0)))
    want, scale = round64(x) @ wr, np.abs(round64(x)) @ np.abs(wr)
    if c is not None:
        bias = c.astype(np.float64) * attrs.get("beta", 1.0)
        want, scale = want + bias, scale + np.abs(bias)
    assert_fp32_sum_of(got, want, scale, wt.shape[0])


def run_act_case(case, rng):
    a_shape, b_shape = ACT_CASES[case]
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    with es.GraphBuilder("g") as gb:
        ain = es.input("a", "float32", list(a_shape))
        bin_ = es.input("b", "float32", list(b_shape))
        es.output(es.op("MatMul", ain, bin_), "y")
    model = ge_hub.compile(gb.graph, options=BF16)
    (step,) = model.plan.steps
    assert step.kernel == "ge_nn_matmul_act_bf16"
    assert precision_report.step_precision(step) == "bf16"
    (got,) = model.run({"a": a, "b": b})
    want, scale = round64(a) @ round64(b), np.abs(round64(a)) @ np.abs(round64(b))
    assert got.shape == want.shape
    assert_fp32_sum_of(got, want, scale, a_shape[-1])


def gelu64(v: np.ndarray) -> np.ndarray:
    """x Phi(x) in float64 (math.erfc, exact to double rounding)."""
    return v * np.vectorize(math.erfc)(-v / math.sqrt(2.0)) / 2.0


def compile_fused_matmul(rng, rows, k, n, activation, options):
    """X W + bias + Z and an activation as one ge_hub.FusedMatMul of random constants,
    compiled with `options`: (model, x, w, b, z), x and z random inputs."""
    x = rng.standard_normal((rows, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    z = rng.standard_normal((rows, n)).astype(np.float32)
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", "float32", [rows, k])
        zin = es.input("z", "float32", [rows, n])
        es.output(es.op("FusedMatMul", xin, es.const(w), es.const(b), zin, domain=FUSED_DOMAIN,
                        activation=activation, alpha=0.0, beta=0.0), "y")
    return ge_hub.compile(gb.graph, options=options), x, w, b, z


def run_fused_matmul_case(rng, rows=37, k=50, n=45, activation="Relu"):
    """MatMul + bias Add + residual Add + an activation: one ge_hub.FusedMatMul (the
    epilogue fusion), run by ge_nn_linear_bf16 with its epilogue applied as Y is stored.
    Gelu (erf form) runs the bf16 path's own formula, within 1e-7 of |x| of the exact one."""
    model, x, w, b, z = compile_fused_matmul(rng, rows, k, n, activation, BF16)
    (step,) = model.plan.steps
    assert step.op == f"{FUSED_DOMAIN}.FusedMatMul"
    assert precision_report.step_precision(step) == "bf16", step.kernel
    (got,) = model.run({"x": x, "z": z})
    exact = round64(x) @ round64(w) + b + z
    scale = np.abs(round64(x)) @ np.abs(round64(w)) + np.abs(b) + np.abs(z)
    if activation == "Relu":
        assert_fp32_sum_of(got, np.maximum(exact, 0), scale, k)
        return
    # Phi' <= 0.4 and x Phi'(x) <= 0.25: the sum's error passes through at most 1.4x
    assert activation == "Gelu"
    bound = 1.4 * (k + 4) * 2.0 ** -23 * scale + 1e-7 * np.abs(exact) + 1e-6
    err = np.abs(got.astype(np.float64) - gelu64(exact))
    assert (err <= bound).all(), f"max error {err.max()}"


@pytest.fixture
def rng():
    return np.random.default_rng(16)


def test_rounding_is_to_nearest_even_and_keeps_specials():
    values = np.array([1.0, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, -2.5, np.inf, -np.inf, np.nan,
                       3.4e38, 1e-40], np.float32)
    rounded = nn_bf16.round_bf16(values)
    np.testing.assert_array_equal(rounded[:6], [1.0, 1.0, 1.0 + 2 ** -6, -2.5, np.inf, -np.inf])
    assert np.isnan(rounded[6])
    assert rounded[7] == np.inf  # past the largest bf16's half-way point
    assert abs(rounded[8] - 1e-40) < 1e-41


def test_packed_a_layout():
    a = np.arange(2 * 17 * 35, dtype=np.float32).reshape(2, 17, 35) / 64
    packed = nn_bf16.pack_a(a)
    assert packed.dtype == np.uint16 and packed.shape == (2, 32 * 64)
    values = nn_bf16.from_bf16(packed[1])
    kp, mr, kb = 64, nn_bf16.BF16_MR, nn_bf16.BF16_KB
    for row, k in [(0, 0), (16, 34), (5, 33), (15, 31)]:
        p, r = divmod(row, mr)
        at = (p * kp + k // kb * kb) * mr + r * kb + k % kb
        assert values[at] == nn_bf16.round_bf16(a[1, row, k])
    assert values[(1 * kp + 32) * mr + 1 * kb + 3] == 0.0  # row 17 is padding


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_cases(case, rng):
    run_conv_case(case, rng)


@pytest.mark.parametrize("case", ["tails", "in_place_uneven"])
@pytest.mark.parametrize("activation, residual, bias", [("Clip", False, False),
                                                        ("Relu", True, False),
                                                        ("", False, True),
                                                        ("Sigmoid", True, True),
                                                        ("Gelu", True, True)])
def test_conv_epilogues(case, activation, residual, bias, rng):
    """Each epilogue, on the packed columns and on B read in place (whose micro-kernel
    stores none, Relu, Clip and Gelu itself; a Sigmoid makes it pack the columns)."""
    run_conv_case(case, rng, activation=activation, residual=residual, bias=bias)


@pytest.mark.parametrize("case", NHWC_CASES)
def test_nhwc_cases(case, rng):
    run_nhwc_case(case, rng)


@pytest.mark.parametrize("activation, residual, bias", [("Clip", False, False),
                                                        ("", False, True),
                                                        ("Gelu", True, True)])
def test_nhwc_epilogues(activation, residual, bias, rng):
    """Each epilogue the channels-last store applies (none, Relu, Clip, Gelu), with and
    without the residual and the bias."""
    run_nhwc_case("uneven", rng, activation=activation, residual=residual, bias=bias)


def test_nhwc_is_not_taken_where_it_does_not_fit(rng):
    """A stride of 3, groups, channels not a multiple of 32, a 1x1 window or an epilogue the
    AMX store does not apply (Sigmoid) keep the other bf16 paths even where the channels-last
    one pays."""
    cases = {"stride3": ((1, 32, 9, 9), (16, 32, 3, 3), dict(strides=[3, 3], pads=[1, 1, 1, 1])),
             "groups": ((1, 64, 6, 9), (16, 32, 3, 3), dict(group=2, pads=[1, 1, 1, 1])),
             "channels_48": ((1, 48, 6, 9), (16, 48, 3, 3), dict(pads=[1, 1, 1, 1])),
             "pointwise": ((1, 64, 5, 33), (24, 64, 1, 1), {})}
    with nhwc_path():
        for name in cases:
            run_conv_case(name, rng, cases=cases)
        run_conv_case("uneven", rng, activation="Sigmoid", cases=NHWC_CASES)
        assert not nhwc_fits(*NHWC_CASES["uneven"], "Sigmoid")


def test_nhwc_weight_layout_is_recorded_as_needing_amx(rng):
    """A plan holding the channels-last weight records the layout nhwc_bf16, which needs
    AMX: a CPU without it plans a portable file again (the other layouts are faster there)
    and refuses any other."""
    from ge_hub.offline import portability

    x_shape, w_shape, attrs = NHWC_CASES["uneven"]
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", "float32", list(x_shape))
        es.output(es.op("Conv", xin, es.const(rng.standard_normal(w_shape).astype(np.float32)),
                        **attrs), "y")
    with nhwc_path():
        model = ge_hub.compile(gb.graph, options=BF16)
    assert portability.layouts_of(model.plan) == {"packed_bf16", "nhwc_bf16"}
    record = portability.record({"nhwc_bf16"})
    assert record["layouts"]["nhwc_bf16"]["cpu_features"] == ["amx_tile", "amx_bf16"]
    flags = portability.cpu_flags
    portability.cpu_flags = lambda: frozenset({"avx512f", "avx512_bf16"})
    try:
        (problem,) = portability.problems(record)
        assert "amx_tile" in problem and "nhwc_bf16" in problem
        assert portability.check(record, portable=True, where="m.ghm") is False
        with pytest.raises(ge_hub.errors.OfflineModelError, match="nhwc_bf16"):
            portability.check(record, portable=False, where="m.ghm")
    finally:
        portability.cpu_flags = flags


def test_packed_weights_start_on_a_cache_line(rng):
    """AMX tile rows are 64 bytes: packed weights must not straddle two lines per row."""
    for _ in range(5):
        a = rng.standard_normal((1, int(rng.integers(1, 40)), int(rng.integers(1, 90))))
        assert nn_bf16.pack_a(a.astype(np.float32)).ctypes.data % 64 == 0
        b = rng.standard_normal((int(rng.integers(1, 90)), int(rng.integers(1, 70))))
        assert nn_bf16.pack_b(b.astype(np.float32)).ctypes.data % 64 == 0


def core_hook(name: str, values: list[int]) -> int:
    """A C test hook of the core taking int64 values and answering one, through ctypes."""
    import ctypes

    from ge_hub import _core

    hook = getattr(ctypes.CDLL(_core.__file__), name)
    hook.restype = ctypes.c_int64
    return hook((ctypes.c_int64 * len(values))(*values))


def check_grid_rule(rng, plan_bytes, hook: str, max_in: int, channels, extra=(),
                    one_tap=False) -> None:
    """conv.py's scratch rule `plan_bytes` for a grid against the core's own (`hook`, a
    window's ints: in_h, in_w, out_h, out_w, kh, kw, strides, dilations, pad_top,
    pad_left, cg, k, then `extra`) on random 2-D windows across the rules' edges
    (strides, dilation, negative padding, the channels; 1x1 windows with `one_tap`): the
    two must agree, and both fit some."""
    import types

    checked = fits = 0
    for _ in range(400):
        kernel = tuple(int(v) for v in rng.integers(1, 6, 2))
        strides = tuple(int(v) for v in rng.choice([1, 1, 1, 2], 2))
        dilations = tuple(int(v) for v in rng.choice([1, 1, 2], 2))
        in_dims = (int(rng.integers(1, max_in)), int(rng.integers(1, max_in + 10)))
        pads = [int(v) for v in rng.integers(-1, 4, 4)]  # top, left, bottom, right
        cg = int(rng.choice(channels))
        out_dims = tuple((i + pads[a] + pads[a + 2] - d * (kk - 1) - 1) // s + 1
                         for a, (i, kk, s, d) in enumerate(zip(in_dims, kernel, strides,
                                                                  dilations)))
        if min(out_dims) < 1 or kernel[0] * kernel[1] < (1 if one_tap else 2):
            continue
        k = cg * kernel[0] * kernel[1]
        window = types.SimpleNamespace(kernel=kernel, strides=strides, dilations=dilations)
        plan = plan_bytes(window, list(in_dims), list(out_dims), pads[:2], cg, k)
        core = core_hook(hook, [*in_dims, *out_dims, *kernel, *strides, *dilations,
                                *pads[:2], cg, k, *extra])
        assert plan == core, (in_dims, out_dims, kernel, strides, dilations, pads, cg)
        checked += 1
        fits += plan > 0
    assert checked > 200 and fits > 20


def test_plan_scratch_for_the_nhwc_grid_matches_the_core(rng):
    """ge_hub/kernels/conv.py's _nhwc_grid_bytes (the scratch the plan gives the step)
    equals what conv_nhwc_bf16.c reads and writes, and both refuse the same windows."""
    check_grid_rule(rng, conv_kernels._nhwc_grid_bytes, "ge_hub_conv_nhwc_grid_bytes", 60,
                    [16, 32, 64, 96], extra=[0])
    # channels-last tensors (ge_hub.FusedConvNHWC): 1x1 windows too
    check_grid_rule(rng, functools.partial(conv_kernels._nhwc_grid_bytes, channels_last=True),
                    "ge_hub_conv_nhwc_grid_bytes", 60, [16, 32, 64, 96], extra=[1],
                    one_tap=True)
    # stems (1 to 4 channels: a grid of their own, depth blocks the window's rows)
    check_grid_rule(rng, functools.partial(conv_kernels._nhwc_grid_bytes, channels_last=True),
                    "ge_hub_conv_nhwc_grid_bytes", 60, [1, 2, 3, 4], extra=[1],
                    one_tap=True)


def test_plan_scratch_for_the_grid_matches_the_core(rng):
    """conv.py sizes the scratch of a Conv read in place with the core's own rule (where
    they disagree the core falls back to packing, unseen), rows padded by more than a
    sixth and grids past 2 MiB among the windows."""
    check_grid_rule(rng, conv_kernels._pairs_grid_bytes, "ge_hub_conv_pairs_grid_bytes", 120,
                    [16, 32, 64, 96, 256])


@pytest.mark.parametrize("case", CONV_TRANSPOSE_CASES)
def test_conv_transpose_cases(case, rng):
    run_conv_transpose_case(case, rng)


def test_conv_transpose_stays_fp32_where_bf16_does_not_fit(rng):
    """Fewer than BF16_MIN_K input channels per group, or weights fed at run time: the
    fp32 kernel, reported so."""
    def kernel(w, const=True):
        with es.GraphBuilder("g") as gb:
            xin = es.input("x", "float32", [1, w.shape[0], 5, 5])
            win = es.const(w) if const else es.input("w", "float32", list(w.shape))
            es.output(es.op("ConvTranspose", xin, win, strides=[2, 2]), "y")
        (step,) = ge_hub.compile(gb.graph, options=BF16).plan.steps
        return step.kernel, precision_report.step_precision(step)

    w = rng.standard_normal((16, 4, 3, 3)).astype(np.float32)
    assert kernel(w) == (conv_kernels.CONV_TRANSPOSE_BF16, "bf16")
    assert kernel(w[:15].copy()) == ("ge_nn_conv_transpose_f32", "fp32")
    assert kernel(w, const=False) == ("ge_nn_conv_transpose_f32", "fp32")


@pytest.mark.parametrize("case", LINEAR_CASES)
def test_linear_cases(case, rng):
    run_linear_case(case, rng)


def test_fused_matmul_epilogue(rng):
    run_fused_matmul_case(rng)


@pytest.mark.parametrize("case", ACT_CASES)
def test_matmul_of_two_activations(case, rng):
    run_act_case(case, rng)


def test_matmul_act_partial_broadcast_runs_strided_in_bf16(rng):
    """Batch dims broadcast only in part: not ge_nn_matmul_act_bf16's layout, so
    fold_matmul_views makes it a StridedMatMul (each broadcast dim a stride of 0), which
    runs in bf16; with the pass off it stays fp32."""
    with es.GraphBuilder("g") as gb:
        a = es.input("a", "float32", [2, 1, 5, 7])
        b = es.input("b", "float32", [1, 3, 7, 6])
        es.output(es.op("MatMul", a, b), "y")
    model = ge_hub.compile(gb.graph, options=BF16)
    (step,) = model.plan.steps
    assert step.kernel == nn_strided.BF16_KERNEL
    assert precision_report.step_precision(step) == "bf16"
    feeds = {"a": rng.standard_normal((2, 1, 5, 7)).astype(np.float32),
             "b": rng.standard_normal((1, 3, 7, 6)).astype(np.float32)}
    (got,) = model.run(feeds)
    want = round64(feeds["a"]) @ round64(feeds["b"])
    scale = np.abs(round64(feeds["a"])) @ np.abs(round64(feeds["b"]))
    assert got.shape == (2, 3, 5, 6)
    assert_fp32_sum_of(got, want, scale, 7)
    unfolded = ge_hub.compile(gb.graph, options={**BF16, "disable_passes": ["fold_matmul_views"]})
    assert [precision_report.step_precision(s) for s in unfolded.plan.steps] == ["fp32"]


@pytest.mark.parametrize("n", [5, 13, 20, 52, 64])
def test_fused_matmul_last_panel_widths(n, rng):
    """Y's last panel of NR columns holds n % 32 of them (or a whole one): each width band
    the AVX512-BF16 kernel computes alone (8, 16, 24, 32), with its epilogue."""
    run_fused_matmul_case(rng, rows=19, k=34, n=n, activation="Gelu")
    run_fused_matmul_case(rng, rows=19, k=34, n=n, activation="Relu")


def test_fused_matmul_gelu(rng):
    """Large values too, where erfc's tail and 2 - erfc meet their limits."""
    run_fused_matmul_case(rng, rows=70, k=40, n=99, activation="Gelu")


@pytest.mark.parametrize("case", sorted(STRIDED_CASES))
def test_strided_cases(case, rng):
    run_strided_case(case, rng)


def test_a_view_past_its_input_is_refused_by_name():
    with pytest.raises(ge_hub.errors.OpError, match="view a .* reaches value 20"):
        with es.GraphBuilder("g"):
            x = es.input("a", "float32", [4, 5])
            es.op("StridedMatMul", x, x, domain=FUSED_DOMAIN, a_offset=1, a_shape=[4, 5],
                  a_strides=[5, 1], b_offset=0, b_shape=[5, 2], b_strides=[2, 1])


def test_shallow_conv_and_unknown_weights_stay_fp32(rng):
    """Fewer than 16 values per output, or weights fed at run time: the fp32 paths, reported
    so. A 3-channel stem deep enough (27 values) takes the bf16 packed path, not the
    few-channel one (its results: CONV_CASES' stems)."""
    stem_w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [1, 3, 8, 8])
        w = es.input("w", "float32", [4, 3, 3, 3])
        y = es.op("Conv", x, es.const(rng.standard_normal((5, 3, 1, 1)).astype(np.float32)))
        es.output(y, "y")
        es.output(es.op("Conv", x, w), "y2")
        es.output(es.op("Conv", x, es.const(stem_w), strides=[2, 2], pads=[1, 1, 1, 1]), "y3")
    model = ge_hub.compile(gb.graph, options=BF16)
    steps = model.plan.steps
    assert [precision_report.step_precision(s) for s in steps] == ["fp32", "fp32", "bf16"]
    assert struct.unpack_from("=q", steps[2].attrs)[0] == conv_kernels.CONV_PACKED_BF16


def run_in_process(env: dict, script: str) -> str:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)],
                          env=dict(os.environ, **env), capture_output=True, text=True,
                          timeout=300, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


VARIANT_SCRIPT = """
    import numpy as np
    from ge_hub.precision_report import kernel_name
    from tests.kernels import test_conv_nhwc as cl
    from tests.kernels import test_conv_pointwise_depthwise as pd
    from tests.kernels import test_conv_winograd_bf16 as wino
    from tests.kernels import test_nn_bf16 as t
    rng = np.random.default_rng(3)
    for case in t.CONV_CASES:
        t.run_conv_case(case, rng)
    for case in wino.CASES:
        wino.run_winograd_case(case, rng)
    for case in t.CONV_TRANSPOSE_CASES:
        t.run_conv_transpose_case(case, rng)
    for case in pd.CASES:
        pd.run_case(case, rng)
    t.run_conv_case("tails", rng, activation="Clip", residual=False, bias=False)
    t.run_conv_case("in_place_uneven", rng, activation="Clip", residual=False, bias=False)
    t.run_conv_case("in_place_uneven", rng, activation="Sigmoid", residual=True, bias=True)
    for case in t.NHWC_CASES:
        t.run_nhwc_case(case, rng)
    t.run_nhwc_case("uneven", rng, activation="Gelu", residual=False, bias=False)
    for case in cl.CASES:
        for dtype in (np.float32, cl.BF16_DTYPE):
            cl.run_case(case, rng, dtype)
    cl.run_case("uneven", rng, cl.BF16_DTYPE, activation="Gelu", residual=True, bias=False)
    cl.run_case("uneven", rng, cl.BF16_DTYPE, activation="Clip", residual=False, bias=True)
    for case in cl.TO_CHANNELS_LAST_CASES:
        cl.run_to_channels_last_case(case, rng)
    for case in t.LINEAR_CASES:
        t.run_linear_case(case, rng)
    t.run_fused_matmul_case(rng)
    t.run_fused_matmul_case(rng, rows=70, k=40, n=99, activation="Gelu")
    t.run_fused_matmul_case(rng, rows=21, k=40, n=52, activation="Gelu")
    for case in t.ACT_CASES:
        t.run_act_case(case, rng)
    for case in t.STRIDED_CASES:
        t.run_strided_case(case, rng)
    from tests.kernels import test_linear_bf16x3 as x3
    x3.run_all(rng)
    print(kernel_name())
"""

# What each variant needs from the CPU (/proc/cpuinfo names).
NEEDS = {"amx": {"amx_tile", "amx_bf16", "avx512f"}, "avx512bf16": {"avx512_bf16", "avx512f"},
         "generic": set()}


def cpu_flags() -> set[str]:
    from ge_hub.kernels.cpu import cpu_flags as flags

    return set(flags())


def expected_variant(wanted: str) -> str:
    """The variant the core runs when GE_HUB_BF16_KERNEL names `wanted` on this CPU."""
    for name in ("amx", "avx512bf16", "generic"):
        lesser_or_equal = list(NEEDS).index(name) >= list(NEEDS).index(wanted)
        if lesser_or_equal and NEEDS[name] <= cpu_flags():
            return name
    return "generic"


@pytest.mark.parametrize("variant", ["amx", "avx512bf16", "generic"])
def test_each_micro_kernel_variant(variant):
    """The variant is picked once per process from the CPU; GE_HUB_BF16_KERNEL forces a
    lesser one (ignored where the CPU lacks it), so each runs in a process of its own."""
    ran = run_in_process({"GE_HUB_BF16_KERNEL": variant}, VARIANT_SCRIPT)
    assert ran == expected_variant(variant)


WINOGRAD_SCRIPT = """
    import numpy as np
    from tests.kernels import test_conv_winograd_bf16 as wino
    rng = np.random.default_rng(4)
    for case in wino.CASES:
        wino.run_winograd_case(case, rng)
    print("ok")
"""


def test_winograd_bf16_with_generic_transforms():
    """The bf16 Winograd path's input and output transforms in their plain loops
    (GE_HUB_GEMM_KERNEL=generic picks them), with each bf16 micro-kernel the CPU has."""
    for variant in ("", "generic"):
        ran = run_in_process({"GE_HUB_GEMM_KERNEL": "generic", "GE_HUB_BF16_KERNEL": variant},
                             WINOGRAD_SCRIPT)
        assert ran == "ok"


MIRROR_SCRIPT = """
    from ge_hub.kernels.cpu import bf16_micro_kernel
    from ge_hub.precision_report import kernel_name
    print(bf16_micro_kernel(), kernel_name())
"""


@pytest.mark.parametrize("env", [{"GE_HUB_BF16_KERNEL": ""}, {"GE_HUB_BF16_KERNEL": "amx"},
                                 {"GE_HUB_BF16_KERNEL": "avx512bf16"},
                                 {"GE_HUB_BF16_KERNEL": "generic"},
                                 {"GE_HUB_BF16_KERNEL": "", "GE_HUB_AMX_DENY": "1"}])
def test_plan_time_reading_of_the_micro_kernel_matches_the_core(env):
    """ge_hub.kernels.cpu.bf16_micro_kernel (what plans read, below the core) names the
    variant the core runs, forced or not, AMX refused or not."""
    planned, ran = run_in_process({"GE_HUB_AMX_DENY": "", **env}, MIRROR_SCRIPT).split()
    assert planned == ran


def test_amx_permission_refused_falls_back():
    """GE_HUB_AMX_DENY=1 stands for Linux refusing ARCH_REQ_XCOMP_PERM: the products run
    on the next variant, correctly, and nothing executes a tile instruction."""
    ran = run_in_process({"GE_HUB_AMX_DENY": "1", "GE_HUB_BF16_KERNEL": ""}, VARIANT_SCRIPT)
    assert ran == expected_variant("avx512bf16")


GELU_SPECIALS_SCRIPT = """
    import numpy as np
    from ge_hub import es
    import ge_hub
    from tests.kernels.test_nn_bf16 import BF16, FUSED_DOMAIN
    rng = np.random.default_rng(1)
    x = rng.standard_normal((40, 24)).astype(np.float32) * 3
    x[3, 5], x[7, 2], x[11, 0] = np.inf, -np.inf, np.nan
    x[20], x[21] = 1e30, -1e30
    w = rng.standard_normal((24, 37)).astype(np.float32)
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", "float32", [40, 24])
        es.output(es.op("FusedMatMul", xin, es.const(w), None, None, domain=FUSED_DOMAIN,
                        activation="Gelu", alpha=0.0, beta=0.0), "y")
    (y,) = ge_hub.compile(gb.graph, options=BF16).run({"x": x})
    print(" ".join(repr(float(v)) for v in y.reshape(-1)))
"""


def test_gelu_in_registers_keeps_the_stored_run_epilogue_on_specials():
    """The AVX512-BF16 kernel applies Gelu as it stores (gelu512); the generic one over the
    stored runs (gelu_bf16): inf, NaN and huge sums come out the same in both."""
    plain = np.array(run_in_process({"GE_HUB_BF16_KERNEL": "generic"},
                                    GELU_SPECIALS_SCRIPT).split(), np.float64)
    best = np.array(run_in_process({"GE_HUB_BF16_KERNEL": ""}, GELU_SPECIALS_SCRIPT).split(),
                    np.float64)
    assert np.isnan(plain).any() and np.isinf(plain).any()
    assert (np.isnan(plain) == np.isnan(best)).all()
    assert (np.isinf(plain) == np.isinf(best)).all()
    finite = np.isfinite(plain)
    np.testing.assert_allclose(best[finite], plain[finite], rtol=1e-5, atol=1e-5)


GELU_ACCURACY_SCRIPT = """
    import math
    import numpy as np
    from ge_hub import es
    import ge_hub
    import ml_dtypes
    from tests.kernels.test_nn_bf16 import BF16, FUSED_DOMAIN
    # values bf16 holds exactly, through an identity weight: the product is exact, and the
    # output is the bf16 path's Gelu of each value
    x = np.linspace(-12, 12, 37 * 64).astype(ml_dtypes.bfloat16).astype(np.float32)
    x = x.reshape(37, 64)
    with es.GraphBuilder("g") as gb:
        xin = es.input("x", "float32", [37, 64])
        es.output(es.op("FusedMatMul", xin, es.const(np.eye(64, dtype=np.float32)), None, None,
                        domain=FUSED_DOMAIN, activation="Gelu", alpha=0.0, beta=0.0), "y")
    (y,) = ge_hub.compile(gb.graph, options=BF16).run({"x": x})
    exact = np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x.reshape(-1).tolist()])
    err = np.abs(y.reshape(-1).astype(np.float64) - exact) / np.maximum(np.abs(x.reshape(-1)), 1)
    print(repr(float(err.max())))
"""


@pytest.mark.parametrize("variant", ["", "avx512bf16", "generic"])
def test_gelu_of_the_bf16_products_is_within_its_bound(variant):
    """The bf16 products' rational Gelu (gelu512_fast, nn_gelu_fast_f32 in the generic
    variant) is within 2e-7 |x| (absolutely below |x| = 1) of x erfc(-x / sqrt 2) / 2 on
    [-12, 12], in each variant."""
    err = float(run_in_process({"GE_HUB_BF16_KERNEL": variant}, GELU_ACCURACY_SCRIPT))
    assert err <= 2e-7
