/*
 * The bf16 packed path's column packer for windows of stride 2 along the rows
 * (conv.c's NN_CONV_PACKED_BF16: stems of 3 channels such as ResNet's 7x7 and
 * MobileNetV2's 3x3, and ResNet's 1x1 stride-2 downsampling), on CPUs that convert to
 * bf16 themselves (AVX512-BF16).
 *
 * A pair-row of the packed B (nn_gemm_bf16.h) holds, for 32 output positions, rows 2q
 * and 2q + 1 of the column matrix (channel, tap) as the low and high bf16 halves of one
 * word. With stride 2 the 32 positions of one output row read 64 consecutive input
 * values of each row of the column matrix (every other one), so both rows come straight
 * from fp32 input rows: four masked loads each (zeros where the window reads padding),
 * vcvtne2ps2bf16, and one word permute that takes the even values of one and the even
 * values of the other. Where the two rows are neighbouring taps of one channel and input
 * row (kx and kx + 1), the 64 values themselves are the pairs in order: the conversion
 * alone is the pair-row. The generic packer gathered each row into an fp32 buffer first
 * and converted it after. One layer, one thread, Zen 4, interleaved (generic -> this):
 * ResNet's 7x7 stem 1584 -> 1311 us, MobileNetV2's 3x3 one 221 -> 180 us, a 1x1 stride-2
 * downsampling of 256 channels at 56x56 1052 -> 1027 us; the same bits.
 */
#ifndef GE_HUB_CONV_STRIDE2_BF16_H
#define GE_HUB_CONV_STRIDE2_BF16_H

#include <stdint.h>

#include "nn_common.h"

/* The most rows (channels x taps) and the widest window it takes: its tables of rows and
 * of tap columns live on the stack. */
#define CONV_STRIDE2_MAX_ROWS 2048
#define CONV_STRIDE2_MAX_KX 16

typedef struct {
    const nn_window *w;
    const float *x;  /* the group's first input channel of one image */
} conv_stride2_columns;

/* 1 where conv_stride2_pack packs this window's `rows` rows: a 2-D window of stride 2 and
 * dilation 1 along the rows, and a CPU with AVX512-BF16 (the bf16 micro-kernel being one
 * of the AVX-512 ones). */
int conv_stride2_fits(const nn_window *w, int64_t rows);

/* The nn_bf16_pack_fn: `arg` a conv_stride2_columns, k = channels x taps. */
void conv_stride2_pack(const void *arg, int64_t col0, int64_t cols, uint16_t *panels,
                       int64_t panel_stride, int64_t k);

#endif
