/*
 * Softmax and LogSoftmax on float32 along one axis, numerically stable (the row maximum
 * is subtracted before exp). Elementwise in shape, so Y may share X's memory.
 *
 * Blob (ge_hub/kernels/nn.py, pack_softmax; the record GE_SOFTMAX_BLOB in nn.h): ints
 * outer, length, inner, slots.
 * X is viewed as (outer, length, inner) with the reduced axis in the middle. When
 * inner is 1 every row is contiguous. Otherwise the kernel works on whole
 * (length x inner) blocks, keeping the running maximum and sum of every column in
 * scratch so that the inner loops stay contiguous; the outer blocks are split into
 * `slots` parallel chunks, each with its own 2 * inner floats of scratch.
 *
 * NaN and inf behave as in the reference: a NaN in a row makes the row NaN, and so
 * does +inf (inf - inf), while -inf entries get probability 0.
 *
 * Softmax rows (inner 1, the attention scores of a transformer) have an AVX-512 variant,
 * picked once from the CPU (GE_HUB_SOFTMAX_KERNEL=generic forces the plain one): exp by
 * fused multiply-adds and vscalefps, a third of the instructions of nn_expf, which kept
 * BERT's [12, 128, 128] softmax at 3x ONNX Runtime's time. It agrees with the generic one
 * to a few ulp; a row whose maximum is NaN or inf takes the generic one.
 */
#include <math.h>
#include <pthread.h>

#include "ge_hub/internal/simd.h"
#include "nn.h"
#include "nn_common.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SOFTMAX_X86 1
#include "math_avx512.h"
#endif

#define NN_SOFTMAX_GRAIN_WORK 16384

typedef struct {
    int64_t outer, length, inner, slots, log;
    const float *x;
    float *y;
    float *scratch;
} softmax_job;

/* The sum of exp(x[i] - shift), in float lanes (the largest term is 1). */
static inline float sum_exp(const float *x, int64_t n, float shift) {
    float lanes[NN_LANES] = {0};
    int64_t i = 0;
    for (; i + NN_LANES <= n; i += NN_LANES) {
        for (int j = 0; j < NN_LANES; j++) {
            lanes[j] += nn_expf(x[i + j] - shift);
        }
    }
    float total = 0.0f;
    for (int j = 0; j < NN_LANES; j++) {
        total += lanes[j];
    }
    for (; i < n; i++) {
        total += nn_expf(x[i] - shift);
    }
    return total;
}

#ifdef SOFTMAX_X86
/* One row's softmax, its maximum `max` finite: exp and sum in one pass, then a multiply
 * by the reciprocal (masked loads and stores for the tail). */
__attribute__((target("avx512f"))) static void softmax_row512(const float *x, float *y,
                                                              int64_t n, float max) {
    const __m512 shift = _mm512_set1_ps(max);
    __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 e0 = exp512_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(x + i), shift));
        const __m512 e1 = exp512_nonpositive(
            _mm512_sub_ps(_mm512_loadu_ps(x + i + 16), shift));
        _mm512_storeu_ps(y + i, e0);
        _mm512_storeu_ps(y + i + 16, e1);
        sum0 = _mm512_add_ps(sum0, e0);
        sum1 = _mm512_add_ps(sum1, e1);
    }
    for (; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
        const __m512 e = _mm512_maskz_mov_ps(
            m, exp512_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), shift)));
        _mm512_mask_storeu_ps(y + i, m, e);
        sum0 = _mm512_add_ps(sum0, e);
    }
    const __m512 inverse = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(_mm512_add_ps(sum0, sum1)));
    for (i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, y + i), inverse));
    }
}
#endif

static int softmax_avx512;
static pthread_once_t softmax_once = PTHREAD_ONCE_INIT;

static void softmax_choose(void) {
#ifdef SOFTMAX_X86
    softmax_avx512 = ge_simd_choose("GE_HUB_SOFTMAX_KERNEL") == GE_SIMD_AVX512;
#endif
}

NN_VECTORIZED static void softmax_rows(void *arg, int64_t begin, int64_t end) {
    const softmax_job *job = (const softmax_job *)arg;
    const int64_t n = job->length;
    for (int64_t r = begin; r < end; r++) {
        const float *x = job->x + r * n;
        float *y = job->y + r * n;
        const float max = nn_max(x, n);
#ifdef SOFTMAX_X86
        if (softmax_avx512 && !job->log && isfinite(max)) {
            softmax_row512(x, y, n, max);
            continue;
        }
#endif
        if (job->log) {
            /* y may be x (in place): the sum is taken before anything is written. */
            const float log_total = logf(sum_exp(x, n, max));
            for (int64_t i = 0; i < n; i++) {
                y[i] = (x[i] - max) - log_total;
            }
        } else {
            /* exp and its sum in one pass, then one multiply by the reciprocal: an
             * attention row (128 values) is too short for a divide per value and a
             * double-precision sum to hide; this took BERT's [12, 128, 128] softmax from
             * 3x to about ONNX Runtime's time. */
            float lanes[NN_LANES] = {0};
            int64_t i = 0;
            for (; i + NN_LANES <= n; i += NN_LANES) {
                for (int j = 0; j < NN_LANES; j++) {
                    const float e = nn_expf(x[i + j] - max);
                    y[i + j] = e;
                    lanes[j] += e;
                }
            }
            float total = 0.0f;
            for (int j = 0; j < NN_LANES; j++) {
                total += lanes[j];
            }
            for (; i < n; i++) {
                y[i] = nn_expf(x[i] - max);
                total += y[i];
            }
            const float inverse = 1.0f / total;
            for (i = 0; i < n; i++) {
                y[i] = y[i] * inverse;
            }
        }
    }
}

/* Blocks of slot s: outer blocks [s * outer / slots, (s + 1) * outer / slots). */
NN_VECTORIZED static void softmax_blocks(void *arg, int64_t begin, int64_t end) {
    const softmax_job *job = (const softmax_job *)arg;
    const int64_t n = job->length, inner = job->inner;
    for (int64_t slot = begin; slot < end; slot++) {
        float *max = job->scratch + slot * 2 * inner;
        float *total = max + inner;
        int64_t first = slot * job->outer / job->slots;
        int64_t last = (slot + 1) * job->outer / job->slots;
        for (int64_t block = first; block < last; block++) {
            const float *x = job->x + block * n * inner;
            float *y = job->y + block * n * inner;
            for (int64_t j = 0; j < inner; j++) {
                max[j] = x[j];
            }
            for (int64_t i = 1; i < n; i++) {
                const float *row = x + i * inner;
                for (int64_t j = 0; j < inner; j++) {
                    /* A NaN becomes the maximum and is never replaced. */
                    max[j] = ((row[j] > max[j]) | (row[j] != row[j])) & (max[j] == max[j])
                        ? row[j] : max[j];
                }
            }
            for (int64_t j = 0; j < inner; j++) {
                total[j] = 0.0f;
            }
            for (int64_t i = 0; i < n; i++) {
                const float *row = x + i * inner;
                float *out = y + i * inner;
                if (job->log) {
                    for (int64_t j = 0; j < inner; j++) {
                        total[j] += nn_expf(row[j] - max[j]);
                    }
                } else {
                    for (int64_t j = 0; j < inner; j++) {
                        float e = nn_expf(row[j] - max[j]);
                        total[j] += e;
                        out[j] = e;
                    }
                }
            }
            if (job->log) {
                for (int64_t j = 0; j < inner; j++) {
                    total[j] = logf(total[j]);
                }
                for (int64_t i = 0; i < n; i++) {
                    const float *row = x + i * inner;
                    float *out = y + i * inner;
                    for (int64_t j = 0; j < inner; j++) {
                        out[j] = (row[j] - max[j]) - total[j];
                    }
                }
            } else {
                for (int64_t i = 0; i < n; i++) {
                    float *out = y + i * inner;
                    for (int64_t j = 0; j < inner; j++) {
                        out[j] = out[j] / total[j];
                    }
                }
            }
        }
    }
}

static int softmax(ge_context *ctx, const char *name, int log, const ge_tensor *inputs,
                   int32_t n_inputs, const ge_tensor *outputs, int32_t n_outputs,
                   const void *attrs, size_t attrs_size) {
    ge_softmax_blob r;
    if (!ge_softmax_blob_read(attrs, attrs_size, &r) || r.outer < 0 || r.length < 1
        || r.inner < 1 || r.slots < 1 || nn_numel3(r.outer, r.length, r.inner) < 0
        || nn_numel3(r.slots, 2, r.inner) < 0) {
        return NN_BAD_BLOB_BYTES(ctx, name, attrs_size);
    }
    const int64_t v[4] = {r.outer, r.length, r.inner, r.slots};
    if (n_inputs != 1 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected 1 input and 1 output, got %d and %d", name,
                              (int)n_inputs, (int)n_outputs);
    }
    const int64_t numel = v[0] * v[1] * v[2];
    if (nn_check_f32(ctx, name, "input", &inputs[0], numel)
        || nn_check_f32(ctx, name, "output", &outputs[0], numel)) {
        return -1;
    }
    softmax_job job = {v[0], v[1], v[2], v[3], log, (const float *)inputs[0].data,
                       (float *)outputs[0].data, NULL};
    if (job.inner == 1) {
        pthread_once(&softmax_once, softmax_choose);
        ctx->parallel_for(ctx, job.outer, nn_grain(job.length, NN_SOFTMAX_GRAIN_WORK),
                          softmax_rows, &job);
        return 0;
    }
    size_t needed = (size_t)(job.slots * 2 * job.inner) * sizeof(float);
    if (ctx->scratch == NULL || ctx->scratch_bytes < needed) {
        return ctx->set_error(ctx, "%s: needs %zu bytes of scratch, got %zu", name, needed,
                              ctx->scratch_bytes);
    }
    job.scratch = (float *)ctx->scratch;
    ctx->parallel_for(ctx, job.slots, 1, softmax_blocks, &job);
    return 0;
}

int ge_nn_softmax_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                      const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                      size_t attrs_size) {
    return softmax(ctx, "ge_nn_softmax_f32", 0, inputs, n_inputs, outputs, n_outputs, attrs,
                   attrs_size);
}

int ge_nn_log_softmax_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                          const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                          size_t attrs_size) {
    return softmax(ctx, "ge_nn_log_softmax_f32", 1, inputs, n_inputs, outputs, n_outputs,
                   attrs, attrs_size);
}
