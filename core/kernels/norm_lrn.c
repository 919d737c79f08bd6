/*
 * LRN (ONNX LocalResponseNormalization across channels) on float32:
 *
 *     Y[n, c, i] = X[n, c, i] / (bias + alpha / size * sum of X[n, j, i]^2) ^ beta
 *
 * the sum over channels j from c - floor((size - 1) / 2) to c + ceil((size - 1) / 2),
 * clipped to [0, C). Spatial dims are flattened into `inner`.
 *
 * Blob (ge_hub/kernels/norm.py, pack_lrn; GE_LRN_BLOB in norm.h): ints N, C, inner, size; floats alpha / size
 * (divided in double, as the reference does), beta, bias.
 *
 * Work is split into (n, c, block of BLOCK positions) items: each sums its window's
 * squares into a stack buffer, so no scratch is needed and items are independent. An
 * item reads channels other than its own, so Y must not share X's memory.
 *
 * beta = 0.75 (AlexNet, GoogLeNet, ZFNet) is computed as sqrt(t) * sqrt(sqrt(t)) with
 * SSE's sqrtps: libm's powf does not vectorize, and sqrtf does not either under the
 * build's -fmath-errno. Other betas use powf. Both give NaN for a negative base.
 */
#include <math.h>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "norm.h"
#include "nn_common.h"

#define LRN_BLOCK 256
#define LRN_GRAIN_WORK 16384

typedef struct {
    int64_t channels, inner, blocks, below, above;
    float alpha_over_size, beta, bias;
    const float *x;
    float *y;
} lrn_job;

/* t^0.75 for `n` non-negative (or NaN-producing) values, in place. */
static void pow_three_quarters(float *t, int64_t n) {
    int64_t i = 0;
#if defined(__SSE__)
    for (; i + 4 <= n; i += 4) {
        __m128 root = _mm_sqrt_ps(_mm_loadu_ps(t + i));
        _mm_storeu_ps(t + i, _mm_mul_ps(root, _mm_sqrt_ps(root)));
    }
#endif
    for (; i < n; i++) {
        float root = sqrtf(t[i]);
        t[i] = root * sqrtf(root);
    }
}

NN_VECTORIZED static void lrn_items(void *arg, int64_t begin, int64_t end) {
    const lrn_job *job = (const lrn_job *)arg;
    const int64_t channels = job->channels, inner = job->inner;
    float window[LRN_BLOCK];
    for (int64_t item = begin; item < end; item++) {
        const int64_t block = item % job->blocks;
        const int64_t plane = item / job->blocks;  /* n * C + c */
        const int64_t c = plane % channels;
        const int64_t start = block * LRN_BLOCK;
        const int64_t count = inner - start < LRN_BLOCK ? inner - start : LRN_BLOCK;
        const int64_t first = c - job->below < 0 ? 0 : c - job->below;
        const int64_t last = c + job->above >= channels ? channels - 1 : c + job->above;
        for (int64_t i = 0; i < count; i++) {
            window[i] = 0.0f;
        }
        for (int64_t j = first; j <= last; j++) {
            const float *xj = job->x + (plane - c + j) * inner + start;
            for (int64_t i = 0; i < count; i++) {
                window[i] += xj[i] * xj[i];
            }
        }
        for (int64_t i = 0; i < count; i++) {
            window[i] = job->bias + job->alpha_over_size * window[i];
        }
        if (job->beta == 0.75f) {
            pow_three_quarters(window, count);
        } else {
            for (int64_t i = 0; i < count; i++) {
                window[i] = powf(window[i], job->beta);
            }
        }
        const float *x = job->x + plane * inner + start;
        float *y = job->y + plane * inner + start;
        for (int64_t i = 0; i < count; i++) {
            y[i] = x[i] / window[i];
        }
    }
}

int ge_lrn_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
               const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
               size_t attrs_size) {
    static const char *name = "ge_lrn_f32";
    ge_lrn_blob r;
    if (!ge_lrn_blob_read(attrs, attrs_size, &r) || r.n < 0 || r.channels < 0 || r.inner < 0
        || r.size < 1) {
        return ctx->set_error(ctx, "%s: attribute blob of %zu bytes does not have the layout "
                              "its packer (ge_hub/kernels/norm.py) writes", name, attrs_size);
    }
    const int64_t v[4] = {r.n, r.channels, r.inner, r.size};
    if (n_inputs != 1 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected 1 input and 1 output, got %d and %d", name,
                              (int)n_inputs, (int)n_outputs);
    }
    const int64_t numel = v[0] * v[1] * v[2];
    if (nn_check_f32(ctx, name, "input X", &inputs[0], numel)
        || nn_check_f32(ctx, name, "output Y", &outputs[0], numel)) {
        return -1;
    }
    if (numel == 0) {
        return 0;
    }
    lrn_job job;
    job.channels = v[1];
    job.inner = v[2];
    job.blocks = (job.inner + LRN_BLOCK - 1) / LRN_BLOCK;
    job.below = (v[3] - 1) / 2;
    job.above = v[3] - 1 - job.below;
    job.alpha_over_size = (float)r.alpha_over_size;
    job.beta = (float)r.beta;
    job.bias = (float)r.bias;
    job.x = (const float *)inputs[0].data;
    job.y = (float *)outputs[0].data;
    /* An item costs about (window channels + a power) per position. */
    const int64_t window = job.below + job.above + 1 < job.channels
                               ? job.below + job.above + 1 : job.channels;
    const int64_t item_work = (job.inner < LRN_BLOCK ? job.inner : LRN_BLOCK) * (window + 4);
    ctx->parallel_for(ctx, v[0] * job.channels * job.blocks,
                      nn_grain(item_work, LRN_GRAIN_WORK), lrn_items, &job);
    return 0;
}
