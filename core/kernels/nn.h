/*
 * The nn family's kernels (nn_matmul.c: MatMul, Gemm; nn_softmax.c: Softmax, LogSoftmax),
 * for registry.c. Their packers are ge_hub/kernels/nn.py; nn_gemm_packed.c is the packed
 * GEMM they and the conv family share.
 */
#ifndef GE_HUB_NN_H
#define GE_HUB_NN_H

#include "kernels.h"

/* Fixed blobs (ge_hub/blob.h's GE_BLOB_RECORD; the packers in ge_hub/kernels/nn.py name
 * the same fields). Gemm: op(A) is m x k, op(B) k x n, C read through its broadcast
 * strides. Softmax: x is [outer, length, inner] around the axis, split over `slots`
 * scratch slots. */
#define GE_GEMM_BLOB(INT, FLOAT)                                                         \
    INT(m) INT(n) INT(k) INT(trans_a) INT(trans_b) INT(has_c) INT(c_row_stride)           \
    INT(c_col_stride) FLOAT(alpha) FLOAT(beta)
GE_BLOB_RECORD(ge_gemm_blob, GE_GEMM_BLOB)

#define GE_SOFTMAX_BLOB(INT, FLOAT) INT(outer) INT(length) INT(inner) INT(slots)
GE_BLOB_RECORD(ge_softmax_blob, GE_SOFTMAX_BLOB)

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
