/*
 * Direct depthwise convolution for 2-D windows up to 7x7 with horizontal stride 1 and
 * vertical stride 1 or 2 (the stride-1 3x3 and 5x5 depthwise layers of MobileNetV2,
 * ShuffleNet, EfficientNet; nn_conv_depthwise_fits says which). The plane copy below is
 * written for any horizontal stride s, but only s = 1 is taken today.
 *
 * Each plane (one channel of one image) is first copied into a zero-padded buffer, so
 * that the inner loops never test bounds: with horizontal stride s the padded columns
 * are split into s phases (phase ph holds columns ph, ph + s, ph + 2s, ...), which makes
 * every tap's inputs for consecutive outputs contiguous:
 *     out[oy][ox] = bias + sum over (ky, kx) of w[ky][kx] * phase[kx % s][oy * sy + ky][ox + kx / s]
 * A row kernel computes one output row at a time from the taps' row pointers, vectors of
 * outputs in registers across all taps (taps in ascending order, from the bias), and the
 * FusedConv epilogue (conv_epilogue.h) runs on each finished plane while it is in cache.
 *
 * Row kernels, picked once from the CPU (GE_HUB_DEPTHWISE_KERNEL forces one it supports):
 *   avx512   32 outputs per step in two zmm accumulators, a masked store at the end;
 *   avx2     16 outputs per step in two ymm accumulators, the last few through a buffer;
 *   generic  plain C, for other CPUs.
 * The SIMD ones use fused multiply-add, so they may differ from the generic one in the
 * last bit. Phase rows carry NN_DW_SLACK zero floats past the last output's taps, so a
 * full vector load at the end of a row stays inside the buffer.
 */
#include "conv_depthwise.h"

#include "ge_hub/internal/simd.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define NN_DW_X86 1
#endif

#define NN_DW_SLACK 32
/* Elements of work per parallel chunk: small convolutions run inline. */
#define NN_DW_GRAIN_WORK 32768

typedef void (*dw_row_fn)(const float *const *taps, const float *weights, int ntaps,
                          float bias, float *out, int64_t out_w);

static void row_generic(const float *const *taps, const float *weights, int ntaps,
                        float bias, float *out, int64_t out_w) {
    for (int64_t ox = 0; ox < out_w; ox++) {
        out[ox] = bias;
    }
    for (int t = 0; t < ntaps; t++) {
        const float *src = taps[t];
        const float weight = weights[t];
        for (int64_t ox = 0; ox < out_w; ox++) {
            out[ox] += weight * src[ox];
        }
    }
}

#ifdef NN_DW_X86
__attribute__((target("avx512f"))) static void row_avx512(
    const float *const *taps, const float *weights, int ntaps, float bias, float *out,
    int64_t out_w) {
    int64_t ox = 0;
    for (; ox + 32 <= out_w; ox += 32) {
        __m512 acc0 = _mm512_set1_ps(bias), acc1 = acc0;
        for (int t = 0; t < ntaps; t++) {
            const __m512 wv = _mm512_set1_ps(weights[t]);
            acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(taps[t] + ox), wv, acc0);
            acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(taps[t] + ox + 16), wv, acc1);
        }
        _mm512_storeu_ps(out + ox, acc0);
        _mm512_storeu_ps(out + ox + 16, acc1);
    }
    for (; ox < out_w; ox += 16) {
        const int64_t left = out_w - ox;
        const __mmask16 mask = (__mmask16)(left >= 16 ? 0xFFFF : (1u << left) - 1u);
        __m512 acc = _mm512_set1_ps(bias);
        for (int t = 0; t < ntaps; t++) {  /* the slack keeps a full load in bounds */
            acc = _mm512_fmadd_ps(_mm512_loadu_ps(taps[t] + ox), _mm512_set1_ps(weights[t]),
                                  acc);
        }
        _mm512_mask_storeu_ps(out + ox, mask, acc);
    }
}

__attribute__((target("avx2,fma"))) static void row_avx2(
    const float *const *taps, const float *weights, int ntaps, float bias, float *out,
    int64_t out_w) {
    int64_t ox = 0;
    for (; ox + 16 <= out_w; ox += 16) {
        __m256 acc0 = _mm256_set1_ps(bias), acc1 = acc0;
        for (int t = 0; t < ntaps; t++) {
            const __m256 wv = _mm256_set1_ps(weights[t]);
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(taps[t] + ox), wv, acc0);
            acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(taps[t] + ox + 8), wv, acc1);
        }
        _mm256_storeu_ps(out + ox, acc0);
        _mm256_storeu_ps(out + ox + 8, acc1);
    }
    for (; ox < out_w; ox += 8) {
        __m256 acc = _mm256_set1_ps(bias);
        for (int t = 0; t < ntaps; t++) {
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(taps[t] + ox), _mm256_set1_ps(weights[t]),
                                  acc);
        }
        if (out_w - ox >= 8) {
            _mm256_storeu_ps(out + ox, acc);
        } else {
            float edge[8];
            _mm256_storeu_ps(edge, acc);
            memcpy(out + ox, edge, (size_t)(out_w - ox) * sizeof(float));
        }
    }
}
#endif /* NN_DW_X86 */

typedef struct {
    const char *name;
    dw_row_fn fn;
} dw_kernel;

static dw_kernel pick_kernel(void) {
    static const dw_kernel generic = {"generic", row_generic};
#ifdef NN_DW_X86
    static const dw_kernel avx512 = {"avx512", row_avx512};
    static const dw_kernel avx2 = {"avx2", row_avx2};
    switch (ge_simd_choose("GE_HUB_DEPTHWISE_KERNEL")) {
    case GE_SIMD_AVX512:
        return avx512;
    case GE_SIMD_AVX2:
        return avx2;
    case GE_SIMD_GENERIC:
        break;
    }
#endif
    return generic;
}

static dw_kernel chosen_kernel;
static pthread_once_t chosen_once = PTHREAD_ONCE_INIT;

static void choose_kernel(void) {
    chosen_kernel = pick_kernel();
}

static const dw_kernel *kernel(void) {
    pthread_once(&chosen_once, choose_kernel);
    return &chosen_kernel;
}

const char *nn_conv_depthwise_kernel_name(void) {
    return kernel()->name;
}

int nn_conv_depthwise_fits(const nn_window *w) {
    return w->in[0] == 1 && w->out[0] == 1 && w->k[0] == 1
           && w->k[1] >= 1 && w->k[1] <= NN_DEPTHWISE_MAX_K
           && w->k[2] >= 1 && w->k[2] <= NN_DEPTHWISE_MAX_K
           /* Horizontal stride 2 copies the whole plane into two phases to compute a
            * quarter of the outputs: measured slower (0.59 against 0.48 ms on 144
            * channels of 56x56) than conv.c's general loop, which it is left to. */
           && (w->stride[1] == 1 || w->stride[1] == 2) && w->stride[2] == 1
           && w->dil[1] == 1 && w->dil[2] == 1 && w->out[1] >= 1 && w->out[2] >= 1;
}

/* The padded plane's geometry: `phases` phases of `rows` rows, each `width` floats. */
typedef struct {
    int64_t phases, rows, width;
} dw_layout;

static dw_layout layout_of(const nn_window *w) {
    dw_layout l;
    l.phases = w->stride[2];
    l.rows = (w->out[1] - 1) * w->stride[1] + w->k[1];
    l.width = w->out[2] + (w->k[2] - 1) / w->stride[2] + 1 + NN_DW_SLACK;
    return l;
}

/* Copies plane `x` (in_h x in_w) into the padded phases: row r, padded column c =
 * j * s + phase holds x[r - pad_h][c - pad_w], zero outside. */
NN_VECTORIZED static void fill_padded(const nn_window *w, const dw_layout *l, const float *x, float *buf) {
    const int64_t s = w->stride[2], in_h = w->in[1], in_w = w->in[2];
    for (int64_t ph = 0; ph < l->phases; ph++) {
        for (int64_t r = 0; r < l->rows; r++) {
            float *dst = buf + (ph * l->rows + r) * l->width;
            const int64_t iy = r - w->pad[1];
            if (iy < 0 || iy >= in_h) {
                memset(dst, 0, (size_t)l->width * sizeof(float));
                continue;
            }
            const float *row = x + iy * in_w;
            if (s == 1) {  /* zeros, the row, zeros */
                const int64_t lead = w->pad[2] < l->width ? w->pad[2] : l->width;
                const int64_t count = in_w < l->width - lead ? in_w : l->width - lead;
                memset(dst, 0, (size_t)lead * sizeof(float));
                memcpy(dst + lead, row, (size_t)count * sizeof(float));
                memset(dst + lead + count, 0, (size_t)(l->width - lead - count) * sizeof(float));
                continue;
            }
            /* columns j with 0 <= j * s + ph - pad < in_w: [lo, hi) */
            const int64_t first = w->pad[2] - ph;
            int64_t lo = first <= 0 ? 0 : (first + s - 1) / s;
            int64_t hi = (in_w - 1 + first) >= 0 ? (in_w - 1 + first) / s + 1 : 0;
            hi = hi < l->width ? hi : l->width;
            lo = lo < hi ? lo : hi;
            memset(dst, 0, (size_t)lo * sizeof(float));
            const float *src = row + ph - w->pad[2];
            if (s == 2) {  /* a constant stride: the compiler vectorizes it with shuffles */
                for (int64_t j = lo; j < hi; j++) {
                    dst[j] = src[2 * j];
                }
            } else {
                for (int64_t j = lo; j < hi; j++) {
                    dst[j] = src[j * s];
                }
            }
            memset(dst + hi, 0, (size_t)(l->width - hi) * sizeof(float));
        }
    }
}

typedef struct {
    ge_context *ctx;
    int *failed;
    const nn_window *w;
    int64_t channels;
    const float *x, *weights, *bias;
    float *y;
    const nn_epilogue *epilogue;
    dw_row_fn row;
} dw_job;

/* Planes [begin, end), one padded buffer per chunk. */
static void dw_planes(void *arg, int64_t begin, int64_t end) {
    const dw_job *job = (const dw_job *)arg;
    const nn_window *w = job->w;
    const dw_layout l = layout_of(w);
    const int64_t kh = w->k[1], kw = w->k[2], sy = w->stride[1], sx = w->stride[2];
    const int64_t in_size = w->in[1] * w->in[2], out_size = w->out[1] * w->out[2];
    const int ntaps = (int)(kh * kw);
    const int epilogue = !nn_epilogue_empty(job->epilogue);
    float *buf = (float *)malloc((size_t)(l.phases * l.rows * l.width) * sizeof(float));
    if (buf == NULL) {
        job->ctx->set_error(job->ctx, "ge_conv: no memory for a depthwise plane of %lld floats",
                            (long long)(l.phases * l.rows * l.width));
        __atomic_store_n(job->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    const float *taps[NN_DEPTHWISE_MAX_K * NN_DEPTHWISE_MAX_K];
    for (int64_t plane = begin; plane < end; plane++) {
        const int64_t channel = plane % job->channels;
        const float *kernel = job->weights + channel * ntaps;
        const float bias = job->bias ? job->bias[channel] : 0.0f;
        float *y = job->y + plane * out_size;
        fill_padded(w, &l, job->x + plane * in_size, buf);
        for (int64_t oy = 0; oy < w->out[1]; oy++) {
            for (int64_t ky = 0; ky < kh; ky++) {
                for (int64_t kx = 0; kx < kw; kx++) {
                    const int64_t ph = kx % sx, r = oy * sy + ky;
                    taps[ky * kw + kx] = buf + (ph * l.rows + r) * l.width + kx / sx;
                }
            }
            job->row(taps, kernel, ntaps, bias, y + oy * w->out[2], w->out[2]);
        }
        if (epilogue) {  /* the plane just written, still in L1 or L2 */
            const float *res = job->epilogue->residual;
            nn_epilogue_run(job->epilogue, y, res ? res + plane * out_size : NULL, out_size);
        }
    }
    free(buf);
}

int nn_conv_depthwise(ge_context *ctx, const nn_window *w, int64_t planes, int64_t channels,
                      const float *x, const float *weights, const float *bias, float *y,
                      const nn_epilogue *epilogue) {
    int failed = 0;
    dw_job job = {ctx, &failed, w, channels, x, weights, bias, y, epilogue, kernel()->fn};
    const int64_t work = w->out[1] * w->out[2] * w->k[1] * w->k[2];
    ctx->parallel_for(ctx, planes, nn_grain(work, NN_DW_GRAIN_WORK), dw_planes, &job);
    return failed ? -1 : 0;
}
