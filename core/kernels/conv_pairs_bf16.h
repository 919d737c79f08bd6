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

/*
 * Read in place (where the bf16 micro-kernel can: nn_gemm_bf16_reads_in_place): the input
 * converted into channel pairs on a zero-padded grid instead, `pitch` words a row (the
 * input's width and both pads, rounded up to 16), so that with unit stride output (oy, ox)
 * and tap (ky, kx) read grid word (oy + ky dy) pitch + ox + kx dx: the words of 32
 * consecutive grid positions for one tap and channel pair are 32 consecutive words, which
 * is a packed B panel's pair-row. The product reads them where they lie (nn_bf16_in_place),
 * its columns the grid positions of the output rows (each row's last pitch - out_w
 * computed and dropped), and no panel is copied. The grid is held `copies` times (one per
 * kx, shifted left by kx dx words) and rows are a multiple of 16 words, so that every
 * pair-row a tile loads starts on a 64-byte line: from one unshifted grid, AMX tile loads
 * that split lines took 1.2x as long. A depth block (32 values) must lie in one tap: cg a
 * multiple of 32.
 *
 * One thread on an AMX Xeon, interleaved in one process, p20 (packed -> in place):
 * ResNet-18's 3x3 layers 64 channels at 56x56 0.777 -> 0.720 ms (with a residual 0.844 ->
 * 0.859), 128 at 28x28 0.677 -> 0.644, 256 at 14x14 0.740 -> 0.637; ResNet-18 7.97 -> 7.27
 * ms, light ResNet-50 19.4 -> 18.7 ms.
 */
typedef struct {
    int64_t pitch, rows;  /* the grid: in_w (with both pads, rounded up to 16) and in_h */
    int64_t top, left;    /* the pads before */
    int64_t plane;        /* words per channel pair and copy: the grid and the slack the
                           * last columns' reads run into, a multiple of 16 */
    int64_t copies;       /* kx = 0 .. copies - 1, each cg / 2 planes */
} conv_pairs_grid;

/* Rows whose padding to a multiple of 16 adds more than 1 / NN_GRID_MAX_WASTE of their
 * width are packed instead (a 7x7 map's 9 grid columns would be 16). */
#define NN_GRID_MAX_WASTE 6

/* Grids (all their copies) larger than this are packed instead: 64 channels at 112x112
 * (5.6 MB) took 1.12x the packed time, at 56x56 (1.4 MB) 0.93x. */
#define NN_GRID_MAX_BYTES (2 << 20)

/* 1 (grid filled) where the window can be read in place: 2-D, unit stride, no negative
 * padding, cg a multiple of 32, more than one tap and rows wide enough (see above). */
int conv_pairs_grid_of(const nn_window *w, int64_t cg, conv_pairs_grid *grid);

/* Bytes of scratch the in-place read takes: copies x cg / 2 planes, then one offset per
 * depth block (ge_hub/kernels/conv.py computes the same). */
int64_t conv_pairs_grid_bytes(const conv_pairs_grid *grid, int64_t cg, int64_t k);

/* x: cg / 2 channel pairs -> their grid planes and the shifted copies (zeros in the padding
 * and the slack), split over the pool. */
void conv_pairs_convert_grid(ge_context *ctx, const float *x, int64_t channel_pairs,
                             const nn_window *w, const conv_pairs_grid *grid, uint32_t *planes);

/* nn_bf16_in_place's block_offsets (values) of a depth k = taps * cg laid out tap-major:
 * depth block kb reads tap (ky, kx) = (kb * KB) / cg from channel pair ((kb * KB) % cg) / 2
 * on, in copy kx. */
void conv_pairs_grid_offsets(const nn_window *w, const conv_pairs_grid *grid, int64_t cg,
                             int64_t k, int64_t *offsets);

#endif /* GE_HUB_CONV_PAIRS_BF16_H */
