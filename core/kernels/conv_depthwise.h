/*
 * Depthwise 2-D convolution (group == C == M), direct, a path of the conv kernels
 * (conv.c): MobileNet, ShuffleNet and EfficientNet blocks. See conv_depthwise.c.
 */
#ifndef GE_HUB_CONV_DEPTHWISE_H
#define GE_HUB_CONV_DEPTHWISE_H

#include <stdint.h>

#include "conv_epilogue.h"
#include "ge_hub/kernel.h"
#include "nn_common.h"

/* Windows the direct kernel takes: 1-D or 2-D, kernel at most NN_DEPTHWISE_MAX_K a side,
 * strides up to NN_DEPTHWISE_MAX_STRIDE, windows spanning at most NN_DEPTHWISE_MAX_SPAN
 * inputs, any padding. Others (3-D, larger kernels, huge dilations) take conv.c's general
 * depthwise loop. */
#define NN_DEPTHWISE_MAX_K 7
#define NN_DEPTHWISE_MAX_STRIDE 8
/* The most input rows (columns) one window spans, (k - 1) * dilation + 1: the phased
 * plane grows with it, and a hostile dilation would make it gigabytes. */
#define NN_DEPTHWISE_MAX_SPAN 129

int nn_conv_depthwise_fits(const nn_window *w);

/* planes = N * C, plane p being channel p % channels of its image. `bias`, and a Relu or
 * Clip epilogue without residual, are applied in registers; any other epilogue (NULL:
 * none) over each finished plane. Returns -1, the
 * error set, when a plane buffer cannot be allocated. */
int nn_conv_depthwise(ge_context *ctx, const nn_window *w, int64_t planes, int64_t channels,
                      const float *x, const float *weights, const float *bias, float *y,
                      const nn_epilogue *epilogue);

/* The same on the calling thread, over `planes` planes (channel p's weights and bias at
 * p) whose inputs lie x_stride floats apart and whose outputs y_stride apart: a band of
 * output rows of each plane, from a band of input rows (w describes the bands: its pads
 * are the padding the band's edge rows see; ge_conv_pointwise_depthwise). The epilogue
 * without residual. Returns -1, the error set, when a plane buffer cannot be allocated. */
int nn_conv_depthwise_here(ge_context *ctx, const nn_window *w, int64_t planes,
                           const float *x, int64_t x_stride, const float *weights,
                           const float *bias, float *y, int64_t y_stride,
                           const nn_epilogue *epilogue);

/* The same kernel for convolutions with few input channels per group (the 3-channel
 * stems of MobileNets, ShuffleNet, SqueezeNet and detectors), where a GEMM's depth
 * (cg * taps, 27 for a 3x3 stem) is too short to pay for packing its columns: each input
 * plane is phased once per image, then every output plane is one span over its group's
 * cg planes, cg * taps taps, four output planes per pass on AVX-512. Windows as
 * nn_conv_depthwise_fits, cg at most NN_FEW_MAX_CHANNELS and cg * taps at most
 * NN_DEPTHWISE_MAX_K squared. W as the Conv's [M, cg, kh, kw]; bias and epilogue as
 * nn_conv_depthwise. Returns -1, the error set, when its buffers cannot be allocated. */
#define NN_FEW_MAX_CHANNELS 4

int nn_conv_few_channels_fits(const nn_window *w, int64_t cg);

int nn_conv_few_channels(ge_context *ctx, const nn_window *w, int64_t n, int64_t c,
                         int64_t m, int64_t group, const float *x, const float *weights,
                         const float *bias, float *y, const nn_epilogue *epilogue);

/* Which span kernel runs: "avx512", "avx2" or "generic". The CPU decides, unless
 * GE_HUB_DEPTHWISE_KERNEL names one it supports (tests force each). */
const char *nn_conv_depthwise_kernel_name(void);

#endif /* GE_HUB_CONV_DEPTHWISE_H */
