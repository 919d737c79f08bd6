/*
 * The channels-last bf16 convolution path for AMX (conv.c's NN_CONV_NHWC_BF16;
 * ge_hub/kernels/conv.py picks it where the bf16 micro-kernel is AMX): a 2-D Conv of
 * several taps, strides of 1 or 2, one group and a multiple of 32 input channels (or, on
 * channels-last tensors, a stem's 1 to 4: stem_width below), computed with the grid's
 * positions as the product's rows.
 *
 * The channel-pair grid (conv_pairs_bf16.h) puts positions along a B tile's row, so a
 * kernel column's shift by one position moves every tile row by 4 bytes across its cache
 * lines, which that path pays for with one shifted copy of the grid per kernel column.
 * Here the input is converted once per call into bf16 on a zero-padded grid of positions,
 * each holding its cg channels in a row (NHWC), and the roles turn round: an A tile is 16
 * consecutive grid positions by 32 channels of one tap (rows cg values apart, each on
 * whole 64-byte lines), so tap (ky, kx) is the same tile moved by (ky dy pitch + kx dx)
 * positions: no copies, and the input rows a block reads stay in L1 across its taps. B is
 * the weight in the packed-B layout of nn_gemm_bf16.h (panels of 32 output channels,
 * packed at compile time, depth tap-major as the pairs path's), and the tiles hold C
 * transposed, which nn_gemm_bf16.c turns back in registers before storing
 * (nn_bf16_in_place with `channels`).
 *
 * One thread on an AMX Xeon, a microbenchmark of the product and its transposed store,
 * 3x3 layers: 64 channels at 56x56 0.154 ms (the pair grid in ResNet-18: 0.31-0.37 ms),
 * 128 at 28x28 0.159 ms (0.23), 256 at 14x14 0.125 ms (0.22).
 */
#ifndef GE_HUB_CONV_NHWC_BF16_H
#define GE_HUB_CONV_NHWC_BF16_H

#include <stdint.h>

#include "ge_hub/kernel.h"
#include "nn_common.h"

/* The grid: the padded input cut into stride_h x stride_w phase planes (plane (py, px)
 * holds the padded input's rows py, py + stride_h, ... and in them the columns px,
 * px + stride_w, ...; one plane at unit stride), each `rows` x `pitch` positions of cg
 * bf16 values, `plane` positions apart; then `slack` zero positions that the last block's
 * rows read past the last plane. Output (oy, ox) and tap (ky, kx) read plane
 * ((ky dy) % sy, (kx dx) % sx) at row oy + (ky dy) / sy, column ox + (kx dx) / sx: with a
 * stride too, a block's 16 consecutive outputs of a row are 16 consecutive positions. */
typedef struct {
    int64_t pitch, rows, top, left, slack;
    int64_t stride_h, stride_w, plane;
    int64_t stem_width;  /* non-zero: a stem's grid (below), `width` pixels a row */
} conv_nhwc_grid;

/* A stem's grid (channels-last X of at most CONV_NHWC_STEM_CHANNELS channels, as ResNet's
 * 3 -> 64 7x7 stride-2 first layer): too few channels for a depth block, so the depth is
 * the window's rows instead. Every pixel of the padded input holds 4 bf16 values (its
 * channels, then zeros), the padded rows cut into stride_h row-phase planes of `rows`
 * rows of stem_width pixels (`plane` pixels each), and depth block ky of output (oy, ox)
 * is the 32 values of the CONV_NHWC_STEM_PIXELS pixels from column ox * stride_w of plane
 * row oy + ky / stride_h in plane ky % stride_h. Consecutive outputs of a row are then
 * 4 * stride_w values apart, which is the A tiles' row stride (the rows overlap: one copy
 * of the input serves every tap, no columns gathered), and an output row's positions are
 * pitch = stem_width / stride_w apart. The weight's depth is kh blocks of 32: (kx, c) at
 * ky * 32 + kx * 4 + c, zero where kx >= kw or c >= cg, so the 8th pixel of a row of a
 * 7-wide window is read and multiplied by zero: where it holds an inf or a NaN the
 * product would turn NaN, so those outputs are computed again from the window alone
 * (conv.c, conv_nhwc_stem_specials). A 7x7 window computes 8/7 x 4/3 of its products
 * so, and still: ResNet-18's stem in the model (one thread, AMX Xeon, ge-hub profile)
 * 0.64 ms on the bf16 packed path writing NCHW float32 -> 0.37 ms here writing bf16
 * positions, whose MaxPool (ge_hub.MaxPoolNHWC) then reads half the bytes. Slack:
 * `slack` pixels. */
#define CONV_NHWC_STEM_CHANNELS 4
#define CONV_NHWC_STEM_PIXELS 8

/* 1 (grid filled) where the window fits the path: 2-D, more than one tap unless
 * `channels_last` (a 1x1 window's NCHW input is already its column matrix, which the
 * packed path converts in one pass: in MobileNetV2 and ResNet-50 the grid's conversion
 * and transposed store cost more than they save; with channels-last tensors neither
 * happens), strides of 1 or 2, no negative padding, cg a multiple of 32. Input rows and
 * columns that no window reads (a stride's leftovers) are left out of the grid. */
int conv_nhwc_grid_of(const nn_window *w, int64_t cg, int channels_last, conv_nhwc_grid *grid);

/* The depth of the path's product: cg * taps, or for a stem's grid kh blocks of 32. */
int64_t conv_nhwc_depth(const nn_window *w, const conv_nhwc_grid *grid, int64_t cg);

/* Bytes of scratch the path takes: the grid (64-byte aligned), then one offset per depth
 * block of k = taps * cg (ge_hub/kernels/conv.py computes the same). */
int64_t conv_nhwc_grid_bytes(const conv_nhwc_grid *grid, int64_t cg, int64_t k);

/* x: cg planes of the input, or with `channels_last` its positions of cg channels each
 * (H x W x cg), or x16 (non-NULL, x unused) those positions in bf16 already -> the grid
 * (zeros in the padding and the slack), split over the pool by rows of the padded input. */
void conv_nhwc_convert(ge_context *ctx, const float *x, const uint16_t *x16, int64_t cg,
                       int channels_last, const nn_window *w, const conv_nhwc_grid *grid,
                       uint16_t *positions);

/* A stem's grid from its channels-last input (x, or x16 where non-NULL): 1 where the
 * input holds an inf or a NaN (see conv_nhwc_grid's stem_width), else 0. */
int conv_nhwc_convert_stem(ge_context *ctx, const float *x, const uint16_t *x16, int64_t cg,
                           const nn_window *w, const conv_nhwc_grid *grid, uint16_t *positions);

/* nn_bf16_in_place's block_offsets (values) of the depth k = taps * cg laid out tap-major:
 * depth block kb reads tap (ky, kx) = (kb * KB) / cg from channel (kb * KB) % cg on. */
void conv_nhwc_offsets(const nn_window *w, const conv_nhwc_grid *grid, int64_t cg, int64_t k,
                       int64_t *offsets);

/* Values from one output position to the next in the grid: the A tiles' row stride. */
static inline int64_t conv_nhwc_position_values(const conv_nhwc_grid *grid, int64_t cg) {
    return grid->stem_width ? 4 * grid->stride_w : cg;
}

#endif /* GE_HUB_CONV_NHWC_BF16_H */
