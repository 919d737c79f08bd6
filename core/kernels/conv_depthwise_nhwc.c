/*
 * ge_hub.FusedConvNHWC for a depthwise window (group = channels, one kernel per channel)
 * on bfloat16 channels-last activations (ge_conv_depthwise_nhwc_bf16): the depthwise
 * layers of a `channels_last` chain, so that MobileNetV2's blocks keep their activations
 * channels-last and bf16 from one pointwise product to the next, as OpenVINO's CPU plugin
 * does, instead of leaving the chain at every depthwise Conv.
 *
 * Work: tasks of (image, block of 32 channels, band of output rows); the chain pads the
 * channels to a multiple of 32. A task widens the input rows its band reads to fp32, a
 * row at a time and each once, into a ring of zero-padded rows of positions of 32 floats
 * (and a row of zeros, which the window's rows in the padding read),
 * then sums each output's taps over the ring: with AVX-512, 4 neighbouring outputs at a
 * time in registers across the taps, a window row's runs loaded once for the 4 where the
 * window is 3 wide, undilated, at stride 1 or 2 (else each tap's run read from memory by
 * its multiply-add); GE_HUB_DEPTHWISE_KERNEL=generic|avx2 forces the plain loops instead.
 * MobileNetV2's 144-channel 56x56 layer, one thread on the AMX Xeon: widening each tap's
 * run where it was read (4 times more often) 0.16 ms; from the ring, a run per tap 0.17,
 * a run per window row 0.15, and rounded by vcvtne2ps2bf16 0.135 (the planar fp32
 * kernel: 0.12, for 144 channels, not 160; both run at about one 16-lane multiply-add a
 * cycle).
 *
 * The sums are fp32 (the inputs are bf16, exactly fp32 values; the weights and bias fp32),
 * over the window's rows in order, each row's taps in order; the activation applies to
 * each sum, then it is rounded to bf16 once, as every bf16 store rounds (nearest even, NaN
 * kept quiet; with AVX512-BF16 one instruction, which reads fp32 subnormals as zero).
 * Padding columns and rows are zeros that the taps multiply: they add nothing, but for an
 * inf or NaN weight, which meets them as NaN, as in the reference's zero padding.
 *
 * Blob: ints N, C (a multiple of 32), activation (FUSED_ACT_*), band, then the window (nn_blob_window; 2-D: depth 1; its span at most DW_NHWC_MAX_SPAN rows), then
 * floats alpha, beta. Inputs: X [N, H, W, C] bf16; W the weights tap by tap [kh * kw, C]
 * fp32 (prepacked from the Conv's [C, 1, kh, kw]); B [C] fp32. Output Y [N, OH, OW, C]
 * bf16. Each thread's ring is its own (ge_thread_workspace): tasks go to threads as the
 * pool hands out chunks of them, finer than fixed slots (the 14x14 layers of 576
 * channels, 18 tasks in 4 slots, ran no faster on two threads than on one).
 */
#include <pthread.h>
#include <string.h>

#include "conv.h"
#include "conv_epilogue.h"
#include "ge_hub/internal/simd.h"
#include "ge_hub/internal/threadpool.h"
#include "nn_common.h"
#include "nn_gemm_bf16.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define DW_NHWC_X86 1
#include "math_avx512.h"
#endif

/* Channels of a block, and outputs whose sums one pass of the AVX-512 loop holds. */
#define BLOCK 32
#define GROUP 4
/* The most rows a window spans, (kh - 1) * dilation + 1: the ring holds that many. */
#define DW_NHWC_MAX_SPAN 16

typedef struct {
    int64_t n, c, band;
    nn_window w;
    nn_epilogue epilogue;
} dw_params;

typedef struct {
    const dw_params *p;
    const uint16_t *x;
    const float *w, *b;
    uint16_t *y;
    int64_t span, left, pitch, ring_floats, bands, blocks;
    int avx512, cvt;
    int failed;  /* a thread's ring could not be allocated */
} dw_job;

static int use_avx512, use_cvt;
static pthread_once_t simd_once = PTHREAD_ONCE_INIT;

static void choose_simd(void) {
#ifdef DW_NHWC_X86
    use_avx512 = ge_simd_choose("GE_HUB_DEPTHWISE_KERNEL") == GE_SIMD_AVX512
                 && __builtin_cpu_supports("avx512bw");
    use_cvt = use_avx512 && nn_bf16_cvt();
#endif
}

/* A ring row's positions: the left padding, X's row, then whatever the last window
 * reaches past it. */
static int64_t ring_pitch(const nn_window *w) {
    const int64_t reach = (w->out[2] - 1) * w->stride[2] + (w->k[2] - 1) * w->dil[2] + 1;
    const int64_t past = reach - w->pad[2] - w->in[2];
    return w->pad[2] + w->in[2] + (past > 0 ? past : 0);
}

/* Floats of a ring: the window's rows and a row of zeros (-1: past a size). */
static int64_t ring_floats(const nn_window *w) {
    const int64_t span = (w->k[1] - 1) * w->dil[1] + 1;
    const int64_t floats = nn_numel3(span + 1, ring_pitch(w), BLOCK);
    return floats < 0 ? -1 : (floats + 15) / 16 * 16;
}

/* `count` positions of a block's 32 channels of X (`c` values apart) widened to fp32
 * into a ring row, position by position. */
NN_VECTORIZED static void widen_generic(const uint16_t *src, int64_t c, int64_t count,
                                        float *dst) {
    for (int64_t i = 0; i < count; i++) {
        for (int64_t j = 0; j < BLOCK; j++) {
            dst[i * BLOCK + j] = nn_bf16_value(src[i * c + j]);
        }
    }
}

/* An output row of the block's channels over `rows` (window row ky's at rows[ky]), one
 * output at a time. */
NN_VECTORIZED static void outputs_generic(const dw_job *job, float *const *rows,
                                          int64_t c0, uint16_t *out) {
    const nn_window *w = &job->p->w;
    const int64_t c = job->p->c, kw = w->k[2];
    float acc[BLOCK];
    for (int64_t ox = 0; ox < w->out[2]; ox++) {
        for (int64_t i = 0; i < BLOCK; i++) {
            acc[i] = job->b[c0 + i];
        }
        for (int64_t ky = 0; ky < w->k[1]; ky++) {
            for (int64_t kx = 0; kx < kw; kx++) {
                const float *x = rows[ky] + (ox * w->stride[2] + kx * w->dil[2]) * BLOCK;
                const float *wt = job->w + (ky * kw + kx) * c + c0;
                for (int64_t i = 0; i < BLOCK; i++) {
                    acc[i] += x[i] * wt[i];
                }
            }
        }
        if (job->p->epilogue.activation != FUSED_ACT_NONE) {
            nn_epilogue_run(&job->p->epilogue, acc, NULL, BLOCK);
        }
        for (int64_t j = 0; j < BLOCK; j++) {
            out[ox * c + c0 + j] = nn_bf16_of(acc[j]);
        }
    }
}

#ifdef DW_NHWC_X86
/* The x86 code below is compiled for AVX-512 with BW and BF16, and runs where the CPU has
 * AVX-512 with BW (dw_job.avx512); the one BF16 instruction only where it has that too
 * (dw_job.cvt), as nn_gemm_bf16.c's stores. */
#define DW_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

DW_TARGET static void widen_avx512(const uint16_t *src, int64_t c, int64_t count, float *dst) {
    for (int64_t i = 0; i < count; i++) {
        const __m512i v = _mm512_loadu_si512(src + i * c);
        const __m512i lo = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(v));
        const __m512i hi = _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(v, 1));
        _mm512_storeu_si512(dst + i * BLOCK, _mm512_slli_epi32(lo, 16));
        _mm512_storeu_si512(dst + i * BLOCK + 16, _mm512_slli_epi32(hi, 16));
    }
}

/* Sums of 32 channels (lo: the first 16) activated, rounded to bf16 and stored. */
DW_TARGET __attribute__((always_inline)) static inline void store32(const dw_job *job,
                                                                     __m512 lo, __m512 hi,
                                                                     uint16_t *y) {
    const nn_epilogue *e = &job->p->epilogue;
    if (e->activation == FUSED_ACT_RELU || e->activation == FUSED_ACT_CLIP) {
        /* max(low, v) and min(high, v) return v where it is NaN (their second operand) */
        const int clip = e->activation == FUSED_ACT_CLIP;
        const __m512 low = _mm512_set1_ps(clip ? (float)e->alpha : 0.0f);
        lo = _mm512_max_ps(low, lo);
        hi = _mm512_max_ps(low, hi);
        if (clip) {
            const __m512 high = _mm512_set1_ps((float)e->beta);
            lo = _mm512_min_ps(high, lo);
            hi = _mm512_min_ps(high, hi);
        }
    } else if (e->activation != FUSED_ACT_NONE) {
        float run[BLOCK];
        _mm512_storeu_ps(run, lo);
        _mm512_storeu_ps(run + 16, hi);
        nn_epilogue_run(e, run, NULL, BLOCK);
        lo = _mm512_loadu_ps(run);
        hi = _mm512_loadu_ps(run + 16);
    }
    if (job->cvt) {  /* one instruction for the 32 roundings */
        _mm512_storeu_si512(y, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        return;
    }
    _mm256_storeu_si256((__m256i *)y, _mm512_cvtepi32_epi16(_mm512_srli_epi32(round_high(lo), 16)));
    _mm256_storeu_si256((__m256i *)(y + 16),
                        _mm512_cvtepi32_epi16(_mm512_srli_epi32(round_high(hi), 16)));
}

/* G outputs from ox on, each tap one fused multiply-add per half from the ring. */
DW_TARGET __attribute__((always_inline)) static inline void outputs_g(
    const dw_job *job, float *const *rows, int64_t c0,
    int64_t ox, uint16_t *out, const int G) {
    const nn_window *w = &job->p->w;
    const int64_t c = job->p->c, kw = w->k[2];
    const int64_t step = w->stride[2] * BLOCK, first = ox * step;
    __m512 lo[GROUP], hi[GROUP];  /* channels [c0, c0 + 16), then the next 16 */
    for (int g = 0; g < G; g++) {
        lo[g] = _mm512_loadu_ps(job->b + c0);
        hi[g] = _mm512_loadu_ps(job->b + c0 + 16);
    }
    for (int64_t ky = 0; ky < w->k[1]; ky++) {
        for (int64_t kx = 0; kx < kw; kx++) {
            const float *wt = job->w + (ky * kw + kx) * c + c0;
            const __m512 w_lo = _mm512_loadu_ps(wt), w_hi = _mm512_loadu_ps(wt + 16);
            const float *x = rows[ky] + first + kx * w->dil[2] * BLOCK;
            for (int g = 0; g < G; g++) {
                lo[g] = _mm512_fmadd_ps(_mm512_loadu_ps(x + g * step), w_lo, lo[g]);
                hi[g] = _mm512_fmadd_ps(_mm512_loadu_ps(x + g * step + 16), w_hi, hi[g]);
            }
        }
    }
    for (int g = 0; g < G; g++) {
        store32(job, lo[g], hi[g], out + (ox + g) * c + c0);
    }
}

/* The same for GROUP outputs of an undilated window KW wide at stride SX: per window row,
 * the runs of the ring they read are loaded once, each used by up to KW taps (a tap's
 * run read from memory for each output, as outputs_g does, took MobileNetV2's 144-channel
 * 56x56 layer 0.17 ms, loaded once 0.15; one thread, AMX Xeon). */
DW_TARGET __attribute__((always_inline)) static inline void outputs_shared(
    const dw_job *job, float *const *rows, int64_t c0,
    int64_t ox, uint16_t *out, const int KW, const int SX) {
    enum { MAX_RUNS = (GROUP - 1) * 2 + 3 };  /* KW 3, SX 2 */
    const int runs = (GROUP - 1) * SX + KW;
    const int64_t c = job->p->c, kh = job->p->w.k[1];
    __m512 lo[GROUP], hi[GROUP];  /* channels [c0, c0 + 16), then the next 16 */
    for (int g = 0; g < GROUP; g++) {
        lo[g] = _mm512_loadu_ps(job->b + c0);
        hi[g] = _mm512_loadu_ps(job->b + c0 + 16);
    }
    for (int64_t ky = 0; ky < kh; ky++) {
        const float *x = rows[ky] + ox * SX * BLOCK;
        __m512 x_lo[MAX_RUNS], x_hi[MAX_RUNS];
        for (int i = 0; i < runs; i++) {
            x_lo[i] = _mm512_loadu_ps(x + i * BLOCK);
            x_hi[i] = _mm512_loadu_ps(x + i * BLOCK + 16);
        }
        const float *wt = job->w + ky * KW * c + c0;
        for (int kx = 0; kx < KW; kx++) {
            const __m512 w_lo = _mm512_loadu_ps(wt + kx * c);
            const __m512 w_hi = _mm512_loadu_ps(wt + kx * c + 16);
            for (int g = 0; g < GROUP; g++) {
                lo[g] = _mm512_fmadd_ps(x_lo[g * SX + kx], w_lo, lo[g]);
                hi[g] = _mm512_fmadd_ps(x_hi[g * SX + kx], w_hi, hi[g]);
            }
        }
    }
    for (int g = 0; g < GROUP; g++) {
        store32(job, lo[g], hi[g], out + (ox + g) * c + c0);
    }
}

DW_TARGET static void outputs_avx512(const dw_job *job, float *const *rows, int64_t c0,
                                     uint16_t *out) {
    const nn_window *w = &job->p->w;
    const int64_t out_w = w->out[2], kw = w->k[2], sx = w->stride[2];
    const int shared = w->dil[2] == 1 ? (kw == 3 && sx == 1 ? 1 : kw == 3 && sx == 2 ? 2 : 0)
                                      : 0;
    int64_t ox = 0;
    for (; ox + GROUP <= out_w; ox += GROUP) {
        if (shared == 1) {
            outputs_shared(job, rows, c0, ox, out, 3, 1);
        } else if (shared == 2) {
            outputs_shared(job, rows, c0, ox, out, 3, 2);
        } else {
            outputs_g(job, rows, c0, ox, out, GROUP);
        }
    }
    for (; ox < out_w; ox++) {
        outputs_g(job, rows, c0, ox, out, 1);
    }
}
#endif

/* Task t (image, band, block: a thread's chunk of tasks is rows of all channels, those
 * that the layers before and after it cut alike give it too) in `ring`: its output rows, their input rows widened into
 * the ring as they are first read. */
static void run_task(const dw_job *job, int64_t t, float *ring) {
    const dw_params *p = job->p;
    const nn_window *w = &p->w;
    const int64_t block = t % job->blocks, band = t / job->blocks % job->bands;
    const int64_t image = t / (job->bands * job->blocks), c0 = block * BLOCK;
    const int64_t o0 = band * p->band;
    const int64_t o1 = o0 + p->band < w->out[1] ? o0 + p->band : w->out[1];
    const int64_t row_floats = job->pitch * BLOCK, kh = w->k[1];
    int64_t held[DW_NHWC_MAX_SPAN];  /* the input row in each ring row, -1: none */
    memset(ring, 0, (size_t)job->ring_floats * sizeof(float));
    for (int64_t i = 0; i < job->span; i++) {
        held[i] = -1;
    }
    const uint16_t *x = job->x + image * nn_window_in_size(w) * p->c + c0;
    float *zeros = ring + job->span * row_floats;  /* padding rows: never written */
    for (int64_t oy = o0; oy < o1; oy++) {
        const int64_t y0 = oy * w->stride[1] - w->pad[1];
        float *rows[DW_NHWC_MAX_SPAN];
        for (int64_t ky = 0; ky < kh; ky++) {
            const int64_t iy = y0 + ky * w->dil[1], slot = iy % job->span;
            if (iy < 0 || iy >= w->in[1]) {
                rows[ky] = zeros;
                continue;
            }
            rows[ky] = ring + slot * row_floats;
            if (held[slot] != iy) {
                const uint16_t *src = x + iy * w->in[2] * p->c;
                float *dst = rows[ky] + job->left * BLOCK;
#ifdef DW_NHWC_X86
                if (job->avx512) {
                    widen_avx512(src, p->c, w->in[2], dst);
                } else
#endif
                {
                    widen_generic(src, p->c, w->in[2], dst);
                }
                held[slot] = iy;
            }
        }
        uint16_t *out = job->y + (image * w->out[1] + oy) * w->out[2] * p->c;
#ifdef DW_NHWC_X86
        if (job->avx512) {
            outputs_avx512(job, rows, c0, out);
            continue;
        }
#endif
        outputs_generic(job, rows, c0, out);
    }
}

/* Tasks [begin, end), in the calling thread's ring (ge_thread_workspace). */
static void run_tasks(void *arg, int64_t begin, int64_t end) {
    dw_job *job = (dw_job *)arg;
    float *ring = ge_thread_workspace((size_t)job->ring_floats * sizeof(float));
    if (ring == NULL) {
        __atomic_store_n(&job->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t t = begin; t < end; t++) {
        run_task(job, t, ring);
    }
}

/* The blob's values, checked: 0 when they do not describe a step this kernel runs. */
static int read_params(ge_blob *blob, dw_params *p) {
    int64_t v[4];
    double f[2] = {0.0, 0.0};
    if (!ge_blob_ints(blob, v, 4) || !nn_blob_window(blob, &p->w, 0)
        || !ge_blob_floats(blob, f, 2) || !ge_blob_done(blob)) {
        return 0;
    }
    p->n = v[0];
    p->c = v[1];
    p->band = v[3];
    p->epilogue = (nn_epilogue){(int)v[2], f[0], f[1], NULL};
    const nn_window *w = &p->w;
    const int64_t span = (w->k[1] - 1) * w->dil[1] + 1;
    return p->n >= 0 && p->c >= BLOCK && p->c % BLOCK == 0 && p->c <= NN_MAX_NUMEL
           && v[2] >= FUSED_ACT_NONE && v[2] < FUSED_ACT_COUNT && p->band >= 1
           && p->band <= NN_MAX_NUMEL && w->in[0] == 1 && w->out[0] == 1 && w->k[0] == 1
           && span <= DW_NHWC_MAX_SPAN && w->pad[1] >= 0 && w->pad[2] >= 0
           /* no window starts in the padding past its reach (the ring's left padding) */
           && w->pad[1] <= (w->k[1] - 1) * w->dil[1] && w->pad[2] <= (w->k[2] - 1) * w->dil[2]
           && ring_floats(w) >= 0 && nn_numel3(ring_floats(w), sizeof(float), 1) >= 0;
}

GE_KERNEL(ge_conv_depthwise_nhwc_bf16) {
    static const char *name = "ge_conv_depthwise_nhwc_bf16";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    dw_params p;
    if (!read_params(&blob, &p)) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    if (n_inputs < 3 || n_inputs > 4 || (n_inputs == 4 && inputs[3].data != NULL)
        || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected inputs X, W, B (no residual) and 1 output, "
                              "got %d and %d", name, (int)n_inputs, (int)n_outputs);
    }
    const nn_window *w = &p.w;
    if (nn_check_bf16(ctx, name, "input X", &inputs[0], nn_numel3(p.n, nn_window_in_size(w), p.c))
        || nn_check_f32(ctx, name, "input W", &inputs[1], nn_numel3(nn_window_taps(w), p.c, 1))
        || nn_check_f32(ctx, name, "input B", &inputs[2], p.c)
        || nn_check_bf16(ctx, name, "output Y", &outputs[0],
                         nn_numel3(p.n, nn_window_out_size(w), p.c))) {
        return -1;
    }
    pthread_once(&simd_once, choose_simd);
    dw_job job = {&p,
                  (const uint16_t *)inputs[0].data,
                  (const float *)inputs[1].data,
                  (const float *)inputs[2].data,
                  (uint16_t *)outputs[0].data,
                  (w->k[1] - 1) * w->dil[1] + 1,
                  w->pad[2],
                  ring_pitch(w),
                  ring_floats(w),
                  (w->out[1] + p.band - 1) / p.band,
                  p.c / BLOCK,
                  use_avx512,
                  use_cvt,
                  0};
    if (p.n == 0) {
        return 0;
    }
    ctx->parallel_for(ctx, p.n * job.blocks * job.bands, 1, run_tasks, &job);
    if (job.failed) {
        return ctx->set_error(ctx, "%s: could not allocate a thread's %lld bytes of rows", name,
                              (long long)(job.ring_floats * (int64_t)sizeof(float)));
    }
    return 0;
}
