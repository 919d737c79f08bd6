/*
 * The channels-last grid of conv_nhwc_bf16.h: its geometry, the per-call conversion of a
 * Conv's input into it and the depth blocks' offsets. Converting a row: per 32 channels
 * and up to CHUNK positions, each channel pair's run becomes bf16 pair words
 * (nn_bf16_interleave, which rounds as every bf16 packer does), then 16 x 16 blocks of
 * those words are transposed so that each position's 16 words (32 channels) are stored
 * together: one 64-byte store per position with AVX-512.
 */
#include "conv_nhwc_bf16.h"

#include <string.h>

#include "nn_gemm_bf16.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define CONV_NHWC_X86 1
#include "math_avx512.h"
#endif

/* Positions converted per run of pair words (16 runs of CHUNK words: 4 KiB). */
#define CHUNK 64

int conv_nhwc_grid_of(const nn_window *w, int64_t cg, conv_nhwc_grid *grid) {
    if (w->in[0] != 1 || w->out[0] != 1 || w->k[0] != 1 || w->stride[1] != 1
        || w->stride[2] != 1 || cg % NN_BF16_KB != 0 || w->k[1] * w->k[2] < 2 || w->pad[1] < 0
        || w->pad[2] < 0) {
        return 0;
    }
    const int64_t rows = w->out[1] + (w->k[1] - 1) * w->dil[1];
    const int64_t pitch = w->out[2] + (w->k[2] - 1) * w->dil[2];
    if (rows < w->in[1] + w->pad[1] || pitch < w->in[2] + w->pad[2]) {
        return 0;  /* a window that trims the input's far side */
    }
    /* C's columns are the positions of the output rows (out_h x pitch), in blocks of NR:
     * the last block's tile rows run up to NR - 1 positions past them, plus the largest
     * tap's offset, which reaches (k_w - 1) d_w past the grid's last row */
    const int64_t slack = NN_BF16_NR + (w->k[2] - 1) * w->dil[2];
    *grid = (conv_nhwc_grid){pitch, rows, w->pad[1], w->pad[2], slack};
    return 1;
}

static int64_t grid_values(const conv_nhwc_grid *grid, int64_t cg) {
    return (grid->rows * grid->pitch + grid->slack) * cg;
}

int64_t conv_nhwc_grid_bytes(const conv_nhwc_grid *grid, int64_t cg, int64_t k) {
    return (grid_values(grid, cg) * 2 + 63) / 64 * 64 + nn_bf16_depth(k) / NN_BF16_KB * 8;
}

/* words[p][i] (pair p of 32 channels at position i < count) -> dst + i * cg: the
 * position's 32 channels as 16 words. */
static void store_positions_generic(const uint32_t (*words)[CHUNK], int64_t count,
                                    uint16_t *dst, int64_t cg) {
    for (int64_t i = 0; i < count; i++) {
        uint32_t row[16];
        for (int p = 0; p < 16; p++) {
            row[p] = words[p][i];
        }
        memcpy(dst + i * cg, row, sizeof row);
    }
}

#ifdef CONV_NHWC_X86
__attribute__((target("avx512f"))) static void store_positions_avx512(
    const uint32_t (*words)[CHUNK], int64_t count, uint16_t *dst, int64_t cg) {
    for (int64_t s = 0; s < count; s += 16) {
        __m512 v[16];
        for (int p = 0; p < 16; p++) {
            v[p] = _mm512_load_ps((const float *)&words[p][s]);
        }
        transpose16(v);
        const int64_t m = count - s < 16 ? count - s : 16;
        for (int64_t i = 0; i < m; i++) {
            _mm512_storeu_ps((float *)(dst + (s + i) * cg), v[i]);
        }
    }
}
#endif

typedef struct {
    const float *x;
    const nn_window *w;
    const conv_nhwc_grid *grid;
    int64_t cg;
    uint16_t *positions;
    int simd;
} convert_job;

static void convert_rows(void *arg, int64_t begin, int64_t end) {
    const convert_job *job = (const convert_job *)arg;
    const conv_nhwc_grid *g = job->grid;
    const int64_t cg = job->cg, in_h = job->w->in[1], in_w = job->w->in[2];
    const int64_t in_size = in_h * in_w, right = g->pitch - g->left - in_w;
    uint32_t words[16][CHUNK] __attribute__((aligned(64)));
    for (int64_t y = begin; y < end; y++) {
        uint16_t *row = job->positions + y * g->pitch * cg;
        const int64_t iy = y - g->top;
        if (iy < 0 || iy >= in_h) {
            memset(row, 0, (size_t)(g->pitch * cg) * 2);
            continue;
        }
        memset(row, 0, (size_t)(g->left * cg) * 2);
        memset(row + (g->left + in_w) * cg, 0, (size_t)(right * cg) * 2);
        for (int64_t c0 = 0; c0 < cg; c0 += 32) {
            const float *even = job->x + c0 * in_size + iy * in_w;
            for (int64_t x0 = 0; x0 < in_w; x0 += CHUNK) {
                const int64_t count = in_w - x0 < CHUNK ? in_w - x0 : CHUNK;
                for (int p = 0; p < 16; p++) {
                    const float *pair = even + 2 * p * in_size + x0;
                    nn_bf16_interleave(pair, pair + in_size, count, words[p]);
                }
                uint16_t *dst = row + (g->left + x0) * cg + c0;
#ifdef CONV_NHWC_X86
                if (job->simd) {
                    store_positions_avx512((const uint32_t (*)[CHUNK])words, count, dst, cg);
                    continue;
                }
#endif
                store_positions_generic((const uint32_t (*)[CHUNK])words, count, dst, cg);
            }
        }
    }
}

void conv_nhwc_convert(ge_context *ctx, const float *x, int64_t cg, const nn_window *w,
                       const conv_nhwc_grid *grid, uint16_t *positions) {
    convert_job job = {x, w, grid, cg, positions, nn_bf16_simd()};
    const int64_t row_values = grid->pitch * cg;
    const int64_t grain = row_values >= 16384 ? 1 : (16384 + row_values - 1) / row_values;
    ctx->parallel_for(ctx, grid->rows, grain, convert_rows, &job);
    memset(positions + grid->rows * row_values, 0, (size_t)(grid->slack * cg) * 2);
}

void conv_nhwc_offsets(const nn_window *w, const conv_nhwc_grid *grid, int64_t cg, int64_t k,
                       int64_t *offsets) {
    for (int64_t kb = 0; kb < nn_bf16_depth(k) / NN_BF16_KB; kb++) {
        const int64_t tap = kb * NN_BF16_KB / cg, channel = kb * NN_BF16_KB % cg;
        const int64_t ky = tap / w->k[2], kx = tap % w->k[2];
        offsets[kb] = (ky * w->dil[1] * grid->pitch + kx * w->dil[2]) * cg + channel;
    }
}

/* For tests (through ctypes): conv_nhwc_grid_bytes of a 2-D window the path fits, else 0,
 * so that ge_hub/kernels/conv.py's _nhwc_grid_bytes can be checked against it. v: in_h,
 * in_w, out_h, out_w, kh, kw, stride_h, stride_w, dil_h, dil_w, pad_top, pad_left, cg, k. */
__attribute__((visibility("default"))) int64_t ge_hub_conv_nhwc_grid_bytes(const int64_t *v) {
    const nn_window w = {{1, v[0], v[1]}, {1, v[2], v[3]}, {1, v[4], v[5]},
                         {1, v[6], v[7]}, {1, v[8], v[9]}, {0, v[10], v[11]}};
    conv_nhwc_grid grid;
    return conv_nhwc_grid_of(&w, v[12], &grid) ? conv_nhwc_grid_bytes(&grid, v[12], v[13]) : 0;
}
