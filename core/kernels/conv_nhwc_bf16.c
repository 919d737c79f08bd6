/*
 * The channels-last grid of conv_nhwc_bf16.h: its geometry, the per-call conversion of a
 * Conv's input into it and the depth blocks' offsets. Converting a row: per 32 channels
 * and up to CHUNK positions, each channel pair's run becomes bf16 pair words
 * (nn_bf16_interleave, which rounds as every bf16 packer does), then 16 x 16 blocks of
 * those words are transposed so that each position's 16 words (32 channels) are stored
 * together: one 64-byte store per position with AVX-512 (with AVX512-BF16, 16 positions
 * at a time straight from the input, convert16_cvt).
 */
#include "conv_nhwc_bf16.h"

#include <string.h>

#include "conv.h"
#include "nn_gemm_bf16.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define CONV_NHWC_X86 1
#include "math_avx512.h"
#endif

/* Positions converted per run of pair words (16 runs of CHUNK words: 4 KiB). */
#define CHUNK 64

/* conv_nhwc_grid_of for a stem (conv_nhwc_bf16.h): strides of 1 or 2, no dilation, a
 * window at most CONV_NHWC_STEM_PIXELS wide. */
static int stem_grid_of(const nn_window *w, conv_nhwc_grid *grid) {
    const int64_t sy = w->stride[1], sx = w->stride[2];
    if (sy < 1 || sy > 2 || sx < 1 || sx > 2 || w->dil[1] != 1 || w->dil[2] != 1
        || w->k[2] > CONV_NHWC_STEM_PIXELS || w->k[1] < 1) {
        return 0;
    }
    /* a row reaches CONV_NHWC_STEM_PIXELS pixels from its last output's first column */
    const int64_t pitch = w->out[2] + (CONV_NHWC_STEM_PIXELS - 1) / sx, width = pitch * sx;
    const int64_t rows = w->out[1] + (w->k[1] - 1) / sy;
    const int64_t plane = nn_numel3(rows, width, 1);
    const int64_t slack = (NN_BF16_NR + CONV_NHWC_STEM_PIXELS) * sx;
    if (plane < 0 || nn_numel3(plane * sy + slack, 4, 2) < 0) {
        return 0;
    }
    *grid = (conv_nhwc_grid){pitch, rows, w->pad[1], w->pad[2], slack, sy, sx, plane, width};
    return 1;
}

int conv_nhwc_grid_of(const nn_window *w, int64_t cg, int channels_last, conv_nhwc_grid *grid) {
    const int64_t sy = w->stride[1], sx = w->stride[2];
    if (channels_last && cg >= 1 && cg <= CONV_NHWC_STEM_CHANNELS && w->in[0] == 1
        && w->out[0] == 1 && w->k[0] == 1 && w->pad[1] >= 0 && w->pad[2] >= 0) {
        return stem_grid_of(w, grid);
    }
    if (w->in[0] != 1 || w->out[0] != 1 || w->k[0] != 1 || sy < 1 || sy > 2 || sx < 1
        || sx > 2 || cg % NN_BF16_KB != 0 || w->k[1] * w->k[2] < (channels_last ? 1 : 2)
        || w->pad[1] < 0
        || w->pad[2] < 0) {
        return 0;
    }
    const int64_t reach_h = (w->k[1] - 1) * w->dil[1], reach_w = (w->k[2] - 1) * w->dil[2];
    const int64_t rows = w->out[1] + reach_h / sy, pitch = w->out[2] + reach_w / sx;
    const int64_t plane = nn_numel3(rows, pitch, 1);
    /* the grid's bytes stay a size (a blob's window could claim any) */
    if (plane < 0 || nn_numel3(plane * sy * sx + NN_BF16_NR + reach_w, cg, 2) < 0) {
        return 0;
    }
    /* C's columns are the positions of the output rows (out_h x pitch), in blocks of NR:
     * the last block's tile rows run up to NR - 1 positions past them, plus the largest
     * tap's offset within a plane, which reaches (k_w - 1) d_w / sx past its last row */
    *grid = (conv_nhwc_grid){pitch, rows, w->pad[1], w->pad[2], NN_BF16_NR + reach_w / sx,
                             sy, sx, plane, 0};
    return 1;
}

int64_t conv_nhwc_depth(const nn_window *w, const conv_nhwc_grid *grid, int64_t cg) {
    return grid->stem_width ? w->k[1] * NN_BF16_KB : cg * nn_window_taps(w);
}

static int64_t grid_values(const conv_nhwc_grid *grid, int64_t cg) {
    if (grid->stem_width) {
        return (grid->stride_h * grid->plane + grid->slack) * 4;
    }
    return (grid->stride_h * grid->stride_w * grid->plane + grid->slack) * cg;
}

int64_t conv_nhwc_grid_bytes(const conv_nhwc_grid *grid, int64_t cg, int64_t k) {
    return (grid_values(grid, cg) * 2 + 63) / 64 * 64 + nn_bf16_depth(k) / NN_BF16_KB * 8;
}

/* words[p][i] (pair p of 32 channels at input column x0 + i, i < count) -> each column's
 * position in its phase's row: the 32 channels as 16 words. */
typedef struct {
    uint16_t *phase_row[2];  /* position 0 of this row in each column phase's plane */
    int64_t sx, left, cg;
    int64_t channel;         /* the first of the 32 channels being stored */
} row_target;

static inline uint16_t *position_of(const row_target *t, int64_t ix) {
    const int64_t x = ix + t->left;
    return t->phase_row[x % t->sx] + (x / t->sx) * t->cg + t->channel;
}

static void store_positions_generic(const uint32_t (*words)[CHUNK], int64_t x0, int64_t count,
                                    const row_target *t) {
    for (int64_t i = 0; i < count; i++) {
        uint32_t row[16];
        for (int p = 0; p < 16; p++) {
            row[p] = words[p][i];
        }
        memcpy(position_of(t, x0 + i), row, sizeof row);
    }
}

#ifdef CONV_NHWC_X86
__attribute__((target("avx512f"))) static void store_positions_avx512(
    const uint32_t (*words)[CHUNK], int64_t x0, int64_t count, const row_target *t) {
    for (int64_t s = 0; s < count; s += 16) {
        __m512 v[16];
        for (int p = 0; p < 16; p++) {
            v[p] = _mm512_load_ps((const float *)&words[p][s]);
        }
        transpose16(v);
        const int64_t m = count - s < 16 ? count - s : 16;
        for (int64_t i = 0; i < m; i++) {
            _mm512_storeu_ps((float *)position_of(t, x0 + s + i), v[i]);
        }
    }
}

/* With AVX512-BF16: 16 positions (count of them) of 32 channels, from `even` (channel 0
 * of the 32 at the first position; channels in_size apart) straight to their positions:
 * per channel pair two masked loads, one vcvtne2ps2bf16 and one word permute make the
 * pair's 16 words, then one transpose. nn_bf16_interleave's rounding, without its calls
 * and its buffer (one thread on the AMX Xeon: a 64-channel 3x3 layer at 56x56 0.217 ->
 * 0.205 ms, ResNet-18 bf16 4.30 -> 4.11 ms). */
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void convert16_cvt(
    const float *even, int64_t in_size, int64_t x0, int64_t count, const row_target *t) {
    static const uint16_t pairs[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,
                                       21, 6, 22, 7, 23, 8, 24, 9, 25, 10, 26,
                                       11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i pick = _mm512_loadu_si512(pairs);
    const __mmask16 mask = (__mmask16)((1u << count) - 1u);
    __m512 v[16];
    for (int p = 0; p < 16; p++) {
        const float *e = even + 2 * p * in_size;
        const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(mask, e + in_size),
                                                          _mm512_maskz_loadu_ps(mask, e));
        v[p] = _mm512_castsi512_ps(_mm512_permutexvar_epi16(pick, both));
    }
    transpose16(v);
    for (int64_t i = 0; i < count; i++) {
        _mm512_storeu_ps((float *)position_of(t, x0 + i), v[i]);
    }
}
#endif

typedef struct {
    const float *x;
    const uint16_t *x16;  /* non-NULL: channels-last bf16 positions instead of x */
    const nn_window *w;
    const conv_nhwc_grid *grid;
    int64_t cg;
    uint16_t *positions;
    int simd, cvt;
    int channels_last;  /* x holds H x W positions of cg channels */
} convert_job;

/* Rows [begin, end) of the padded input (rows * stride_h of them): each into its row
 * phase's plane, its columns into their column phase's, zeros where they are padding. */
static void convert_rows(void *arg, int64_t begin, int64_t end) {
    const convert_job *job = (const convert_job *)arg;
    const conv_nhwc_grid *g = job->grid;
    const int64_t cg = job->cg, in_h = job->w->in[1], sx = g->stride_w;
    const int64_t in_size = in_h * job->w->in[2];
    /* the input columns the grid holds: those below pitch * sx once padded */
    const int64_t width = g->pitch * sx - g->left;
    const int64_t in_w = job->w->in[2] < width ? job->w->in[2] : width;
    uint32_t words[16][CHUNK] __attribute__((aligned(64)));
    for (int64_t y = begin; y < end; y++) {
        const int64_t py = y % g->stride_h, iy = y - g->top;
        row_target t = {{NULL, NULL}, sx, g->left, cg, 0};
        for (int64_t px = 0; px < sx; px++) {
            t.phase_row[px] = job->positions + ((py * sx + px) * g->plane
                                                + (y / g->stride_h) * g->pitch) * cg;
            /* this phase's columns px, px + sx, ... that hold input: [lo, hi) */
            int64_t lo = (g->left - px + sx - 1) / sx, hi = (g->left + in_w - px + sx - 1) / sx;
            if (iy < 0 || iy >= in_h || in_w <= 0) {
                lo = hi = 0;
            }
            lo = lo < g->pitch ? lo : g->pitch;
            hi = hi < g->pitch ? hi : g->pitch;
            hi = hi > lo ? hi : lo;
            memset(t.phase_row[px], 0, (size_t)(lo * cg) * 2);
            memset(t.phase_row[px] + hi * cg, 0, (size_t)((g->pitch - hi) * cg) * 2);
        }
        if (iy < 0 || iy >= in_h || in_w <= 0) {
            continue;
        }
        if (job->channels_last) {
            /* the row's positions are already cg channels each: rounded in order, the
             * whole row in one run at unit stride, else position by position into their
             * column phases */
            if (job->x16) {  /* copied as they are */
                const uint16_t *row16 = job->x16 + iy * job->w->in[2] * cg;
                if (sx == 1) {
                    memcpy(position_of(&t, 0), row16, (size_t)(in_w * cg) * 2);
                    continue;
                }
                for (int64_t ix = 0; ix < in_w; ix++) {
                    memcpy(position_of(&t, ix), row16 + ix * cg, (size_t)cg * 2);
                }
                continue;
            }
            const float *row = job->x + iy * job->w->in[2] * cg;
            if (sx == 1) {
                nn_bf16_round_run(row, in_w * cg, position_of(&t, 0));
                continue;
            }
            for (int64_t ix = 0; ix < in_w; ix++) {
                nn_bf16_round_run(row + ix * cg, cg, position_of(&t, ix));
            }
            continue;
        }
        for (int64_t c0 = 0; c0 < cg; c0 += 32) {
            const float *even = job->x + c0 * in_size + iy * job->w->in[2];
            t.channel = c0;
#ifdef CONV_NHWC_X86
            if (job->cvt) {
                for (int64_t x0 = 0; x0 < in_w; x0 += 16) {
                    convert16_cvt(even + x0, in_size, x0, in_w - x0 < 16 ? in_w - x0 : 16, &t);
                }
                continue;
            }
#endif
            for (int64_t x0 = 0; x0 < in_w; x0 += CHUNK) {
                const int64_t count = in_w - x0 < CHUNK ? in_w - x0 : CHUNK;
                for (int p = 0; p < 16; p++) {
                    const float *pair = even + 2 * p * in_size + x0;
                    nn_bf16_interleave(pair, pair + in_size, count, words[p]);
                }
#ifdef CONV_NHWC_X86
                if (job->simd) {
                    store_positions_avx512((const uint32_t (*)[CHUNK])words, x0, count, &t);
                } else
#endif
                {
                    store_positions_generic((const uint32_t (*)[CHUNK])words, x0, count, &t);
                }
            }
        }
    }
}

void conv_nhwc_convert(ge_context *ctx, const float *x, const uint16_t *x16, int64_t cg,
                       int channels_last, const nn_window *w, const conv_nhwc_grid *grid,
                       uint16_t *positions) {
    convert_job job = {x,        x16,           w,           grid,         cg,
                       positions, nn_bf16_simd(), nn_bf16_cvt(), channels_last || x16};
    const int64_t row_values = grid->pitch * grid->stride_w * cg;
    const int64_t grain = row_values >= 16384 ? 1 : (16384 + row_values - 1) / row_values;
    ctx->parallel_for(ctx, grid->rows * grid->stride_h, grain, convert_rows, &job);
    memset(positions + grid->stride_h * grid->stride_w * grid->plane * cg, 0,
           (size_t)(grid->slack * cg) * 2);
}

typedef struct {
    const float *x;
    const uint16_t *x16;
    const nn_window *w;
    const conv_nhwc_grid *grid;
    int64_t cg;
    uint16_t *positions;
    int simd;
    int specials;  /* set (atomically) where a row holds an inf or a NaN */
} stem_job;

#ifdef CONV_NHWC_X86
/* `count` bf16 pixels of cg (<= 4) channels -> pixels of 4 values (the channels, then
 * zeros), 8 at a time: a masked load of their 8 cg values, one word permute, one 64-byte
 * store. Returns 1 where one of them is an inf or a NaN. */
__attribute__((target("avx512f,avx512bw"))) static int stem_pixels_avx512(
    const uint16_t *x, int64_t cg, int64_t count, uint16_t *dst) {
    uint16_t pick[32];
    for (int i = 0; i < 32; i++) {  /* slot 4 p + c <- value p cg + c */
        pick[i] = (uint16_t)(i % 4 < cg ? i / 4 * cg + i % 4 : 0);
    }
    const __m512i index = _mm512_loadu_si512(pick);
    __mmask32 channels = 0;
    for (int i = 0; i < 32; i++) {
        channels |= (__mmask32)(i % 4 < cg) << i;
    }
    const __m512i exponent = _mm512_set1_epi16(0x7f80);
    __mmask32 specials = 0;
    for (int64_t p = 0; p < count; p += 8) {
        const int64_t n = count - p < 8 ? count - p : 8;
        const __mmask32 load = (__mmask32)((1ull << (n * cg)) - 1);
        const __m512i v = _mm512_maskz_loadu_epi16(load, x + p * cg);
        specials |= _mm512_mask_cmpeq_epi16_mask(load, _mm512_and_si512(v, exponent), exponent);
        const __mmask32 store = (__mmask32)((1ull << (n * 4)) - 1);
        _mm512_mask_storeu_epi16(dst + p * 4, store,
                                 _mm512_maskz_permutexvar_epi16(channels, index, v));
    }
    return specials != 0;
}
#endif

/* Padded rows [begin, end) of a stem's grid: each pixel's channels, then zeros. */
static void convert_stem_rows(void *arg, int64_t begin, int64_t end) {
    stem_job *job = (stem_job *)arg;
    const conv_nhwc_grid *g = job->grid;
    const int64_t cg = job->cg, in_h = job->w->in[1], in_w0 = job->w->in[2];
    const int64_t in_w = in_w0 < g->stem_width - g->left ? in_w0 : g->stem_width - g->left;
    int specials = 0;
    for (int64_t y = begin; y < end; y++) {
        uint16_t *row = job->positions
                        + ((y % g->stride_h) * g->plane + (y / g->stride_h) * g->stem_width) * 4;
        memset(row, 0, (size_t)(g->stem_width * 4) * 2);
        const int64_t iy = y - g->top;
        if (iy < 0 || iy >= in_h) {
            continue;
        }
        uint16_t *dst = row + g->left * 4;
        const int64_t at = iy * in_w0 * cg;
#ifdef CONV_NHWC_X86
        if (job->x16 && job->simd) {
            specials |= stem_pixels_avx512(job->x16 + at, cg, in_w, dst);
            continue;
        }
#endif
        for (int64_t ix = 0; ix < in_w; ix++) {
            for (int64_t c = 0; c < cg; c++) {
                const uint16_t v = job->x16 ? job->x16[at + ix * cg + c]
                                            : nn_bf16_of(job->x[at + ix * cg + c]);
                specials |= (v & 0x7f80) == 0x7f80;
                dst[ix * 4 + c] = v;
            }
        }
    }
    if (specials) {
        __atomic_store_n(&job->specials, 1, __ATOMIC_RELAXED);
    }
}

int conv_nhwc_convert_stem(ge_context *ctx, const float *x, const uint16_t *x16, int64_t cg,
                           const nn_window *w, const conv_nhwc_grid *grid, uint16_t *positions) {
    stem_job job = {x, x16, w, grid, cg, positions, nn_bf16_simd(), 0};
    const int64_t padded_rows = grid->rows * grid->stride_h;
    const int64_t grain = grid->stem_width >= 4096 ? 1 : 4096 / grid->stem_width;
    ctx->parallel_for(ctx, padded_rows, grain, convert_stem_rows, &job);
    memset(positions + grid->stride_h * grid->plane * 4, 0, (size_t)(grid->slack * 4) * 2);
    return __atomic_load_n(&job.specials, __ATOMIC_RELAXED);
}

void conv_nhwc_offsets(const nn_window *w, const conv_nhwc_grid *grid, int64_t cg, int64_t k,
                       int64_t *offsets) {
    if (grid->stem_width) {  /* depth block ky: its row of its row-phase plane */
        for (int64_t ky = 0; ky < w->k[1]; ky++) {
            offsets[ky] = ((ky % grid->stride_h) * grid->plane
                           + ky / grid->stride_h * grid->stem_width) * 4;
        }
        return;
    }
    for (int64_t kb = 0; kb < nn_bf16_depth(k) / NN_BF16_KB; kb++) {
        const int64_t tap = kb * NN_BF16_KB / cg, channel = kb * NN_BF16_KB % cg;
        const int64_t ry = tap / w->k[2] * w->dil[1], rx = tap % w->k[2] * w->dil[2];
        const int64_t phase = (ry % grid->stride_h) * grid->stride_w + rx % grid->stride_w;
        offsets[kb] = (phase * grid->plane + ry / grid->stride_h * grid->pitch
                       + rx / grid->stride_w) * cg + channel;
    }
}

/* For tests (through ctypes): conv_nhwc_grid_bytes of a 2-D window the path fits, else 0,
 * so that ge_hub/kernels/conv.py's _nhwc_grid_bytes can be checked against it. v: in_h,
 * in_w, out_h, out_w, kh, kw, stride_h, stride_w, dil_h, dil_w, pad_top, pad_left, cg, k,
 * channels_last. */
__attribute__((visibility("default"))) int64_t ge_hub_conv_nhwc_grid_bytes(const int64_t *v) {
    const nn_window w = {{1, v[0], v[1]}, {1, v[2], v[3]}, {1, v[4], v[5]},
                         {1, v[6], v[7]}, {1, v[8], v[9]}, {0, v[10], v[11]}};
    conv_nhwc_grid grid;
    (void)v[13];  /* k = cg * taps: a stem's depth is its own (conv_nhwc_depth) */
    return conv_nhwc_grid_of(&w, v[12], (int)v[14], &grid)
               ? conv_nhwc_grid_bytes(&grid, v[12], conv_nhwc_depth(&w, &grid, v[12])) : 0;
}

#ifdef CONV_NHWC_X86
/* Positions a task of few_channels_runs converts. */
#define FEW_RUN 4096

typedef struct {
    const float *x;
    uint16_t *y;
    int64_t c, plane;
} few_job;

/* 16 float32 values rounded to bf16 as nn_bf16_of rounds (math_avx512.h's round_high),
 * packed into 16 words. */
__attribute__((target("avx512f"))) static inline __m256i round16(__m512 v) {
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(round_high(v), 16));
}

/* ToChannelsLast of at most 4 channels (a stem's input), runs of FEW_RUN positions
 * (task t: image t / runs, run t % runs): per 16 positions each channel's 16 values
 * rounded, then two word permutes interleave them into the 16 c values of those
 * positions (slot j: channel j % c of position j / c). The plain loop below, a value at a
 * time, took ResNet's 3 x 224 x 224 input 0.17 ms (one thread, AMX Xeon). */
__attribute__((target("avx512f,avx512bw"))) static void few_channels_runs(void *arg,
                                                                         int64_t begin,
                                                                         int64_t end) {
    const few_job *job = (const few_job *)arg;
    const int64_t c = job->c, plane = job->plane, runs = (plane + FEW_RUN - 1) / FEW_RUN;
    uint16_t pick[64];
    for (int j = 0; j < 64; j++) {  /* into A = channels 0|1, B = channels 2|3 */
        pick[j] = (uint16_t)(j < 16 * c ? j % c * 16 + j / c : 0);
    }
    const __m512i low = _mm512_loadu_si512(pick), high = _mm512_loadu_si512(pick + 32);
    for (int64_t task = begin; task < end; task++) {
        const int64_t image = task / runs, first = task % runs * FEW_RUN;
        const int64_t last = first + FEW_RUN < plane ? first + FEW_RUN : plane;
        const float *x = job->x + image * c * plane;
        uint16_t *y = job->y + image * c * plane;
        for (int64_t p = first; p < last; p += 16) {
            const int64_t n = last - p < 16 ? last - p : 16;
            const __mmask16 lanes = (__mmask16)((1u << n) - 1u);
            __m256i ch[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(),
                             _mm256_setzero_si256(), _mm256_setzero_si256()};
            for (int64_t k = 0; k < c; k++) {
                ch[k] = round16(_mm512_maskz_loadu_ps(lanes, x + k * plane + p));
            }
            const __m512i a = _mm512_inserti64x4(_mm512_castsi256_si512(ch[0]), ch[1], 1);
            const __m512i b = _mm512_inserti64x4(_mm512_castsi256_si512(ch[2]), ch[3], 1);
            const int64_t values = n * c;
            const __mmask32 first_half = (__mmask32)(values >= 32 ? ~0u : (1u << values) - 1u);
            _mm512_mask_storeu_epi16(y + p * c, first_half, _mm512_permutex2var_epi16(a, low, b));
            if (values > 32) {
                const __mmask32 rest = (__mmask32)((1ull << (values - 32)) - 1);
                _mm512_mask_storeu_epi16(y + p * c + 32, rest,
                                         _mm512_permutex2var_epi16(a, high, b));
            }
        }
    }
}
#endif

/* ge_hub.ToChannelsLast (the `channels_last` pass's way into a bf16 chain): X float32
 * (N, C, H, W) -> Y bfloat16 (N, H, W, C) in one pass. With C a multiple of 32 it is the
 * grid conversion of a 1x1 window with no padding and no slack, whose grid is Y itself;
 * other channel counts run a plain loop. Blob: ints N, C, H, W. */
GE_KERNEL(ge_to_channels_last_bf16) {
    static const char *name = "ge_to_channels_last_bf16";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    int64_t v[4] = {0};
    if (!ge_blob_ints(&blob, v, 4) || !ge_blob_done(&blob) || v[0] < 0 || v[1] < 0
        || v[2] < 0 || v[3] < 0) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    if (n_inputs != 1 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected 1 input and 1 output, got %d and %d", name,
                              (int)n_inputs, (int)n_outputs);
    }
    const int64_t n = v[0], c = v[1], plane = nn_numel3(v[2], v[3], 1);
    const int64_t numel = nn_numel3(n, c, plane);
    if (nn_check_f32(ctx, name, "input X", &inputs[0], numel)
        || nn_check_bf16(ctx, name, "output Y", &outputs[0], numel)) {
        return -1;
    }
    const float *x = (const float *)inputs[0].data;
    uint16_t *y = (uint16_t *)outputs[0].data;
    if (c % NN_BF16_KB == 0) {
        const nn_window w = {{1, v[2], v[3]}, {1, v[2], v[3]}, {1, 1, 1},
                             {1, 1, 1},       {1, 1, 1},       {0, 0, 0}};
        const conv_nhwc_grid grid = {v[3], v[2], 0, 0, 0, 1, 1, plane, 0};
        for (int64_t image = 0; image < n; image++) {
            conv_nhwc_convert(ctx, x + image * c * plane, NULL, c, 0, &w, &grid,
                              y + image * c * plane);
        }
        return 0;
    }
#ifdef CONV_NHWC_X86
    if (c <= CONV_NHWC_STEM_CHANNELS && nn_bf16_simd()) {
        few_job job = {x, y, c, plane};
        ctx->parallel_for(ctx, n * ((plane + FEW_RUN - 1) / FEW_RUN), 1, few_channels_runs,
                          &job);
        return 0;
    }
#endif
    for (int64_t image = 0; image < n; image++) {
        for (int64_t ch = 0; ch < c; ch++) {
            const float *src = x + (image * c + ch) * plane;
            uint16_t *dst = y + image * c * plane + ch;
            for (int64_t i = 0; i < plane; i++) {
                dst[i * c] = nn_bf16_of(src[i]);
            }
        }
    }
    return 0;
}
