/*
 * Reduce* kernels: Sum, Mean, Max, Min, Prod, L1, L2, SumSquare and LogSumExp.
 *
 * The blob (reduce.h) splits the input into rows (kept dims), a reduced multi-index and
 * a contiguous run of `inner` kept elements. Two loops cover every axes set:
 *
 * - row mode (inner == 1: the last reduced dim is contiguous): each output element
 *   reduces contiguous runs, with REDUCE_LANES independent accumulators so that the
 *   loop vectorizes without -ffast-math's reassociation; a single huge run (a
 *   reduction to one value) is cut into pieces reduced in parallel and merged in order.
 * - column mode (inner > 1): a work item of up to REDUCE_BLOCK outputs walks them in
 *   strips of REDUCE_STRIP whose partials stay in registers, adding one contiguous input
 *   row at a time, a loop that vectorizes.
 *
 * Float sums accumulate in double, so that they match the reference (which sums in
 * float64) even over millions of elements. Sum, Mean and L1 first add up to
 * REDUCE_ROUNDS values per lane in float (four per SSE instruction, half the work of
 * converting each to double): a blocked summation whose error stays below about 1e-6
 * of the summed magnitudes, however long the sum. Squares and products stay in double
 * throughout (a float square overflows from 1.8e19, where the reference's does not).
 * Integers wrap around like the reference, through unsigned arithmetic. Max and Min
 * propagate NaN.
 */
#include <math.h>
#include <stdint.h>

#include "reduce.h"

/* Outputs a column-mode work item covers, in strips of REDUCE_STRIP whose partials fit
 * in registers (eight SSE registers of floats). */
#define REDUCE_BLOCK 256
#define REDUCE_STRIP 32
/* Input elements a parallel chunk should read at least, so small tensors run inline. */
#define REDUCE_GRAIN_ELEMENTS 32768
/* A single run this long is reduced in REDUCE_PIECES parallel pieces. */
#define REDUCE_SPLIT_MIN 131072
#define REDUCE_PIECES 16
/* Independent accumulators of a contiguous run: lanes the compiler can vectorize without
 * reassociating anything (each lane sums its own elements in order). */
#define REDUCE_LANES 16
/* Values a float partial sums before it is added, in double, to its accumulator: its
 * rounding error stays below REDUCE_ROUNDS * 2^-24 of the magnitudes it summed. */
#define REDUCE_ROUNDS 16

typedef struct {
    int64_t nk, kept_shape[GE_MAX_RANK], kept_strides[GE_MAX_RANK];
    int64_t nr, red_shape[GE_MAX_RANK], red_strides[GE_MAX_RANK];
    int64_t inner, rows, count;
    int row_mode;
    int64_t runs, run_len; /* row mode: contiguous runs per output and their length */
    int64_t blocks;        /* column mode: blocks of REDUCE_BLOCK outputs per row */
    const void *x;
    void *y;
} reduce_plan;

/* Reads and checks the blob against the tensors; 0, or -1 with the error set. */
static int reduce_open(ge_context *ctx, const char *name, const ge_tensor *inputs,
                       int32_t n_inputs, const ge_tensor *outputs, int32_t n_outputs,
                       const void *attrs, size_t attrs_size, int32_t dtype, reduce_plan *plan) {
    if (n_inputs < 1 || n_inputs > 2 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected 1 or 2 inputs and 1 output, got %d and %d",
                              name, (int)n_inputs, (int)n_outputs);
    }
    const ge_tensor *x = &inputs[0], *y = &outputs[0];
    if (x->data == NULL || x->dtype != dtype || y->dtype != dtype) {
        return ctx->set_error(ctx, "%s: input 'data' and the output must be dtype %d, got %d "
                              "and %d", name, (int)dtype, (int)x->dtype, (int)y->dtype);
    }
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    plan->nk = ge_blob_int(&blob);
    if (plan->nk >= 0 && plan->nk <= GE_MAX_RANK) {
        ge_blob_ints_in(&blob, plan->kept_shape, plan->nk, 0, INT64_MAX);
        ge_blob_ints_in(&blob, plan->kept_strides, plan->nk, 0, INT64_MAX);
    } else {
        blob.ok = 0;
    }
    plan->nr = ge_blob_int(&blob);
    if (plan->nr >= 0 && plan->nr <= GE_MAX_RANK) {
        ge_blob_ints_in(&blob, plan->red_shape, plan->nr, 0, INT64_MAX);
        ge_blob_ints_in(&blob, plan->red_strides, plan->nr, 0, INT64_MAX);
    } else {
        blob.ok = 0;
    }
    plan->inner = ge_blob_int(&blob);
    if (!ge_blob_done(&blob) || plan->inner < 0) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (%zu bytes)", name, attrs_size);
    }
    /* The split covers the input exactly and never reads past it (checked sizes: a
     * blob from a file must not wrap one around, ge_hub/blob.h). */
    int64_t rows = 1, count = 1, reach = 0;
    for (int64_t d = 0; d < plan->nk; d++) {  /* (an empty dim reads nothing) */
        rows = ge_size_mul(rows, plan->kept_shape[d]);
        reach = ge_size_add(reach, ge_size_mul(plan->kept_shape[d] ? plan->kept_shape[d] - 1
                                               : 0, plan->kept_strides[d]));
    }
    for (int64_t d = 0; d < plan->nr; d++) {
        count = ge_size_mul(count, plan->red_shape[d]);
        reach = ge_size_add(reach, ge_size_mul(plan->red_shape[d] ? plan->red_shape[d] - 1
                                               : 0, plan->red_strides[d]));
    }
    const int64_t x_numel = ge_size_mul(ge_size_mul(rows, count), plan->inner);
    const int64_t y_numel = ge_size_mul(rows, plan->inner);
    if (x_numel < 0 || y_numel < 0 || reach < 0) {
        return ctx->set_error(ctx, "%s: its attribute blob's sizes pass %lld elements", name,
                              (long long)GE_MAX_SIZE);
    }
    const int64_t last = reach + plan->inner - 1;
    if (x->numel != x_numel || y->numel != y_numel || (x->numel > 0 && last >= x->numel)) {
        return ctx->set_error(ctx, "%s: input 'data' has %lld elements and the output %lld; "
                              "the compiled layout needs %lld and %lld", name,
                              (long long)x->numel, (long long)y->numel,
                              (long long)x_numel, (long long)y_numel);
    }
    plan->rows = rows;
    plan->count = count;
    plan->row_mode = plan->inner == 1 && plan->nr > 0 && plan->red_strides[plan->nr - 1] == 1;
    plan->run_len = plan->row_mode ? plan->red_shape[plan->nr - 1] : 1;
    plan->runs = plan->run_len > 0 ? count / plan->run_len : 0;
    plan->blocks = (plan->inner + REDUCE_BLOCK - 1) / REDUCE_BLOCK;
    plan->x = x->data;
    plan->y = y->data;
    return 0;
}

/* Input offset of the first element of output row `row`; its kept multi-index in `index`. */
REDUCE_INLINE int64_t reduce_row_start(const reduce_plan *plan, int64_t row, int64_t *index) {
    int64_t offset = 0;
    for (int64_t d = plan->nk - 1; d >= 0; d--) {
        index[d] = row % plan->kept_shape[d];
        offset += index[d] * plan->kept_strides[d];
        row /= plan->kept_shape[d];
    }
    return offset;
}

/* Input offset of the first element of output row `row`. */
REDUCE_INLINE int64_t reduce_row_offset(const reduce_plan *plan, int64_t row) {
    int64_t offset = 0;
    for (int64_t d = plan->nk - 1; d >= 0; d--) {
        offset += (row % plan->kept_shape[d]) * plan->kept_strides[d];
        row /= plan->kept_shape[d];
    }
    return offset;
}

/* Steps the multi-index `index` over the first n dims (last fastest); returns the offset. */
REDUCE_INLINE int64_t reduce_next(const int64_t *shape, const int64_t *strides, int64_t n,
                                  int64_t *index, int64_t offset) {
    for (int64_t d = n - 1; d >= 0; d--) {
        offset += strides[d];
        if (++index[d] < shape[d]) {
            return offset;
        }
        offset -= strides[d] * shape[d];
        index[d] = 0;
    }
    return offset;
}

static inline int64_t reduce_grain(int64_t work_per_item) {
    int64_t grain = REDUCE_GRAIN_ELEMENTS / (work_per_item > 0 ? work_per_item : 1);
    return grain > 0 ? grain : 1;
}

/*
 * Contiguous runs reduced in REDUCE_LANES independent accumulators: each lane reduces
 * its own elements in order, so the compiler may vectorize across lanes without
 * reassociating anything. STEP(acc, value) folds a value into an ACC_T accumulator,
 * MERGE(acc, other) combines two. The lanes first fold up to REDUCE_ROUNDS values each
 * into FAST_T partials with FAST_STEP, then merge them into the ACC_T lanes: for float
 * sums that is float partials of at most REDUCE_ROUNDS values (four floats per SSE
 * instruction), summed in double. Defines NAME_accumulate (a run into the lanes: a row
 * of several runs keeps its lanes across them), NAME_fold (the lanes into one) and
 * NAME_run.
 */
#define DEFINE_LANE_RUN(NAME, IN_T, ACC_T, INIT, STEP, MERGE, FAST_T, FAST_STEP)             \
    REDUCE_INLINE void NAME##_accumulate(ACC_T *acc, const IN_T *p, int64_t n) {             \
        int64_t i = 0;                                                                       \
        while (i + REDUCE_LANES <= n) {                                                      \
            FAST_T fast[REDUCE_LANES];                                                       \
            for (int l = 0; l < REDUCE_LANES; l++) {                                         \
                fast[l] = (FAST_T)(INIT);                                                    \
            }                                                                                \
            int64_t rounds = (n - i) / REDUCE_LANES;                                         \
            rounds = rounds < REDUCE_ROUNDS ? rounds : REDUCE_ROUNDS;                        \
            for (int64_t r = 0; r < rounds; r++, i += REDUCE_LANES) {                        \
                for (int l = 0; l < REDUCE_LANES; l++) {                                     \
                    FAST_STEP(fast[l], p[i + l]);                                            \
                }                                                                            \
            }                                                                                \
            for (int l = 0; l < REDUCE_LANES; l++) {                                         \
                MERGE(acc[l], (ACC_T)fast[l]);                                               \
            }                                                                                \
        }                                                                                    \
        for (; i < n; i++) {                                                                 \
            STEP(acc[i % REDUCE_LANES], p[i]);                                               \
        }                                                                                    \
    }                                                                                        \
                                                                                             \
    REDUCE_INLINE ACC_T NAME##_fold(ACC_T *acc) {                                            \
        for (int width = REDUCE_LANES / 2; width > 0; width /= 2) {                          \
            for (int l = 0; l < width; l++) {                                                \
                MERGE(acc[l], acc[l + width]);                                               \
            }                                                                                \
        }                                                                                    \
        return acc[0];                                                                       \
    }                                                                                        \
                                                                                             \
    REDUCE_INLINE ACC_T NAME##_run(const IN_T *p, int64_t n) {                               \
        ACC_T acc[REDUCE_LANES];                                                             \
        for (int l = 0; l < REDUCE_LANES; l++) {                                             \
            acc[l] = INIT;                                                                   \
        }                                                                                    \
        NAME##_accumulate(acc, p, n);                                                        \
        return NAME##_fold(acc);                                                             \
    }

/*
 * Float Max and Min over runs: reduce.h's vectorized loops, the result kept in lane 0.
 */
#define DEFINE_EXTREME_RUN(NAME, INIT, RUN, STEP)                                            \
    REDUCE_INLINE void NAME##_accumulate(float *acc, const float *p, int64_t n) {            \
        float part = RUN(p, n);                                                              \
        STEP(acc[0], part);                                                                  \
    }                                                                                        \
                                                                                             \
    REDUCE_INLINE float NAME##_fold(float *acc) {                                            \
        return acc[0];                                                                       \
    }                                                                                        \
                                                                                             \
    REDUCE_INLINE float NAME##_run(const float *p, int64_t n) {                              \
        return RUN(p, n);                                                                    \
    }

/*
 * One reduction, for one input type, over its NAME_accumulate and NAME_fold: the
 * accumulator type and initial value, MERGE(acc, other), DONE(acc, count) the output
 * value, and the FAST_T partials of the column loop (as in DEFINE_LANE_RUN). Defines
 * NAME_rows, NAME_columns and NAME_pieces (parallel loops) and NAME_run_plan.
 */
#define DEFINE_REDUCTION(NAME, IN_T, OUT_T, ACC_T, INIT, MERGE, DONE, FAST_T, FAST_STEP)     \
    REDUCE_VECTORIZED static void NAME##_rows(void *arg, int64_t begin, int64_t end) {       \
        const reduce_plan *plan = (const reduce_plan *)arg;                                  \
        const IN_T *x = (const IN_T *)plan->x;                                               \
        OUT_T *y = (OUT_T *)plan->y;                                                         \
        int64_t kept_index[GE_MAX_RANK];                                                     \
        int64_t row_offset = reduce_row_start(plan, begin, kept_index);                      \
        for (int64_t row = begin; row < end; row++) {                                        \
            const IN_T *base = x + row_offset;                                               \
            ACC_T acc[REDUCE_LANES];                                                         \
            for (int l = 0; l < REDUCE_LANES; l++) {                                         \
                acc[l] = INIT;                                                               \
            }                                                                                \
            if (plan->runs == 1) {                                                           \
                NAME##_accumulate(acc, base, plan->run_len);                                 \
            } else {                                                                         \
                int64_t index[GE_MAX_RANK] = {0}, offset = 0;                                \
                for (int64_t run = 0; run < plan->runs; run++) {                             \
                    NAME##_accumulate(acc, base + offset, plan->run_len);                    \
                    offset = reduce_next(plan->red_shape, plan->red_strides, plan->nr - 1,   \
                                         index, offset);                                     \
                }                                                                            \
            }                                                                                \
            y[row] = DONE(NAME##_fold(acc), plan->count);                                    \
            row_offset = reduce_next(plan->kept_shape, plan->kept_strides, plan->nk,         \
                                     kept_index, row_offset);                                \
        }                                                                                    \
    }                                                                                        \
                                                                                             \
    /* A strip of up to REDUCE_STRIP outputs over every reduced position: with a full        \
     * strip the partials stay in registers. */                                              \
    REDUCE_INLINE void NAME##_strip(ACC_T *acc, const IN_T *base, int64_t width,             \
                                    const reduce_plan *plan) {                               \
        int64_t index[GE_MAX_RANK] = {0}, offset = 0;                                        \
        for (int64_t position = 0; position < plan->count;) {                                \
            int64_t stop = plan->count - position;                                           \
            stop = position + (stop < REDUCE_ROUNDS ? stop : REDUCE_ROUNDS);                 \
            FAST_T fast[REDUCE_STRIP];                                                       \
            for (int i = 0; i < REDUCE_STRIP; i++) {                                         \
                fast[i] = (FAST_T)(INIT);                                                    \
            }                                                                                \
            if (width == REDUCE_STRIP) {                                                     \
                for (; position < stop; position++) {                                        \
                    const IN_T *p = base + offset;                                           \
                    for (int i = 0; i < REDUCE_STRIP; i++) {                                 \
                        FAST_STEP(fast[i], p[i]);                                            \
                    }                                                                        \
                    offset = reduce_next(plan->red_shape, plan->red_strides, plan->nr,       \
                                         index, offset);                                     \
                }                                                                            \
            } else {                                                                         \
                for (; position < stop; position++) {                                        \
                    const IN_T *p = base + offset;                                           \
                    for (int64_t i = 0; i < width; i++) {                                    \
                        FAST_STEP(fast[i], p[i]);                                            \
                    }                                                                        \
                    offset = reduce_next(plan->red_shape, plan->red_strides, plan->nr,       \
                                         index, offset);                                     \
                }                                                                            \
            }                                                                                \
            for (int64_t i = 0; i < width; i++) {                                            \
                MERGE(acc[i], (ACC_T)fast[i]);                                               \
            }                                                                                \
        }                                                                                    \
    }                                                                                        \
                                                                                             \
    REDUCE_VECTORIZED static void NAME##_columns(void *arg, int64_t begin, int64_t end) {    \
        const reduce_plan *plan = (const reduce_plan *)arg;                                  \
        const IN_T *x = (const IN_T *)plan->x;                                               \
        OUT_T *y = (OUT_T *)plan->y;                                                         \
        ACC_T acc[REDUCE_STRIP];                                                             \
        for (int64_t item = begin; item < end; item++) {                                     \
            int64_t row = item / plan->blocks, first = (item % plan->blocks) * REDUCE_BLOCK; \
            int64_t width = plan->inner - first;                                             \
            width = width < REDUCE_BLOCK ? width : REDUCE_BLOCK;                             \
            const IN_T *base = x + reduce_row_offset(plan, row) + first;                     \
            OUT_T *out = y + row * plan->inner + first;                                      \
            for (int64_t strip = 0; strip < width; strip += REDUCE_STRIP) {                  \
                int64_t strip_width = width - strip;                                         \
                strip_width = strip_width < REDUCE_STRIP ? strip_width : REDUCE_STRIP;       \
                for (int64_t i = 0; i < strip_width; i++) {                                  \
                    acc[i] = INIT;                                                           \
                }                                                                            \
                NAME##_strip(acc, base + strip, strip_width, plan);                          \
                for (int64_t i = 0; i < strip_width; i++) {                                  \
                    out[strip + i] = DONE(acc[i], plan->count);                              \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
    }                                                                                        \
                                                                                             \
    typedef struct {                                                                         \
        const reduce_plan *plan;                                                             \
        int64_t piece_len;                                                                   \
        ACC_T parts[REDUCE_PIECES];                                                          \
    } NAME##_split;                                                                          \
                                                                                             \
    REDUCE_VECTORIZED static void NAME##_pieces(void *arg, int64_t begin, int64_t end) {     \
        NAME##_split *job = (NAME##_split *)arg;                                             \
        const IN_T *x = (const IN_T *)job->plan->x;                                          \
        for (int64_t piece = begin; piece < end; piece++) {                                  \
            int64_t start = piece * job->piece_len, n = job->plan->run_len - start;          \
            n = n < job->piece_len ? n : job->piece_len;                                     \
            job->parts[piece] = n > 0 ? NAME##_run(x + start, n) : (ACC_T)(INIT);            \
        }                                                                                    \
    }                                                                                        \
                                                                                             \
    static void NAME##_run_plan(ge_context *ctx, const reduce_plan *plan) {                  \
        if (plan->row_mode && plan->rows == 1 && plan->runs == 1                             \
            && plan->run_len >= REDUCE_SPLIT_MIN) {                                          \
            /* One long run: partial results merged in piece order, so the answer does not   \
             * depend on how many threads ran. */                                            \
            NAME##_split job;                                                                \
            job.plan = plan;                                                                 \
            job.piece_len = (plan->run_len + REDUCE_PIECES - 1) / REDUCE_PIECES;             \
            ctx->parallel_for(ctx, REDUCE_PIECES, 1, NAME##_pieces, &job);                   \
            ACC_T acc = job.parts[0];                                                        \
            for (int p = 1; p < REDUCE_PIECES; p++) {                                        \
                MERGE(acc, job.parts[p]);                                                    \
            }                                                                                \
            ((OUT_T *)plan->y)[0] = DONE(acc, plan->count);                                  \
        } else if (plan->row_mode) {                                                         \
            ctx->parallel_for(ctx, plan->rows, reduce_grain(plan->count), NAME##_rows,       \
                              (void *)plan);                                                 \
        } else {                                                                             \
            int64_t width = plan->inner < REDUCE_BLOCK ? plan->inner : REDUCE_BLOCK;         \
            ctx->parallel_for(ctx, plan->rows * plan->blocks,                                \
                              reduce_grain(plan->count * width), NAME##_columns,             \
                              (void *)plan);                                                 \
        }                                                                                    \
    }

/* The kernel entry point of one reduction. */
#define REDUCE_KERNEL(SYMBOL, NAME, DTYPE)                                                   \
    GE_KERNEL(SYMBOL) {                                                                      \
        reduce_plan plan;                                                                    \
        if (reduce_open(ctx, #SYMBOL, inputs, n_inputs, outputs, n_outputs, attrs,           \
                        attrs_size, DTYPE, &plan)) {                                         \
            return -1;                                                                       \
        }                                                                                    \
        NAME##_run_plan(ctx, &plan);                                                         \
        return 0;                                                                            \
    }

/* -- accumulation rules ------------------------------------------------------------------ */

#define ADD_STEP(a, v) ((a) += (v))
#define ADD_MERGE(a, b) ((a) += (b))
#define DOUBLE_STEP(a, v) ((a) += (double)(v))
#define ABS_STEP(a, v) ((a) += fabs((double)(v)))
#define FLOAT_ABS_STEP(a, v) ((a) += fabsf(v))
#define SQUARE_STEP(a, v) ((a) += (double)(v) * (double)(v))
#define MUL_STEP(a, v) ((a) *= (v))
#define MUL_MERGE(a, b) ((a) *= (b))
#define DOUBLE_MUL_STEP(a, v) ((a) *= (double)(v))
/* A NaN value replaces the accumulator and then stays (every comparison with it fails). */
#define MAX_STEP(a, v) ((a) = ((v) > (a) || (v) != (v)) ? (v) : (a))
#define MIN_STEP(a, v) ((a) = ((v) < (a) || (v) != (v)) ? (v) : (a))
#define INT_MAX_STEP(a, v) ((a) = (v) > (a) ? (v) : (a))
#define INT_MIN_STEP(a, v) ((a) = (v) < (a) ? (v) : (a))

#define TO_F32(a, count) ((float)(a))
#define MEAN_F32(a, count) ((float)((a) / (double)(count)))
#define SQRT_F32(a, count) ((float)sqrt(a))
#define AS_IS(a, count) (a)
/* Unsigned to signed keeps the bits (GCC and Clang define the conversion modulo 2^n). */
#define TO_I32(a, count) ((int32_t)(a))
#define TO_I64(a, count) ((int64_t)(a))

/* Float sums, means and L1 norms fold REDUCE_ROUNDS values at a time in float. Squares
 * stay in double (a float square overflows from 1.8e19), as do products. */
DEFINE_LANE_RUN(sum_f32, float, double, 0.0, DOUBLE_STEP, ADD_MERGE, float, ADD_STEP)
DEFINE_LANE_RUN(sum_i32, int32_t, uint32_t, 0u, ADD_STEP, ADD_MERGE, uint32_t, ADD_STEP)
DEFINE_LANE_RUN(sum_i64, int64_t, uint64_t, 0u, ADD_STEP, ADD_MERGE, uint64_t, ADD_STEP)
DEFINE_LANE_RUN(mean_f32, float, double, 0.0, DOUBLE_STEP, ADD_MERGE, float, ADD_STEP)
DEFINE_EXTREME_RUN(max_f32, -INFINITY, reduce_max_run_f32, MAX_STEP)
DEFINE_LANE_RUN(max_i32, int32_t, int32_t, INT32_MIN, INT_MAX_STEP, INT_MAX_STEP, int32_t,
                INT_MAX_STEP)
DEFINE_LANE_RUN(max_i64, int64_t, int64_t, INT64_MIN, INT_MAX_STEP, INT_MAX_STEP, int64_t,
                INT_MAX_STEP)
DEFINE_EXTREME_RUN(min_f32, INFINITY, reduce_min_run_f32, MIN_STEP)
DEFINE_LANE_RUN(min_i32, int32_t, int32_t, INT32_MAX, INT_MIN_STEP, INT_MIN_STEP, int32_t,
                INT_MIN_STEP)
DEFINE_LANE_RUN(min_i64, int64_t, int64_t, INT64_MAX, INT_MIN_STEP, INT_MIN_STEP, int64_t,
                INT_MIN_STEP)
DEFINE_LANE_RUN(prod_f32, float, double, 1.0, DOUBLE_MUL_STEP, MUL_MERGE, double,
                DOUBLE_MUL_STEP)
DEFINE_LANE_RUN(prod_i32, int32_t, uint32_t, 1u, MUL_STEP, MUL_MERGE, uint32_t, MUL_STEP)
DEFINE_LANE_RUN(prod_i64, int64_t, uint64_t, 1u, MUL_STEP, MUL_MERGE, uint64_t, MUL_STEP)
DEFINE_LANE_RUN(l1_f32, float, double, 0.0, ABS_STEP, ADD_MERGE, float, FLOAT_ABS_STEP)
DEFINE_LANE_RUN(l2_f32, float, double, 0.0, SQUARE_STEP, ADD_MERGE, double, SQUARE_STEP)
DEFINE_LANE_RUN(sum_square_f32, float, double, 0.0, SQUARE_STEP, ADD_MERGE, double,
                SQUARE_STEP)

DEFINE_REDUCTION(sum_f32, float, float, double, 0.0, ADD_MERGE, TO_F32, float, ADD_STEP)
DEFINE_REDUCTION(sum_i32, int32_t, int32_t, uint32_t, 0u, ADD_MERGE, TO_I32, uint32_t, ADD_STEP)
DEFINE_REDUCTION(sum_i64, int64_t, int64_t, uint64_t, 0u, ADD_MERGE, TO_I64, uint64_t, ADD_STEP)
DEFINE_REDUCTION(mean_f32, float, float, double, 0.0, ADD_MERGE, MEAN_F32, float, ADD_STEP)
DEFINE_REDUCTION(max_f32, float, float, float, -INFINITY, MAX_STEP, AS_IS, float, MAX_STEP)
DEFINE_REDUCTION(max_i32, int32_t, int32_t, int32_t, INT32_MIN, INT_MAX_STEP, AS_IS, int32_t,
                 INT_MAX_STEP)
DEFINE_REDUCTION(max_i64, int64_t, int64_t, int64_t, INT64_MIN, INT_MAX_STEP, AS_IS, int64_t,
                 INT_MAX_STEP)
DEFINE_REDUCTION(min_f32, float, float, float, INFINITY, MIN_STEP, AS_IS, float, MIN_STEP)
DEFINE_REDUCTION(min_i32, int32_t, int32_t, int32_t, INT32_MAX, INT_MIN_STEP, AS_IS, int32_t,
                 INT_MIN_STEP)
DEFINE_REDUCTION(min_i64, int64_t, int64_t, int64_t, INT64_MAX, INT_MIN_STEP, AS_IS, int64_t,
                 INT_MIN_STEP)
DEFINE_REDUCTION(prod_f32, float, float, double, 1.0, MUL_MERGE, TO_F32, double,
                 DOUBLE_MUL_STEP)
DEFINE_REDUCTION(prod_i32, int32_t, int32_t, uint32_t, 1u, MUL_MERGE, TO_I32, uint32_t, MUL_STEP)
DEFINE_REDUCTION(prod_i64, int64_t, int64_t, uint64_t, 1u, MUL_MERGE, TO_I64, uint64_t, MUL_STEP)
DEFINE_REDUCTION(l1_f32, float, float, double, 0.0, ADD_MERGE, TO_F32, float, FLOAT_ABS_STEP)
DEFINE_REDUCTION(l2_f32, float, float, double, 0.0, ADD_MERGE, SQRT_F32, double, SQUARE_STEP)
DEFINE_REDUCTION(sum_square_f32, float, float, double, 0.0, ADD_MERGE, TO_F32, double,
                 SQUARE_STEP)

REDUCE_KERNEL(ge_reduce_sum_f32, sum_f32, GE_FLOAT32)
REDUCE_KERNEL(ge_reduce_sum_i32, sum_i32, GE_INT32)
REDUCE_KERNEL(ge_reduce_sum_i64, sum_i64, GE_INT64)
REDUCE_KERNEL(ge_reduce_mean_f32, mean_f32, GE_FLOAT32)
REDUCE_KERNEL(ge_reduce_max_f32, max_f32, GE_FLOAT32)
REDUCE_KERNEL(ge_reduce_max_i32, max_i32, GE_INT32)
REDUCE_KERNEL(ge_reduce_max_i64, max_i64, GE_INT64)
REDUCE_KERNEL(ge_reduce_min_f32, min_f32, GE_FLOAT32)
REDUCE_KERNEL(ge_reduce_min_i32, min_i32, GE_INT32)
REDUCE_KERNEL(ge_reduce_min_i64, min_i64, GE_INT64)
REDUCE_KERNEL(ge_reduce_prod_f32, prod_f32, GE_FLOAT32)
REDUCE_KERNEL(ge_reduce_prod_i32, prod_i32, GE_INT32)
REDUCE_KERNEL(ge_reduce_prod_i64, prod_i64, GE_INT64)
REDUCE_KERNEL(ge_reduce_l1_f32, l1_f32, GE_FLOAT32)
REDUCE_KERNEL(ge_reduce_l2_f32, l2_f32, GE_FLOAT32)
REDUCE_KERNEL(ge_reduce_sum_square_f32, sum_square_f32, GE_FLOAT32)

/* -- ReduceLogSumExp: two passes, the maximum then the shifted sum of exponentials --------- */

/* log(sum(exp(x - shift))) + shift, shifting by the maximum when it is finite (an infinite
 * maximum needs no shift, and inf - inf would be NaN); the reference's formula. */
REDUCE_INLINE float lse_finish(float peak, double sum) {
    double shift = isfinite(peak) ? (double)peak : 0.0;
    return (float)(log(sum) + shift);
}

REDUCE_INLINE double lse_shift(float peak) {
    return isfinite(peak) ? (double)peak : 0.0;
}

REDUCE_VECTORIZED static void lse_rows(void *arg, int64_t begin, int64_t end) {
    const reduce_plan *plan = (const reduce_plan *)arg;
    const float *x = (const float *)plan->x;
    float *y = (float *)plan->y;
    for (int64_t row = begin; row < end; row++) {
        const float *base = x + reduce_row_offset(plan, row);
        int64_t index[GE_MAX_RANK] = {0}, offset = 0;
        float peak = -INFINITY;
        for (int64_t run = 0; run < plan->runs; run++) {
            float part = max_f32_run(base + offset, plan->run_len);
            MAX_STEP(peak, part);
            offset = reduce_next(plan->red_shape, plan->red_strides, plan->nr - 1, index, offset);
        }
        double shift = lse_shift(peak), sum = 0.0;
        offset = 0;
        for (int64_t run = 0; run < plan->runs; run++) {
            const float *p = base + offset;
            for (int64_t i = 0; i < plan->run_len; i++) {
                sum += exp((double)p[i] - shift);
            }
            offset = reduce_next(plan->red_shape, plan->red_strides, plan->nr - 1, index, offset);
        }
        y[row] = lse_finish(peak, sum);
    }
}

REDUCE_VECTORIZED static void lse_columns(void *arg, int64_t begin, int64_t end) {
    const reduce_plan *plan = (const reduce_plan *)arg;
    const float *x = (const float *)plan->x;
    float *y = (float *)plan->y;
    float peak[REDUCE_BLOCK];
    double shift[REDUCE_BLOCK], sum[REDUCE_BLOCK];
    for (int64_t item = begin; item < end; item++) {
        int64_t row = item / plan->blocks, first = (item % plan->blocks) * REDUCE_BLOCK;
        int64_t width = plan->inner - first;
        width = width < REDUCE_BLOCK ? width : REDUCE_BLOCK;
        const float *base = x + reduce_row_offset(plan, row) + first;
        for (int64_t i = 0; i < width; i++) {
            peak[i] = -INFINITY;
            sum[i] = 0.0;
        }
        int64_t index[GE_MAX_RANK] = {0}, offset = 0;
        for (int64_t position = 0; position < plan->count; position++) {
            const float *p = base + offset;
            for (int64_t i = 0; i < width; i++) {
                MAX_STEP(peak[i], p[i]);
            }
            offset = reduce_next(plan->red_shape, plan->red_strides, plan->nr, index, offset);
        }
        for (int64_t i = 0; i < width; i++) {
            shift[i] = lse_shift(peak[i]);
        }
        offset = 0;
        for (int64_t position = 0; position < plan->count; position++) {
            const float *p = base + offset;
            for (int64_t i = 0; i < width; i++) {
                sum[i] += exp((double)p[i] - shift[i]);
            }
            offset = reduce_next(plan->red_shape, plan->red_strides, plan->nr, index, offset);
        }
        float *out = y + row * plan->inner + first;
        for (int64_t i = 0; i < width; i++) {
            out[i] = lse_finish(peak[i], sum[i]);
        }
    }
}

GE_KERNEL(ge_reduce_log_sum_exp_f32) {
    reduce_plan plan;
    if (reduce_open(ctx, "ge_reduce_log_sum_exp_f32", inputs, n_inputs, outputs, n_outputs,
                    attrs, attrs_size, GE_FLOAT32, &plan)) {
        return -1;
    }
    if (plan.row_mode) {
        /* exp costs far more than a load: a smaller grain. */
        ctx->parallel_for(ctx, plan.rows, reduce_grain(plan.count * 8), lse_rows, &plan);
    } else {
        int64_t width = plan.inner < REDUCE_BLOCK ? plan.inner : REDUCE_BLOCK;
        ctx->parallel_for(ctx, plan.rows * plan.blocks, reduce_grain(plan.count * width * 8),
                          lse_columns, &plan);
    }
    return 0;
}
