/*
 * The conv family's kernels (conv.c, with its Winograd path in conv_winograd.c): Conv and
 * ConvTranspose, and ge_hub.FusedConv (conv.c, its epilogue conv_epilogue.c, its direct
 * depthwise path conv_depthwise.c), and ge_hub.PointwiseDepthwise
 * (conv_pointwise_depthwise.c), and ge_hub.ToChannelsLast (conv_nhwc_bf16.c), and
 * ge_hub.FusedConvNHWC (conv.c; its depthwise windows conv_depthwise_nhwc.c), for
 * registry.c. Their packers are ge_hub/kernels/conv.py.
 */
#ifndef GE_HUB_CONV_H
#define GE_HUB_CONV_H

#include "kernels.h"

/* The conv family's kernels, each named once: expanded below into prototypes and in
 * registry.c into the table of built-in kernels (tests/test_kernel_list.py checks it
 * against the Python kernel specs). */
#define GE_CONV_KERNELS(X)      \
    X(ge_nn_conv_f32)           \
    X(ge_conv_fused_f32)        \
    X(ge_conv_nhwc_bf16)        \
    X(ge_to_channels_last_bf16) \
    X(ge_nn_conv_transpose_f32) \
    X(ge_nn_conv_transpose_bf16) \
    X(ge_conv_pointwise_depthwise_f32) \
    X(ge_conv_depthwise_nhwc_bf16)

GE_CONV_KERNELS(GE_DECLARE_KERNEL)

#endif /* GE_HUB_CONV_H */
