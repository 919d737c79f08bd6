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
 * (nn_sgemm; for MatMul and FusedMatMul nn_matmul_run, which also spreads batches of small
 * products over the pool and runs FusedMatMul's epilogue per block), each tile one
 * ge_sgemm call. This wants a BLAS that runs each call on
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

/* -- MatMul, and the driver FusedMatMul shares ------------------------------------------ */

/* Columns of Y per ge_sgemm call when an epilogue follows: a block of m rows of this many
 * floats (m * 1 KiB) stays in L2 for the transformer shapes (m up to a few hundred);
 * fewer columns would make the BLAS repack A more often for little gain. */
#define NN_EPILOGUE_COLS 256

int nn_matmul_dims_read(ge_blob *blob, nn_matmul_dims *d) {
    d->m = ge_blob_int(blob);
    d->n = ge_blob_int(blob);
    d->k = ge_blob_int(blob);
    d->rank = ge_blob_int(blob);
    if (!blob->ok || d->m < 0 || d->n < 0 || d->k < 0 || d->rank < 0 || d->rank > GE_MAX_RANK
        || !ge_blob_ints(blob, d->shape, d->rank) || !ge_blob_ints(blob, d->a_strides, d->rank)
        || !ge_blob_ints(blob, d->b_strides, d->rank)) {
        return 0;
    }
    /* every size below is checked to fit (nn_numel3) before it is used: a blob from a
     * file must not wrap a span around to a size that passes the operand checks */
    d->batches = 1;
    d->a_span = nn_numel3(d->m, d->k, 1);
    d->b_span = nn_numel3(d->k, d->n, 1);
    if (d->a_span < 0 || d->b_span < 0 || nn_numel3(d->m, d->n, 1) < 0) {
        return 0;
    }
    for (int64_t i = 0; i < d->rank; i++) {
        const int64_t a_step = nn_numel3(d->shape[i] - 1, d->a_strides[i], 1);
        const int64_t b_step = nn_numel3(d->shape[i] - 1, d->b_strides[i], 1);
        d->batches = nn_numel3(d->batches, d->shape[i], 1);
        if (d->shape[i] < 1 || a_step < 0 || b_step < 0 || d->batches < 0) {
            return 0;
        }
        d->a_span += a_step;
        d->b_span += b_step;
        if (d->a_span > NN_MAX_NUMEL || d->b_span > NN_MAX_NUMEL) {
            return 0;
        }
    }
    d->lda = d->k;
    d->ldb = d->n;
    d->ldc = d->n;
    d->trans_b = d->y_strided = 0;
    return nn_numel3(d->batches, d->m, d->n) >= 0;
}

typedef struct {
    const nn_matmul_dims *d;
    const float *a, *b;
    float *y;
    nn_matmul_epilogue_fn epilogue;
    const void *epilogue_arg;
    int split_n;    /* tiles of one product cut its columns (1) or its rows (0) */
    int64_t tile;
    int64_t batch;  /* the product being split */
} matmul_job;

static void product_operands(const matmul_job *job, int64_t batch, const float **a,
                             const float **b, float **y) {
    const nn_matmul_dims *d = job->d;
    int64_t a_offset = 0, b_offset = 0, rest = batch;
    for (int64_t i = d->rank - 1; i >= 0; i--) {
        int64_t index = rest % d->shape[i];
        rest /= d->shape[i];
        a_offset += index * d->a_strides[i];
        b_offset += index * d->b_strides[i];
    }
    *a = job->a + a_offset;
    *b = job->b + b_offset;
    if (!d->y_strided) {
        *y = job->y + batch * d->m * d->n;
        return;
    }
    int64_t y_offset = 0;
    for (int64_t i = d->rank - 1; i >= 0; i--) {
        y_offset += batch % d->shape[i] * d->y_strides[i];
        batch /= d->shape[i];
    }
    *y = job->y + y_offset;
}

/* Rows [r0, r0 + rows) by columns [c0, c0 + cols) of one product: one ge_sgemm, or with an
 * epilogue one per block of NN_EPILOGUE_COLS columns, each finished while in cache. */
static void product_block(const matmul_job *job, int64_t batch, const float *a, const float *b,
                          float *y, int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
    const nn_matmul_dims *d = job->d;
    const int64_t width = job->epilogue ? NN_EPILOGUE_COLS : cols;
    for (int64_t j = c0; j < c0 + cols; j += width) {
        const int64_t w = c0 + cols - j < width ? c0 + cols - j : width;
        ge_sgemm(0, (int)d->trans_b, rows, w, d->k, 1.0f, a + r0 * d->lda, d->lda,
                 b + (d->trans_b ? j * d->ldb : j), d->ldb, 0.0f, y + r0 * d->ldc + j, d->ldc);
        if (job->epilogue) {
            job->epilogue(job->epilogue_arg, batch, y, r0, rows, j, w);
        }
    }
}

/* Whole products [begin, end), each on the calling thread. */
static void whole_products(void *arg, int64_t begin, int64_t end) {
    const matmul_job *job = (const matmul_job *)arg;
    for (int64_t batch = begin; batch < end; batch++) {
        const float *a, *b;
        float *y;
        product_operands(job, batch, &a, &b, &y);
        product_block(job, batch, a, b, y, 0, job->d->m, 0, job->d->n);
    }
}

/* Tiles [begin, end) of product job->batch: column or row ranges of `tile`. */
static void product_tiles(void *arg, int64_t begin, int64_t end) {
    const matmul_job *job = (const matmul_job *)arg;
    const float *a, *b;
    float *y;
    product_operands(job, job->batch, &a, &b, &y);
    const int64_t extent = job->split_n ? job->d->n : job->d->m;
    for (int64_t t = begin; t < end; t++) {
        const int64_t first = t * job->tile;
        if (first >= extent) {
            continue;
        }
        const int64_t size = extent - first < job->tile ? extent - first : job->tile;
        if (job->split_n) {
            product_block(job, job->batch, a, b, y, 0, job->d->m, first, size);
        } else {
            product_block(job, job->batch, a, b, y, first, size, 0, job->d->n);
        }
    }
}

void nn_matmul_run(ge_context *ctx, const nn_matmul_dims *d, const float *a, const float *b,
                   float *y, nn_matmul_epilogue_fn epilogue, const void *epilogue_arg) {
    if (d->batches * d->m * d->n == 0) {
        return;
    }
    matmul_job job = {d, a, b, y, epilogue, epilogue_arg, 0, 0, 0};
    const int64_t tiles = nn_sgemm_tiles(d->m, d->n, d->k);
    if (tiles == 1 && d->batches == 1) {  /* one small product: no pool round trip */
        whole_products(&job, 0, 1);
        return;
    }
    if (tiles == 1) {  /* products too small to split: spread whole products over the pool */
        ctx->parallel_for(ctx, d->batches, nn_grain(d->m * d->n * d->k, NN_SMALL_GEMM_FLOPS),
                          whole_products, &job);
        return;
    }
    /* One tile per thread, a multiple of NN_TILE_ALIGN wide (as nn_sgemm cuts them). */
    job.split_n = d->n >= d->m;
    const int64_t extent = job.split_n ? d->n : d->m;
    const int64_t tile = (extent + tiles - 1) / tiles;
    job.tile = (tile + NN_TILE_ALIGN - 1) / NN_TILE_ALIGN * NN_TILE_ALIGN;
    for (job.batch = 0; job.batch < d->batches; job.batch++) {
        ctx->parallel_for(ctx, (extent + job.tile - 1) / job.tile, 1, product_tiles, &job);
    }
}

int ge_nn_matmul_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                     const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                     size_t attrs_size) {
    static const char *name = "ge_nn_matmul_f32";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    nn_matmul_dims d;
    if (!nn_matmul_dims_read(&blob, &d) || !ge_blob_done(&blob)) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    if (n_inputs != 2 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected 2 inputs and 1 output, got %d and %d", name,
                              (int)n_inputs, (int)n_outputs);
    }
    /* The operands may hold more elements than a batch walk reads (never fewer). */
    if (inputs[0].dtype != GE_FLOAT32 || inputs[1].dtype != GE_FLOAT32
        || inputs[0].numel < d.a_span || inputs[1].numel < d.b_span) {
        return ctx->set_error(ctx, "%s: inputs A (%lld elements) and B (%lld elements) must be "
                              "float32 with at least %lld and %lld elements", name,
                              (long long)inputs[0].numel, (long long)inputs[1].numel,
                              (long long)d.a_span, (long long)d.b_span);
    }
    if (nn_check_f32(ctx, name, "output Y", &outputs[0], d.batches * d.m * d.n)) {
        return -1;
    }
    nn_matmul_run(ctx, &d, (const float *)inputs[0].data, (const float *)inputs[1].data,
                  (float *)outputs[0].data, NULL, NULL);
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

/* -- ge_hub.StridedMatMul in fp32 ------------------------------------------------------- */

static int read_view(ge_blob *blob, int64_t nb, nn_strided_view *v) {
    int64_t ints[GE_MAX_RANK + 3];
    if (!ge_blob_ints(blob, ints, nb + 3)) {
        return 0;
    }
    v->offset = ints[0];
    for (int64_t d = 0; d < nb; d++) {
        v->batch[d] = ints[1 + d];
    }
    v->row = ints[1 + nb];
    v->col = ints[2 + nb];
    return 1;
}

/* 1 when every element the view reaches (batch dims `shape`, rows x cols) lies in
 * [0, numel): strides are non-negative, so the last element is the farthest. */
static int view_fits(const nn_strided_view *v, int64_t nb, const int64_t *shape, int64_t rows,
                     int64_t cols, int64_t numel) {
    if (v->offset < 0 || v->row < 0 || v->col < 0) {
        return 0;
    }
    __int128 last = v->offset + (__int128)(rows - 1) * v->row + (__int128)(cols - 1) * v->col;
    for (int64_t d = 0; d < nb; d++) {
        if (v->batch[d] < 0) {
            return 0;
        }
        last += (__int128)(shape[d] - 1) * v->batch[d];
    }
    return last < numel;
}

static int strided_matmul_read(ge_blob *blob, nn_strided_matmul *s, int64_t a_numel,
                               int64_t b_numel, int64_t y_numel) {
    int64_t mkn[3];
    if (!ge_blob_ints(blob, &s->nb, 1) || s->nb < 0 || s->nb > GE_MAX_RANK
        || !ge_blob_ints(blob, s->shape, s->nb) || !ge_blob_ints(blob, mkn, 3)
        || !read_view(blob, s->nb, &s->a) || !read_view(blob, s->nb, &s->b)
        || !read_view(blob, s->nb, &s->c)) {
        return 0;
    }
    s->m = mkn[0];
    s->k = mkn[1];
    s->n = mkn[2];
    s->batches = 1;
    for (int64_t d = 0; d < s->nb; d++) {
        if (s->shape[d] < 1 || s->shape[d] > (INT64_C(1) << 40) / s->batches) {
            return 0;
        }
        s->batches *= s->shape[d];
    }
    const int64_t most = INT64_C(1) << 31;
    if (s->m < 1 || s->k < 1 || s->n < 1 || s->m > most || s->k > most || s->n > most
        || s->a.col != 1 || s->c.col != 1 || (s->b.col != 1 && s->b.row != 1)) {
        return 0;
    }
    return view_fits(&s->a, s->nb, s->shape, s->m, s->k, a_numel)
           && view_fits(&s->b, s->nb, s->shape, s->k, s->n, b_numel)
           && view_fits(&s->c, s->nb, s->shape, s->m, s->n, y_numel);
}

int nn_strided_matmul_open(ge_context *ctx, const char *name, const ge_tensor *inputs,
                           int32_t n_inputs, const ge_tensor *outputs, int32_t n_outputs,
                           ge_blob *blob, nn_strided_matmul *s) {
    if (n_inputs != 2 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected inputs A, B and 1 output, got %d and %d", name,
                              (int)n_inputs, (int)n_outputs);
    }
    for (int i = 0; i < 2; i++) {
        if (inputs[i].data == NULL || inputs[i].dtype != GE_FLOAT32) {
            return ctx->set_error(ctx, "%s: input %s must be float32", name, i ? "B" : "A");
        }
    }
    if (outputs[0].data == NULL || outputs[0].dtype != GE_FLOAT32) {
        return ctx->set_error(ctx, "%s: output Y must be float32", name);
    }
    if (!strided_matmul_read(blob, s, inputs[0].numel, inputs[1].numel, outputs[0].numel)) {
        return NN_BAD_BLOB(ctx, name, *blob);
    }
    return 0;
}

/* ge_hub.StridedMatMul (ge_hub/passes/fold_matmul_views.py) in fp32: nn_matmul_run's
 * products, tiles and threads, each product's operands and result at their views' strides
 * (B's rows or, transposed, its columns contiguous), so the bits are MatMul's after the
 * Transposes and Splits it replaces. The BLAS wants leading dims of at least a row: a view
 * whose rows overlap is refused (the pass makes none). */
int ge_nn_matmul_strided_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                             const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                             size_t attrs_size) {
    static const char *name = "ge_nn_matmul_strided_f32";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    nn_strided_matmul s;
    if (nn_strided_matmul_open(ctx, name, inputs, n_inputs, outputs, n_outputs, &blob, &s)) {
        return -1;
    }
    if (!ge_blob_done(&blob)) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    nn_matmul_dims d = {0};
    d.m = s.m;
    d.n = s.n;
    d.k = s.k;
    d.rank = s.nb;
    d.batches = s.batches;
    for (int64_t i = 0; i < s.nb; i++) {
        d.shape[i] = s.shape[i];
        d.a_strides[i] = s.a.batch[i];
        d.b_strides[i] = s.b.batch[i];
        d.y_strides[i] = s.c.batch[i];
    }
    d.y_strided = 1;
    d.trans_b = s.b.col != 1;
    /* one row (or column) reads no stride: give the BLAS a legal one */
    d.lda = s.m > 1 ? s.a.row : s.k;
    d.ldb = d.trans_b ? (s.n > 1 ? s.b.col : s.k) : (s.k > 1 ? s.b.row : s.n);
    d.ldc = s.m > 1 ? s.c.row : s.n;
    if (d.lda < s.k || d.ldc < s.n || d.ldb < (d.trans_b ? s.k : s.n)) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    nn_matmul_run(ctx, &d, (const float *)inputs[0].data + s.a.offset,
                  (const float *)inputs[1].data + s.b.offset,
                  (float *)outputs[0].data + s.c.offset, NULL, NULL);
    return 0;
}

