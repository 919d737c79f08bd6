/*
 * CumSum and CumProd (float32, float64, int32, int64): running sums and products along
 * one axis of [outer, n, inner], both from one template (SCAN with its identity and
 * combining step).
 *
 * Float scans run in double and are rounded at each output, as the references do (they
 * accumulate in float64, one element after another); integers wrap around through
 * unsigned arithmetic. `exclusive` writes the running value before combining the
 * element, so inf never meets -inf in a subtraction (nor 0 an inf in a division);
 * `reverse` walks the axis backward. With inner > 1 a block of REDUCE-style stack
 * accumulators walks whole contiguous rows, a loop that vectorizes. Each element is
 * read before its output is written. An axis given as a graph input (runtime_axis) is read
 * at run time and [outer, n, inner] taken from x's shape.
 */
#include <stdint.h>

#include "reduce.h"

#define SCAN_BLOCK 256
#define SCAN_GRAIN_ELEMENTS 32768

typedef struct {
    int64_t outer, n, inner, exclusive, reverse, blocks;
    const void *x;
    void *y;
} scan_plan;

static int scan_open(ge_context *ctx, const char *name, const ge_tensor *inputs,
                     int32_t n_inputs, const ge_tensor *outputs, int32_t n_outputs,
                     const void *attrs, size_t attrs_size, int32_t dtype, scan_plan *plan) {
    if (n_inputs != 2 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected 2 inputs and 1 output, got %d and %d", name,
                              (int)n_inputs, (int)n_outputs);
    }
    ge_cumsum_blob r;
    if (!ge_cumsum_blob_read(attrs, attrs_size, &r) || r.outer < 0 || r.n < 0 || r.inner < 0
        || r.exclusive < 0 || r.exclusive > 1 || r.reverse < 0 || r.reverse > 1
        || r.runtime_axis < 0 || r.runtime_axis > 1) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (%zu bytes)", name, attrs_size);
    }
    plan->outer = r.outer;
    plan->n = r.n;
    plan->inner = r.inner;
    if (r.runtime_axis) {
        /* The axis is a graph input: [outer, n, inner] comes from x's shape. */
        const ge_tensor *axis = &inputs[1], *x = &inputs[0];
        if (axis->data == NULL || axis->numel != 1
            || (axis->dtype != GE_INT32 && axis->dtype != GE_INT64)) {
            return ctx->set_error(ctx, "%s: input 'axis' must hold one int32 or int64 value",
                                  name);
        }
        int64_t a = axis->dtype == GE_INT32 ? ((const int32_t *)axis->data)[0]
                                            : ((const int64_t *)axis->data)[0];
        if (a < -(int64_t)x->ndim || a >= x->ndim) {
            return ctx->set_error(ctx, "%s: input 'axis' value %lld is out of range for 'x' of "
                                  "rank %d", name, (long long)a, (int)x->ndim);
        }
        a = a < 0 ? a + x->ndim : a;
        plan->outer = plan->n = plan->inner = 1;
        for (int64_t d = 0; d < x->ndim; d++) {
            int64_t *part = d < a ? &plan->outer : (d == a ? &plan->n : &plan->inner);
            *part *= x->shape[d];
        }
    }
    plan->exclusive = r.exclusive;
    plan->reverse = r.reverse;
    plan->blocks = (plan->inner + SCAN_BLOCK - 1) / SCAN_BLOCK;
    const ge_tensor *x = &inputs[0], *y = &outputs[0];
    int64_t numel = plan->outer * plan->n * plan->inner;
    if (x->data == NULL || x->dtype != dtype || y->dtype != dtype || x->numel != numel
        || y->numel != numel) {
        return ctx->set_error(ctx, "%s: input 'x' (dtype %d, %lld elements) and output 'y' "
                              "(dtype %d, %lld elements) must be dtype %d with %lld elements",
                              name, (int)x->dtype, (long long)x->numel, (int)y->dtype,
                              (long long)y->numel, (int)dtype, (long long)numel);
    }
    plan->x = x->data;
    plan->y = y->data;
    return 0;
}

#define DEFINE_SCAN(NAME, T, ACC_T, DTYPE, IDENTITY, OP)                                     \
    REDUCE_VECTORIZED static void NAME##_rows(void *arg, int64_t begin, int64_t end) {       \
        const scan_plan *plan = (const scan_plan *)arg;                                      \
        int64_t n = plan->n;                                                                 \
        int64_t step = plan->reverse ? -1 : 1;                                               \
        for (int64_t o = begin; o < end; o++) {                                              \
            const T *x = (const T *)plan->x + o * n + (plan->reverse ? n - 1 : 0);           \
            T *y = (T *)plan->y + o * n + (plan->reverse ? n - 1 : 0);                       \
            ACC_T acc = IDENTITY;                                                            \
            if (plan->exclusive) {                                                           \
                for (int64_t i = 0; i < n; i++) {                                            \
                    ACC_T value = (ACC_T)x[i * step];                                        \
                    y[i * step] = (T)acc;                                                    \
                    acc = acc OP value;                                                      \
                }                                                                            \
            } else {                                                                         \
                for (int64_t i = 0; i < n; i++) {                                            \
                    acc = acc OP (ACC_T)x[i * step];                                         \
                    y[i * step] = (T)acc;                                                    \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
    }                                                                                        \
                                                                                             \
    REDUCE_VECTORIZED static void NAME##_columns(void *arg, int64_t begin, int64_t end) {    \
        const scan_plan *plan = (const scan_plan *)arg;                                      \
        int64_t n = plan->n, inner = plan->inner;                                            \
        ACC_T acc[SCAN_BLOCK];                                                               \
        for (int64_t item = begin; item < end; item++) {                                     \
            int64_t o = item / plan->blocks, first = (item % plan->blocks) * SCAN_BLOCK;     \
            int64_t width = inner - first;                                                   \
            width = width < SCAN_BLOCK ? width : SCAN_BLOCK;                                 \
            for (int64_t j = 0; j < width; j++) {                                            \
                acc[j] = IDENTITY;                                                           \
            }                                                                                \
            for (int64_t s = 0; s < n; s++) {                                                \
                int64_t i = plan->reverse ? n - 1 - s : s;                                   \
                const T *x = (const T *)plan->x + (o * n + i) * inner + first;               \
                T *y = (T *)plan->y + (o * n + i) * inner + first;                           \
                if (plan->exclusive) {                                                       \
                    for (int64_t j = 0; j < width; j++) {                                    \
                        ACC_T value = (ACC_T)x[j];                                           \
                        y[j] = (T)acc[j];                                                    \
                        acc[j] = acc[j] OP value;                                            \
                    }                                                                        \
                } else {                                                                     \
                    for (int64_t j = 0; j < width; j++) {                                    \
                        acc[j] = acc[j] OP (ACC_T)x[j];                                      \
                        y[j] = (T)acc[j];                                                    \
                    }                                                                        \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
    }                                                                                        \
                                                                                             \
    GE_KERNEL(ge_##NAME) {                                                                   \
        scan_plan plan;                                                                      \
        if (scan_open(ctx, "ge_" #NAME, inputs, n_inputs, outputs, n_outputs, attrs,         \
                      attrs_size, DTYPE, &plan)) {                                           \
            return -1;                                                                       \
        }                                                                                    \
        int64_t grain = SCAN_GRAIN_ELEMENTS / (plan.n > 0 ? plan.n : 1);                     \
        if (plan.inner == 1) {                                                               \
            ctx->parallel_for(ctx, plan.outer, grain > 0 ? grain : 1, NAME##_rows, &plan);   \
        } else {                                                                             \
            int64_t width = plan.inner < SCAN_BLOCK ? plan.inner : SCAN_BLOCK;               \
            grain /= width;                                                                  \
            ctx->parallel_for(ctx, plan.outer * plan.blocks, grain > 0 ? grain : 1,          \
                              NAME##_columns, &plan);                                        \
        }                                                                                    \
        return 0;                                                                            \
    }

/* Unsigned accumulators: the wraparound the reference gives, without signed overflow. */
DEFINE_SCAN(cumsum_f32, float, double, GE_FLOAT32, 0, +)
DEFINE_SCAN(cumsum_f64, double, double, GE_FLOAT64, 0, +)
DEFINE_SCAN(cumsum_i32, int32_t, uint32_t, GE_INT32, 0, +)
DEFINE_SCAN(cumsum_i64, int64_t, uint64_t, GE_INT64, 0, +)
DEFINE_SCAN(cumprod_f32, float, double, GE_FLOAT32, 1, *)
DEFINE_SCAN(cumprod_f64, double, double, GE_FLOAT64, 1, *)
DEFINE_SCAN(cumprod_i32, int32_t, uint32_t, GE_INT32, 1, *)
DEFINE_SCAN(cumprod_i64, int64_t, uint64_t, GE_INT64, 1, *)
