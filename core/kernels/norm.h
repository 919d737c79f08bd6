/*
 * The norm family's kernels (norm.c: BatchNormalization, LayerNormalization,
 * InstanceNormalization; norm_lrn.c: LRN across channels), for registry.c. Their packers
 * are ge_hub/kernels/norm.py.
 */
#ifndef GE_HUB_NORM_H
#define GE_HUB_NORM_H

#include "kernels.h"

/* The norm family's kernels, each named once: expanded below into prototypes and in
 * registry.c into the table of built-in kernels (tests/test_kernel_list.py checks it
 * against the Python kernel specs). */
#define GE_NORM_KERNELS(X)     \
    X(ge_nn_batch_norm_f32)    \
    X(ge_nn_layer_norm_f32)    \
    X(ge_nn_instance_norm_f32) \
    X(ge_lrn_f32)

GE_NORM_KERNELS(GE_DECLARE_KERNEL)

#endif /* GE_HUB_NORM_H */
