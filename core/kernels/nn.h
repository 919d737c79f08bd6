/*
 * The nn family's kernels (nn_matmul.c: MatMul, Gemm; nn_softmax.c: Softmax, LogSoftmax;
 * nn_attention.c: ge_hub.Attention; nn_matmul_fused.c: ge_hub.FusedMatMul;
 * nn_matmul_packed.c: all three with a constant, prepacked weight), for
 * registry.c. Their packers are ge_hub/kernels/nn.py; nn_gemm_packed.c is the packed
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

/* ge_hub.Attention (nn_attention.c): Q [b0, b1, s, d], K [b0, b1, sk, d],
 * V [b0, b1, sk, dv], the mask [b0, b1, s, sk] and Y [b0, b1, s, dv], each read or written
 * through element strides (q: qs0, qs1, qs_row, qs_col; ...), which hold the folded
 * Transposes and, for the mask, 0 where it broadcasts; V and Y need unit column strides.
 * `slots` scratch regions. */
#define GE_ATTENTION_BLOB(INT, FLOAT)                                                    \
    INT(b0) INT(b1) INT(s) INT(sk) INT(d) INT(dv) INT(qs0) INT(qs1) INT(qs_row)           \
    INT(qs_col) INT(ks0) INT(ks1) INT(ks_key) INT(ks_dim) INT(vs0) INT(vs1) INT(vs_key)   \
    INT(vs_col) INT(ys0) INT(ys1) INT(ys_row) INT(ys_col) INT(scale_divides) INT(has_mask) \
    INT(ms0) INT(ms1) INT(ms_row) INT(ms_col) INT(slots) FLOAT(scale)
GE_BLOB_RECORD(ge_attention_blob, GE_ATTENTION_BLOB)

/* The batched product MatMul and ge_hub.FusedMatMul share (nn_matmul.c): the dims their
 * blobs start with (ints M, N, K, r, batch_shape[r], a_strides[r], b_strides[r]; see
 * nn_matmul.c), and one driver that runs every product through the BLAS over the pool. */
typedef struct {
    int64_t m, n, k, rank;
    int64_t shape[GE_MAX_RANK], a_strides[GE_MAX_RANK], b_strides[GE_MAX_RANK];
    int64_t batches, a_span, b_span; /* derived: products, elements A and B must hold */
    /* Row strides of A, B and Y (k, n, n as read from a blob), B stored transposed
     * (trans_b: B[kk][j] at b[j * ldb + kk]), and Y's batch strides (y_strided 0: the
     * products one after another, m * n apart): ge_hub.StridedMatMul's views. */
    int64_t lda, ldb, ldc, trans_b, y_strided, y_strides[GE_MAX_RANK];
} nn_matmul_dims;

/* ge_hub.StridedMatMul's blob (ge_hub/kernels/nn_strided.py): ints nb, batch shape
 * [nb], m, k, n, then A's, B's and Y's views, each offset, batch strides [nb], row, col
 * (then, for the bf16 kernel, its block). Element (b..., i, j) of a view lies at
 * offset + sum b_d * batch[d] + i * row + j * col. */
typedef struct {
    int64_t offset, batch[GE_MAX_RANK], row, col;
} nn_strided_view;

typedef struct {
    int64_t nb, shape[GE_MAX_RANK], m, k, n, batches;
    nn_strided_view a, b, c;
} nn_strided_matmul;

/* Checks a StridedMatMul step's tensors (A, B and Y float32) and reads its blob's dims and
 * views, which must reach only inside them: 0, or -1 with the error set, naming `name`.
 * The bf16 kernel's block is left in the blob to read. */
int nn_strided_matmul_open(ge_context *ctx, const char *name, const ge_tensor *inputs,
                           int32_t n_inputs, const ge_tensor *outputs, int32_t n_outputs,
                           ge_blob *blob, nn_strided_matmul *s);

/* Reads the dims from `blob` (which then continues past them); 0 when malformed. */
int nn_matmul_dims_read(ge_blob *blob, nn_matmul_dims *d);

/* What a FusedMatMul does to a block of one product's Y after the BLAS writes it: rows
 * [r0, r0 + rows) by columns [c0, c0 + cols) of product `batch`, at `y` (rows n apart). */
typedef void (*nn_matmul_epilogue_fn)(const void *arg, int64_t batch, float *y, int64_t r0,
                                      int64_t rows, int64_t c0, int64_t cols);

/* Y = A @ B for every product of `d`; with an epilogue, in blocks of at most 256 columns,
 * each finished by the epilogue while it is in cache. */
void nn_matmul_run(ge_context *ctx, const nn_matmul_dims *d, const float *a, const float *b,
                   float *y, nn_matmul_epilogue_fn epilogue, const void *epilogue_arg);

/* The nn family's kernels, each named once: expanded below into prototypes and in
 * registry.c into the table of built-in kernels (tests/test_kernel_list.py checks it
 * against the Python kernel specs). */
#define GE_NN_KERNELS(X)     \
    X(ge_nn_matmul_f32)      \
    X(ge_nn_gemm_f32)        \
    X(ge_nn_softmax_f32)     \
    X(ge_nn_log_softmax_f32) \
    X(ge_nn_linear_bf16)  /* MatMul, Gemm in bf16 (nn_gemm_bf16.c) */ \
    X(ge_nn_matmul_act_bf16)  /* MatMul of two activations in bf16 (nn_gemm_bf16.c) */ \
    X(ge_nn_matmul_strided_bf16)  /* the same through strided views (nn_gemm_bf16.c) */ \
    X(ge_nn_matmul_strided_f32)   /* ge_hub.StridedMatMul in fp32 (nn_matmul.c) */ \
    X(ge_nn_attention_f32)  /* ge_hub.Attention */ \
    X(ge_nn_matmul_fused_f32)  /* ge_hub.FusedMatMul (nn_matmul_fused.c) */ \
    X(ge_nn_linear_f32)  /* MatMul, Gemm, FusedMatMul with a constant weight (nn_matmul_packed.c) */

GE_NN_KERNELS(GE_DECLARE_KERNEL)

#endif /* GE_HUB_NN_H */
