/*
 * Winograd F(2x2, 3x3) convolution (conv_winograd.c), a path of ge_nn_conv_f32.
 */
#ifndef GE_HUB_CONV_WINOGRAD_H
#define GE_HUB_CONV_WINOGRAD_H

#include <stdint.h>

#include "conv_epilogue.h"
#include "ge_hub/kernel.h"
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
} nn_winograd_conv;

/* Floats of one packed U[xi]: the mg x cg GEMM operand in NN_PACK_MR-row panels. */
static inline int64_t nn_winograd_u_plane_floats(int64_t cg, int64_t mg) {
    return nn_pack_panels(mg, NN_PACK_MR) * NN_PACK_MR * cg;
}

/* Floats of one scratch area: V in whole packed panels, then M. */
static inline int64_t nn_winograd_scratch_floats(int64_t cg, int64_t mg, int64_t block) {
    return 16 * (cg * nn_pack_panels(block, NN_PACK_NR) * NN_PACK_NR + mg * block);
}

void nn_conv_winograd(ge_context *ctx, const nn_winograd_conv *conv);

#endif /* GE_HUB_CONV_WINOGRAD_H */
