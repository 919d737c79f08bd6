/*
 * Einsum (float32): runs the program that ge_hub/kernels/reduce_einsum.py lowered the equation
 * to. Blob (int64 values), first value the program kind:
 *
 * 0, generic contraction:
 *     n_ops, n_out, out_shape[n_out], n_sum, sum_shape[n_sum],
 *     then per operand: out_strides[n_out], sum_strides[n_sum]
 *   Output element o (row-major over out_shape, which is the contiguous output with its
 *   size-1 dims dropped) is the sum over the sum_shape multi-index of the product of
 *   the operands at their strides, accumulated in double.
 *
 * 1, batched GEMM:
 *     n_pre, copy[n_pre],
 *     nb, batch_shape[nb], m, n, k,
 *     x: buffer, offset, trans, ld;  y: buffer, offset, trans, ld;  c: buffer, offset, ldc,
 *     x_batch_strides[nb], y_batch_strides[nb], c_batch_strides[nb],
 *     n_post, copy[n_post]
 *   where a copy is: src_buffer, src_offset, dst_buffer, dst_offset, rank, shape[rank],
 *   src_strides[rank], dst_strides[rank]. Buffers: 0 and 1 the operands, 2 the scratch,
 *   3 the output; offsets and strides count floats. The pre copies put operands BLAS
 *   cannot walk into canonical order in scratch, then C = op(X) @ op(Y) per batch with
 *   ge_sgemm, then the post copy moves a scratch result into the output's order.
 *
 * Every offset a program can reach is checked against its buffer before anything runs.
 */
#include <stdint.h>

#include "reduce.h"

#define EINSUM_MAX_DIMS 16
#define EINSUM_MAX_OPERANDS 8
#define EINSUM_GRAIN_ELEMENTS 32768
/* Small products run one per pool thread; larger ones let the BLAS thread itself. */
#define EINSUM_SMALL_GEMM (64 * 64 * 64)

enum { BUFFER_A = 0, BUFFER_B = 1, BUFFER_SCRATCH = 2, BUFFER_OUTPUT = 3, N_BUFFERS = 4 };

static inline int64_t einsum_grain(int64_t work_per_item) {
    int64_t grain = EINSUM_GRAIN_ELEMENTS / (work_per_item > 0 ? work_per_item : 1);
    return grain > 0 ? grain : 1;
}

/* The largest offset a walk over `shape` with `strides` reaches from 0 (an empty dim
 * adds nothing: the walk reads nothing), as a checked size (ge_hub/blob.h): -1 when it
 * passes GE_MAX_SIZE, so that a blob from a file cannot wrap it around. */
static int64_t einsum_extent(const int64_t *shape, const int64_t *strides, int64_t rank) {
    int64_t last = 0;
    for (int64_t d = 0; d < rank; d++) {
        if (shape[d] != 0) {
            last = ge_size_add(last, ge_size_mul(shape[d] - 1, strides[d]));
        }
    }
    return last;
}

/* Elements of `shape`, a checked size (-1 past GE_MAX_SIZE). */
static int64_t einsum_numel(const int64_t *shape, int64_t rank) {
    int64_t numel = 1;
    for (int64_t d = 0; d < rank; d++) {
        numel = ge_size_mul(numel, shape[d]);
    }
    return numel;
}

/* -- the generic contraction --------------------------------------------------------------- */

typedef struct {
    int64_t n_ops, n_out, n_sum, out_numel, sum_count;
    int64_t out_shape[EINSUM_MAX_DIMS], sum_shape[EINSUM_MAX_DIMS];
    int64_t out_strides[EINSUM_MAX_OPERANDS][EINSUM_MAX_DIMS];
    int64_t sum_strides[EINSUM_MAX_OPERANDS][EINSUM_MAX_DIMS];
    const float *x[EINSUM_MAX_OPERANDS];
    float *y;
} einsum_generic;

/* The sum over every summed index of the operands' product, from offsets `base`. */
REDUCE_INLINE double generic_sum(const einsum_generic *g, const int64_t *base) {
    int64_t n_ops = g->n_ops;
    if (g->n_sum == 0) {
        double product = 1.0;
        for (int64_t op = 0; op < n_ops; op++) {
            product *= (double)g->x[op][base[op]];
        }
        return product;
    }
    if (g->sum_count == 0) {
        return 0.0;
    }
    int64_t last = g->n_sum - 1, len = g->sum_shape[last];
    int64_t step[EINSUM_MAX_OPERANDS], offset[EINSUM_MAX_OPERANDS];
    int64_t index[EINSUM_MAX_DIMS] = {0};
    for (int64_t op = 0; op < n_ops; op++) {
        step[op] = g->sum_strides[op][last];
        offset[op] = base[op];
    }
    double acc = 0.0;
    for (int64_t run = 0, runs = g->sum_count / len; run < runs; run++) {
        if (n_ops == 1) {
            const float *a = g->x[0] + offset[0];
            for (int64_t i = 0; i < len; i++) {
                acc += (double)a[i * step[0]];
            }
        } else if (n_ops == 2) {
            const float *a = g->x[0] + offset[0], *b = g->x[1] + offset[1];
            for (int64_t i = 0; i < len; i++) {
                acc += (double)a[i * step[0]] * (double)b[i * step[1]];
            }
        } else {
            for (int64_t i = 0; i < len; i++) {
                double product = 1.0;
                for (int64_t op = 0; op < n_ops; op++) {
                    product *= (double)g->x[op][offset[op] + i * step[op]];
                }
                acc += product;
            }
        }
        for (int64_t d = last - 1; d >= 0; d--) {
            for (int64_t op = 0; op < n_ops; op++) {
                offset[op] += g->sum_strides[op][d];
            }
            if (++index[d] < g->sum_shape[d]) {
                break;
            }
            for (int64_t op = 0; op < n_ops; op++) {
                offset[op] -= g->sum_strides[op][d] * g->sum_shape[d];
            }
            index[d] = 0;
        }
    }
    return acc;
}

/* Output elements [o, o + len) along the last output dim: a strided copy or product when
 * nothing is summed, else one sum per element. */
REDUCE_INLINE void generic_segment(const einsum_generic *g, const int64_t *base, int64_t o,
                            int64_t len) {
    int64_t last = g->n_out - 1;
    if (g->n_sum == 0 && g->n_ops <= 2) {
        const float *a = g->x[0] + base[0];
        int64_t sa = last >= 0 ? g->out_strides[0][last] : 0;
        if (g->n_ops == 1) {
            for (int64_t i = 0; i < len; i++) {
                g->y[o + i] = a[i * sa];
            }
        } else {
            const float *b = g->x[1] + base[1];
            int64_t sb = last >= 0 ? g->out_strides[1][last] : 0;
            for (int64_t i = 0; i < len; i++) {
                g->y[o + i] = (float)((double)a[i * sa] * (double)b[i * sb]);
            }
        }
        return;
    }
    int64_t at[EINSUM_MAX_OPERANDS];
    for (int64_t op = 0; op < g->n_ops; op++) {
        at[op] = base[op];
    }
    for (int64_t i = 0; i < len; i++) {
        g->y[o + i] = (float)generic_sum(g, at);
        for (int64_t op = 0; last >= 0 && op < g->n_ops; op++) {
            at[op] += g->out_strides[op][last];
        }
    }
}

REDUCE_VECTORIZED static void generic_chunk(void *arg, int64_t begin, int64_t end) {
    const einsum_generic *g = (const einsum_generic *)arg;
    int64_t index[EINSUM_MAX_DIMS], base[EINSUM_MAX_OPERANDS] = {0};
    int64_t rest = begin;
    for (int64_t d = g->n_out - 1; d >= 0; d--) {
        index[d] = rest % g->out_shape[d];
        rest /= g->out_shape[d];
        for (int64_t op = 0; op < g->n_ops; op++) {
            base[op] += index[d] * g->out_strides[op][d];
        }
    }
    int64_t last = g->n_out - 1;
    for (int64_t o = begin; o < end;) {
        /* The rest of this output row, within the chunk. */
        int64_t len = last >= 0 ? g->out_shape[last] - index[last] : 1;
        len = len < end - o ? len : end - o;
        generic_segment(g, base, o, len);
        o += len;
        if (last < 0) {
            break;
        }
        for (int64_t op = 0; op < g->n_ops; op++) {
            base[op] += len * g->out_strides[op][last];
        }
        index[last] += len;
        for (int64_t d = last; d > 0 && index[d] == g->out_shape[d]; d--) {
            for (int64_t op = 0; op < g->n_ops; op++) {
                base[op] += g->out_strides[op][d - 1] - g->out_shape[d] * g->out_strides[op][d];
            }
            index[d] = 0;
            index[d - 1]++;
        }
    }
}

static int run_generic(ge_context *ctx, ge_blob *blob, const ge_tensor *inputs,
                       int32_t n_inputs, const ge_tensor *output) {
    static const char *name = "ge_einsum_f32";
    einsum_generic g;
    g.n_ops = ge_blob_int(blob);
    if (g.n_ops < 1 || g.n_ops > EINSUM_MAX_OPERANDS) {
        blob->ok = 0;
    }
    g.n_out = ge_blob_int(blob);
    if (g.n_out < 0 || g.n_out > EINSUM_MAX_DIMS) {
        blob->ok = 0;
    }
    ge_blob_ints_in(blob, g.out_shape, blob->ok ? g.n_out : 0, 0, INT64_MAX);
    g.n_sum = ge_blob_int(blob);
    if (g.n_sum < 0 || g.n_sum > EINSUM_MAX_DIMS) {
        blob->ok = 0;
    }
    ge_blob_ints_in(blob, g.sum_shape, blob->ok ? g.n_sum : 0, 0, INT64_MAX);
    for (int64_t op = 0; blob->ok && op < g.n_ops; op++) {
        ge_blob_ints_in(blob, g.out_strides[op], g.n_out, 0, INT64_MAX);
        ge_blob_ints_in(blob, g.sum_strides[op], g.n_sum, 0, INT64_MAX);
    }
    if (!ge_blob_done(blob)) {
        return ctx->set_error(ctx, "%s: malformed attribute blob", name);
    }
    if (n_inputs != g.n_ops) {
        return ctx->set_error(ctx, "%s: the equation was compiled for %lld inputs, got %d", name,
                              (long long)g.n_ops, (int)n_inputs);
    }
    g.out_numel = einsum_numel(g.out_shape, g.n_out);
    g.sum_count = einsum_numel(g.sum_shape, g.n_sum);
    if (g.out_numel < 0 || g.sum_count < 0 || ge_size_mul(g.sum_count, g.n_ops) < 0) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (sizes past %lld)", name,
                              (long long)GE_MAX_SIZE);
    }
    if (output->numel != g.out_numel) {
        return ctx->set_error(ctx, "%s: the output has %lld elements, the equation needs %lld",
                              name, (long long)output->numel, (long long)g.out_numel);
    }
    for (int64_t op = 0; op < g.n_ops; op++) {
        if (inputs[op].data == NULL || inputs[op].dtype != GE_FLOAT32) {
            return ctx->set_error(ctx, "%s: input %lld must be float32", name, (long long)op);
        }
        int64_t last = ge_size_add(einsum_extent(g.out_shape, g.out_strides[op], g.n_out),
                                   einsum_extent(g.sum_shape, g.sum_strides[op], g.n_sum));
        if (g.out_numel > 0 && g.sum_count > 0 && (last < 0 || last >= inputs[op].numel)) {
            return ctx->set_error(ctx, "%s: input %lld has %lld elements, the equation reads "
                                  "up to element %lld", name, (long long)op,
                                  (long long)inputs[op].numel, (long long)last);
        }
        g.x[op] = (const float *)inputs[op].data;
    }
    g.y = (float *)output->data;
    ctx->parallel_for(ctx, g.out_numel, einsum_grain(g.sum_count * g.n_ops), generic_chunk, &g);
    return 0;
}

/* -- the GEMM program ---------------------------------------------------------------------- */

typedef struct {
    int64_t src, src_offset, dst, dst_offset, rank;
    int64_t shape[EINSUM_MAX_DIMS], src_strides[EINSUM_MAX_DIMS], dst_strides[EINSUM_MAX_DIMS];
    float *buffers[N_BUFFERS];
} einsum_copy;

typedef struct {
    int64_t buffer, offset, trans, ld;
} gemm_operand;

typedef struct {
    int64_t nb, m, n, k, batch_shape[EINSUM_MAX_DIMS];
    gemm_operand x, y, c;
    int64_t x_strides[EINSUM_MAX_DIMS], y_strides[EINSUM_MAX_DIMS], c_strides[EINSUM_MAX_DIMS];
    const float *xp, *yp;
    float *cp;
} einsum_gemm;

static int read_copy(ge_blob *blob, einsum_copy *copy) {
    copy->src = ge_blob_int(blob);
    copy->src_offset = ge_blob_int(blob);
    copy->dst = ge_blob_int(blob);
    copy->dst_offset = ge_blob_int(blob);
    copy->rank = ge_blob_int(blob);
    if (copy->src < 0 || copy->src >= N_BUFFERS || copy->dst < BUFFER_SCRATCH
        || copy->dst >= N_BUFFERS || copy->src_offset < 0 || copy->dst_offset < 0
        || copy->rank < 0 || copy->rank > EINSUM_MAX_DIMS) {
        blob->ok = 0;
        return 0;
    }
    ge_blob_ints_in(blob, copy->shape, copy->rank, 1, INT64_MAX);
    ge_blob_ints_in(blob, copy->src_strides, copy->rank, 0, INT64_MAX);
    ge_blob_ints_in(blob, copy->dst_strides, copy->rank, 0, INT64_MAX);
    return blob->ok;
}

REDUCE_VECTORIZED static void copy_rows(void *arg, int64_t begin, int64_t end) {
    const einsum_copy *copy = (const einsum_copy *)arg;
    const float *src = copy->buffers[copy->src] + copy->src_offset;
    float *dst = copy->buffers[copy->dst] + copy->dst_offset;
    int64_t last = copy->rank - 1;
    int64_t len = copy->shape[last], ss = copy->src_strides[last], ds = copy->dst_strides[last];
    for (int64_t row = begin; row < end; row++) {
        int64_t rest = row, s = 0, t = 0;
        for (int64_t d = last - 1; d >= 0; d--) {
            int64_t i = rest % copy->shape[d];
            rest /= copy->shape[d];
            s += i * copy->src_strides[d];
            t += i * copy->dst_strides[d];
        }
        if (ss == 1 && ds == 1) {
            for (int64_t i = 0; i < len; i++) {
                dst[t + i] = src[s + i];
            }
        } else {
            for (int64_t i = 0; i < len; i++) {
                dst[t + i * ds] = src[s + i * ss];
            }
        }
    }
}

static void run_copy(ge_context *ctx, einsum_copy *copy) {
    if (copy->rank == 0) {
        copy->buffers[copy->dst][copy->dst_offset] = copy->buffers[copy->src][copy->src_offset];
        return;
    }
    int64_t len = copy->shape[copy->rank - 1];
    int64_t rows = einsum_numel(copy->shape, copy->rank) / len;
    ctx->parallel_for(ctx, rows, einsum_grain(len), copy_rows, copy);
}

static void gemm_batches(void *arg, int64_t begin, int64_t end) {
    const einsum_gemm *g = (const einsum_gemm *)arg;
    for (int64_t batch = begin; batch < end; batch++) {
        int64_t rest = batch, xo = g->x.offset, yo = g->y.offset, co = g->c.offset;
        for (int64_t d = g->nb - 1; d >= 0; d--) {
            int64_t i = rest % g->batch_shape[d];
            rest /= g->batch_shape[d];
            xo += i * g->x_strides[d];
            yo += i * g->y_strides[d];
            co += i * g->c_strides[d];
        }
        ge_sgemm((int)g->x.trans, (int)g->y.trans, g->m, g->n, g->k, 1.0f, g->xp + xo, g->x.ld,
                 g->yp + yo, g->y.ld, 0.0f, g->cp + co, g->c.ld);
    }
}

/* An operand's matrix (rows x cols, stored transposed when trans) fits its buffer. */
static int operand_fits(const einsum_gemm *g, const gemm_operand *p, const int64_t *strides,
                        int64_t rows, int64_t cols, int64_t size) {
    int64_t stored_rows = p->trans ? cols : rows, stored_cols = p->trans ? rows : cols;
    if (!(p->offset >= 0 && p->ld >= stored_cols && (p->trans == 0 || p->trans == 1))) {
        return 0;
    }
    if (stored_rows == 0 || stored_cols == 0) {
        return stored_rows >= 0 && stored_cols >= 0;  /* reads nothing */
    }
    /* checked sizes: -1 (past GE_MAX_SIZE) fails */
    int64_t end = ge_size_add(ge_size_add(p->offset, einsum_extent(g->batch_shape, strides,
                                                                      g->nb)),
                              ge_size_add(ge_size_mul(stored_rows - 1, p->ld), stored_cols));
    return end > 0 && end <= size;
}

static int run_gemm(ge_context *ctx, ge_blob *blob, const ge_tensor *inputs,
                    int32_t n_inputs, const ge_tensor *output) {
    static const char *name = "ge_einsum_f32";
    if (n_inputs != 2) {
        return ctx->set_error(ctx, "%s: the equation was compiled for 2 inputs, got %d", name,
                              (int)n_inputs);
    }
    for (int op = 0; op < 2; op++) {
        if (inputs[op].data == NULL || inputs[op].dtype != GE_FLOAT32) {
            return ctx->set_error(ctx, "%s: input %d must be float32", name, op);
        }
    }
    float *buffers[N_BUFFERS] = {(float *)inputs[0].data, (float *)inputs[1].data,
                                 (float *)ctx->scratch, (float *)output->data};
    int64_t sizes[N_BUFFERS] = {inputs[0].numel, inputs[1].numel,
                                (int64_t)(ctx->scratch_bytes / sizeof(float)), output->numel};
    if (ctx->scratch == NULL) {
        sizes[BUFFER_SCRATCH] = 0;
    }

    einsum_copy pre[2], post[1];
    int64_t n_pre = ge_blob_int(blob);
    if (n_pre < 0 || n_pre > 2) {
        blob->ok = 0;
    }
    for (int64_t i = 0; blob->ok && i < n_pre; i++) {
        read_copy(blob, &pre[i]);
    }
    einsum_gemm g;
    g.nb = ge_blob_int(blob);
    if (g.nb < 0 || g.nb > EINSUM_MAX_DIMS) {
        blob->ok = 0;
    }
    ge_blob_ints_in(blob, g.batch_shape, blob->ok ? g.nb : 0, 1, INT64_MAX);
    g.m = ge_blob_int(blob);
    g.n = ge_blob_int(blob);
    g.k = ge_blob_int(blob);
    gemm_operand *operands[2] = {&g.x, &g.y};
    for (int i = 0; i < 2; i++) {
        operands[i]->buffer = ge_blob_int(blob);
        operands[i]->offset = ge_blob_int(blob);
        operands[i]->trans = ge_blob_int(blob);
        operands[i]->ld = ge_blob_int(blob);
    }
    g.c.buffer = ge_blob_int(blob);
    g.c.offset = ge_blob_int(blob);
    g.c.trans = 0;
    g.c.ld = ge_blob_int(blob);
    if (blob->ok) {
        ge_blob_ints_in(blob, g.x_strides, g.nb, 0, INT64_MAX);
        ge_blob_ints_in(blob, g.y_strides, g.nb, 0, INT64_MAX);
        ge_blob_ints_in(blob, g.c_strides, g.nb, 0, INT64_MAX);
    }
    int64_t n_post = ge_blob_int(blob);
    if (n_post < 0 || n_post > 1) {
        blob->ok = 0;
    }
    for (int64_t i = 0; blob->ok && i < n_post; i++) {
        read_copy(blob, &post[i]);
    }
    if (!ge_blob_done(blob) || g.m < 1 || g.n < 1 || g.k < 1
        || ge_size_mul(ge_size_mul(g.m, g.n), g.k) < 0 || einsum_numel(g.batch_shape, g.nb) < 0 || g.x.buffer < 0
        || g.x.buffer > BUFFER_SCRATCH || g.y.buffer < 0 || g.y.buffer > BUFFER_SCRATCH
        || (g.c.buffer != BUFFER_SCRATCH && g.c.buffer != BUFFER_OUTPUT)) {
        return ctx->set_error(ctx, "%s: malformed attribute blob", name);
    }

    /* Check every walk against its buffer. */
    einsum_copy *copies[3];
    int n_copies = 0;
    for (int64_t i = 0; i < n_pre; i++) {
        copies[n_copies++] = &pre[i];
    }
    for (int64_t i = 0; i < n_post; i++) {
        copies[n_copies++] = &post[i];
    }
    for (int i = 0; i < n_copies; i++) {
        einsum_copy *copy = copies[i];
        int64_t src_last = ge_size_add(copy->src_offset, einsum_extent(copy->shape,
                                                                        copy->src_strides,
                                                                        copy->rank));
        int64_t dst_last = ge_size_add(copy->dst_offset, einsum_extent(copy->shape,
                                                                        copy->dst_strides,
                                                                        copy->rank));
        if (src_last < 0 || dst_last < 0 || einsum_numel(copy->shape, copy->rank) < 0
            || src_last >= sizes[copy->src] || dst_last >= sizes[copy->dst]) {
            return ctx->set_error(ctx, "%s: a compiled copy reaches past its buffer (the "
                                  "inputs have %lld and %lld elements, the scratch %lld, the "
                                  "output %lld)", name, (long long)sizes[0],
                                  (long long)sizes[1], (long long)sizes[2],
                                  (long long)sizes[3]);
        }
        memcpy(copy->buffers, buffers, sizeof buffers);
    }
    if (!operand_fits(&g, &g.x, g.x_strides, g.m, g.k, sizes[g.x.buffer])
        || !operand_fits(&g, &g.y, g.y_strides, g.k, g.n, sizes[g.y.buffer])
        || !operand_fits(&g, &g.c, g.c_strides, g.m, g.n, sizes[g.c.buffer])) {
        return ctx->set_error(ctx, "%s: the compiled GEMM reaches past its buffers (the "
                              "inputs have %lld and %lld elements, the scratch %lld, the "
                              "output %lld)", name, (long long)sizes[0], (long long)sizes[1],
                              (long long)sizes[2], (long long)sizes[3]);
    }
    g.xp = buffers[g.x.buffer];
    g.yp = buffers[g.y.buffer];
    g.cp = buffers[g.c.buffer];

    for (int64_t i = 0; i < n_pre; i++) {
        run_copy(ctx, &pre[i]);
    }
    int64_t batches = einsum_numel(g.batch_shape, g.nb), flops = g.m * g.n * g.k;
    if (batches > 1 && flops < EINSUM_SMALL_GEMM) {
        ctx->parallel_for(ctx, batches, einsum_grain(flops / 8), gemm_batches, &g);
    } else {
        gemm_batches(&g, 0, batches);
    }
    for (int64_t i = 0; i < n_post; i++) {
        run_copy(ctx, &post[i]);
    }
    return 0;
}

GE_KERNEL(ge_einsum_f32) {
    if (n_outputs != 1 || outputs[0].dtype != GE_FLOAT32) {
        return ctx->set_error(ctx, "ge_einsum_f32: expected 1 float32 output, got %d outputs",
                              (int)n_outputs);
    }
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    int64_t kind = ge_blob_int(&blob);
    if (kind == 0) {
        return run_generic(ctx, &blob, inputs, n_inputs, &outputs[0]);
    }
    if (kind == 1) {
        return run_gemm(ctx, &blob, inputs, n_inputs, &outputs[0]);
    }
    return ctx->set_error(ctx, "ge_einsum_f32: malformed attribute blob (%zu bytes)",
                          attrs_size);
}
