/*
 * MatMul and Gemm on float32, through ge_sgemm (the runtime-loaded BLAS).
 *
 * MatMul blob (ge_hub/kernels/nn.py, pack_matmul): ints
 *   M, N, K, r, batch_shape[r], a_strides[r], b_strides[r]
 * where the r batch dims are the output's, already collapsed and stripped of size-1
 * dims, and a_strides/b_strides are the element offsets between consecutive matrices
 * of A and B along each of them (0 where that operand is broadcast). A batch whose B is
 * shared (every b_stride 0) and whose A is contiguous arrives folded into M with r = 0:
 * one GEMM.
 *
 * Gemm blob (pack_gemm; the record GE_GEMM_BLOB in nn.h): ints M, N, K, trans_a, trans_b, has_c, c_row_stride,
 * c_col_stride; floats alpha, beta. C is read through its broadcast strides (0 along a
 * broadcast dim).
 *
 * Threads: a large product is cut into one tile per thread of the executor's pool
 * (nn_sgemm), each tile one ge_sgemm call. This wants a BLAS that runs each call on
 * the calling thread (BLAS threads = 1): a BLAS that also threads itself puts two
 * thread pools on the same cores, whose spinning waits then fight each other.
 */
#include "nn.h"
#include "nn_common.h"

/* Batches of products smaller than this run one product per pool chunk; larger products
 * are split into tiles of about NN_TILE_FLOPS multiply-adds (at most NN_MAX_TILES). */
#define NN_SMALL_GEMM_FLOPS (64 * 64 * 64)
#define NN_TILE_FLOPS (1 << 21)
#define NN_MAX_TILES 16
/* Tile edges are multiples of this, so that BLAS micro-kernels see whole panels. */
#define NN_TILE_ALIGN 16

/* -- tiled GEMM ------------------------------------------------------------------------ */

typedef struct {
    int trans_a, trans_b, split_n;
    int64_t m, n, k, lda, ldb, ldc, tile;
    float alpha, beta;
    const float *a, *b;
    float *c;
} sgemm_job;

int64_t nn_sgemm_tiles(int64_t m, int64_t n, int64_t k) {
    int64_t flops = m * n * k;
    int64_t tiles = flops / NN_TILE_FLOPS;
    int64_t longest = (m > n ? m : n) / NN_TILE_ALIGN;
    /* One tile per pool thread: a larger tile keeps the BLAS micro-kernel efficient. */
    int64_t threads = ge_threadpool_size();
    if (tiles > threads) {
        tiles = threads;
    }
    if (tiles > NN_MAX_TILES) {
        tiles = NN_MAX_TILES;
    }
    if (tiles > longest) {
        tiles = longest;
    }
    return tiles < 1 ? 1 : tiles;
}

static void sgemm_tiles(void *arg, int64_t begin, int64_t end) {
    const sgemm_job *job = (const sgemm_job *)arg;
    for (int64_t t = begin; t < end; t++) {
        int64_t first = t * job->tile;
        int64_t extent = job->split_n ? job->n : job->m;
        if (first >= extent) {
            continue;
        }
        int64_t size = extent - first < job->tile ? extent - first : job->tile;
        if (job->split_n) {
            const float *b = job->trans_b ? job->b + first * job->ldb : job->b + first;
            ge_sgemm(job->trans_a, job->trans_b, job->m, size, job->k, job->alpha, job->a,
                     job->lda, b, job->ldb, job->beta, job->c + first, job->ldc);
        } else {
            const float *a = job->trans_a ? job->a + first : job->a + first * job->lda;
            ge_sgemm(job->trans_a, job->trans_b, size, job->n, job->k, job->alpha, a, job->lda,
                     job->b, job->ldb, job->beta, job->c + first * job->ldc, job->ldc);
        }
    }
}

void nn_sgemm(ge_context *ctx, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
              float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
              float beta, float *c, int64_t ldc) {
    int64_t tiles = nn_sgemm_tiles(m, n, k);
    if (tiles == 1) {
        ge_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    sgemm_job job = {trans_a, trans_b, n >= m, m, n, k, lda, ldb, ldc, 0, alpha, beta, a, b, c};
    int64_t extent = job.split_n ? n : m;
    int64_t tile = (extent + tiles - 1) / tiles;
    job.tile = (tile + NN_TILE_ALIGN - 1) / NN_TILE_ALIGN * NN_TILE_ALIGN;
    ctx->parallel_for(ctx, (extent + job.tile - 1) / job.tile, 1, sgemm_tiles, &job);
}

/* -- MatMul ---------------------------------------------------------------------------- */

typedef struct {
    int64_t m, n, k, rank;
    int64_t shape[GE_MAX_RANK], a_strides[GE_MAX_RANK], b_strides[GE_MAX_RANK];
    const float *a, *b;
    float *y;
    ge_context *ctx;  /* set when each product may split over the pool itself */
} matmul_job;

static void matmul_batches(void *arg, int64_t begin, int64_t end) {
    const matmul_job *job = (const matmul_job *)arg;
    for (int64_t batch = begin; batch < end; batch++) {
        int64_t a_offset = 0, b_offset = 0, rest = batch;
        for (int64_t d = job->rank - 1; d >= 0; d--) {
            int64_t index = rest % job->shape[d];
            rest /= job->shape[d];
            a_offset += index * job->a_strides[d];
            b_offset += index * job->b_strides[d];
        }
        const float *a = job->a + a_offset, *b = job->b + b_offset;
        float *y = job->y + batch * job->m * job->n;
        if (job->ctx) {
            nn_sgemm(job->ctx, 0, 0, job->m, job->n, job->k, 1.0f, a, job->k, b, job->n, 0.0f,
                     y, job->n);
        } else {
            ge_sgemm(0, 0, job->m, job->n, job->k, 1.0f, a, job->k, b, job->n, 0.0f, y, job->n);
        }
    }
}

int ge_nn_matmul_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                     const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                     size_t attrs_size) {
    static const char *name = "ge_nn_matmul_f32";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    matmul_job job;
    job.m = ge_blob_int(&blob);
    job.n = ge_blob_int(&blob);
    job.k = ge_blob_int(&blob);
    job.rank = ge_blob_int(&blob);
    if (!blob.ok || job.m < 0 || job.n < 0 || job.k < 0 || job.rank < 0
        || job.rank > GE_MAX_RANK || !ge_blob_ints(&blob, job.shape, job.rank)
        || !ge_blob_ints(&blob, job.a_strides, job.rank)
        || !ge_blob_ints(&blob, job.b_strides, job.rank) || !ge_blob_done(&blob)) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    if (n_inputs != 2 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected 2 inputs and 1 output, got %d and %d", name,
                              (int)n_inputs, (int)n_outputs);
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
    /* The operands may hold more elements than a batch walk reads (never fewer). */
    if (inputs[0].dtype != GE_FLOAT32 || inputs[1].dtype != GE_FLOAT32
        || inputs[0].numel < a_span || inputs[1].numel < b_span) {
        return ctx->set_error(ctx, "%s: inputs A (%lld elements) and B (%lld elements) must be "
                              "float32 with at least %lld and %lld elements", name,
                              (long long)inputs[0].numel, (long long)inputs[1].numel,
                              (long long)a_span, (long long)b_span);
    }
    if (nn_check_f32(ctx, name, "output Y", &outputs[0], batches * job.m * job.n)) {
        return -1;
    }
    job.a = (const float *)inputs[0].data;
    job.b = (const float *)inputs[1].data;
    job.y = (float *)outputs[0].data;
    int64_t flops = job.m * job.n * job.k;
    if (batches > 1 && nn_sgemm_tiles(job.m, job.n, job.k) == 1) {
        /* products too small to split: spread whole products over the pool */
        job.ctx = NULL;
        ctx->parallel_for(ctx, batches, nn_grain(flops, NN_SMALL_GEMM_FLOPS), matmul_batches,
                          &job);
    } else {
        job.ctx = ctx;
        matmul_batches(&job, 0, batches);
    }
    return 0;
}

int ge_nn_gemm_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                   const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                   size_t attrs_size) {
    static const char *name = "ge_nn_gemm_f32";
    ge_gemm_blob r;
    if (!ge_gemm_blob_read(attrs, attrs_size, &r) || r.m < 0 || r.n < 0 || r.k < 0
        || r.c_row_stride < 0 || r.c_col_stride < 0) {
        return NN_BAD_BLOB_BYTES(ctx, name, attrs_size);
    }
    const double alpha = r.alpha, beta = r.beta;
    const int64_t m = r.m, n = r.n, k = r.k, trans_a = r.trans_a, trans_b = r.trans_b;
    const int64_t has_c = r.has_c, c_rs = r.c_row_stride, c_cs = r.c_col_stride;
    if (n_inputs < 2 || n_outputs != 1 || (has_c && n_inputs < 3)) {
        return ctx->set_error(ctx, "%s: expected inputs A, B%s and 1 output, got %d and %d",
                              name, has_c ? ", C" : "", (int)n_inputs, (int)n_outputs);
    }
    if (nn_check_f32(ctx, name, "input A", &inputs[0], m * k)
        || nn_check_f32(ctx, name, "input B", &inputs[1], k * n)
        || nn_check_f32(ctx, name, "output Y", &outputs[0], m * n)) {
        return -1;
    }
    float *y = (float *)outputs[0].data;
    float beta_f = (float)beta;
    if (has_c) {
        const ge_tensor *c_tensor = &inputs[2];
        int64_t c_span = (m > 0 ? (m - 1) * c_rs : 0) + (n > 0 ? (n - 1) * c_cs : 0) + 1;
        if (c_tensor->dtype != GE_FLOAT32 || c_tensor->data == NULL || c_tensor->numel < c_span) {
            return ctx->set_error(ctx, "%s: input C must be float32 with at least %lld elements, "
                                  "got %lld", name, (long long)c_span,
                                  (long long)c_tensor->numel);
        }
        /* Y starts as beta * C (even for beta 0: 0 * inf is NaN, as in the reference), and
         * the product is accumulated onto it. */
        const float *c = (const float *)c_tensor->data;
        for (int64_t i = 0; i < m; i++) {
            const float *c_row = c + i * c_rs;
            float *y_row = y + i * n;
            if (c_cs == 1) {
                for (int64_t j = 0; j < n; j++) {
                    y_row[j] = beta_f * c_row[j];
                }
            } else {
                float value = beta_f * c_row[0];
                for (int64_t j = 0; j < n; j++) {
                    y_row[j] = c_cs == 0 ? value : beta_f * c_row[j * c_cs];
                }
            }
        }
    }
    nn_sgemm(ctx, (int)trans_a, (int)trans_b, m, n, k, (float)alpha,
             (const float *)inputs[0].data, trans_a ? m : k, (const float *)inputs[1].data,
             trans_b ? k : n, has_c ? 1.0f : 0.0f, y, n);
    return 0;
}
