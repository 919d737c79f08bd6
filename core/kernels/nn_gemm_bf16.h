/*
 * bf16 products with fp32 accumulation (precision "bf16"/"mixed", ge_hub/passes/precision.py):
 * C = A @ B (+ a bias per row or per column of C), stored in fp32. A Conv's A is its
 * constant weight packed once at compile time in bf16 (ge_hub/kernels/nn_bf16.py) and its
 * B is packed in bf16 at every call by a callback, so that the fp32 -> bf16 conversion of
 * the activations happens in the packing the product does anyway (no conversion step of
 * its own), or, where the micro-kernel reads B in place, converted once onto a grid the
 * tiles load from (nn_bf16_in_place, below). A MatMul's (ge_nn_linear_bf16) is the other way round: its constant weight is
 * B, packed at compile time, and its input X is A, rounded once per call into a row-major
 * bf16 matrix that the tiles read in place (no per-tile packing).
 *
 * One layout, read by all three micro-kernels (nn_gemm_bf16.c: AMX tiles, AVX512-BF16,
 * plain C), so a plan packed on one machine runs on any other:
 *
 * Packed A: ceil(m / NN_BF16_MR) panels of MR rows, each kp = round_up(k, NN_BF16_KB)
 *   values deep, one after another; a panel holds kp / KB blocks of MR x KB values,
 *   row-major (an AMX A tile: 16 rows of 64 bytes):
 *     a[(p * kp + kb) * MR + r * KB + kk] = bf16(A[p * MR + r][kb + kk])   (kb % KB == 0)
 *   zero past m and past k.
 * Packed B: panels of NN_BF16_NR columns, each kp / 2 rows of NR pairs (the VNNI layout an
 *   AMX B tile and vdpbf16ps want):
 *     panel[(kk / 2) * 2 * NR + 2 * j + kk % 2] = bf16(B[kk][col0 + j])
 *   zero past the columns and past k; panels `panel_stride` values apart.
 */
#ifndef GE_HUB_NN_GEMM_BF16_H
#define GE_HUB_NN_GEMM_BF16_H

#include <stdint.h>
#include <string.h>

#include "conv_epilogue.h"
#include "ge_hub/kernel.h"
#include "nn_gemm_packed.h"

#define NN_BF16_MR 16
#define NN_BF16_NR 32
#define NN_BF16_KB 32

static inline int64_t nn_bf16_depth(int64_t k) {
    return (k + NN_BF16_KB - 1) / NN_BF16_KB * NN_BF16_KB;
}

/* Values (uint16) of a packed A of m rows and depth k. */
static inline int64_t nn_bf16_a_values(int64_t m, int64_t k) {
    return (m + NN_BF16_MR - 1) / NN_BF16_MR * NN_BF16_MR * nn_bf16_depth(k);
}

/* Writes the packed-B panels of columns [col0, col0 + cols) (ceil(cols / NR) panels,
 * `panel_stride` values apart, each nn_bf16_depth(k) / 2 rows deep). Panels of one call
 * are written by one thread; calls run on several threads with disjoint columns. */
typedef void (*nn_bf16_pack_fn)(const void *arg, int64_t col0, int64_t cols, uint16_t *panels,
                                int64_t panel_stride, int64_t k);

typedef struct {
    int64_t m, n, k;
    const uint16_t *a_packed;  /* nn_bf16_a_values(m, k) values */
    const float *bias;         /* m values, or NULL for zero */
    float *c;                  /* C[i][j] at c[i * ldc_row + j * ldc_col] */
    int64_t ldc_row, ldc_col;
    nn_bf16_pack_fn pack_b;
    const void *pack_arg;
    int64_t block;             /* columns of B packed at a time: a multiple of NR */
    uint16_t *scratch;         /* ceil(block / NR) panels, panel_stride values apart */
    int64_t panel_stride;      /* at least nn_bf16_depth(k) * NR */
    /* FusedConv's epilogue, applied to each stored run of a row of C (ldc_col == 1
     * only); `residual` laid out like C. NULL: none. */
    const nn_epilogue *epilogue;
    const float *residual;
    /* Optional (zero: as above). A another layout: row r of a block of 2 * MR rows and
     * depth block kb (a multiple of KB) at
     *   a + (r / MR) * a_tile + (r % MR) * a_row + (kb / KB) * a_kstep
     * (a row-major bf16 matrix of rows `ld` values long: a_row = ld, a_tile = MR * ld,
     * a_kstep = KB; its row count padded to a multiple of MR). */
    int64_t a_row, a_tile, a_kstep;
    /* Non-NULL: B packed once beforehand (its panels panel_stride values apart), so that
     * pack_b, block and scratch go unused. */
    const uint16_t *b_packed;
    int bias_per_col;  /* the bias is one value per column of C, not per row */
    /* Non-NULL (only where nn_gemm_bf16_reads_in_place()): B read where it lies, see
     * nn_bf16_in_place; pack_b, block, scratch and b_packed go unused. */
    const struct nn_bf16_in_place *in_place;
    /* Non-NULL (only with in_place's out_channels_last): C and the residual are bf16,
     * rounded as every bf16 packer rounds (c and residual unused). */
    uint16_t *c_bf16;
    const uint16_t *residual_bf16;
} nn_bf16_gemm;

/* B read in place by the micro-kernel, with no packed panels: a Conv's input converted to
 * bf16 channel pairs on a zero-padded grid (core/kernels/conv_pairs_bf16.h), whose pair-rows
 * for 32 consecutive grid positions are 32 consecutive words. Column q of B (of n = output
 * rows x pitch) is grid position q; depth block kb's pair-row i (i < KB / 2) of columns
 * [q, q + 32) starts at b + 2 * q + block_offsets[kb / KB] + i * row_stride (values). C's
 * column q is output position (q / pitch) * width + q % pitch, stored where q % pitch <
 * width; the others (the grid's padding columns) are computed and dropped. */
typedef struct nn_bf16_in_place {
    const uint16_t *b;
    const int64_t *block_offsets;  /* nn_bf16_depth(k) / KB values */
    int64_t row_stride;            /* values from one pair-row to the next in a block */
    int64_t pitch, width;
    /* Non-zero: a channels-last grid instead (core/kernels/conv_nhwc_bf16.h): position q
     * holds `channels` bf16 values at b + q * channels, depth block kb of columns
     * [q, q + 32) is the 32 values at b + (q + i) * channels + block_offsets[kb / KB] of
     * each position i, row_stride is unused, and the product's A (a_packed) is the weight
     * in the packed-B layout (a panel of NR columns per block of 2 * MR rows of C), which
     * all three micro-kernels read (AMX with the positions as its A tiles). */
    int64_t channels;
    /* Non-zero (with `channels`): C is stored channels-last, C[i][j] at
     * c[i * ldc_row + j * ldc_col] with ldc_row 1 (a row of C is an output channel, a
     * column a position), the residual laid out alike: the tiles, which hold the block
     * transposed (positions x channels), are stored as they are, a position's run of
     * channels at a time. */
    int out_channels_last;
} nn_bf16_in_place;

/* 1 where the micro-kernel reads B in place (AMX: a tile load takes any row stride) and
 * stores a product with this epilogue (NULL: none) itself: no activation, Relu, Clip or
 * Gelu, with or without a residual. */
int nn_gemm_bf16_reads_in_place(const nn_epilogue *epilogue);

void nn_gemm_bf16(ge_context *ctx, const nn_bf16_gemm *g);

/* The same with B packed beforehand (g->b_packed), all on the calling thread: for callers
 * that split their work over the pool themselves (Winograd's 16 products). */
void nn_gemm_bf16_here(const nn_bf16_gemm *g);

/* Packers that write the bf16 pair-rows in one pass from fp32 activations (the
 * conversion fused into the packing, no fp32 panel in between):
 *
 * nn_bf16_pack_matrix: B a row-major fp32 matrix (k rows, B[kk][c] at data[kk * ld + c]),
 *   as a pointwise stride-1 Conv's input [C, HW] is; `arg` an nn_bf16_matrix.
 * nn_bf16_pair_rows: pair-row building block for packers that gather their rows first
 *   (a Conv's im2col, core/kernels/conv.c): `even` and `odd` are two gathered rows of
 *   panels * NR floats (NULL: zeros, as past the depth); panel i's pair-row, from their
 *   values [i * NR, (i + 1) * NR), is written at dst + i * panel_stride. */
typedef struct {
    const float *data;
    int64_t ld;
} nn_bf16_matrix;
void nn_bf16_pack_matrix(const void *arg, int64_t col0, int64_t cols, uint16_t *panels,
                         int64_t panel_stride, int64_t k);
/* nn_bf16_pack_matrix_t: B the transpose of a row-major fp32 matrix, B[kk][c] at
 * data[c * ld + kk] (attention's K^T read from K's rows): a pair of B's rows is two
 * consecutive values of each source row. `arg` an nn_bf16_matrix. */
void nn_bf16_pack_matrix_t(const void *arg, int64_t col0, int64_t cols, uint16_t *panels,
                           int64_t panel_stride, int64_t k);
void nn_bf16_pair_rows(const float *even, const float *odd, int64_t panels, uint16_t *dst,
                       int64_t panel_stride);

/* Bits [from, to) of 16 (clamped to 0..16): a 16-lane mask for the packers' masked loads
 * and stores of a run that starts or ends inside a vector. */
static inline uint16_t nn_bf16_lanes(int64_t from, int64_t to) {
    from = from < 0 ? 0 : from > 16 ? 16 : from;
    to = to < from ? from : to > 16 ? 16 : to;
    return (uint16_t)(((1u << to) - 1u) & ~((1u << from) - 1u));
}

/* Before a packer copies words into a panel of `count` positions (of NR) whose first
 * `rows` pair-rows it fills, of depth kp: a partial panel's missing positions zero in
 * every row, and the pair-rows past the depth zero. */
static inline void nn_bf16_panel_zeros(uint32_t *panel, int64_t count, int64_t rows, int64_t kp) {
    if (count < NN_BF16_NR) {
        memset(panel, 0, (size_t)(rows * NN_BF16_NR) * sizeof(uint32_t));
    }
    memset(panel + rows * NN_BF16_NR, 0, (size_t)((kp / 2 - rows) * NN_BF16_NR) * sizeof(uint32_t));
}

/* dst[i] = bf16(even[i]) | bf16(odd[i]) << 16 for i < n: two rows as one row of pairs
 * (a pair-row's entries; core/kernels/conv_pairs_bf16.h converts a Conv's input so). */
void nn_bf16_interleave(const float *even, const float *odd, int64_t n, uint32_t *dst);

/* One fp32 value rounded to bf16 as the packers round (nearest even, NaN kept quiet). */
uint16_t nn_bf16_of(float value);

/* A bf16 value as the fp32 it stands for (exact). */
static inline float nn_bf16_value(uint16_t value) {
    const uint32_t bits = (uint32_t)value << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* dst[i] = bf16(src[i]) for i < n, n a multiple of 32: a channels-last row rounded in
 * order (conv_nhwc_bf16.h), with the packers' rounding. */
void nn_bf16_round_run(const float *src, int64_t n, uint16_t *dst);

/* 1 where the packers run AVX-512 code (with the AMX and AVX512-BF16 micro-kernels), 0 with
 * the generic one: each variant is tested whole. */
int nn_bf16_simd(void);

/* 1 where the packers also convert with the CPU's own bf16 instructions (nn_bf16_simd and
 * AVX512-BF16, which AMX alone does not imply). */
int nn_bf16_cvt(void);

/* The least depth a Conv's bf16 path takes (ge_hub/kernels/nn_bf16.py: BF16_MIN_K); below
 * it the fp32 paths are as fast. */
#define NN_BF16_MIN_K 16

/* Which micro-kernel runs: "amx", "avx512bf16" or "generic" (for tests and reports). The
 * CPU decides (AMX only where Linux grants the tile state), unless GE_HUB_BF16_KERNEL
 * names a lesser one; GE_HUB_AMX_DENY=1 simulates a refused AMX permission. */
const char *nn_gemm_bf16_kernel_name(void);

#endif /* GE_HUB_NN_GEMM_BF16_H */
