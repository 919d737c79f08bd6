/*
 * The pool family's kernels (pool.c): MaxPool, AveragePool, GlobalAveragePool,
 * GlobalMaxPool, and ge_hub.MaxPoolNHWC (pool_nhwc.c), for registry.c. Their packers are ge_hub/kernels/pool.py.
 */
#ifndef GE_HUB_POOL_H
#define GE_HUB_POOL_H

#include "kernels.h"

/* The pool family's kernels, each named once: expanded below into prototypes and in
 * registry.c into the table of built-in kernels (tests/test_kernel_list.py checks it
 * against the Python kernel specs). */
#define GE_POOL_KERNELS(X)           \
    X(ge_nn_max_pool_f32)            \
    X(ge_nn_average_pool_f32)        \
    X(ge_nn_global_average_pool_f32) \
    X(ge_nn_global_max_pool_f32)     \
    X(ge_max_pool_nhwc)

GE_POOL_KERNELS(GE_DECLARE_KERNEL)

#endif /* GE_HUB_POOL_H */
