/*
 * Direct convolution for few channels on both sides (conv_direct.h): the sums are taken
 * straight from the input planes, with no columns packed and no transforms.
 *
 * The output planes are cut into vectors of up to 16 positions along a row (a row of
 * width W gives ceil(W / 16) of them, the last one short). A tile is NN_DIRECT_OC (8)
 * output channels by DIRECT_SLOTS (3) such vectors, 24 zmm accumulators. For every
 * input channel and tap the tile loads one vector of inputs per slot and multiplies it
 * by each of the 8 channels' weight, broadcast from the packed weights, whose layout
 * [block][cg][kh][kw][8] makes those 8 weights one contiguous run:
 *
 *     acc[q][j][i] += W[q][c][ky][kx] * x[c][oy_j * sy + ky - pad_y][(ox_j + i) * sx + kx - pad_x]
 *
 * 24 multiply-adds per 3 input loads and 8 broadcasts keep the FMA units busy where the
 * packed GEMM, with only 16-64 rows of A, spends as long packing its columns as it does
 * multiplying them: the stride-2 layers between a small detector's stages (2x ONNX
 * Runtime's time on the packed path), and stride-1 layers with too few channels for
 * Winograd.
 *
 * Padding costs nothing: a tap's lanes that fall left or right of the input row are
 * masked off at the load (the masks per slot and kx are made once per tile), and a tap
 * whose input row lies above or below the plane gets an all-zero mask. Stride 2 loads 32
 * consecutive inputs under a mask and keeps the even ones (one permute; a 3x3 window gets
 * all three taps of a row from one such load and one more lane); masked lanes are never
 * read, so no load leaves the input.
 *
 * Bias starts the sums; a residual and Relu or Clip are applied in the registers as the
 * tile is stored, the other activations over each stored run (conv_epilogue.h). Tiles
 * are split over the pool slot group by slot group, each taking every channel block of
 * its slots in turn while their input rows are in cache.
 *
 * Tile kernels, picked once from the CPU (GE_HUB_CONV_DIRECT_KERNEL=generic forces the
 * plain one): avx512 (masked loads, vpermt2ps for stride 2, fused multiply-add) and
 * generic (plain C). Each starts from the bias, but they walk channels and taps in
 * different orders (the AVX-512 stride-1 tile keeps each tap's masks in registers over
 * the channels), so their results agree to rounding, not bit for bit.
 */
#include "conv_direct.h"

#include "ge_hub/internal/simd.h"

#include <pthread.h>
#include <stdlib.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define NN_DIRECT_X86 1
#endif

#define OC NN_DIRECT_OC
/* Vectors of output positions per tile. */
#define DIRECT_SLOTS 3
#define LANES 16
/* Elements of work per parallel chunk. */
#define DIRECT_GRAIN_WORK 65536

/* What a tile applies in the registers as it stores: nothing, a residual and Relu or
 * Clip (the NaN-keeping forms of conv_epilogue.c); anything else runs nn_epilogue_run
 * over the stored values (`after`). */
enum { DIRECT_ACT_NONE = 0, DIRECT_ACT_RELU = 1, DIRECT_ACT_CLIP = 2 };

typedef struct {
    const float *x;          /* the image's first input plane of the group */
    const float *weights;    /* the block's packed weights, [cg][kh][kw][OC] */
    float bias[OC];
    float *y;                /* the block's first output plane */
    const float *residual;   /* at y's offset in the residual, or NULL */
    int64_t cg, in_h, in_w, out_w, out_size;
    int64_t kh, kw, sy, sx, py, px;
    int64_t oy[DIRECT_SLOTS], ox[DIRECT_SLOTS], lanes[DIRECT_SLOTS];  /* lanes 0: unused */
    int channels;            /* real output channels in the block (the rest are padding) */
    int act;                 /* DIRECT_ACT_* applied in registers (with the residual) */
    float lo, hi;            /* Clip's bounds */
    const nn_epilogue *after;  /* the epilogue to run over the stored values, or NULL */
} direct_tile;

typedef void (*direct_fn)(const direct_tile *t);

/* Lanes [lo, hi) of a load whose lane l reads column `base + l` (l < count): those
 * inside the row [0, in_w). */
static inline uint32_t lanes_inside(int64_t base, int64_t count, int64_t in_w) {
    const int64_t lo = base < 0 ? -base : 0;
    const int64_t hi = in_w - base < count ? in_w - base : count;
    if (hi <= lo) {
        return 0;
    }
    return (uint32_t)((((uint64_t)1 << hi) - 1) & ~(((uint64_t)1 << lo) - 1));
}

static inline float clip_scalar(float v, float lo, float hi) {
    v = v < lo ? lo : v;
    return v > hi ? hi : v;
}

/* The stored runs of a tile through the rest of the epilogue. */
static void run_after(const direct_tile *t) {
    for (int q = 0; q < t->channels; q++) {
        for (int j = 0; j < DIRECT_SLOTS; j++) {
            if (t->lanes[j] == 0) {
                continue;
            }
            const int64_t at = q * t->out_size + t->oy[j] * t->out_w + t->ox[j];
            nn_epilogue_run(t->after, t->y + at, t->residual ? t->residual + at : NULL,
                            t->lanes[j]);
        }
    }
}

NN_VECTORIZED static void tile_generic(const direct_tile *t) {
    float acc[OC][DIRECT_SLOTS][LANES];
    for (int q = 0; q < OC; q++) {
        for (int j = 0; j < DIRECT_SLOTS; j++) {
            for (int i = 0; i < LANES; i++) {
                acc[q][j][i] = t->bias[q];
            }
        }
    }
    const int64_t plane = t->in_h * t->in_w;
    for (int64_t ky = 0; ky < t->kh; ky++) {
        for (int64_t c = 0; c < t->cg; c++) {
            const float *wc = t->weights + (c * t->kh + ky) * t->kw * OC;
            for (int64_t kx = 0; kx < t->kw; kx++) {
                for (int j = 0; j < DIRECT_SLOTS; j++) {
                    const int64_t iy = t->oy[j] * t->sy - t->py + ky;
                    if (t->lanes[j] == 0 || iy < 0 || iy >= t->in_h) {
                        continue;
                    }
                    const int64_t base = t->ox[j] * t->sx - t->px + kx;
                    const float *row = t->x + c * plane + iy * t->in_w;
                    for (int i = 0; i < t->lanes[j]; i++) {
                        const int64_t col = base + i * t->sx;
                        if (col < 0 || col >= t->in_w) {
                            continue;
                        }
                        const float v = row[col];
                        for (int q = 0; q < OC; q++) {
                            acc[q][j][i] += wc[kx * OC + q] * v;
                        }
                    }
                }
            }
        }
    }
    for (int q = 0; q < t->channels; q++) {
        for (int j = 0; j < DIRECT_SLOTS; j++) {
            const int64_t at = q * t->out_size + t->oy[j] * t->out_w + t->ox[j];
            for (int i = 0; i < t->lanes[j]; i++) {
                float v = acc[q][j][i];
                if (t->after == NULL) {
                    v += t->residual ? t->residual[at + i] : 0.0f;
                    v = t->act == DIRECT_ACT_RELU ? (v < 0.0f ? 0.0f : v)
                        : t->act == DIRECT_ACT_CLIP ? clip_scalar(v, t->lo, t->hi) : v;
                }
                t->y[at + i] = v;
            }
        }
    }
    if (t->after) {
        run_after(t);
    }
}

#ifdef NN_DIRECT_X86
/* Stores the tile's sums with the register epilogue; NaN kept as in act512
 * (conv_depthwise.c): max and min return their second operand on an unordered compare. */
__attribute__((target("avx512f"), always_inline)) static inline void store_tile_avx512(
    const direct_tile *t, __m512 acc[OC][DIRECT_SLOTS]) {
    __mmask16 keep[DIRECT_SLOTS];
    for (int j = 0; j < DIRECT_SLOTS; j++) {
        keep[j] = (__mmask16)lanes_inside(0, t->lanes[j], LANES);
    }
    const __m512 lo = _mm512_set1_ps(t->lo), hi = _mm512_set1_ps(t->hi);
    for (int q = 0; q < OC; q++) {
        if (q >= t->channels) {
            break;
        }
        for (int j = 0; j < DIRECT_SLOTS; j++) {
            const int64_t at = q * t->out_size + t->oy[j] * t->out_w + t->ox[j];
            __m512 v = acc[q][j];
            if (t->after == NULL) {
                if (t->residual) {
                    v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(keep[j], t->residual + at));
                }
                if (t->act == DIRECT_ACT_RELU) {
                    v = _mm512_max_ps(_mm512_setzero_ps(), v);
                } else if (t->act == DIRECT_ACT_CLIP) {
                    v = _mm512_min_ps(hi, _mm512_max_ps(lo, v));
                }
            }
            _mm512_mask_storeu_ps(t->y + at, keep[j], v);
        }
    }
    if (t->after) {
        run_after(t);
    }
}

/* The 24 accumulators as named variables: GCC keeps an array of them in memory (a store
 * of every accumulator per tap) where named ones stay in registers. */
#define DIRECT_ACC_DECLARE(q) __m512 a##q##0, a##q##1, a##q##2;
#define DIRECT_ACC_INIT(q)                                                       \
    a##q##0 = a##q##1 = a##q##2 = _mm512_set1_ps(t->bias[q]);
#define DIRECT_ACC_SAVE(q)                                                       \
    acc[q][0] = a##q##0;                                                         \
    acc[q][1] = a##q##1;                                                         \
    acc[q][2] = a##q##2;
/* One tap's multiply-adds for channel q: the slots' input vectors v0..v2 times its
 * weight, broadcast from the packed run wp. */
#define DIRECT_FMA(q, wp)                                                        \
    {                                                                            \
        const __m512 weight = _mm512_set1_ps((wp)[q]);                           \
        a##q##0 = _mm512_fmadd_ps(v0, weight, a##q##0);                          \
        a##q##1 = _mm512_fmadd_ps(v1, weight, a##q##1);                          \
        a##q##2 = _mm512_fmadd_ps(v2, weight, a##q##2);                          \
    }
#define DIRECT_EACH(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define DIRECT_FMAS(wp)                                                          \
    DIRECT_FMA(0, wp) DIRECT_FMA(1, wp) DIRECT_FMA(2, wp) DIRECT_FMA(3, wp)      \
    DIRECT_FMA(4, wp) DIRECT_FMA(5, wp) DIRECT_FMA(6, wp) DIRECT_FMA(7, wp)

/* Per slot, where output (oy, ox) reads its first tap's row, and which lanes of a load
 * of `stride` * lanes - stride + 1 inputs from there each kx may read inside the row. */
static inline void slot_columns(const direct_tile *t, int64_t stride, int64_t *base,
                                uint32_t columns[DIRECT_SLOTS][NN_DIRECT_MAX_K]) {
    for (int j = 0; j < DIRECT_SLOTS; j++) {
        base[j] = stride * t->ox[j] - t->px;
        const int64_t count = t->lanes[j] > 0 ? stride * (t->lanes[j] - 1) + 1 : 0;
        for (int64_t kx = 0; kx < t->kw; kx++) {
            columns[j][kx] = lanes_inside(base[j] + kx, count, t->in_w);
        }
    }
}

/* Per slot, where input row ky's taps start and the lanes they read: none for a row
 * outside the plane, whose address is then kept inside it. */
static inline void row_taps(const direct_tile *t, int64_t ky, const int64_t *base,
                            uint32_t columns[DIRECT_SLOTS][NN_DIRECT_MAX_K],
                            uint32_t masks[DIRECT_SLOTS][NN_DIRECT_MAX_K], const float **at) {
    for (int j = 0; j < DIRECT_SLOTS; j++) {
        const int64_t iy = t->oy[j] * t->sy - t->py + ky;
        const int inside = iy >= 0 && iy < t->in_h;
        at[j] = t->x + (inside ? iy : 0) * t->in_w + base[j];
        for (int64_t kx = 0; kx < t->kw; kx++) {
            masks[j][kx] = inside ? columns[j][kx] : 0;
        }
    }
}

/* Stride 1: each tap reads 16 consecutive inputs per slot. */
__attribute__((target("avx512f"))) static void tile_s1_avx512(const direct_tile *t) {
    DIRECT_EACH(DIRECT_ACC_DECLARE)
    DIRECT_EACH(DIRECT_ACC_INIT)
    const int64_t plane = t->in_h * t->in_w, taps = t->kh * t->kw;
    uint32_t columns[DIRECT_SLOTS][NN_DIRECT_MAX_K];
    int64_t base[DIRECT_SLOTS];
    slot_columns(t, 1, base, columns);
    for (int64_t ky = 0; ky < t->kh; ky++) {
        uint32_t masks[DIRECT_SLOTS][NN_DIRECT_MAX_K];
        const float *at[DIRECT_SLOTS];
        row_taps(t, ky, base, columns, masks, at);
        for (int64_t kx = 0; kx < t->kw; kx++) {
            /* the channels innermost: the tap's masks stay in mask registers */
            const __mmask16 m0 = (__mmask16)masks[0][kx], m1 = (__mmask16)masks[1][kx],
                            m2 = (__mmask16)masks[2][kx];
            const float *x0 = at[0] + kx, *x1 = at[1] + kx, *x2 = at[2] + kx;
            const float *wc = t->weights + (ky * t->kw + kx) * OC;
            for (int64_t c = 0; c < t->cg; c++) {
                const __m512 v0 = _mm512_maskz_loadu_ps(m0, x0 + c * plane);
                const __m512 v1 = _mm512_maskz_loadu_ps(m1, x1 + c * plane);
                const __m512 v2 = _mm512_maskz_loadu_ps(m2, x2 + c * plane);
                DIRECT_FMAS(wc + c * taps * OC)
            }
        }
    }
    __m512 acc[OC][DIRECT_SLOTS];
    DIRECT_EACH(DIRECT_ACC_SAVE)
    store_tile_avx512(t, acc);
}

/* Lanes 0, 2, ..., 30 of the 32 floats at src (those `mask` keeps; the rest zero). */
__attribute__((target("avx512f"), always_inline)) static inline __m512 evens_avx512(
    const float *src, uint32_t mask, __m512i even) {
    const __m512 low = _mm512_maskz_loadu_ps((__mmask16)mask, src);
    const __m512 high = _mm512_maskz_loadu_ps((__mmask16)(mask >> 16), src + 16);
    return _mm512_permutex2var_ps(low, even, high);
}

/* Stride 2 along the row: 32 consecutive inputs per slot and tap, the even ones kept. */
__attribute__((target("avx512f"))) static void tile_s2_avx512(const direct_tile *t) {
    DIRECT_EACH(DIRECT_ACC_DECLARE)
    DIRECT_EACH(DIRECT_ACC_INIT)
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4,
                                          2, 0);
    const int64_t plane = t->in_h * t->in_w, taps = t->kh * t->kw;
    uint32_t columns[DIRECT_SLOTS][NN_DIRECT_MAX_K];
    int64_t base[DIRECT_SLOTS];
    slot_columns(t, 2, base, columns);  /* lane 2i serves output i */
    for (int64_t ky = 0; ky < t->kh; ky++) {
        uint32_t masks[DIRECT_SLOTS][NN_DIRECT_MAX_K];
        const float *at[DIRECT_SLOTS];
        row_taps(t, ky, base, columns, masks, at);
        for (int64_t kx = 0; kx < t->kw; kx++) {
            const uint32_t m0 = masks[0][kx], m1 = masks[1][kx], m2 = masks[2][kx];
            const float *x0 = at[0] + kx, *x1 = at[1] + kx, *x2 = at[2] + kx;
            const float *wc = t->weights + (ky * t->kw + kx) * OC;
            for (int64_t c = 0; c < t->cg; c++) {
                const __m512 v0 = evens_avx512(x0 + c * plane, m0, even);
                const __m512 v1 = evens_avx512(x1 + c * plane, m1, even);
                const __m512 v2 = evens_avx512(x2 + c * plane, m2, even);
                DIRECT_FMAS(wc + c * taps * OC)
            }
        }
    }
    __m512 acc[OC][DIRECT_SLOTS];
    DIRECT_EACH(DIRECT_ACC_SAVE)
    store_tile_avx512(t, acc);
}
/* Stride 2 with three taps a row (the common 3x3 stride-2 layer): per input row and
 * slot, one masked load of 32 inputs and one of the 33rd give all three taps' vectors,
 * the even lanes (kx = 0), the odd ones (kx = 1) and the even ones moved down a lane with
 * the 33rd in last place (kx = 2): three loads and three shuffles where the general form
 * takes six loads and three shuffles. */
__attribute__((target("avx512f"))) static void tile_s2k3_avx512(const direct_tile *t) {
    DIRECT_EACH(DIRECT_ACC_DECLARE)
    DIRECT_EACH(DIRECT_ACC_INIT)
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4,
                                          2, 0);
    const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5,
                                         3, 1);
    const int64_t plane = t->in_h * t->in_w;
    uint64_t masks[3][DIRECT_SLOTS];  /* per ky: lanes 0-32 from the row's first column */
    int64_t rows[3][DIRECT_SLOTS];
    for (int j = 0; j < DIRECT_SLOTS; j++) {
        const int64_t base = 2 * t->ox[j] - t->px;
        /* output i reads lanes 2i, 2i + 1, 2i + 2: up to 2 * lanes */
        const int64_t count = t->lanes[j] > 0 ? 2 * t->lanes[j] + 1 : 0;
        const int64_t lo = base < 0 ? -base : 0;
        const int64_t hi = t->in_w - base < count ? t->in_w - base : count;
        const uint64_t inside_row = hi > lo ? (((uint64_t)1 << hi) - 1) & ~(((uint64_t)1 << lo) - 1)
                                            : 0;
        for (int ky = 0; ky < 3; ky++) {
            const int64_t iy = t->oy[j] * t->sy - t->py + ky;
            const int inside = iy >= 0 && iy < t->in_h;
            rows[ky][j] = (inside ? iy : 0) * t->in_w + base;
            masks[ky][j] = inside ? inside_row : 0;
        }
    }
#define DIRECT_S2K3_LOAD(j)                                                              \
    const float *src##j = xc + rows[ky][j];                                              \
    const __m512 low##j = _mm512_maskz_loadu_ps((__mmask16)masks[ky][j], src##j);        \
    const __m512 high##j = _mm512_maskz_loadu_ps((__mmask16)(masks[ky][j] >> 16), src##j + 16); \
    const __m512 last##j = _mm512_maskz_loadu_ps((__mmask16)(masks[ky][j] >> 32), src##j + 32); \
    const __m512 e##j = _mm512_permutex2var_ps(low##j, even, high##j);                   \
    const __m512 o##j = _mm512_permutex2var_ps(low##j, odd, high##j);                    \
    const __m512 n##j = _mm512_castsi512_ps(                                            \
        _mm512_alignr_epi32(_mm512_castps_si512(last##j), _mm512_castps_si512(e##j), 1));
    for (int64_t c = 0; c < t->cg; c++) {
        const float *xc = t->x + c * plane;
        const float *wc = t->weights + c * 9 * OC;
        for (int ky = 0; ky < 3; ky++) {
            DIRECT_S2K3_LOAD(0)
            DIRECT_S2K3_LOAD(1)
            DIRECT_S2K3_LOAD(2)
            {
                const __m512 v0 = e0, v1 = e1, v2 = e2;
                DIRECT_FMAS(wc + (ky * 3 + 0) * OC)
            }
            {
                const __m512 v0 = o0, v1 = o1, v2 = o2;
                DIRECT_FMAS(wc + (ky * 3 + 1) * OC)
            }
            {
                const __m512 v0 = n0, v1 = n1, v2 = n2;
                DIRECT_FMAS(wc + (ky * 3 + 2) * OC)
            }
        }
    }
#undef DIRECT_S2K3_LOAD
    __m512 acc[OC][DIRECT_SLOTS];
    DIRECT_EACH(DIRECT_ACC_SAVE)
    store_tile_avx512(t, acc);
}
#endif /* NN_DIRECT_X86 */

typedef struct {
    direct_fn stride1, stride2, stride2_k3;
} direct_kernel;

static direct_kernel pick_kernel(void) {
    static const direct_kernel generic = {tile_generic, tile_generic, tile_generic};
#ifdef NN_DIRECT_X86
    static const direct_kernel avx512 = {tile_s1_avx512, tile_s2_avx512, tile_s2k3_avx512};
    if (ge_simd_choose("GE_HUB_CONV_DIRECT_KERNEL") == GE_SIMD_AVX512) {
        return avx512;
    }
#endif
    return generic;
}

static direct_kernel chosen_kernel;
static pthread_once_t chosen_once = PTHREAD_ONCE_INIT;

static void choose_kernel(void) {
    chosen_kernel = pick_kernel();
}

static const direct_kernel *kernel(void) {
    pthread_once(&chosen_once, choose_kernel);
    return &chosen_kernel;
}

int nn_conv_direct_fits(const nn_window *w) {
    if (w->in[0] != 1 || w->out[0] != 1 || w->k[0] != 1) {
        return 0;
    }
    for (int a = 1; a < 3; a++) {
        if (w->k[a] > NN_DIRECT_MAX_K || w->stride[a] > 2 || w->dil[a] != 1
            || w->pad[a] < 0 || w->pad[a] >= w->k[a]) {
            return 0;
        }
    }
    return 1;
}

int64_t nn_conv_direct_weight_floats(int64_t group, int64_t cg, int64_t mg, int64_t taps) {
    return nn_numel3(group * ((mg + OC - 1) / OC), cg * taps, OC);
}

typedef struct {
    const nn_window *w;
    int64_t c, m, group, cg, mg, blocks;  /* blocks: output-channel blocks per group */
    int64_t row_vectors, slots, slot_groups;
    const float *x, *weights, *bias;
    float *y;
    int act;
    float lo, hi;
    const float *residual;
    const nn_epilogue *after;
    direct_fn fn;
} direct_job;

/* Tiles [begin, end): tile u is channel block u % blocks of slot group u / blocks of one
 * image and group, so that a chunk's tiles share their input rows. */
static void direct_tiles(void *arg, int64_t begin, int64_t end) {
    const direct_job *job = (const direct_job *)arg;
    const nn_window *w = job->w;
    const int64_t in_size = w->in[1] * w->in[2], out_size = w->out[1] * w->out[2];
    const int64_t taps = w->k[1] * w->k[2];
    const int64_t per_group = job->slot_groups * job->blocks;
    direct_tile t;
    t.cg = job->cg;
    t.in_h = w->in[1];
    t.in_w = w->in[2];
    t.out_w = w->out[2];
    t.out_size = out_size;
    t.kh = w->k[1];
    t.kw = w->k[2];
    t.sy = w->stride[1];
    t.sx = w->stride[2];
    t.py = w->pad[1];
    t.px = w->pad[2];
    t.act = job->act;
    t.lo = job->lo;
    t.hi = job->hi;
    t.after = job->after;
    for (int64_t u = begin; u < end; u++) {
        const int64_t image_group = u / per_group, rest = u % per_group;
        const int64_t slot_group = rest / job->blocks, block = rest % job->blocks;
        const int64_t image = image_group / job->group, g = image_group % job->group;
        const int64_t first = g * job->mg + block * OC;  /* the block's first channel */
        const int64_t real = job->mg - block * OC;
        t.channels = (int)(real < OC ? real : OC);
        t.x = job->x + (image * job->c + g * job->cg) * in_size;
        t.weights = job->weights + (g * job->blocks + block) * job->cg * taps * OC;
        for (int q = 0; q < OC; q++) {
            t.bias[q] = job->bias && q < t.channels ? job->bias[first + q] : 0.0f;
        }
        const int64_t plane = (image * job->m + first) * out_size;
        t.y = job->y + plane;
        t.residual = job->residual ? job->residual + plane : NULL;
        for (int j = 0; j < DIRECT_SLOTS; j++) {
            const int64_t slot = slot_group * DIRECT_SLOTS + j;
            if (slot < job->slots) {
                t.oy[j] = slot / job->row_vectors;
                t.ox[j] = slot % job->row_vectors * LANES;
                t.lanes[j] = w->out[2] - t.ox[j] < LANES ? w->out[2] - t.ox[j] : LANES;
            } else {  /* past the plane: computes zeros, stores nothing */
                t.oy[j] = t.ox[j] = t.lanes[j] = 0;
            }
        }
        job->fn(&t);
    }
}

void nn_conv_direct(ge_context *ctx, const nn_window *w, int64_t n, int64_t c, int64_t m,
                    int64_t group, const float *x, const float *weights, const float *bias,
                    float *y, const nn_epilogue *epilogue) {
    const direct_kernel *k = kernel();
    direct_job job;
    job.w = w;
    job.c = c;
    job.m = m;
    job.group = group;
    job.cg = c / group;
    job.mg = m / group;
    job.blocks = (job.mg + OC - 1) / OC;
    job.row_vectors = (w->out[2] + LANES - 1) / LANES;
    job.slots = w->out[1] * job.row_vectors;
    job.slot_groups = (job.slots + DIRECT_SLOTS - 1) / DIRECT_SLOTS;
    job.x = x;
    job.weights = weights;
    job.bias = bias;
    job.y = y;
    job.act = DIRECT_ACT_NONE;
    job.lo = job.hi = 0.0f;
    job.residual = NULL;
    job.after = NULL;
    if (!nn_epilogue_empty(epilogue)) {
        if (epilogue->activation == FUSED_ACT_RELU) {
            job.act = DIRECT_ACT_RELU;
        } else if (epilogue->activation == FUSED_ACT_CLIP) {
            job.act = DIRECT_ACT_CLIP;
            job.lo = (float)epilogue->alpha;
            job.hi = (float)epilogue->beta;
        }
        job.residual = epilogue->residual;
        if (job.act == DIRECT_ACT_NONE && epilogue->activation != FUSED_ACT_NONE) {
            job.after = epilogue;  /* residual and activation over the stored values */
        }
    }
    job.fn = w->stride[2] == 1 ? k->stride1
             : w->k[1] == 3 && w->k[2] == 3 ? k->stride2_k3 : k->stride2;
    const int64_t tiles = n * group * job.slot_groups * job.blocks;
    const int64_t cost = OC * DIRECT_SLOTS * LANES * job.cg * w->k[1] * w->k[2];
    if (tiles > 0) {
        ctx->parallel_for(ctx, tiles, nn_grain(cost, DIRECT_GRAIN_WORK), direct_tiles, &job);
    }
}

int nn_conv_direct_unpacked(ge_context *ctx, const nn_window *w, int64_t n, int64_t c,
                            int64_t m, int64_t group, const float *x, const float *weights,
                            const float *bias, float *y, const nn_epilogue *epilogue) {
    const int64_t cg = c / group, mg = m / group, taps = w->k[1] * w->k[2];
    const int64_t blocks = (mg + OC - 1) / OC, floats = nn_conv_direct_weight_floats(group, cg,
                                                                                    mg, taps);
    float *packed = floats > 0 ? (float *)calloc((size_t)floats, sizeof(float)) : NULL;
    if (packed == NULL) {
        return ctx->set_error(ctx, "ge_conv: no memory for %lld packed weights",
                              (long long)floats);
    }
    /* as ge_hub.kernels.conv._direct_weights: [group][block][cg * taps][OC] */
    for (int64_t g = 0; g < group; g++) {
        for (int64_t o = 0; o < mg; o++) {
            const float *from = weights + (g * mg + o) * cg * taps;
            float *to = packed + ((g * blocks + o / OC) * cg * taps) * OC + o % OC;
            for (int64_t k = 0; k < cg * taps; k++) {
                to[k * OC] = from[k];
            }
        }
    }
    nn_conv_direct(ctx, w, n, c, m, group, x, packed, bias, y, epilogue);
    free(packed);
    return 0;
}
