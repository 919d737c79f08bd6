/*
 * The nn family's kernels (nn_matmul.c: MatMul, Gemm; nn_softmax.c: Softmax, LogSoftmax),
 * for registry.c. Their packers are ge_hub/kernels/nn.py; nn_gemm_packed.c is the packed
 * GEMM they and the conv family share.
 */
#ifndef GE_HUB_NN_H
#define GE_HUB_NN_H

#include "kernels.h"

/* The nn family's kernels, each named once: expanded below into prototypes and in
 * registry.c into the table of built-in kernels (tests/test_kernel_list.py checks it
 * against the Python kernel specs). */
#define GE_NN_KERNELS(X)     \
    X(ge_nn_matmul_f32)      \
    X(ge_nn_gemm_f32)        \
    X(ge_nn_softmax_f32)     \
    X(ge_nn_log_softmax_f32)

GE_NN_KERNELS(GE_DECLARE_KERNEL)

#endif /* GE_HUB_NN_H */
