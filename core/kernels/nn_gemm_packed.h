/*
 * GEMM with a left operand packed once, at compile time: C = A @ B (+ a bias per row of
 * C), where A is a constant (Conv weights) that ge_hub/kernels/conv.py lays out in panels
 * when it packs the step, and B is laid out in panels by a callback at every call (the
 * im2col columns of a Conv, written straight into that layout).
 *
 * Packed A: k in slices of NN_PACK_KC (the last one shorter), each slice holding the
 * ceil(m / NN_PACK_MR) panels of its kc values of k one after another, so that the whole
 * slice, which the micro-kernels walk through for one panel of B, streams from memory
 * in one run:
 *   slice at k0: a + k0 * panels * NN_PACK_MR, its panel p at + p * kc * NN_PACK_MR,
 *   holding panel[kk * NN_PACK_MR + r] = A[p * NN_PACK_MR + r][k0 + kk]
 * (rows past m are zero).
 * Packed B: ceil(cols / NN_PACK_NR) panels, each k x NN_PACK_NR:
 *   panel[kk * NN_PACK_NR + j] = B[kk][col0 + p * NN_PACK_NR + j]   (zero past the end).
 *
 * Both operands then stream through the micro-kernel contiguously (nn_gemm_packed.c).
 */
#ifndef GE_HUB_NN_GEMM_PACKED_H
#define GE_HUB_NN_GEMM_PACKED_H

#include <stdint.h>

#include "conv_epilogue.h"
#include "ge_hub/kernel.h"

/* Rows of A and columns of B per panel: one micro-kernel tile of C is MR x NR; k is
 * walked in slices of KC (a B micro-panel slice, KC x NR floats, fills 32 KiB of L1).
 * These are part of the packed-weights contract with ge_hub/kernels/conv.py (PACK_MR,
 * PACK_NR, PACK_KC). */
#define NN_PACK_MR 12
#define NN_PACK_NR 32
#define NN_PACK_KC 256

static inline int64_t nn_pack_panels(int64_t size, int64_t width) {
    return (size + width - 1) / width;
}

/*
 * Writes rows [row_begin, row_end) of B's columns [col0, col0 + cols) into `panels`
 * (the packed-B layout above, k rows per panel), zero columns included up to the end of
 * the last panel. Called from several threads at once with disjoint row ranges.
 */
typedef void (*nn_pack_b_fn)(const void *arg, int64_t row_begin, int64_t row_end,
                             int64_t col0, int64_t cols, float *panels, int64_t k);

typedef struct {
    int64_t m, n, k;
    const float *a_packed;   /* ceil(m / NN_PACK_MR) * k * NN_PACK_MR floats */
    const float *bias;       /* m values, or NULL for zero */
    float *c;                /* m x n, rows ldc apart */
    int64_t ldc;
    nn_pack_b_fn pack_b;
    const void *pack_arg;
    int64_t block;           /* columns of B packed at a time: a multiple of NN_PACK_NR */
    float *scratch;          /* k * block floats, for the packed columns */
    /* FusedConv's epilogue (conv_epilogue.h), applied to each tile of C as its last k
     * slice is stored; NULL: none. `residual` is laid out like C (rows ldc apart, at C's
     * position), NULL: none. */
    const nn_epilogue *epilogue;
    const float *residual;
    /* B in place instead of packed (NULL: pack_b packs it): k rows of n columns, ldb
     * floats apart (a 1x1 conv's input planes). Columns are read only up to n. */
    const float *b_direct;
    int64_t ldb;
} nn_packed_gemm;

void nn_gemm_packed(ge_context *ctx, const nn_packed_gemm *g);

/* C (m x n, rows ldc apart) = A @ B with both operands already packed (B's panels
 * holding its n columns), on the calling thread: for callers that split their own work
 * over the pool, such as the 16 products of a Winograd block. */
void nn_gemm_prepacked(const float *a_packed, const float *b_packed, int64_t m, int64_t n,
                       int64_t k, float *c, int64_t ldc);

/* Which micro-kernel runs: "avx512", "avx2" or "generic" (for tests and reports). The
 * CPU decides, unless GE_HUB_GEMM_KERNEL names one it supports. */
const char *nn_gemm_packed_kernel_name(void);

#endif /* GE_HUB_NN_GEMM_PACKED_H */
