/*
 * Direct convolution for layers with few channels on both sides, a path of the conv
 * kernels (conv.c, NN_CONV_DIRECT): the stride-2 layers between a small detector's
 * stages, and stride-1 layers too narrow for Winograd, where a GEMM's columns cost as
 * much to pack as its few output channels take to compute (ge_hub/kernels/conv.py,
 * _direct_fits, says which). See conv_direct.c.
 */
#ifndef GE_HUB_CONV_DIRECT_H
#define GE_HUB_CONV_DIRECT_H

#include <stdint.h>

#include "conv_epilogue.h"
#include "ge_hub/kernel.h"
#include "nn_common.h"

/* Output channels per block: the innermost axis of the packed weights. */
#define NN_DIRECT_OC 8
/* Kernels at most this many taps a side. */
#define NN_DIRECT_MAX_K 7

/* Windows the direct kernel takes: 1-D or 2-D, kernel at most NN_DIRECT_MAX_K a side,
 * strides 1 or 2, no dilation, pads smaller than the kernel. */
int nn_conv_direct_fits(const nn_window *w);

/* Floats of the packed weights (ge_hub/kernels/conv.py, _direct_weights): per group,
 * ceil(mg / NN_DIRECT_OC) blocks of [cg][kh][kw][NN_DIRECT_OC], the output channels past
 * mg zero. */
int64_t nn_conv_direct_weight_floats(int64_t group, int64_t cg, int64_t mg, int64_t taps);

/* Y = conv(X, W) + bias, then the epilogue (NULL: none): Relu and Clip, and a residual
 * with them or alone, in registers; the other activations over each stored run. */
void nn_conv_direct(ge_context *ctx, const nn_window *w, int64_t n, int64_t c, int64_t m,
                    int64_t group, const float *x, const float *weights, const float *bias,
                    float *y, const nn_epilogue *epilogue);

/* The same with W as the Conv's [M, cg, kh, kw]: packed into blocks on the heap first
 * (small weights: the stems the few-channel path would take). Returns -1, the error set,
 * when that buffer cannot be allocated. */
int nn_conv_direct_unpacked(ge_context *ctx, const nn_window *w, int64_t n, int64_t c,
                            int64_t m, int64_t group, const float *x, const float *weights,
                            const float *bias, float *y, const nn_epilogue *epilogue);

#endif /* GE_HUB_CONV_DIRECT_H */
