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
 * The products go through ge_sgemm (the run-time BLAS) in tiles over the executor's pool
 * as MatMul's do, and each tile is cut into blocks of at most EPILOGUE_COLS columns: one
 * ge_sgemm per block, then the bias, the residual and the activation over the block
 * while it is still in cache (nn_epilogue_run: the simple activations vectorized),
 * instead of three more steps that each read and write all of Y.
 */
#include "conv_epilogue.h"
#include "nn.h"
#include "nn_common.h"

/* Columns of Y per ge_sgemm call when an epilogue follows: a block of m rows of this many
 * floats (m * 1 KiB) stays in L2 for the transformer shapes (m up to a few hundred);
 * fewer columns would make the BLAS repack A more often for little gain. */
#define EPILOGUE_COLS 256
#define SMALL_GEMM_FLOPS (64 * 64 * 64)

typedef struct {
    nn_epilogue act;     /* activation, alpha, beta (its residual field unused) */
    const float *bias;   /* n values or NULL */
} mm_epilogue;

NN_VECTORIZED static void add_bias(float *y, const float *bias, int64_t cols) {
    for (int64_t j = 0; j < cols; j++) {
        y[j] += bias[j];
    }
}

/* Y's rows [0, rows) by columns [col0, col0 + cols) (rows ldc apart): + bias, + z, then
 * the activation; `z` starts at the block like `y`. */
static void run_epilogue(const mm_epilogue *e, float *y, const float *z, int64_t rows,
                         int64_t col0, int64_t cols, int64_t ldc) {
    for (int64_t r = 0; r < rows; r++) {
        float *row = y + r * ldc;
        if (e->bias) {
            add_bias(row, e->bias + col0, cols);
        }
        nn_epilogue_run(&e->act, row, z ? z + r * ldc : NULL, cols);
    }
}

/* One block of rows [r0, r0 + rows) and columns [c0, c0 + cols) of one product. */
static void block(const float *a, const float *b, float *y, const float *z, int64_t n,
                  int64_t k, int64_t r0, int64_t rows, int64_t c0, int64_t cols,
                  const mm_epilogue *e) {
    for (int64_t j = c0; j < c0 + cols; j += EPILOGUE_COLS) {
        const int64_t width = c0 + cols - j < EPILOGUE_COLS ? c0 + cols - j : EPILOGUE_COLS;
        float *out = y + r0 * n + j;
        ge_sgemm(0, 0, rows, width, k, 1.0f, a + r0 * k, k, b + j, n, 0.0f, out, n);
        run_epilogue(e, out, z ? z + r0 * n + j : NULL, rows, j, width, n);
    }
}

typedef struct {
    int64_t m, n, k, rank;
    int64_t shape[GE_MAX_RANK], a_strides[GE_MAX_RANK], b_strides[GE_MAX_RANK];
    const float *a, *b, *z;
    float *y;
    mm_epilogue e;
    /* tiles of one product (when products are split) */
    int split_n;
    int64_t tile;
    int64_t batch;  /* the product being split */
} fused_job;

static void product_operands(const fused_job *job, int64_t batch, const float **a,
                             const float **b, float **y, const float **z) {
    int64_t a_offset = 0, b_offset = 0, rest = batch;
    for (int64_t d = job->rank - 1; d >= 0; d--) {
        int64_t index = rest % job->shape[d];
        rest /= job->shape[d];
        a_offset += index * job->a_strides[d];
        b_offset += index * job->b_strides[d];
    }
    *a = job->a + a_offset;
    *b = job->b + b_offset;
    *y = job->y + batch * job->m * job->n;
    *z = job->z ? job->z + batch * job->m * job->n : NULL;
}

/* Whole products [begin, end), each on the calling thread. */
static void whole_products(void *arg, int64_t begin, int64_t end) {
    const fused_job *job = (const fused_job *)arg;
    for (int64_t batch = begin; batch < end; batch++) {
        const float *a, *b, *z;
        float *y;
        product_operands(job, batch, &a, &b, &y, &z);
        block(a, b, y, z, job->n, job->k, 0, job->m, 0, job->n, &job->e);
    }
}

/* Tiles [begin, end) of product job->batch: column or row ranges of `tile`. */
static void product_tiles(void *arg, int64_t begin, int64_t end) {
    const fused_job *job = (const fused_job *)arg;
    const float *a, *b, *z;
    float *y;
    product_operands(job, job->batch, &a, &b, &y, &z);
    for (int64_t t = begin; t < end; t++) {
        const int64_t first = t * job->tile, extent = job->split_n ? job->n : job->m;
        if (first >= extent) {
            continue;
        }
        const int64_t size = extent - first < job->tile ? extent - first : job->tile;
        if (job->split_n) {
            block(a, b, y, z, job->n, job->k, 0, job->m, first, size, &job->e);
        } else {
            block(a, b, y, z, job->n, job->k, first, size, 0, job->n, &job->e);
        }
    }
}

int ge_nn_matmul_fused_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                           const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                           size_t attrs_size) {
    static const char *name = "ge_nn_matmul_fused_f32";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    fused_job job;
    int64_t v[3] = {0, 0, 0};
    double f[2] = {0.0, 0.0};
    job.m = ge_blob_int(&blob);
    job.n = ge_blob_int(&blob);
    job.k = ge_blob_int(&blob);
    job.rank = ge_blob_int(&blob);
    if (!blob.ok || job.m < 0 || job.n < 0 || job.k < 0 || job.rank < 0
        || job.rank > GE_MAX_RANK || !ge_blob_ints(&blob, job.shape, job.rank)
        || !ge_blob_ints(&blob, job.a_strides, job.rank)
        || !ge_blob_ints(&blob, job.b_strides, job.rank) || !ge_blob_ints(&blob, v, 3)
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
    int64_t batches = 1, a_span = job.m * job.k, b_span = job.k * job.n;
    for (int64_t d = 0; d < job.rank; d++) {
        if (job.shape[d] < 1 || job.a_strides[d] < 0 || job.b_strides[d] < 0) {
            return NN_BAD_BLOB(ctx, name, blob);
        }
        batches *= job.shape[d];
        a_span += (job.shape[d] - 1) * job.a_strides[d];
        b_span += (job.shape[d] - 1) * job.b_strides[d];
    }
    if (inputs[0].dtype != GE_FLOAT32 || inputs[1].dtype != GE_FLOAT32
        || inputs[0].numel < a_span || inputs[1].numel < b_span) {
        return ctx->set_error(ctx, "%s: inputs A (%lld elements) and B (%lld elements) must be "
                              "float32 with at least %lld and %lld elements", name,
                              (long long)inputs[0].numel, (long long)inputs[1].numel,
                              (long long)a_span, (long long)b_span);
    }
    const int64_t total = batches * job.m * job.n;
    if (nn_check_f32(ctx, name, "output Y", &outputs[0], total)
        || (v[1] && nn_check_f32(ctx, name, "input Bias", &inputs[2], job.n))
        || (v[2] && nn_check_f32(ctx, name, "input Z", &inputs[3], total))) {
        return -1;
    }
    job.a = (const float *)inputs[0].data;
    job.b = (const float *)inputs[1].data;
    job.y = (float *)outputs[0].data;
    job.z = v[2] ? (const float *)inputs[3].data : NULL;
    job.e.act = (nn_epilogue){(int)v[0], f[0], f[1], NULL};
    job.e.bias = v[1] ? (const float *)inputs[2].data : NULL;
    if (total == 0) {
        return 0;
    }
    const int64_t tiles = nn_sgemm_tiles(job.m, job.n, job.k);
    if (tiles == 1 && batches == 1) {  /* one small product: no pool round trip */
        whole_products(&job, 0, 1);
        return 0;
    }
    if (tiles == 1) {  /* products too small to split: spread whole products over the pool */
        ctx->parallel_for(ctx, batches, nn_grain(job.m * job.n * job.k, SMALL_GEMM_FLOPS),
                          whole_products, &job);
        return 0;
    }
    /* Tiles a multiple of 16 wide (the BLAS micro-kernels' panels), one per thread. */
    job.split_n = job.n >= job.m;
    const int64_t extent = job.split_n ? job.n : job.m;
    const int64_t tile = (extent + tiles - 1) / tiles;
    job.tile = (tile + 15) / 16 * 16;
    for (job.batch = 0; job.batch < batches; job.batch++) {
        ctx->parallel_for(ctx, (extent + job.tile - 1) / job.tile, 1, product_tiles, &job);
    }
    return 0;
}
