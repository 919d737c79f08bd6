/*
 * ge_hub.FusedMatMul (ge_hub/ops/nn.py): Y = activation(MatMul(A, B) + Bias + Z), the
 * MatMul (or Gemm) of a Linear layer with its bias Add, its residual Add and its
 * activation, as the `fuse_matmul_epilogue` rules make it.
 *
 * Blob (ge_hub/kernels/nn.py, pack_fused_matmul): the MatMul blob (nn_matmul.c: ints M,
 * N, K, r, batch_shape[r], a_strides[r], b_strides[r]), then ints activation (FUSED_ACT_*,
 * conv_epilogue.h), has_bias, has_residual, then floats alpha, beta (the activation's).
 * Bias holds N values (one per column of Y); Z has Y's shape.
 *
 * The products run through nn_matmul_run (nn_matmul.c), the BLAS driver MatMul uses too,
 * which cuts them into blocks of at most 256 columns: after each block's ge_sgemm, the
 * bias, the residual and the activation run over the block while it is still in cache
 * (nn_epilogue_run: the simple activations vectorized), instead of three more steps that
 * each read and write all of Y. A FusedMatMul whose B is a constant matrix runs
 * ge_nn_linear_f32 (nn_matmul_packed.c) instead.
 */
#include "conv_epilogue.h"
#include "nn.h"
#include "nn_common.h"

typedef struct {
    nn_epilogue act;     /* activation, alpha, beta (its residual field unused) */
    const float *bias;   /* n values or NULL */
    const float *z;      /* the residual (Y's shape) or NULL */
    int64_t m, n;
} mm_epilogue;

NN_VECTORIZED static void add_bias(float *y, const float *bias, int64_t cols) {
    for (int64_t j = 0; j < cols; j++) {
        y[j] += bias[j];
    }
}

/* Rows [r0, r0 + rows) by columns [c0, c0 + cols) of product `batch` (Y at `y`, rows n
 * apart): + bias, + z, then the activation. */
static void run_epilogue(const void *arg, int64_t batch, float *y, int64_t r0, int64_t rows,
                         int64_t c0, int64_t cols) {
    const mm_epilogue *e = (const mm_epilogue *)arg;
    const float *z = e->z ? e->z + batch * e->m * e->n : NULL;
    for (int64_t r = r0; r < r0 + rows; r++) {
        float *row = y + r * e->n + c0;
        if (e->bias) {
            add_bias(row, e->bias + c0, cols);
        }
        nn_epilogue_run(&e->act, row, z ? z + r * e->n + c0 : NULL, cols);
    }
}

int ge_nn_matmul_fused_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                           const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                           size_t attrs_size) {
    static const char *name = "ge_nn_matmul_fused_f32";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    nn_matmul_dims d;
    int64_t v[3] = {0, 0, 0};
    double f[2] = {0.0, 0.0};
    if (!nn_matmul_dims_read(&blob, &d) || !ge_blob_ints(&blob, v, 3)
        || !ge_blob_floats(&blob, f, 2) || !ge_blob_done(&blob) || v[0] < FUSED_ACT_NONE
        || v[0] >= FUSED_ACT_COUNT || (v[1] != 0 && v[1] != 1) || (v[2] != 0 && v[2] != 1)) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    /* An omitted Bias before a Z is still in its place (with no data). */
    if (n_inputs < (v[2] ? 4 : v[1] ? 3 : 2) || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected inputs A, B%s%s and 1 output, got %d and %d",
                              name, v[1] ? ", Bias" : "", v[2] ? ", Z" : "", (int)n_inputs,
                              (int)n_outputs);
    }
    if (inputs[0].dtype != GE_FLOAT32 || inputs[1].dtype != GE_FLOAT32
        || inputs[0].numel < d.a_span || inputs[1].numel < d.b_span) {
        return ctx->set_error(ctx, "%s: inputs A (%lld elements) and B (%lld elements) must be "
                              "float32 with at least %lld and %lld elements", name,
                              (long long)inputs[0].numel, (long long)inputs[1].numel,
                              (long long)d.a_span, (long long)d.b_span);
    }
    const int64_t total = d.batches * d.m * d.n;
    if (nn_check_f32(ctx, name, "output Y", &outputs[0], total)
        || (v[1] && nn_check_f32(ctx, name, "input Bias", &inputs[2], d.n))
        || (v[2] && nn_check_f32(ctx, name, "input Z", &inputs[3], total))) {
        return -1;
    }
    mm_epilogue e = {{(int)v[0], f[0], f[1], NULL},
                     v[1] ? (const float *)inputs[2].data : NULL,
                     v[2] ? (const float *)inputs[3].data : NULL, d.m, d.n};
    nn_matmul_run(ctx, &d, (const float *)inputs[0].data, (const float *)inputs[1].data,
                  (float *)outputs[0].data, run_epilogue, &e);
    return 0;
}
