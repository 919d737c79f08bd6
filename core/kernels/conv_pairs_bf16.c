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

/* copy_run_generic for unit stride: masked loads read only [lo, hi) and zero the rest. */
__attribute__((target("avx512f"))) static void copy_run_avx512(
    uint32_t *dst, const uint32_t *src, int64_t planes, int64_t in_size, int64_t lo,
    int64_t hi, int64_t len) {
    const __mmask16 load0 = nn_bf16_lanes(lo, hi), load1 = nn_bf16_lanes(lo - 16, hi - 16);
    const __mmask16 store0 = nn_bf16_lanes(0, len), store1 = nn_bf16_lanes(-16, len - 16);
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

/* copy_run_generic for stride 2: per 16 positions, the 32 words they span in two masked
 * loads (only words [2 lo, 2 hi - 1) read, the others zero), their even words picked by
 * one permute. ResNet-50's stride-2 3x3 layer of 128 channels at 56x56 (one layer, one
 * thread, Zen 4): 1237 -> 1154 us against copying word by word. */
__attribute__((target("avx512f"))) static void copy_run_avx512_stride2(
    uint32_t *dst, const uint32_t *src, int64_t planes, int64_t in_size, int64_t lo,
    int64_t hi, int64_t len) {
    const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24,
                                            26, 28, 30);
    const int64_t first = 2 * lo, last = 2 * hi - 1;  /* the words [first, last) read */
    const __mmask16 load0 = nn_bf16_lanes(first, last);
    const __mmask16 load1 = nn_bf16_lanes(first - 16, last - 16);
    const __mmask16 load2 = nn_bf16_lanes(first - 32, last - 32);
    const __mmask16 load3 = nn_bf16_lanes(first - 48, last - 48);
    const __mmask16 store0 = nn_bf16_lanes(0, len), store1 = nn_bf16_lanes(-16, len - 16);
    /* the loads' base, position 0's word, may lie before the plane: only read lanes count */
    const uintptr_t base = (uintptr_t)src - (uintptr_t)lo * 8u;
    for (int64_t c = 0; c < planes; c++, dst += NR) {
        const uint32_t *s = (const uint32_t *)(base + (uintptr_t)(c * in_size) * 4u);
        const __m512i w0 = _mm512_maskz_loadu_epi32(load0, s);
        const __m512i w1 = _mm512_maskz_loadu_epi32(load1, s + 16);
        _mm512_mask_storeu_epi32(dst, store0, _mm512_permutex2var_epi32(w0, evens, w1));
        if (store1) {
            const __m512i w2 = _mm512_maskz_loadu_epi32(load2, s + 32);
            const __m512i w3 = _mm512_maskz_loadu_epi32(load3, s + 48);
            _mm512_mask_storeu_epi32(dst + 16, store1, _mm512_permutex2var_epi32(w2, evens, w3));
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
        nn_bf16_panel_zeros(panel, count, tap_rows, kp);
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
                        if (simd && w->stride[2] == 2) {
                            copy_run_avx512_stride2(dst, src, planes, in_size, lo, hi,
                                                    run->len);
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

/* -- read in place: the padded grid ------------------------------------------------------- */

int conv_pairs_grid_of(const nn_window *w, int64_t cg, conv_pairs_grid *grid) {
    if (w->in[0] != 1 || w->out[0] != 1 || w->k[0] != 1 || w->stride[1] != 1
        || w->stride[2] != 1 || cg % (2 * 16) != 0 || w->k[1] * w->k[2] < 2 || w->pad[1] < 0
        || w->pad[2] < 0) {
        return 0;
    }
    const int64_t rows = w->out[1] + (w->k[1] - 1) * w->dil[1];
    const int64_t width = w->out[2] + (w->k[2] - 1) * w->dil[2];
    const int64_t pitch = (width + 15) / 16 * 16;
    if (rows < w->in[1] + w->pad[1] || width < w->in[2] + w->pad[2]) {
        return 0;  /* a window that trims the input's far side */
    }
    if ((pitch - width) * NN_GRID_MAX_WASTE > width) {
        return 0;  /* narrow rows: more columns computed and dropped than packing costs */
    }
    /* the last block's columns run up to 31 positions past the output rows */
    const int64_t plane = (rows * pitch + NR + 15) / 16 * 16;
    if (w->k[2] * (cg / 2) * plane * 4 > NN_GRID_MAX_BYTES) {
        return 0;  /* a grid past L2 is read from farther away than packed panels */
    }
    *grid = (conv_pairs_grid){pitch, rows, w->pad[1], w->pad[2], plane, w->k[2]};
    return 1;
}

int64_t conv_pairs_grid_bytes(const conv_pairs_grid *grid, int64_t cg, int64_t k) {
    return grid->copies * (cg / 2) * grid->plane * 4 + nn_bf16_depth(k) / NN_BF16_KB * 8;
}

typedef struct {
    const float *x;
    const nn_window *w;
    const conv_pairs_grid *grid;
    int64_t channel_pairs;
    uint32_t *planes;
} grid_job;

static void convert_grid_planes(void *arg, int64_t begin, int64_t end) {
    const grid_job *job = (const grid_job *)arg;
    const conv_pairs_grid *g = job->grid;
    const int64_t in_h = job->w->in[1], in_w = job->w->in[2], in_size = in_h * in_w;
    const int64_t right = g->pitch - g->left - in_w, copy = job->channel_pairs * g->plane;
    for (int64_t c = begin; c < end; c++) {
        const float *even = job->x + 2 * c * in_size, *odd = even + in_size;
        uint32_t *plane = job->planes + c * g->plane;
        memset(plane, 0, (size_t)(g->top * g->pitch + g->left) * sizeof *plane);
        for (int64_t y = 0; y < in_h; y++) {
            uint32_t *row = plane + (g->top + y) * g->pitch + g->left;
            nn_bf16_interleave(even + y * in_w, odd + y * in_w, in_w, row);
            /* this row's right pad and the next row's left one */
            memset(row + in_w, 0, (size_t)(right + (y + 1 < in_h ? g->left : 0)) * sizeof *row);
        }
        const int64_t done = (g->top + in_h) * g->pitch;
        memset(plane + done, 0, (size_t)(g->plane - done) * sizeof *plane);
        /* copy kx: the plane shifted left by kx dx words, zeros after */
        for (int64_t kx = 1; kx < g->copies; kx++) {
            const int64_t shift = kx * job->w->dil[2];
            uint32_t *shifted = plane + kx * copy;
            memcpy(shifted, plane + shift, (size_t)(g->plane - shift) * sizeof *plane);
            memset(shifted + g->plane - shift, 0, (size_t)shift * sizeof *plane);
        }
    }
}

void conv_pairs_convert_grid(ge_context *ctx, const float *x, int64_t channel_pairs,
                             const nn_window *w, const conv_pairs_grid *grid, uint32_t *planes) {
    grid_job job = {x, w, grid, channel_pairs, planes};
    const int64_t grain = grid->plane >= 4096 ? 1 : (4096 + grid->plane - 1) / grid->plane;
    ctx->parallel_for(ctx, channel_pairs, grain, convert_grid_planes, &job);
}

void conv_pairs_grid_offsets(const nn_window *w, const conv_pairs_grid *grid, int64_t cg,
                             int64_t k, int64_t *offsets) {
    for (int64_t kb = 0; kb < nn_bf16_depth(k) / NN_BF16_KB; kb++) {
        const int64_t tap = kb * NN_BF16_KB / cg, pair = (kb * NN_BF16_KB % cg) / 2;
        const int64_t ky = tap / w->k[2], kx = tap % w->k[2];
        offsets[kb] = 2 * ((kx * (cg / 2) + pair) * grid->plane + ky * w->dil[1] * grid->pitch);
    }
}

/* For tests (through ctypes): conv_pairs_grid_bytes of a 2-D window where it is read in
 * place, else 0, so that ge_hub/kernels/conv.py's _pairs_grid_bytes can be checked
 * against it. v: in_h, in_w, out_h, out_w, kh, kw, stride_h, stride_w, dil_h, dil_w,
 * pad_top, pad_left, cg, k. */
__attribute__((visibility("default"))) int64_t ge_hub_conv_pairs_grid_bytes(const int64_t *v) {
    const nn_window w = {{1, v[0], v[1]}, {1, v[2], v[3]}, {1, v[4], v[5]},
                         {1, v[6], v[7]}, {1, v[8], v[9]}, {0, v[10], v[11]}};
    conv_pairs_grid grid;
    return conv_pairs_grid_of(&w, v[12], &grid) ? conv_pairs_grid_bytes(&grid, v[12], v[13]) : 0;
}
