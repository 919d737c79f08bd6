/*
 * The tap-major bf16 convolution path (conv_pairs_bf16.h): the input converted once into
 * bf16 channel pairs, and the packer that copies their words into the packed-B panels.
 *
 * A panel's 32 output positions are cut into runs that stay in one output row (a 7x7 map
 * cuts 32 positions into five or six); per run and tap, the input words the run reads
 * are one strided run of each channel pair's plane, copied with zeros where the window
 * hangs over the padding. With unit stride and AVX-512 a run is two masked loads and two
 * masked stores per channel pair.
 */
#include "conv_pairs_bf16.h"

#include <string.h>

#include "nn_gemm_bf16.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define CONV_PAIRS_X86 1
#endif

#define NR NN_BF16_NR

typedef struct {
    const float *x;
    uint32_t *pairs;
    int64_t in_size;
} convert_job;

static void convert_planes(void *arg, int64_t begin, int64_t end) {
    const convert_job *job = (const convert_job *)arg;
    for (int64_t c = begin; c < end; c++) {
        const float *even = job->x + 2 * c * job->in_size;
        nn_bf16_interleave(even, even + job->in_size, job->in_size,
                           job->pairs + c * job->in_size);
    }
}

void conv_pairs_convert(ge_context *ctx, const float *x, int64_t channel_pairs,
                        int64_t in_size, uint32_t *pairs) {
    convert_job job = {x, pairs, in_size};
    const int64_t grain = in_size >= 4096 ? 1 : (4096 + in_size - 1) / in_size;
    ctx->parallel_for(ctx, channel_pairs, grain, convert_planes, &job);
}

/* One run of one tap: for each of `planes` channel pairs, words [0, len) of the pair-row
 * at dst (rows NR words apart) get src[(j - lo) * stride] for j in [lo, hi), zeros
 * elsewhere (src: the word position lo reads, planes in_size apart). */
static void copy_run_generic(uint32_t *dst, const uint32_t *src, int64_t planes,
                             int64_t in_size, int64_t stride, int64_t lo, int64_t hi,
                             int64_t len) {
    for (int64_t c = 0; c < planes; c++, dst += NR, src += in_size) {
        for (int64_t j = 0; j < lo; j++) {
            dst[j] = 0;
        }
        for (int64_t j = lo; j < hi; j++) {
            dst[j] = src[(j - lo) * stride];
        }
        for (int64_t j = hi; j < len; j++) {
            dst[j] = 0;
        }
    }
}

#ifdef CONV_PAIRS_X86
static inline __mmask16 lanes(int64_t from, int64_t to) {  /* bits [from, to) of 16 */
    from = from < 0 ? 0 : from > 16 ? 16 : from;
    to = to < from ? from : to > 16 ? 16 : to;
    return (__mmask16)(((1u << to) - 1u) & ~((1u << from) - 1u));
}

/* copy_run_generic for unit stride: masked loads read only [lo, hi) and zero the rest. */
__attribute__((target("avx512f"))) static void copy_run_avx512(
    uint32_t *dst, const uint32_t *src, int64_t planes, int64_t in_size, int64_t lo,
    int64_t hi, int64_t len) {
    const __mmask16 load0 = lanes(lo, hi), load1 = lanes(lo - 16, hi - 16);
    const __mmask16 store0 = lanes(0, len), store1 = lanes(-16, len - 16);
    /* the loads' base, position 0, may lie before the plane: only lanes [lo, hi) are read */
    const uintptr_t base = (uintptr_t)src - (uintptr_t)lo * 4u;
    for (int64_t c = 0; c < planes; c++, dst += NR) {
        const uint32_t *s = (const uint32_t *)(base + (uintptr_t)(c * in_size) * 4u);
        _mm512_mask_storeu_epi32(dst, store0, _mm512_maskz_loadu_epi32(load0, s));
        if (store1) {
            _mm512_mask_storeu_epi32(dst + 16, store1, _mm512_maskz_loadu_epi32(load1, s + 16));
        }
    }
}
#endif

/* The output positions [first, first + count) of a panel, cut at output-row ends. */
typedef struct {
    int64_t at, len, oz, oy, ox;  /* at: the run's first position in the panel */
} pos_run;

static int64_t panel_runs(const nn_window *w, int64_t first, int64_t count, pos_run *runs) {
    int64_t n = 0, ox = first % w->out[2], rest = first / w->out[2];
    int64_t oy = rest % w->out[1], oz = rest / w->out[1];
    for (int64_t at = 0; at < count; n++) {
        const int64_t len = count - at < w->out[2] - ox ? count - at : w->out[2] - ox;
        runs[n] = (pos_run){at, len, oz, oy, ox};
        at += len;
        ox = 0;
        if (++oy == w->out[1]) {
            oy = 0;
            oz++;
        }
    }
    return n;
}

void conv_pairs_pack(const void *arg, int64_t col0, int64_t cols, uint16_t *panels,
                     int64_t panel_stride, int64_t k) {
    const conv_pairs *cp = (const conv_pairs *)arg;
    const nn_window *w = cp->w;
    const int64_t in_size = nn_window_in_size(w), planes = cp->channel_pairs;
    const int64_t kp = nn_bf16_depth(k), tap_rows = k / 2;  /* k even: whole pairs */
    const int simd = nn_bf16_simd();
    pos_run runs[NR];
    for (int64_t p0 = 0; p0 < cols; p0 += NR) {
        uint32_t *panel = (uint32_t *)(panels + (p0 / NR) * panel_stride);
        const int64_t count = cols - p0 < NR ? cols - p0 : NR;
        if (count < NR) {  /* the last panel's missing positions are zeros in every row */
            memset(panel, 0, (size_t)(tap_rows * NR) * sizeof(uint32_t));
        }
        /* pair-rows past the depth: zeros */
        memset(panel + tap_rows * NR, 0, (size_t)((kp / 2 - tap_rows) * NR) * sizeof(uint32_t));
        const int64_t n_runs = panel_runs(w, col0 + p0, count, runs);
        for (int64_t r = 0; r < n_runs; r++) {
            const pos_run *run = &runs[r];
            int64_t tap = 0;
            for (int64_t kz = 0; kz < w->k[0]; kz++) {
                const int64_t iz = run->oz * w->stride[0] + kz * w->dil[0] - w->pad[0];
                for (int64_t ky = 0; ky < w->k[1]; ky++) {
                    const int64_t iy = run->oy * w->stride[1] + ky * w->dil[1] - w->pad[1];
                    const int row_ok = iz >= 0 && iz < w->in[0] && iy >= 0 && iy < w->in[1];
                    for (int64_t kx = 0; kx < w->k[2]; kx++, tap++) {
                        uint32_t *dst = panel + tap * planes * NR + run->at;
                        const int64_t offset = kx * w->dil[2] - w->pad[2];
                        int64_t lo = 0, hi = 0;  /* the run's positions that read the input */
                        if (row_ok) {
                            nn_position_range(offset, w->stride[2], w->in[2], w->out[2], &lo,
                                              &hi);
                            lo = lo > run->ox ? lo - run->ox : 0;
                            hi = hi > run->ox ? hi - run->ox : 0;
                            hi = hi < run->len ? hi : run->len;
                            lo = lo < hi ? lo : hi;
                        }
                        /* the input word read by position lo (not read when lo == hi) */
                        const uint32_t *src = lo < hi ? cp->pairs + (iz * w->in[1] + iy) * w->in[2]
                                                           + (run->ox + lo) * w->stride[2] + offset
                                                      : cp->pairs;
#ifdef CONV_PAIRS_X86
                        if (simd && w->stride[2] == 1) {
                            copy_run_avx512(dst, src, planes, in_size, lo, hi, run->len);
                            continue;
                        }
#endif
                        (void)simd;
                        copy_run_generic(dst, src, planes, in_size, w->stride[2], lo, hi,
                                         run->len);
                    }
                }
            }
        }
    }
}
