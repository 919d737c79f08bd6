/*
 * ge_hub.MaxPoolNHWC (ge_max_pool_nhwc): MaxPool over a 2-D window on channels-last
 * tensors, X and Y (N, H, W, C) both float32 or both bfloat16 (the `channels_last` pass's
 * chains; ResNet's MaxPool between its stem and its first block). A position's channels
 * are contiguous, so each output takes the NaN-keeping maximum of its taps' channel runs:
 * with AVX-512 and a multiple of 16 channels 16 at a time in a register across the taps
 * (GE_HUB_POOL_KERNEL=generic|avx2 forces the loops below), else one loop per tap over
 * the channels (NN_VECTORIZED), in chunks of CHUNK channels held as float32. A bf16 value is the float32 whose high half it is, and the maximum
 * picks one of its inputs, so the bf16 output is that float32's high half: exact, as the
 * reference's maximum is. An output whose window holds no input cell is -inf, as the
 * reference's (padding is -inf).
 *
 * Blob: ints N, C, then the window (nn_blob_window; 2-D: depth 1).
 */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "ge_hub/internal/simd.h"
#include "nn_common.h"
#include "nn_gemm_bf16.h"
#include "pool.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define NN_POOL_NHWC_X86 1
#endif

/* Channels whose maxima a row of outputs keeps in float32 at a time. */
#define CHUNK 256

typedef struct {
    const void *x;
    void *y;
    nn_window w;
    int64_t c;
    int bf16;
    int avx512;  /* pool_row_avx512 runs it */
} nhwc_pool_job;

static ge_simd_level simd_level;
static pthread_once_t simd_once = PTHREAD_ONCE_INIT;

static void choose_simd(void) {
    simd_level = ge_simd_choose("GE_HUB_POOL_KERNEL");
}


/* One output's window: its taps inside X, [y_lo, y_hi) x [x_lo, x_hi), tap (ky, kx) at
 * X's value first + ky * y_step + kx * x_step (first, tap (0, 0)'s, may lie outside X:
 * only taps inside are read), and its own first value in Y. */
typedef struct {
    int64_t y_lo, y_hi, x_lo, x_hi, first, y_step, x_step, out;
} pool_cell;

static inline void cell_of(const nhwc_pool_job *job, int64_t image, int64_t oy, int64_t ox,
                           pool_cell *cell) {
    const nn_window *w = &job->w;
    const int64_t c = job->c, in_h = w->in[1], in_w = w->in[2];
    const int64_t y0 = oy * w->stride[1] - w->pad[1], x0 = ox * w->stride[2] - w->pad[2];
    nn_tap_range(y0, in_h, w->k[1], w->dil[1], &cell->y_lo, &cell->y_hi);
    nn_tap_range(x0, in_w, w->k[2], w->dil[2], &cell->x_lo, &cell->x_hi);
    cell->first = ((image * in_h + y0) * in_w + x0) * c;
    cell->y_step = w->dil[1] * in_w * c;
    cell->x_step = w->dil[2] * c;
    cell->out = ((image * w->out[1] + oy) * w->out[2] + ox) * c;
}

/* One output row's positions [0, out_w), each over its taps' channel runs, CHUNK channels
 * at a time; each dtype's loop written once (`bf16` a constant in each caller), compiled
 * for AVX-512, AVX2 and plain x86-64 (NN_VECTORIZED) around its channel loops. */
static inline __attribute__((always_inline)) void pool_row(const nhwc_pool_job *job,
                                                           int64_t image, int64_t oy,
                                                           const int bf16) {
    const int64_t c = job->c;
    float acc[CHUNK];
    for (int64_t ox = 0; ox < job->w.out[2]; ox++) {
        pool_cell cell;
        cell_of(job, image, oy, ox, &cell);
        const int64_t out = cell.out;
        for (int64_t c0 = 0; c0 < c; c0 += CHUNK) {
            const int64_t n = c - c0 < CHUNK ? c - c0 : CHUNK;
            for (int64_t i = 0; i < n; i++) {
                acc[i] = -INFINITY;
            }
            for (int64_t ky = cell.y_lo; ky < cell.y_hi; ky++) {
                for (int64_t kx = cell.x_lo; kx < cell.x_hi; kx++) {
                    const int64_t at = cell.first + ky * cell.y_step + kx * cell.x_step + c0;
                    if (bf16) {
                        const uint16_t *x = (const uint16_t *)job->x + at;
                        for (int64_t i = 0; i < n; i++) {
                            acc[i] = nn_max_keep_nan(acc[i], nn_bf16_value(x[i]));
                        }
                    } else {
                        const float *x = (const float *)job->x + at;
                        for (int64_t i = 0; i < n; i++) {
                            acc[i] = nn_max_keep_nan(acc[i], x[i]);
                        }
                    }
                }
            }
            if (bf16) {  /* the high half of the float32 each maximum is */
                uint16_t *y = (uint16_t *)job->y + out + c0;
                for (int64_t i = 0; i < n; i++) {
                    uint32_t bits;
                    memcpy(&bits, &acc[i], 4);
                    y[i] = (uint16_t)(bits >> 16);
                }
            } else {
                memcpy((float *)job->y + out + c0, acc, (size_t)n * sizeof(float));
            }
        }
    }
}

NN_VECTORIZED static void pool_row_bf16(const nhwc_pool_job *job, int64_t image, int64_t oy) {
    pool_row(job, image, oy, 1);
}

NN_VECTORIZED static void pool_row_f32(const nhwc_pool_job *job, int64_t image, int64_t oy) {
    pool_row(job, image, oy, 0);
}

#ifdef NN_POOL_NHWC_X86
/* 16 channels of X at `at` as float32 (a bf16 run widened by a shift). */
__attribute__((target("avx512f"))) static inline __m512 load16(const nhwc_pool_job *job,
                                                                int64_t at) {
    if (job->bf16) {
        const __m256i half = _mm256_loadu_si256((const __m256i *)((const uint16_t *)job->x + at));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
    }
    return _mm512_loadu_ps((const float *)job->x + at);
}

/* Channels [c0, c0 + 16 * G) of one output over its taps, G registers side by side (the
 * compare-and-blend chain of one register alone kept a tap 4-5 cycles long). */
__attribute__((target("avx512f"), always_inline)) static inline void pool_channels(
    const nhwc_pool_job *job, const pool_cell *cell, int64_t c0, const int G) {
    __m512 acc[4];
    for (int g = 0; g < G; g++) {
        acc[g] = _mm512_set1_ps(-INFINITY);
    }
    for (int64_t ky = cell->y_lo; ky < cell->y_hi; ky++) {
        for (int64_t kx = cell->x_lo; kx < cell->x_hi; kx++) {
            const int64_t at = cell->first + ky * cell->y_step + kx * cell->x_step + c0;
            for (int g = 0; g < G; g++) {
                const __m512 v = load16(job, at + 16 * g);
                const __mmask16 take = _mm512_cmp_ps_mask(v, acc[g], _CMP_GT_OQ)
                                       | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
                acc[g] = _mm512_mask_mov_ps(acc[g], take, v);
            }
        }
    }
    for (int g = 0; g < G; g++) {
        const int64_t at = cell->out + c0 + 16 * g;
        if (job->bf16) {  /* the high half of the float32 each maximum is */
            const __m256i high = _mm512_cvtepi32_epi16(
                _mm512_srli_epi32(_mm512_castps_si512(acc[g]), 16));
            _mm256_storeu_si256((__m256i *)((uint16_t *)job->y + at), high);
        } else {
            _mm512_storeu_ps((float *)job->y + at, acc[g]);
        }
    }
}

/* With AVX-512 and a multiple of 16 channels: per output, 64 channels at a time held in
 * four registers across the taps, the maximum kept NaN-sticky by a mask (v > acc, or v
 * NaN). The generic loops, a chunk through memory per tap, took ResNet-18's 64-channel
 * pool 0.31 ms; one register at a time 0.17 ms (one thread, AMX Xeon). */
__attribute__((target("avx512f"))) static void pool_row_avx512(const nhwc_pool_job *job,
                                                                int64_t image, int64_t oy) {
    for (int64_t ox = 0; ox < job->w.out[2]; ox++) {
        pool_cell cell;
        cell_of(job, image, oy, ox, &cell);
        int64_t c0 = 0;
        for (; c0 + 64 <= job->c; c0 += 64) {
            pool_channels(job, &cell, c0, 4);
        }
        for (; c0 < job->c; c0 += 16) {
            pool_channels(job, &cell, c0, 1);
        }
    }
}
#endif

/* Output rows [begin, end) of all images (image * out_h + oy). */
static void max_pool_rows(void *arg, int64_t begin, int64_t end) {
    const nhwc_pool_job *job = (const nhwc_pool_job *)arg;
    const int64_t out_h = job->w.out[1];
    for (int64_t row = begin; row < end; row++) {
#ifdef NN_POOL_NHWC_X86
        if (job->avx512) {
            pool_row_avx512(job, row / out_h, row % out_h);
            continue;
        }
#endif
        if (job->bf16) {
            pool_row_bf16(job, row / out_h, row % out_h);
        } else {
            pool_row_f32(job, row / out_h, row % out_h);
        }
    }
}

GE_KERNEL(ge_max_pool_nhwc) {
    static const char *name = "ge_max_pool_nhwc";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    int64_t head[2];
    nhwc_pool_job job;
    if (!ge_blob_ints(&blob, head, 2) || !nn_blob_window(&blob, &job.w, 0)
        || !ge_blob_done(&blob) || head[0] < 0 || head[1] < 0 || job.w.in[0] != 1
        || job.w.out[0] != 1 || job.w.k[0] != 1) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    if (n_inputs != 1 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected 1 input and 1 output, got %d and %d", name,
                              (int)n_inputs, (int)n_outputs);
    }
    const int64_t n = head[0];
    job.c = head[1];
    job.bf16 = inputs[0].dtype == GE_BFLOAT16;
    const int64_t in_numel = nn_numel3(n, nn_window_in_size(&job.w), job.c);
    const int64_t out_numel = nn_numel3(n, nn_window_out_size(&job.w), job.c);
    if (job.bf16 ? nn_check_bf16(ctx, name, "input X", &inputs[0], in_numel)
                     || nn_check_bf16(ctx, name, "output Y", &outputs[0], out_numel)
                 : nn_check_f32(ctx, name, "input X", &inputs[0], in_numel)
                     || nn_check_f32(ctx, name, "output Y", &outputs[0], out_numel)) {
        return -1;
    }
    pthread_once(&simd_once, choose_simd);
    job.avx512 = simd_level == GE_SIMD_AVX512 && job.c % 16 == 0;
    job.x = inputs[0].data;
    job.y = outputs[0].data;
    const int64_t rows = n * job.w.out[1];
    const int64_t row_work = nn_numel3(job.w.out[2] * nn_window_taps(&job.w), job.c, 1);
    ctx->parallel_for(ctx, rows, nn_grain(row_work, 32768), max_pool_rows, &job);
    return 0;
}
