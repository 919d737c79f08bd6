/*
 * Index-finding kernels along one axis: ArgMax, ArgMin and TopK (float32, int32, int64).
 *
 * The input is [outer, n, inner] around the axis (reduce.h has the blobs). The order is
 * the reference's: NaN counts as greater than every number and equal to another NaN,
 * ties go to the lower index (ArgMax/ArgMin: the higher one with select_last_index).
 * ArgMax and ArgMin return the first NaN, as numpy.argmax and numpy.argmin do.
 *
 * TopK keeps each slice's k best elements in a binary heap whose root is the worst of
 * them, so that most elements cost one comparison; the heap lives in the slice of the
 * outputs it becomes, and a final heap sort leaves it best first. No scratch, no
 * allocation.
 */
#include <math.h>
#include <stdint.h>

#include "reduce.h"

/* Outputs an inner > 1 ArgMax/ArgMin block tracks at once (on the stack). */
#define INDEX_BLOCK 256
/* Input elements a parallel chunk should read at least. */
#define INDEX_GRAIN_ELEMENTS 32768

static inline int64_t index_grain(int64_t work_per_item) {
    int64_t grain = INDEX_GRAIN_ELEMENTS / (work_per_item > 0 ? work_per_item : 1);
    return grain > 0 ? grain : 1;
}

#define F32_IS_NAN(v) ((v) != (v))
#define INT_IS_NAN(v) 0

/* -- ArgMax, ArgMin ---------------------------------------------------------------------- */

typedef struct {
    int64_t outer, n, inner, select_last, blocks;
    const void *x;
    int64_t *y;
} arg_plan;

static int arg_open(ge_context *ctx, const char *name, const ge_tensor *inputs,
                    int32_t n_inputs, const ge_tensor *outputs, int32_t n_outputs,
                    const void *attrs, size_t attrs_size, int32_t dtype, arg_plan *plan) {
    if (n_inputs != 1 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected 1 input and 1 output, got %d and %d", name,
                              (int)n_inputs, (int)n_outputs);
    }
    ge_arg_blob r;
    if (!ge_arg_blob_read(attrs, attrs_size, &r) || r.outer < 0 || r.n < 1 || r.inner < 0
        || r.select_last_index < 0 || r.select_last_index > 1) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (%zu bytes)", name, attrs_size);
    }
    plan->outer = r.outer;
    plan->n = r.n;
    plan->inner = r.inner;
    plan->select_last = r.select_last_index;
    plan->blocks = (plan->inner + INDEX_BLOCK - 1) / INDEX_BLOCK;
    const ge_tensor *x = &inputs[0], *y = &outputs[0];
    if (x->data == NULL || x->dtype != dtype || y->dtype != GE_INT64
        || x->numel != plan->outer * plan->n * plan->inner
        || y->numel != plan->outer * plan->inner) {
        return ctx->set_error(ctx, "%s: input 'data' (dtype %d, %lld elements) and output "
                              "(dtype %d, %lld elements) do not match the compiled layout: "
                              "dtype %d, %lld elements -> int64, %lld elements", name,
                              (int)x->dtype, (long long)x->numel, (int)y->dtype,
                              (long long)y->numel, (int)dtype,
                              (long long)(plan->outer * plan->n * plan->inner),
                              (long long)(plan->outer * plan->inner));
    }
    plan->x = x->data;
    plan->y = (int64_t *)y->data;
    return 0;
}

/*
 * One ArgMax or ArgMin for one type. BETTER(v, best): v strictly beats best; EXTREME(p, n)
 * the best value of a contiguous run (NaN if it holds one). With select_last_index an
 * equal value (or a later NaN) takes over; without it, the first NaN wins for good.
 */
#define DEFINE_ARG(NAME, T, IS_NAN, BETTER, EXTREME)                                         \
    REDUCE_INLINE int NAME##_takes(T v, T best, int64_t select_last) {                       \
        if (select_last) {                                                                   \
            return IS_NAN(v) || (!IS_NAN(best) && !BETTER(best, v));                         \
        }                                                                                    \
        return !IS_NAN(best) && (BETTER(v, best) || IS_NAN(v));                              \
    }                                                                                        \
                                                                                             \
    REDUCE_VECTORIZED static void NAME##_slices(void *arg, int64_t begin, int64_t end) {     \
        const arg_plan *plan = (const arg_plan *)arg;                                        \
        const T *x = (const T *)plan->x;                                                     \
        T best[INDEX_BLOCK];                                                                 \
        int64_t at[INDEX_BLOCK];                                                             \
        for (int64_t item = begin; item < end; item++) {                                     \
            int64_t o = item / plan->blocks, first = (item % plan->blocks) * INDEX_BLOCK;    \
            int64_t width = plan->inner - first;                                             \
            width = width < INDEX_BLOCK ? width : INDEX_BLOCK;                               \
            const T *base = x + o * plan->n * plan->inner + first;                           \
            for (int64_t j = 0; j < width; j++) {                                            \
                best[j] = base[j];                                                           \
                at[j] = 0;                                                                   \
            }                                                                                \
            for (int64_t i = 1; i < plan->n; i++) {                                          \
                const T *p = base + i * plan->inner;                                         \
                for (int64_t j = 0; j < width; j++) {                                        \
                    if (NAME##_takes(p[j], best[j], plan->select_last)) {                    \
                        best[j] = p[j];                                                      \
                        at[j] = i;                                                           \
                    }                                                                        \
                }                                                                            \
            }                                                                                \
            int64_t *out = plan->y + o * plan->inner + first;                                \
            for (int64_t j = 0; j < width; j++) {                                            \
                out[j] = at[j];                                                              \
            }                                                                                \
        }                                                                                    \
    }                                                                                        \
                                                                                             \
    /* Contiguous rows in two passes that run at memory speed: the extreme value (NaN if     \
     * the row holds one), then the first (or last) index holding it. */                     \
    REDUCE_VECTORIZED static void NAME##_rows(void *arg, int64_t begin, int64_t end) {       \
        const arg_plan *plan = (const arg_plan *)arg;                                        \
        int64_t n = plan->n;                                                                 \
        for (int64_t o = begin; o < end; o++) {                                              \
            const T *p = (const T *)plan->x + o * n;                                         \
            T best = EXTREME(p, n);                                                          \
            int64_t at;                                                                      \
            if (plan->select_last) {                                                         \
                for (at = n - 1; at > 0; at--) {                                             \
                    if (IS_NAN(best) ? IS_NAN(p[at]) : p[at] == best) {                      \
                        break;                                                               \
                    }                                                                        \
                }                                                                            \
            } else {                                                                         \
                for (at = 0; at < n - 1; at++) {                                             \
                    if (IS_NAN(best) ? IS_NAN(p[at]) : p[at] == best) {                      \
                        break;                                                               \
                    }                                                                        \
                }                                                                            \
            }                                                                                \
            plan->y[o] = at;                                                                 \
        }                                                                                    \
    }                                                                                        \
                                                                                             \
    static int NAME##_kernel(ge_context *ctx, const char *name, const ge_tensor *inputs,     \
                             int32_t n_inputs, const ge_tensor *outputs, int32_t n_outputs,  \
                             const void *attrs, size_t attrs_size, int32_t dtype) {          \
        arg_plan plan;                                                                       \
        if (arg_open(ctx, name, inputs, n_inputs, outputs, n_outputs, attrs, attrs_size,     \
                     dtype, &plan)) {                                                        \
            return -1;                                                                       \
        }                                                                                    \
        if (plan.inner == 1) {                                                               \
            ctx->parallel_for(ctx, plan.outer, index_grain(plan.n), NAME##_rows, &plan);     \
        } else {                                                                             \
            int64_t width = plan.inner < INDEX_BLOCK ? plan.inner : INDEX_BLOCK;             \
            ctx->parallel_for(ctx, plan.outer * plan.blocks, index_grain(plan.n * width),    \
                              NAME##_slices, &plan);                                         \
        }                                                                                    \
        return 0;                                                                            \
    }

#define GREATER(a, b) ((a) > (b))
#define LESS(a, b) ((a) < (b))

/* The extreme of a contiguous integer run (n >= 1): loops the compiler vectorizes. */
#define DEFINE_INT_EXTREME(NAME, T, BETTER)                                                  \
    REDUCE_INLINE T NAME(const T *p, int64_t n) {                                            \
        T best = p[0];                                                                       \
        for (int64_t i = 1; i < n; i++) {                                                    \
            best = BETTER(p[i], best) ? p[i] : best;                                         \
        }                                                                                    \
        return best;                                                                         \
    }

DEFINE_INT_EXTREME(max_run_i32, int32_t, GREATER)
DEFINE_INT_EXTREME(max_run_i64, int64_t, GREATER)
DEFINE_INT_EXTREME(min_run_i32, int32_t, LESS)
DEFINE_INT_EXTREME(min_run_i64, int64_t, LESS)

DEFINE_ARG(argmax_f32, float, F32_IS_NAN, GREATER, reduce_max_run_f32)
DEFINE_ARG(argmax_i32, int32_t, INT_IS_NAN, GREATER, max_run_i32)
DEFINE_ARG(argmax_i64, int64_t, INT_IS_NAN, GREATER, max_run_i64)
DEFINE_ARG(argmin_f32, float, F32_IS_NAN, LESS, reduce_min_run_f32)
DEFINE_ARG(argmin_i32, int32_t, INT_IS_NAN, LESS, min_run_i32)
DEFINE_ARG(argmin_i64, int64_t, INT_IS_NAN, LESS, min_run_i64)

#define ARG_KERNEL(NAME, DTYPE)                                                              \
    GE_KERNEL(ge_##NAME) {                                                                   \
        return NAME##_kernel(ctx, "ge_" #NAME, inputs, n_inputs, outputs, n_outputs, attrs,  \
                             attrs_size, DTYPE);                                             \
    }

ARG_KERNEL(argmax_f32, GE_FLOAT32)
ARG_KERNEL(argmax_i32, GE_INT32)
ARG_KERNEL(argmax_i64, GE_INT64)
ARG_KERNEL(argmin_f32, GE_FLOAT32)
ARG_KERNEL(argmin_i32, GE_INT32)
ARG_KERNEL(argmin_i64, GE_INT64)

/* -- TopK -------------------------------------------------------------------------------- */

typedef struct {
    int64_t outer, n, inner, k, largest;
    const void *x;
    void *values;
    int64_t *indices;
} topk_plan;

static int topk_open(ge_context *ctx, const char *name, const ge_tensor *inputs,
                     int32_t n_inputs, const ge_tensor *outputs, int32_t n_outputs,
                     const void *attrs, size_t attrs_size, int32_t dtype, topk_plan *plan) {
    if (n_inputs != 2 || n_outputs != 2) {
        return ctx->set_error(ctx, "%s: expected 2 inputs and 2 outputs, got %d and %d", name,
                              (int)n_inputs, (int)n_outputs);
    }
    ge_topk_blob r;
    if (!ge_topk_blob_read(attrs, attrs_size, &r) || r.outer < 0 || r.n < 0 || r.inner < 0
        || r.k < 0 || r.k > r.n || r.largest < 0 || r.largest > 1) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (%zu bytes)", name, attrs_size);
    }
    plan->outer = r.outer;
    plan->n = r.n;
    plan->inner = r.inner;
    plan->k = r.k;
    plan->largest = r.largest;
    const ge_tensor *x = &inputs[0], *values = &outputs[0], *indices = &outputs[1];
    int64_t out_numel = plan->outer * plan->k * plan->inner;
    if (x->data == NULL || x->dtype != dtype || x->numel != plan->outer * plan->n * plan->inner
        || values->dtype != dtype || values->numel != out_numel
        || indices->dtype != GE_INT64 || indices->numel != out_numel) {
        return ctx->set_error(ctx, "%s: input 'X' (%lld elements) and outputs 'Values' (%lld) "
                              "and 'Indices' (%lld) do not match the compiled layout: %lld, "
                              "%lld and %lld elements, dtypes %d, %d and int64", name,
                              (long long)x->numel, (long long)values->numel,
                              (long long)indices->numel,
                              (long long)(plan->outer * plan->n * plan->inner),
                              (long long)out_numel, (long long)out_numel, (int)dtype,
                              (int)dtype);
    }
    plan->x = x->data;
    plan->values = values->data;
    plan->indices = (int64_t *)indices->data;
    return 0;
}

/*
 * TopK for one type. NAME_before(a, ia, b, ib, largest): element (a at index ia) comes
 * before (b at ib) in the output order. The heap of one slice is the strided slice of the
 * outputs, its root the worst element kept.
 */
#define DEFINE_TOPK(NAME, T, IS_NAN, ALL_WORSE)                                              \
    REDUCE_INLINE int NAME##_before(T a, int64_t ia, T b, int64_t ib, int64_t largest) {     \
        int a_nan = IS_NAN(a), b_nan = IS_NAN(b);                                            \
        if (a_nan || b_nan) {                                                                \
            if (a_nan && b_nan) {                                                            \
                return ia < ib;                                                              \
            }                                                                                \
            return largest ? a_nan : b_nan;                                                  \
        }                                                                                    \
        if (a != b) {                                                                        \
            return largest ? a > b : a < b;                                                  \
        }                                                                                    \
        return ia < ib;                                                                      \
    }                                                                                        \
                                                                                             \
    /* Restores the heap below `at` (a root worse than all its descendants). */              \
    REDUCE_INLINE void NAME##_sift_down(T *v, int64_t *ix, int64_t stride, int64_t size,     \
                                        int64_t at, int64_t largest) {                       \
        T value = v[at * stride];                                                            \
        int64_t index = ix[at * stride];                                                     \
        for (;;) {                                                                           \
            int64_t child = 2 * at + 1;                                                      \
            if (child >= size) {                                                             \
                break;                                                                       \
            }                                                                                \
            /* The worse child moves up. */                                                  \
            if (child + 1 < size                                                             \
                && NAME##_before(v[child * stride], ix[child * stride],                      \
                                 v[(child + 1) * stride], ix[(child + 1) * stride],          \
                                 largest)) {                                                 \
                child++;                                                                     \
            }                                                                                \
            if (!NAME##_before(value, index, v[child * stride], ix[child * stride],          \
                               largest)) {                                                   \
                break;                                                                       \
            }                                                                                \
            v[at * stride] = v[child * stride];                                              \
            ix[at * stride] = ix[child * stride];                                            \
            at = child;                                                                      \
        }                                                                                    \
        v[at * stride] = value;                                                              \
        ix[at * stride] = index;                                                             \
    }                                                                                        \
                                                                                             \
    REDUCE_VECTORIZED static void NAME##_slices(void *arg, int64_t begin, int64_t end) {     \
        const topk_plan *plan = (const topk_plan *)arg;                                      \
        int64_t n = plan->n, k = plan->k, inner = plan->inner, largest = plan->largest;      \
        for (int64_t item = begin; item < end; item++) {                                     \
            int64_t o = item / inner, j = item % inner;                                      \
            const T *x = (const T *)plan->x + o * n * inner + j;                             \
            T *v = (T *)plan->values + o * k * inner + j;                                    \
            int64_t *ix = plan->indices + o * k * inner + j;                                 \
            /* Fill the heap with the first k elements, sifting each up. */                  \
            for (int64_t i = 0; i < k; i++) {                                                \
                T value = x[i * inner];                                                      \
                int64_t at = i;                                                              \
                while (at > 0) {                                                             \
                    int64_t parent = (at - 1) / 2;                                           \
                    if (!NAME##_before(v[parent * inner], ix[parent * inner], value, i,      \
                                       largest)) {                                           \
                        break;                                                               \
                    }                                                                        \
                    v[at * inner] = v[parent * inner];                                       \
                    ix[at * inner] = ix[parent * inner];                                     \
                    at = parent;                                                             \
                }                                                                            \
                v[at * inner] = value;                                                       \
                ix[at * inner] = i;                                                          \
            }                                                                                \
            /* Every later element that beats the worst kept one replaces it. */             \
            /* A value strictly worse than the root (NaN aside) is out at one compare; in a  \
             * contiguous slice, TOPK_BLOCK such values at a time. */                        \
            T root = k > 0 ? v[0] : (T)0;                                                    \
            for (int64_t i = k; i < n && k > 0;) {                                           \
                if (inner == 1 && i + TOPK_BLOCK <= n && ALL_WORSE(x + i, root, largest)) {  \
                    i += TOPK_BLOCK;                                                         \
                    continue;                                                                \
                }                                                                            \
                T value = x[i * inner];                                                      \
                if (!(largest ? value < root : value > root)                                 \
                    && NAME##_before(value, i, root, ix[0], largest)) {                      \
                    v[0] = value;                                                            \
                    ix[0] = i;                                                               \
                    NAME##_sift_down(v, ix, inner, k, 0, largest);                           \
                    root = v[0];                                                             \
                }                                                                            \
                i++;                                                                         \
            }                                                                                \
            /* Heap sort: the worst moves to the end, best first remains. */                 \
            for (int64_t size = k - 1; size > 0; size--) {                                   \
                T value = v[size * inner];                                                   \
                int64_t index = ix[size * inner];                                            \
                v[size * inner] = v[0];                                                      \
                ix[size * inner] = ix[0];                                                    \
                v[0] = value;                                                                \
                ix[0] = index;                                                               \
                NAME##_sift_down(v, ix, inner, size, 0, largest);                            \
            }                                                                                \
        }                                                                                    \
    }                                                                                        \
                                                                                             \
    GE_KERNEL(ge_##NAME) {                                                                   \
        topk_plan plan;                                                                      \
        if (topk_open(ctx, "ge_" #NAME, inputs, n_inputs, outputs, n_outputs, attrs,         \
                      attrs_size, GE_DTYPE_OF_##NAME, &plan)) {                              \
            return -1;                                                                       \
        }                                                                                    \
        ctx->parallel_for(ctx, plan.outer * plan.inner, index_grain(plan.n * 2),             \
                          NAME##_slices, &plan);                                             \
        return 0;                                                                            \
    }

#define GE_DTYPE_OF_topk_f32 GE_FLOAT32
#define GE_DTYPE_OF_topk_i32 GE_INT32
#define GE_DTYPE_OF_topk_i64 GE_INT64

/* Elements a contiguous TopK slice checks against its root at once. */
#define TOPK_BLOCK 16

/* Every one of p[0, TOPK_BLOCK) is strictly worse than `root` (a NaN never is). */
#define DEFINE_ALL_WORSE(NAME, T)                                                            \
    REDUCE_INLINE int NAME(const T *p, T root, int64_t largest) {                            \
        int worse = 1;                                                                       \
        if (largest) {                                                                       \
            for (int l = 0; l < TOPK_BLOCK; l++) {                                           \
                worse &= p[l] < root;                                                        \
            }                                                                                \
        } else {                                                                             \
            for (int l = 0; l < TOPK_BLOCK; l++) {                                           \
                worse &= p[l] > root;                                                        \
            }                                                                                \
        }                                                                                    \
        return worse;                                                                        \
    }

DEFINE_ALL_WORSE(all_worse_i32, int32_t)
DEFINE_ALL_WORSE(all_worse_i64, int64_t)

#if defined(__SSE2__)
REDUCE_INLINE int all_worse_f32(const float *p, float root, int64_t largest) {
    __m128 r = _mm_set1_ps(root);
    __m128 a = _mm_loadu_ps(p), b = _mm_loadu_ps(p + 4);
    __m128 c = _mm_loadu_ps(p + 8), d = _mm_loadu_ps(p + 12);
    __m128 worse = largest ? _mm_and_ps(_mm_and_ps(_mm_cmplt_ps(a, r), _mm_cmplt_ps(b, r)),
                                        _mm_and_ps(_mm_cmplt_ps(c, r), _mm_cmplt_ps(d, r)))
                           : _mm_and_ps(_mm_and_ps(_mm_cmpgt_ps(a, r), _mm_cmpgt_ps(b, r)),
                                        _mm_and_ps(_mm_cmpgt_ps(c, r), _mm_cmpgt_ps(d, r)));
    return _mm_movemask_ps(worse) == 0xF;
}
#else
DEFINE_ALL_WORSE(all_worse_f32, float)
#endif

DEFINE_TOPK(topk_f32, float, F32_IS_NAN, all_worse_f32)
DEFINE_TOPK(topk_i32, int32_t, INT_IS_NAN, all_worse_i32)
DEFINE_TOPK(topk_i64, int64_t, INT_IS_NAN, all_worse_i64)
