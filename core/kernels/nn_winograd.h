/*
 * Winograd F(2x2, 3x3) convolution (nn_winograd.c), a path of ge_nn_conv_f32.
 */
#ifndef GE_HUB_NN_WINOGRAD_H
#define GE_HUB_NN_WINOGRAD_H

#include <stdint.h>

#include "ge_hub/kernel.h"

/* One 3x3, stride-1, dilation-1 2-D convolution, already checked by the caller. */
typedef struct {
    int64_t n, c, m, group, cg, mg;
    int64_t in_h, in_w, out_h, out_w, pad_h, pad_w;
    int64_t block;          /* output tiles per block */
    const float *x, *weights, *bias;  /* bias may be NULL */
    float *y;
    float *scratch;         /* 16 * (mg * cg + cg * block + mg * block) floats */
} nn_winograd_conv;

/* Floats of scratch the convolution needs. */
static inline int64_t nn_winograd_scratch_floats(int64_t cg, int64_t mg, int64_t block) {
    return 16 * (mg * cg + cg * block + mg * block);
}

void nn_conv_winograd(ge_context *ctx, const nn_winograd_conv *conv);

#endif /* GE_HUB_NN_WINOGRAD_H */
