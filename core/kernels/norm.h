/*
 * The norm family's kernels (norm.c: BatchNormalization, LayerNormalization,
 * InstanceNormalization; norm_lrn.c: LRN across channels; norm_fused.c:
 * ge_hub.SkipLayerNormalization), for registry.c. Their packers
 * are ge_hub/kernels/norm.py.
 */
#ifndef GE_HUB_NORM_H
#define GE_HUB_NORM_H

#include "kernels.h"

/* Fixed blobs (ge_hub/blob.h's GE_BLOB_RECORD; the packers in ge_hub/kernels/norm.py name
 * the same fields). InstanceNormalization: x is [n, channels, inner]. LRN: x is
 * [n, channels, inner], `size` channels per window, alpha already divided by size. */
#define GE_INSTANCE_NORM_BLOB(INT, FLOAT) INT(n) INT(channels) INT(inner) FLOAT(epsilon)
GE_BLOB_RECORD(ge_instance_norm_blob, GE_INSTANCE_NORM_BLOB)

#define GE_LRN_BLOB(INT, FLOAT)                                                          \
    INT(n) INT(channels) INT(inner) INT(size) FLOAT(alpha_over_size) FLOAT(beta) FLOAT(bias)
GE_BLOB_RECORD(ge_lrn_blob, GE_LRN_BLOB)

/* ge_hub.SkipLayerNormalization (norm_fused.c): x and skip are [outer, inner]; Scale, B
 * and Bias repeat with their periods along a row (0: B or Bias absent). */
#define GE_SKIP_LAYER_NORM_BLOB(INT, FLOAT)                                             \
    INT(outer) INT(inner) INT(scale_period) INT(b_period) INT(bias_period) FLOAT(epsilon)
GE_BLOB_RECORD(ge_skip_layer_norm_blob, GE_SKIP_LAYER_NORM_BLOB)

/* The norm family's kernels, each named once: expanded below into prototypes and in
 * registry.c into the table of built-in kernels (tests/test_kernel_list.py checks it
 * against the Python kernel specs). */
#define GE_NORM_KERNELS(X)     \
    X(ge_nn_batch_norm_f32)    \
    X(ge_nn_layer_norm_f32)    \
    X(ge_nn_instance_norm_f32) \
    X(ge_lrn_f32)              \
    X(ge_nn_skip_layer_norm_f32)  /* ge_hub.SkipLayerNormalization */

GE_NORM_KERNELS(GE_DECLARE_KERNEL)

#endif /* GE_HUB_NORM_H */
