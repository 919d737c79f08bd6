/*
 * Winograd F(2x2, 3x3) convolution (conv_winograd.c), a path of ge_nn_conv_f32.
 */
#ifndef GE_HUB_CONV_WINOGRAD_H
#define GE_HUB_CONV_WINOGRAD_H

#include <stdint.h>

#include "conv_epilogue.h"
#include "ge_hub/kernel.h"
#include "nn_gemm_bf16.h"
#include "nn_gemm_packed.h"

/* One 3x3, stride-1, dilation-1 2-D convolution, already checked by the caller. */
typedef struct {
    int64_t n, c, m, group, cg, mg;
    int64_t in_h, in_w, out_h, out_w, pad_h, pad_w;
    int64_t block;          /* output tiles per block */
    int64_t slots;          /* scratch areas: blocks run side by side when 2 or more */
    const float *x;
    const float *u;         /* the transformed kernels: group x 16 packed U[xi] */
    const float *bias;      /* NULL: none */
    float *y;
    float *scratch;         /* slots * nn_winograd_scratch_floats */
    /* FusedConv's epilogue, applied to each output row of a tile strip as it is stored
     * (NULL: none); the residual (NULL: none) is laid out like y. */
    const nn_epilogue *epilogue;
    const float *residual;
    /* Non-NULL: the products in bf16 with fp32 sums (precision "bf16", conv.c's
     * NN_CONV_WINOGRAD_BF16), U[xi] packed at compile time as nn_gemm_bf16.h's packed A,
     * nn_winograd_bf16_u_values apart, and V rounded to bf16 pair-rows as the input
     * transform writes it; `u` unused, the scratch areas nn_winograd_bf16_scratch_bytes. */
    const uint16_t *u_bf16;
} nn_winograd_conv;

/* Floats of one packed U[xi]: the mg x cg GEMM operand in NN_PACK_MR-row panels. */
static inline int64_t nn_winograd_u_plane_floats(int64_t cg, int64_t mg) {
    return nn_pack_panels(mg, NN_PACK_MR) * NN_PACK_MR * cg;
}

/* Floats of one scratch area: V in whole packed panels, then M. */
static inline int64_t nn_winograd_scratch_floats(int64_t cg, int64_t mg, int64_t block) {
    return 16 * (cg * nn_pack_panels(block, NN_PACK_NR) * NN_PACK_NR + mg * block);
}

/* uint16 values of one bf16 U[xi]: the mg x cg operand as nn_gemm_bf16.h's packed A. */
static inline int64_t nn_winograd_bf16_u_values(int64_t cg, int64_t mg) {
    return nn_bf16_a_values(mg, cg);
}

/* Bytes of one scratch area of the bf16 products: V's bf16 pair-row panels (the depth
 * padded to NN_BF16_KB), then M in fp32; a multiple of 64. */
static inline int64_t nn_winograd_bf16_v_values(int64_t cg, int64_t block) {
    return 16 * nn_pack_panels(block, NN_PACK_NR) * NN_PACK_NR * nn_bf16_depth(cg);
}
static inline int64_t nn_winograd_bf16_scratch_bytes(int64_t cg, int64_t mg, int64_t block) {
    const int64_t bytes = nn_winograd_bf16_v_values(cg, block) * 2 + 16 * mg * block * 4;
    return (bytes + 63) / 64 * 64;
}

void nn_conv_winograd(ge_context *ctx, const nn_winograd_conv *conv);

#endif /* GE_HUB_CONV_WINOGRAD_H */
