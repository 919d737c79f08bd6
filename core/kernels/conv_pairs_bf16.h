/*
 * The bf16 convolution path whose depth runs tap-major over pairs of input channels
 * (conv.c's NN_CONV_PAIRS_BF16; ge_hub/kernels/conv.py picks it for bf16 convolutions with
 * an even number of channels per group and more than one tap):
 *
 *   row k of the column matrix = tap k / cg, channel k % cg   (was: channel-major)
 *
 * so that a pair-row of the packed B (nn_gemm_bf16.h: rows 2q and 2q + 1 interleaved)
 * holds one tap of two neighbouring channels. The input is converted once per call into
 * bf16 channel pairs, a 32-bit word per position holding (channel 2c, channel 2c + 1) as
 * (low, high) bf16 halves, which is exactly a pair-row's entry: packing B becomes copying
 * runs of words (one per output row and tap, with zeros where the window reads padding),
 * where the channel-major packer gathered fp32 values and converted each one once per tap
 * that reads it (9 times for a 3x3 window).
 */
#ifndef GE_HUB_CONV_PAIRS_BF16_H
#define GE_HUB_CONV_PAIRS_BF16_H

#include <stdint.h>

#include "ge_hub/kernel.h"
#include "nn_common.h"

typedef struct {
    const nn_window *w;
    const uint32_t *pairs;  /* cg / 2 planes of in_size words (conv_pairs_convert) */
    int64_t channel_pairs;  /* cg / 2 */
} conv_pairs;

/* x: 2 * channel_pairs planes of in_size floats -> pairs (channel_pairs planes of words),
 * split over the pool. */
void conv_pairs_convert(ge_context *ctx, const float *x, int64_t channel_pairs,
                        int64_t in_size, uint32_t *pairs);

/* The nn_bf16_pack_fn of this path: `arg` a conv_pairs, k = taps * cg. */
void conv_pairs_pack(const void *arg, int64_t col0, int64_t cols, uint16_t *panels,
                     int64_t panel_stride, int64_t k);

#endif /* GE_HUB_CONV_PAIRS_BF16_H */
