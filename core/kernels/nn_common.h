/*
 * Helpers shared by the float32 kernels of the nn, conv, pool, norm, resize and rnn
 * families: checking tensors against their blobs (read with ge_hub/blob.h), and the
 * geometry of a sliding window (Conv, ConvTranspose, the pools), whose Python side is
 * ge_hub/kernels/nn_common.py.
 *
 * Window ops are handled as 3-D: the packer pads 1-D and 2-D windows with leading
 * axes of size 1 (kernel 1, stride 1, dilation 1, no padding), so one loop nest serves
 * every spatial rank.
 */
#ifndef GE_HUB_NN_COMMON_H
#define GE_HUB_NN_COMMON_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ge_hub/blob.h"
#include "ge_hub/kernel.h"

/*
 * GCC: assume floating-point operations do not trap. Values, NaN and inf included, are
 * exactly what they would be otherwise (this is not -ffast-math); only the floating-
 * point exception flags, which nothing reads, may differ. Without it GCC keeps a loop
 * holding a float compare-and-select or a float-to-int conversion scalar unless AVX-512
 * masks are available. Clang assumes this by default.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

/*
 * NN_VECTORIZED marks a hot loop nest to be compiled also for AVX2 and AVX-512, the
 * right one picked once at load time (GCC/Clang function multiversioning). The build
 * targets baseline x86-64 so that one binary runs on any CPU; without this the loops
 * would be limited to SSE2. -std=c11 keeps floating-point contraction off, so every
 * version computes bit-identical results.
 */
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__has_attribute)  /* needs ifunc */
/* (not under a sanitizer: its runtime is not ready when the ifunc resolvers run) */
#if __has_attribute(target_clones) && !defined(__SANITIZE_ADDRESS__) \
    && !defined(__SANITIZE_THREAD__)
#define NN_VECTORIZED __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef NN_VECTORIZED
#define NN_VECTORIZED
#endif

/*
 * NN_INLINE_COPIES keeps GCC from turning a copy or fill loop into a call to memcpy or
 * memset: right for the long copies, but the short rows of a tile transform (tens of
 * floats, thousands of times per convolution) then spend more in the calls than in the
 * copying. Clang has no such per-function switch and needs none as much.
 */
#if defined(__GNUC__) && !defined(__clang__)
#define NN_INLINE_COPIES __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define NN_INLINE_COPIES
#endif

#define NN_BAD_BLOB(ctx, kernel, blob) NN_BAD_BLOB_BYTES(ctx, kernel, (blob).size)
#define NN_BAD_BLOB_BYTES(ctx, kernel, bytes)                                                     \
    (ctx)->set_error((ctx), "%s: attribute blob of %zu bytes does not have the layout its " \
                     "packer (ge_hub/kernels/) writes", (kernel), (size_t)(bytes))

/* The most elements any size computed from a blob may count (ge_hub/blob.h). */
#define NN_MAX_NUMEL GE_MAX_SIZE

/* a * b * c as a checked size (ge_size_mul): -1 when a factor is negative or a partial
 * product passes NN_MAX_NUMEL. */
static inline int64_t nn_numel3(int64_t a, int64_t b, int64_t c) {
    return ge_size_mul(ge_size_mul(a, b), c);
}

/* Tensor `t` must be of `dtype` with `numel` elements and data. */
static inline int nn_check_dtype(ge_context *ctx, const char *kernel, const char *what,
                                 const ge_tensor *t, int64_t numel, ge_dtype dtype,
                                 const char *dtype_name) {
    if (t->data == NULL && numel > 0) {
        return ctx->set_error(ctx, "%s: %s is missing", kernel, what);
    }
    if (t->dtype != (int32_t)dtype) {
        return ctx->set_error(ctx, "%s: %s must be %s (dtype code %d), got dtype code %d",
                              kernel, what, dtype_name, (int)dtype, (int)t->dtype);
    }
    if (numel < 0) {  /* nn_numel3's overflow: the blob's sizes are not a tensor's */
        return ctx->set_error(ctx, "%s: its attribute blob sizes %s past %lld elements",
                              kernel, what, (long long)NN_MAX_NUMEL);
    }
    if (t->numel != numel) {
        return ctx->set_error(ctx, "%s: %s must have %lld elements (packed at compile time), "
                              "got %lld", kernel, what, (long long)numel, (long long)t->numel);
    }
    return 0;
}

static inline int nn_check_f32(ge_context *ctx, const char *kernel, const char *what,
                               const ge_tensor *t, int64_t numel) {
    return nn_check_dtype(ctx, kernel, what, t, numel, GE_FLOAT32, "float32");
}

static inline int nn_check_bf16(ge_context *ctx, const char *kernel, const char *what,
                                const ge_tensor *t, int64_t numel) {
    return nn_check_dtype(ctx, kernel, what, t, numel, GE_BFLOAT16, "bfloat16");
}

/* The larger of y and v, where a NaN in either stays, so the order of the taps does not
 * matter (the pools' maximum, as the reference's np.max). */
static inline float nn_max_keep_nan(float y, float v) {
    return ((v > y) | (v != v)) ? v : y;
}

/* Work items per parallel chunk such that one chunk holds about `target` units of work
 * when an item costs `cost` units (at least one item). */
static inline int64_t nn_grain(int64_t cost, int64_t target) {
    if (cost < 1) {
        cost = 1;
    }
    int64_t grain = target / cost;
    return grain < 1 ? 1 : grain;
}

/* -- vectorizable math ----------------------------------------------------------------- */

/* Reductions are written over NN_LANES independent partial results, which the compiler
 * can keep in one vector register: a plain `total += x[i]` loop stays scalar without
 * -ffast-math, which the build (rightly) does not use. */
#define NN_LANES 16

/* exp(x) for float, as a branch-free expression that vectorizes (libm's expf does not
 * without -ffast-math): x = n ln2 + r with |r| <= ln2 / 2 (Cody-Waite), exp(r) by the
 * Cephes minimax polynomial (within 2 ulp), times 2^n built in the exponent bits.
 * exp(+inf) = inf, exp(-inf) = 0, NaN stays NaN; results that would be subnormal
 * (x < -87.3) flush to 0. */
static inline float nn_expf(float x) {
    const float max_arg = 88.3762626647949f, min_arg = -87.3365447505531f;
    float clamped = x > max_arg ? max_arg : x;
    clamped = clamped < min_arg ? min_arg : clamped;
    const float finite = clamped == clamped ? clamped : 0.0f;  /* NaN must not reach the cast */
    /* round to nearest: adding and subtracting 1.5 * 2^23 drops the fraction */
    const float n = (finite * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    const float r = clamped - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float result = p * scale;
    result = x > max_arg ? INFINITY : result;
    return x < min_arg ? 0.0f : result;
}

/* 16 floats (or their bit patterns) as one value: GCC/Clang vector extensions, for the
 * one reduction the auto-vectorizer will not touch (a maximum that must see NaN). Each
 * function version lowers it to its own instructions (four SSE registers, two AVX
 * registers or one AVX-512 register). */
typedef float nn_f32x16 __attribute__((vector_size(64)));
typedef int32_t nn_i32x16 __attribute__((vector_size(64)));

/* The maximum of n floats, NaN if any is NaN. */
static inline float nn_max(const float *x, int64_t n) {
    nn_f32x16 lanes;
    nn_i32x16 nan = {0};
    for (int j = 0; j < NN_LANES; j++) {
        lanes[j] = -INFINITY;
    }
    int64_t i = 0;
    for (; i + NN_LANES <= n; i += NN_LANES) {
        nn_f32x16 v;
        memcpy(&v, x + i, sizeof v);
        nn_i32x16 greater = v > lanes;  /* all ones where v wins */
        nan |= v != v;
        lanes = (nn_f32x16)((greater & (nn_i32x16)v) | (~greater & (nn_i32x16)lanes));
    }
    float best = -INFINITY;
    int any_nan = 0;
    for (int j = 0; j < NN_LANES; j++) {
        best = lanes[j] > best ? lanes[j] : best;
        any_nan |= nan[j] != 0;
    }
    for (; i < n; i++) {
        best = x[i] > best ? x[i] : best;
        any_nan |= x[i] != x[i];
    }
    return any_nan ? NAN : best;
}

/* The sum of n floats, accumulated in double. */
static inline double nn_sum(const float *x, int64_t n) {
    double lanes[NN_LANES] = {0};
    int64_t i = 0;
    for (; i + NN_LANES <= n; i += NN_LANES) {
        for (int j = 0; j < NN_LANES; j++) {
            lanes[j] += x[i + j];
        }
    }
    double total = 0.0;
    for (int j = 0; j < NN_LANES; j++) {
        total += lanes[j];
    }
    for (; i < n; i++) {
        total += x[i];
    }
    return total;
}

/* The sum of (x - mean)^2 over n floats, accumulated in double. */
static inline double nn_sum_squares(const float *x, int64_t n, double mean) {
    double lanes[NN_LANES] = {0};
    int64_t i = 0;
    for (; i + NN_LANES <= n; i += NN_LANES) {
        for (int j = 0; j < NN_LANES; j++) {
            double d = x[i + j] - mean;
            lanes[j] += d * d;
        }
    }
    double total = 0.0;
    for (int j = 0; j < NN_LANES; j++) {
        total += lanes[j];
    }
    for (; i < n; i++) {
        double d = x[i] - mean;
        total += d * d;
    }
    return total;
}

/* -- GEMM over the thread pool ---------------------------------------------------------- */

/*
 * C = alpha * op(A) @ op(B) + beta * C (ge_sgemm's contract), split into column or row
 * tiles that run as one parallel loop on the executor's pool, each tile one ge_sgemm.
 * A product too small to be worth splitting is one ge_sgemm on the calling thread.
 * Defined in nn_matmul.c.
 */
void nn_sgemm(ge_context *ctx, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
              float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
              float beta, float *c, int64_t ldc);

/* How many tiles nn_sgemm would split an m x n x k product into. */
int64_t nn_sgemm_tiles(int64_t m, int64_t n, int64_t k);

/* -- sliding windows ------------------------------------------------------------------ */

/* A window over 3 spatial axes (1-D and 2-D ones padded in front by the packer). `pad` is
 * the padding used before each axis (ConvTranspose may make it negative). */
typedef struct {
    int64_t in[3], out[3], k[3], stride[3], dil[3], pad[3];
} nn_window;

#define NN_WINDOW_INTS 18

/* The largest window coordinate a blob may describe (ge_hub.ops.limits.MAX_COORDINATE,
 * which the packers already enforce): with every value and the span the windows cover
 * within 2**60, the few additions below stay under 2**62 and cannot wrap. */
#define NN_MAX_COORDINATE ((int64_t)1 << 60)


static inline int nn_window_axis_ok(const nn_window *w, int a, int negative_pads_ok) {
    const int64_t limit = NN_MAX_COORDINATE;
    if (w->in[a] < 0 || w->out[a] < 0 || w->k[a] < 1 || w->stride[a] < 1 || w->dil[a] < 1
        || (!negative_pads_ok && w->pad[a] < 0)) {
        return 0;
    }
    if (w->in[a] > limit || w->out[a] > limit || w->k[a] > limit || w->stride[a] > limit
        || w->dil[a] > limit || w->pad[a] > limit || w->pad[a] < -limit) {
        return 0;
    }
    const int64_t reach = (w->out[a] > w->in[a] ? w->out[a] : w->in[a]) - 1;
    return w->k[a] - 1 <= limit / w->dil[a] && reach <= limit / w->stride[a]
        && (w->k[a] - 1) * w->dil[a] + reach * w->stride[a] <= limit;
}

/* Reads a window (in, out, kernel, strides, dilations, pads; 3 values each); 0 when the
 * blob is short or a size is out of range (nn_window_axis_ok). */
static inline int nn_blob_window(ge_blob *blob, nn_window *w, int negative_pads_ok) {
    int64_t v[NN_WINDOW_INTS];
    if (!ge_blob_ints(blob, v, NN_WINDOW_INTS)) {
        return 0;
    }
    for (int a = 0; a < 3; a++) {
        w->in[a] = v[a];
        w->out[a] = v[3 + a];
        w->k[a] = v[6 + a];
        w->stride[a] = v[9 + a];
        w->dil[a] = v[12 + a];
        w->pad[a] = v[15 + a];
        if (!nn_window_axis_ok(w, a, negative_pads_ok)) {
            blob->ok = 0;
            return 0;
        }
    }
    /* the sizes every kernel multiplies by its channels (nn_window_in_size, ...) */
    if (nn_numel3(w->in[0], w->in[1], w->in[2]) < 0
        || nn_numel3(w->out[0], w->out[1], w->out[2]) < 0
        || nn_numel3(w->k[0], w->k[1], w->k[2]) < 0) {
        blob->ok = 0;
        return 0;
    }
    return 1;
}

static inline int64_t nn_window_in_size(const nn_window *w) {
    return w->in[0] * w->in[1] * w->in[2];
}

static inline int64_t nn_window_out_size(const nn_window *w) {
    return w->out[0] * w->out[1] * w->out[2];
}

static inline int64_t nn_window_taps(const nn_window *w) {
    return w->k[0] * w->k[1] * w->k[2];
}

/* The kernel taps [*lo, *hi) along one axis that land inside [0, size) for a window
 * starting at `start`: start + tap * dil in [0, size). */
static inline void nn_tap_range(int64_t start, int64_t size, int64_t k, int64_t dil,
                                int64_t *lo, int64_t *hi) {
    int64_t first = start < 0 ? (-start + dil - 1) / dil : 0;
    int64_t last = size - start <= 0 ? 0 : (size - start + dil - 1) / dil;
    if (last > k) {
        last = k;
    }
    if (first > last) {
        first = last;
    }
    *lo = first;
    *hi = last;
}

/* The output positions [*lo, *hi) along one axis whose input coordinate
 * pos * stride + offset lies in [0, size); `count` positions in all. */
static inline void nn_position_range(int64_t offset, int64_t stride, int64_t size,
                                     int64_t count, int64_t *lo, int64_t *hi) {
    int64_t first = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
    int64_t last = size - offset <= 0 ? 0 : (size - offset + stride - 1) / stride;
    if (last > count) {
        last = count;
    }
    if (first > last) {
        first = last;
    }
    *lo = first;
    *hi = last;
}

/* The kernel columns [*first, *last) that reach inside the input along x for at least
 * one output position: kx * dil - pad + ox * stride in [0, in) for some ox in [0, out).
 * The others touch only padding, so row loops skip them: a kernel of 2**32 columns over
 * a row of 32 then costs what its useful columns cost, not 2**32 iterations per row. */
static inline void nn_useful_columns(const nn_window *w, int64_t *first, int64_t *last) {
    if (w->out[2] == 0 || w->in[2] == 0) {
        *first = *last = 0;
        return;
    }
    const int64_t reach = (w->out[2] - 1) * w->stride[2];  /* within NN_MAX_COORDINATE */
    nn_tap_range(reach - w->pad[2], w->in[2] + reach, w->k[2], w->dil[2], first, last);
}

/* For each kernel column kx: the input offset kx * dil - pad along x, and the output
 * positions [lo, hi) it reaches inside the input. The same for every row of every
 * plane, so row loops look them up instead of dividing again. */
#define NN_MAX_KERNEL_W 64

typedef struct {
    int64_t count;  /* kernel columns, or 0 when the kernel is too wide to tabulate */
    int64_t offset[NN_MAX_KERNEL_W], lo[NN_MAX_KERNEL_W], hi[NN_MAX_KERNEL_W];
} nn_columns;

static inline void nn_columns_init(nn_columns *c, const nn_window *w) {
    c->count = w->k[2] <= NN_MAX_KERNEL_W ? w->k[2] : 0;
    for (int64_t kx = 0; kx < c->count; kx++) {
        c->offset[kx] = kx * w->dil[2] - w->pad[2];
        nn_position_range(c->offset[kx], w->stride[2], w->in[2], w->out[2], &c->lo[kx],
                          &c->hi[kx]);
    }
}

/* Kernel column kx: its offset and output range, tabulated or computed. */
static inline int64_t nn_column(const nn_columns *c, const nn_window *w, int64_t kx,
                                int64_t *lo, int64_t *hi) {
    if (kx < c->count) {
        *lo = c->lo[kx];
        *hi = c->hi[kx];
        return c->offset[kx];
    }
    int64_t offset = kx * w->dil[2] - w->pad[2];
    nn_position_range(offset, w->stride[2], w->in[2], w->out[2], lo, hi);
    return offset;
}

#endif /* GE_HUB_NN_COMMON_H */
