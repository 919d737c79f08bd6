/*
 * Unary elementwise kernels: math functions, activations, rounding, Clip, IsNaN, IsInf.
 *
 * Each kernel is one loop `out[i] = f(in[i])` over the element count (shapes do not
 * matter), split over the thread pool above a grain. The functions f are small inline
 * helpers written so that gcc can vectorize the loop wherever libm allows: both sides
 * of a select are computed, then chosen.
 *
 * Precision follows the NumPy references in ge_hub/ops/activation.py, which compute in
 * float64 and round once: ops whose float32 evaluation stays within about 2 ulp of that
 * use float32 libm (expf, erff, ...); the others (attribute-scaled ops, Gelu, Celu, Mish,
 * Softsign, HardSigmoid, HardSwish) compute in double, which also makes them round like
 * the reference, and so does Tanh, where one double exp is faster than tanhf. NaN and
 * infinities go through every formula as they do in the reference (Softsign(inf) is
 * NaN there too).
 *
 * The blob layouts are listed in activation.h.
 */
#if defined(__GNUC__) && !defined(__clang__)
/* The selects below only vectorize when gcc may evaluate both arms, which it refuses
 * while floating-point operations might trap. Nothing here reads FP exception flags or
 * enables traps, and no result changes (unlike -ffast-math, which this is not: NaN,
 * infinities, signed zeros and evaluation order are all kept). */
#pragma GCC optimize("no-trapping-math")
#endif

#include <math.h>
#include <string.h>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "activation.h"
#include "activation_math.h" /* nn_gelu_erf_f32 */
#include "nn_common.h"      /* NN_VECTORIZED */

/* Elements below which handing chunks to the pool costs more than it saves: a cheap
 * op is memory-bound at about a nanosecond per element, a libm call costs 2 to 20. */
#define CHEAP_GRAIN 16384
#define LIBM_GRAIN 4096

/* -- the shared driver -------------------------------------------------------------------- */

typedef struct {
    const void *in;
    void *out;          /* may be `in`: each element is read before it is written */
    int64_t ints[2];    /* the blob's int64 values, then its float64 values */
    double floats[2];
} unary_job;

typedef struct {
    const char *symbol;
    int32_t in_dtype;
    int32_t out_dtype;
    int32_t n_ints;
    int32_t n_floats;
    int64_t grain;
    ge_range_fn range;
} unary_kernel;

/* Checks the tensors every one-input-element-to-one-output-element kernel shares:
 * input 0 present with `in_dtype`, at most `max_inputs` inputs, one output of
 * `out_dtype` with as many elements. */
static int check_elementwise(ge_context *ctx, const char *symbol, const ge_tensor *inputs,
                             int32_t n_inputs, int32_t max_inputs, const ge_tensor *outputs,
                             int32_t n_outputs, int32_t in_dtype, int32_t out_dtype) {
    if (n_inputs < 1 || n_inputs > max_inputs || n_outputs != 1) {
        return ctx->set_error(ctx, "%s takes 1 to %d inputs and 1 output, got %d and %d",
                              symbol, max_inputs, n_inputs, n_outputs);
    }
    if (inputs[0].data == NULL) {
        return ctx->set_error(ctx, "%s: input 0 is omitted", symbol);
    }
    if (inputs[0].dtype != in_dtype) {
        return ctx->set_error(ctx, "%s: input 0 has dtype %s, expected %s", symbol,
                              ge_dtype_name(inputs[0].dtype), ge_dtype_name(in_dtype));
    }
    if (outputs[0].dtype != out_dtype) {
        return ctx->set_error(ctx, "%s: output 0 has dtype %s, expected %s", symbol,
                              ge_dtype_name(outputs[0].dtype), ge_dtype_name(out_dtype));
    }
    if (inputs[0].numel != outputs[0].numel) {
        return ctx->set_error(ctx, "%s: input 0 has %lld elements, output 0 has %lld; they "
                              "must be equal", symbol, (long long)inputs[0].numel,
                              (long long)outputs[0].numel);
    }
    return 0;
}

/* Runs fn over [0, n), inline when one chunk would do. */
static void run_elements(ge_context *ctx, int64_t n, int64_t grain, ge_range_fn fn, void *arg) {
    if (n <= 0) {
        return;
    }
    if (n <= grain) {
        fn(arg, 0, n);
    } else {
        ctx->parallel_for(ctx, n, grain, fn, arg);
    }
}

static int unary_run(const unary_kernel *kernel, ge_context *ctx, const ge_tensor *inputs,
                     int32_t n_inputs, const ge_tensor *outputs, int32_t n_outputs,
                     const void *attrs, size_t attrs_size) {
    if (check_elementwise(ctx, kernel->symbol, inputs, n_inputs, 1, outputs, n_outputs,
                          kernel->in_dtype, kernel->out_dtype)) {
        return -1;
    }
    size_t expected = GE_BLOB_SLOT * (size_t)(kernel->n_ints + kernel->n_floats);
    unary_job job = {inputs[0].data, outputs[0].data, {0, 0}, {0.0, 0.0}};
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    ge_blob_ints(&blob, job.ints, kernel->n_ints);
    ge_blob_floats(&blob, job.floats, kernel->n_floats);
    if (!ge_blob_done(&blob)) {
        return ctx->set_error(ctx, "%s: attribute blob has %zu bytes, expected %zu (%d int64 "
                              "then %d float64 values)", kernel->symbol, attrs_size, expected,
                              kernel->n_ints, kernel->n_floats);
    }
    run_elements(ctx, outputs[0].numel, kernel->grain, kernel->range, &job);
    return 0;
}

/* The kernel function SYMBOL, whose loop is SYMBOL##_range. */
#define DEFINE_KERNEL(SYMBOL, DT_IN, DT_OUT, N_INTS, N_FLOATS, GRAIN)                      \
    GE_KERNEL(SYMBOL) {                                                                    \
        static const unary_kernel kernel = {#SYMBOL, DT_IN, DT_OUT, N_INTS, N_FLOATS,      \
                                            GRAIN, SYMBOL##_range};                        \
        return unary_run(&kernel, ctx, inputs, n_inputs, outputs, n_outputs, attrs,        \
                         attrs_size);                                                      \
    }

/* A kernel computing EXPR from element `x` of type T_IN; EXPR may read the blob's
 * values as `param0`, `param1` (float64) and `flag0`, `flag1` (int64). */
#define UNARY_KERNEL(SYMBOL, T_IN, T_OUT, DT_IN, DT_OUT, N_INTS, N_FLOATS, GRAIN, EXPR)    \
    static void SYMBOL##_range(void *arg, int64_t begin, int64_t end) {                    \
        const unary_job *job = arg;                                                        \
        const T_IN *in = job->in;                                                          \
        T_OUT *out = job->out;                                                             \
        const double param0 = job->floats[0], param1 = job->floats[1];                     \
        const int64_t flag0 = job->ints[0], flag1 = job->ints[1];                          \
        (void)param0, (void)param1, (void)flag0, (void)flag1;                              \
        for (int64_t i = begin; i < end; i++) {                                            \
            const T_IN x = in[i];                                                          \
            out[i] = (EXPR);                                                               \
        }                                                                                  \
    }                                                                                      \
    DEFINE_KERNEL(SYMBOL, DT_IN, DT_OUT, N_INTS, N_FLOATS, GRAIN)

#define F32_KERNEL(SYMBOL, N_FLOATS, GRAIN, EXPR) \
    UNARY_KERNEL(SYMBOL, float, float, GE_FLOAT32, GE_FLOAT32, 0, N_FLOATS, GRAIN, EXPR)

/* A float32 kernel applying FN (no attributes) in a loop that is multiversioned
 * (NN_VECTORIZED), for the math the compiler vectorizes (Gelu, and Sigmoid over nn_expf);
 * the other kernels stay baseline x86-64. */
#define VECTORIZED_F32_KERNEL(SYMBOL, FN)                                                  \
    NN_VECTORIZED static void SYMBOL##_range(void *arg, int64_t begin, int64_t end) {      \
        const unary_job *job = arg;                                                        \
        const float *in = job->in;                                                         \
        float *out = job->out;                                                             \
        for (int64_t i = begin; i < end; i++) {                                            \
            out[i] = FN(in[i]);                                                            \
        }                                                                                  \
    }                                                                                      \
    DEFINE_KERNEL(SYMBOL, GE_FLOAT32, GE_FLOAT32, 0, 0, CHEAP_GRAIN)

/* -- sign, magnitude, rounding --------------------------------------------------------------- */

static inline float sign_f32(float x) {
    return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x);  /* zeros and NaN stay as they are */
}

/* Round half to even. Adding and then subtracting 2^23 leaves an integer, rounded in the
 * default mode (nearest, ties to even); from 2^23 up every float is an integer already,
 * and NaN and infinities pass through. copysign keeps -0.4 -> -0.0 as rint does. */
static inline float round_half_even_f32(float x) {
    const float two_23 = 8388608.0f;
    float magnitude = fabsf(x);
    float rounded = copysignf((magnitude + two_23) - two_23, x);
    return magnitude < two_23 ? rounded : x;
}

/* floor and ceil from the nearest integer, which is at most one away; the sign of x
 * is the sign of the result whenever the result is zero (floor(-0.0), ceil(-0.5)). */
static inline float floor_f32(float x) {
    float nearest = round_half_even_f32(x);
    float below = nearest - 1.0f;
    return copysignf(nearest > x ? below : nearest, x);
}

static inline float ceil_f32(float x) {
    float nearest = round_half_even_f32(x);
    float above = nearest + 1.0f;
    return copysignf(nearest < x ? above : nearest, x);
}

/* Integer negation wraps (-INT_MIN is INT_MIN, as the reference says); computing it in
 * unsigned arithmetic keeps that out of C's undefined behaviour. */
#define NEG_I32(x) ((int32_t)(0u - (uint32_t)(x)))
#define NEG_I64(x) ((int64_t)(0ull - (uint64_t)(x)))

F32_KERNEL(ge_neg_f32, 0, CHEAP_GRAIN, -x)
UNARY_KERNEL(ge_neg_i32, int32_t, int32_t, GE_INT32, GE_INT32, 0, 0, CHEAP_GRAIN, NEG_I32(x))
UNARY_KERNEL(ge_neg_i64, int64_t, int64_t, GE_INT64, GE_INT64, 0, 0, CHEAP_GRAIN, NEG_I64(x))
F32_KERNEL(ge_abs_f32, 0, CHEAP_GRAIN, fabsf(x))
UNARY_KERNEL(ge_abs_i32, int32_t, int32_t, GE_INT32, GE_INT32, 0, 0, CHEAP_GRAIN,
             x < 0 ? NEG_I32(x) : x)
UNARY_KERNEL(ge_abs_i64, int64_t, int64_t, GE_INT64, GE_INT64, 0, 0, CHEAP_GRAIN,
             x < 0 ? NEG_I64(x) : x)
F32_KERNEL(ge_sign_f32, 0, CHEAP_GRAIN, sign_f32(x))
UNARY_KERNEL(ge_sign_i32, int32_t, int32_t, GE_INT32, GE_INT32, 0, 0, CHEAP_GRAIN,
             (int32_t)((x > 0) - (x < 0)))
UNARY_KERNEL(ge_sign_i64, int64_t, int64_t, GE_INT64, GE_INT64, 0, 0, CHEAP_GRAIN,
             (int64_t)((x > 0) - (x < 0)))
F32_KERNEL(ge_floor_f32, 0, CHEAP_GRAIN, floor_f32(x))
F32_KERNEL(ge_ceil_f32, 0, CHEAP_GRAIN, ceil_f32(x))
F32_KERNEL(ge_round_f32, 0, CHEAP_GRAIN, round_half_even_f32(x))

/* -- exponentials, logarithms, powers ------------------------------------------------------- */

F32_KERNEL(ge_exp_f32, 0, LIBM_GRAIN, expf(x))
F32_KERNEL(ge_log_f32, 0, LIBM_GRAIN, logf(x))
F32_KERNEL(ge_reciprocal_f32, 0, CHEAP_GRAIN, 1.0f / x)
F32_KERNEL(ge_erf_f32, 0, LIBM_GRAIN, erff(x))

/* sqrtf may set errno (setup.py keeps -fmath-errno), which stops gcc from vectorizing
 * it; SSE's sqrtps gives the same correctly rounded results (NaN below zero). */
static void ge_sqrt_f32_range(void *arg, int64_t begin, int64_t end) {
    const unary_job *job = arg;
    const float *in = job->in;
    float *out = job->out;
    int64_t i = begin;
#if defined(__SSE__)
    for (; i + 4 <= end; i += 4) {
        _mm_storeu_ps(out + i, _mm_sqrt_ps(_mm_loadu_ps(in + i)));
    }
#endif
    for (; i < end; i++) {
        out[i] = sqrtf(in[i]);
    }
}
DEFINE_KERNEL(ge_sqrt_f32, GE_FLOAT32, GE_FLOAT32, 0, 0, CHEAP_GRAIN)

/* -- trigonometric and hyperbolic ------------------------------------------------------------ */

/* tanh|x| = 1 - 2 / (exp(2|x|) + 1) in double: one exp, 2-3 times faster than tanhf,
 * and, double being 29 bits wider, still correctly rounded to float after the
 * cancellation near 0; below 1e-3, x - x^3 / 3 takes over (the next term is 2^-42 of
 * it, far below float's 2^-24). Overflow of exp gives 1; NaN stays NaN. */
static inline float tanh_f32(float x) {
    double magnitude = fabs((double)x);
    double from_exp = 1.0 - 2.0 / (exp(2.0 * magnitude) + 1.0);
    double series = magnitude - magnitude * magnitude * magnitude * (1.0 / 3.0);
    return (float)copysign(magnitude < 1e-3 ? series : from_exp, (double)x);
}

F32_KERNEL(ge_sin_f32, 0, LIBM_GRAIN, sinf(x))
F32_KERNEL(ge_cos_f32, 0, LIBM_GRAIN, cosf(x))
F32_KERNEL(ge_tan_f32, 0, LIBM_GRAIN, tanf(x))
F32_KERNEL(ge_asin_f32, 0, LIBM_GRAIN, asinf(x))
F32_KERNEL(ge_acos_f32, 0, LIBM_GRAIN, acosf(x))
F32_KERNEL(ge_atan_f32, 0, LIBM_GRAIN, atanf(x))
F32_KERNEL(ge_sinh_f32, 0, LIBM_GRAIN, sinhf(x))
F32_KERNEL(ge_cosh_f32, 0, LIBM_GRAIN, coshf(x))
F32_KERNEL(ge_tanh_f32, 0, LIBM_GRAIN, tanh_f32(x))
F32_KERNEL(ge_asinh_f32, 0, LIBM_GRAIN, asinhf(x))
F32_KERNEL(ge_acosh_f32, 0, LIBM_GRAIN, acoshf(x))
F32_KERNEL(ge_atanh_f32, 0, LIBM_GRAIN, atanhf(x))

/* -- activations ----------------------------------------------------------------------------- */

/* exp(-|x|) never overflows; for x < 0, e / (1 + e) keeps the small results that
 * 1 / (1 + exp(-x)) would lose. exp is the vectorizable nn_expf (within 2 ulp of expf; as
 * in the fused elementwise kernel, results below float's normal range, x under about
 * -87.3, flush to 0), about 10x libm's expf per element in Sigmoid's AVX-512 loop. */
static inline float sigmoid_f32(float x) {
    float e = nn_expf(-fabsf(x));
    return (x >= 0.0f ? 1.0f : e) / (1.0f + e);
}

/* Attributes are float64 in the blob, as in the reference: scaling in double and
 * rounding once gives the reference's result exactly. */
static inline float leaky_relu_f32(float x, double alpha) {
    float scaled = (float)(alpha * x);
    return x >= 0.0f ? x : scaled;
}

static inline float thresholded_relu_f32(float x, double alpha) {
    return (double)x > alpha ? x : 0.0f;
}

static inline float elu_f32(float x, double alpha) {
    float negative = (float)(alpha * (double)expm1f(x));
    return x > 0.0f ? x : negative;
}

static inline float selu_f32(float x, double alpha, double gamma) {
    double positive = gamma * x;
    double negative = gamma * (alpha * (double)expm1f(x));
    return (float)(x > 0.0f ? positive : negative);
}

/* max(0, x) + min(0, alpha * expm1(x / alpha)) is x for x > 0 and the second term
 * otherwise, whatever alpha's sign; NaN takes the second arm and stays NaN. */
static inline float celu_f32(float x, double alpha) {
    double w = x;
    double negative = alpha * expm1(w / alpha);
    return (float)(x > 0.0f ? w : negative);
}

/* x * Phi(x), the erf form (activation_math.h, shared with the fused epilogues). */
static inline float gelu_f32(float x) {
    return nn_gelu_erf_f32(x);
}

/* The tanh approximation. 0.5 * x * (1 + tanh(u)) is x * sigmoid(2u) = x / (1 + exp(-2u)),
 * which does not cancel for negative x as 1 + tanh(u) does. */
static inline float gelu_tanh_f32(float x) {
    const double sqrt_2_over_pi = 0.79788456080286535588;
    double w = x;
    double u = sqrt_2_over_pi * (w + 0.044715 * (w * w * w));
    return (float)(w / (1.0 + exp(-2.0 * u)));
}

/* log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)), which never overflows. */
static inline float softplus_f32(float x) {
    float positive_part = x > 0.0f ? x : 0.0f;
    return positive_part + log1pf(expf(-fabsf(x)));
}

static inline float softsign_f32(float x) {
    double w = x;
    return (float)(w / (1.0 + fabs(w)));
}

/* tanh(log(1 + e)) with e = exp(x) is n / (n + 2) with n = e * (e + 2): one exp, no
 * cancellation; in double, as the float version drifts to 4 ulp. Past x = 20 the ratio
 * is 1 in float (and n would overflow further on). */
static inline float mish_f32(float x) {
    double w = x;
    double e = exp(w);
    double n = e * (e + 2.0);
    return (float)(w > 20.0 ? w : w * n / (n + 2.0));
}

/* The clamps below keep NaN (a comparison with NaN is false), as np.clip does. */
static inline double clamp_unit(double v) {
    double low = v < 0.0 ? 0.0 : v;
    return low > 1.0 ? 1.0 : low;
}

static inline float hard_sigmoid_f32(float x, double alpha, double beta) {
    return (float)clamp_unit(alpha * x + beta);
}

static inline float hard_swish_f32(float x) {
    double w = x;
    return (float)(w * clamp_unit(w / 6.0 + 0.5));
}

F32_KERNEL(ge_relu_f32, 0, CHEAP_GRAIN, x < 0.0f ? 0.0f : x)
UNARY_KERNEL(ge_relu_i32, int32_t, int32_t, GE_INT32, GE_INT32, 0, 0, CHEAP_GRAIN,
             x < 0 ? 0 : x)
UNARY_KERNEL(ge_relu_i64, int64_t, int64_t, GE_INT64, GE_INT64, 0, 0, CHEAP_GRAIN,
             x < 0 ? 0 : x)
VECTORIZED_F32_KERNEL(ge_sigmoid_f32, sigmoid_f32)
F32_KERNEL(ge_leaky_relu_f32, 1, CHEAP_GRAIN, leaky_relu_f32(x, param0))
F32_KERNEL(ge_thresholded_relu_f32, 1, CHEAP_GRAIN, thresholded_relu_f32(x, param0))
F32_KERNEL(ge_elu_f32, 1, LIBM_GRAIN, elu_f32(x, param0))
F32_KERNEL(ge_selu_f32, 2, LIBM_GRAIN, selu_f32(x, param0, param1))
F32_KERNEL(ge_celu_f32, 1, LIBM_GRAIN, celu_f32(x, param0))
VECTORIZED_F32_KERNEL(ge_gelu_f32, gelu_f32)
F32_KERNEL(ge_gelu_tanh_f32, 0, LIBM_GRAIN, gelu_tanh_f32(x))
F32_KERNEL(ge_softplus_f32, 0, LIBM_GRAIN, softplus_f32(x))
F32_KERNEL(ge_softsign_f32, 0, CHEAP_GRAIN, softsign_f32(x))
F32_KERNEL(ge_mish_f32, 0, LIBM_GRAIN, mish_f32(x))
F32_KERNEL(ge_hard_sigmoid_f32, 2, CHEAP_GRAIN, hard_sigmoid_f32(x, param0, param1))
F32_KERNEL(ge_hard_swish_f32, 0, CHEAP_GRAIN, hard_swish_f32(x))

/* -- classification -------------------------------------------------------------------------- */

/* IsInf's blob: flag0 = detect_negative, flag1 = detect_positive. */
UNARY_KERNEL(ge_isnan_f32, float, uint8_t, GE_FLOAT32, GE_BOOL, 0, 0, CHEAP_GRAIN,
             (uint8_t)(x != x))
UNARY_KERNEL(ge_isinf_f32, float, uint8_t, GE_FLOAT32, GE_BOOL, 2, 0, CHEAP_GRAIN,
             (uint8_t)(((flag0 != 0) & (x == -INFINITY)) | ((flag1 != 0) & (x == INFINITY))))

/* -- Clip ------------------------------------------------------------------------------------ */

/* Reads Clip's bound `index` (1: min, 2: max) into *bound, unless it is omitted. */
static int read_clip_bound(ge_context *ctx, const char *symbol, const ge_tensor *inputs,
                           int32_t n_inputs, int32_t index, int32_t dtype, void *bound) {
    if (index >= n_inputs || inputs[index].data == NULL) {
        return 0;
    }
    const char *name = index == 1 ? "min" : "max";
    if (inputs[index].dtype != dtype) {
        return ctx->set_error(ctx, "%s: input %d ('%s') has dtype %s, expected %s", symbol,
                              index, name, ge_dtype_name(inputs[index].dtype),
                              ge_dtype_name(dtype));
    }
    if (inputs[index].numel != 1) {
        return ctx->set_error(ctx, "%s: input %d ('%s') must hold one value, got %lld", symbol,
                              index, name, (long long)inputs[index].numel);
    }
    memcpy(bound, inputs[index].data, ge_dtype_itemsize(dtype));
    return 0;
}

/* min then max, as the reference applies them: where min > max every element is max.
 * A NaN bound makes every element NaN, as np.maximum and np.minimum propagate it. */
#define CLIP_KERNEL(SYMBOL, T, DT, LOWEST, HIGHEST, IS_NAN)                                  \
    typedef struct {                                                                       \
        const T *in;                                                                       \
        T *out;                                                                            \
        T low, high;                                                                       \
    } SYMBOL##_job;                                                                        \
    static void SYMBOL##_range(void *arg, int64_t begin, int64_t end) {                    \
        const SYMBOL##_job *job = arg;                                                     \
        const T *in = job->in;                                                             \
        T *out = job->out;                                                                 \
        const T low = job->low, high = job->high;                                          \
        for (int64_t i = begin; i < end; i++) {                                            \
            const T x = in[i];                                                             \
            const T raised = x < low ? low : x;                                            \
            out[i] = raised > high ? high : raised;                                        \
        }                                                                                  \
    }                                                                                      \
    GE_KERNEL(SYMBOL) {                                                                    \
        SYMBOL##_job job = {NULL, NULL, LOWEST, HIGHEST};                                  \
        if (check_elementwise(ctx, #SYMBOL, inputs, n_inputs, 3, outputs, n_outputs, DT,   \
                              DT)                                                          \
            || read_clip_bound(ctx, #SYMBOL, inputs, n_inputs, 1, DT, &job.low)            \
            || read_clip_bound(ctx, #SYMBOL, inputs, n_inputs, 2, DT, &job.high)) {        \
            return -1;                                                                     \
        }                                                                                  \
        if (attrs_size != 0) {                                                             \
            return ctx->set_error(ctx, #SYMBOL ": attribute blob has %zu bytes, expected " \
                                  "none", attrs_size);                                     \
        }                                                                                  \
        job.in = inputs[0].data;                                                           \
        job.out = outputs[0].data;                                                         \
        if (IS_NAN(job.low) || IS_NAN(job.high)) {                                         \
            const T nan_bound = IS_NAN(job.low) ? job.low : job.high;                      \
            for (int64_t i = 0; i < outputs[0].numel; i++) {                               \
                job.out[i] = nan_bound;                                                    \
            }                                                                              \
            return 0;                                                                      \
        }                                                                                  \
        run_elements(ctx, outputs[0].numel, CHEAP_GRAIN, SYMBOL##_range, &job);            \
        return 0;                                                                          \
    }

#define NEVER_NAN(v) 0

CLIP_KERNEL(ge_clip_f32, float, GE_FLOAT32, -INFINITY, INFINITY, isnan)
CLIP_KERNEL(ge_clip_i32, int32_t, GE_INT32, INT32_MIN, INT32_MAX, NEVER_NAN)
CLIP_KERNEL(ge_clip_i64, int64_t, GE_INT64, INT64_MIN, INT64_MAX, NEVER_NAN)
