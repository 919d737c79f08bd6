/*
 * ge_hub.Attention on float32 (the fuse_attention pass makes it from MatMul(Q, K^T),
 * a scale Mul or Div, an optional mask Add, Softmax over the last axis and MatMul(., V)):
 *
 *     Y = Softmax(Q @ K^T (* or /) scale + Mask) @ V
 *
 * Q is [B0, B1, S, D], K [B0, B1, Sk, D], V [B0, B1, Sk, Dv] and Y [B0, B1, S, Dv], each
 * read or written through element strides that the packer derives from the operands'
 * layouts: K given as K^T, and the Transposes of the heads' split and merge that the
 * pass folded in (the perm attributes), cost no step of their own. V and Y keep unit
 * column strides. Rank-3 operands arrive with B0 = 1. The mask is read through its
 * broadcast strides.
 *
 * Work is split into tasks of (one batch-head, ATTN_ROWS query rows); each task walks the
 * keys in blocks of ATTN_KEYS with an online softmax: for each block, the block's scores
 * (ATTN_ROWS x ATTN_KEYS, in the slot's scratch), the running row maximum m, the running
 * sum l of exp(score - m) and the output rows O (accumulated in Y itself) rescaled by
 * exp(m_old - m_new) whenever the maximum grows; Y = O / l at the end. The full S x Sk
 * score matrix is never formed, whatever the sequence length. The key block is first
 * copied as K^T (D rows of ATTN_KEYS keys, zero past the end), so that the score loop
 * runs over 16 keys at a time for 4 query rows, and the P @ V loop over 16 columns of V.
 *
 * Blob (ge_hub/kernels/nn.py, pack_attention; GE_ATTENTION_BLOB in nn.h): ints b0, b1,
 * s, sk, d, dv, the strides of Q (b0, b1, row, column), K (b0, b1, key, column), V (b0,
 * b1, key, column = 1) and Y (b0, b1, row, column = 1), scale_divides, has_mask, the
 * mask's strides (0 where it broadcasts), slots; floats scale. Scratch: `slots`
 * regions, one per parallel chunk, each ATTN_SLOT_FLOATS(d) floats.
 *
 * NaN and inf as in the unfused reference: a NaN score or a +inf one (inf - inf) makes its
 * row NaN, -inf scores get weight 0, and a row whose scores are all -inf is NaN (0 / 0).
 *
 * Micro-kernels: the same code is compiled for AVX-512, AVX2+FMA and baseline x86-64 and
 * picked once from the CPU; GE_HUB_GEMM_KERNEL=avx2|generic forces a lesser one (as for
 * the packed GEMM). Multiply-adds contract into FMA where the target has it, so the
 * variants agree to rounding, not bit for bit.
 */
#if defined(__GNUC__) && !defined(__clang__)
/* Multiply-adds contract into FMA where the variant's target has it (AVX2+FMA and
 * AVX-512): twice the arithmetic per instruction in the two product loops. So the
 * variants round differently (each within the tests' tolerance of the reference); the
 * build's -std=c11 keeps contraction off everywhere else. */
#pragma GCC optimize("fp-contract=fast")
#endif

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ge_hub/internal/simd.h"
#include "nn.h"
#include "nn_common.h"

#define ATTN_ROWS 64  /* query rows per task: a multiple of ATTN_GROUP */
#define ATTN_KEYS 128 /* keys per block: a multiple of 16 */
#define ATTN_GROUP 4  /* query rows the score loop handles at once */
/* Scratch floats per slot: the scores, the packed key block, m and l per row. */
#define ATTN_SLOT_FLOATS(d) ((int64_t)ATTN_ROWS * ATTN_KEYS + (int64_t)(d) * ATTN_KEYS + 2 * ATTN_ROWS)

typedef struct {
    int64_t b0, b1, s, sk, d, dv, scale_divides, slots, tasks, row_blocks;
    int64_t qs0, qs1, qs_row, qs_col, ks0, ks1, ks_key, ks_dim, vs0, vs1, vs_key;
    int64_t ys0, ys1, ys_row, ms0, ms1, ms_row, ms_col;
    float scale;
    const float *q, *k, *v, *mask;
    float *y, *scratch;
} attn_job;

/* 16 floats in and out of a vector: macros, since passing a 64-byte vector by value
 * to a baseline-x86-64 function changes its ABI. */
#define LOAD16(p) (*(const attn_f32x16u *)(const void *)(p))
#define STORE16(p, v) (*(attn_f32x16u *)(void *)(p) = (v))
typedef float attn_f32x16u __attribute__((vector_size(64), aligned(4), may_alias));

/* Copy keys [j0, j0 + kb) of one head as K^T: kt[c * ATTN_KEYS + j] (zero for j >= kb). */
static inline __attribute__((always_inline)) void pack_keys(const attn_job *job,
                                                            const float *k, int64_t j0,
                                                            int64_t kb, float *kt) {
    const int64_t d = job->d, key = job->ks_key, dim = job->ks_dim;
    if (key == 1) {  /* K^T given: its rows are the packed rows */
        for (int64_t c = 0; c < d; c++) {
            memcpy(kt + c * ATTN_KEYS, k + c * dim + j0, (size_t)kb * sizeof(float));
        }
    } else {  /* key by key: each key's elements are read in order */
        for (int64_t j = 0; j < kb; j++) {
            const float *kj = k + (j0 + j) * key;
            for (int64_t c = 0; c < d; c++) {
                kt[c * ATTN_KEYS + j] = kj[c * dim];
            }
        }
    }
    for (int64_t c = 0; c < d; c++) {
        for (int64_t j = kb; j < ATTN_KEYS; j++) {
            kt[c * ATTN_KEYS + j] = 0.0f;
        }
    }
}

/* scores[r][j] = q_r . k_j for ATTN_GROUP rows (rows past the block repeat the last one
 * and land in the scores' spare rows; a row's elements are qc apart) and the block's
 * keys, 16 at a time. */
static inline __attribute__((always_inline)) void group_scores(const float *const *q_rows,
                                                               int64_t qc, const float *kt,
                                                               int64_t d, int64_t kb,
                                                               float *scores) {
    for (int64_t j = 0; j < kb; j += 16) {
        nn_f32x16 acc0 = {0}, acc1 = {0}, acc2 = {0}, acc3 = {0};
        for (int64_t c = 0; c < d; c++) {
            const nn_f32x16 kv = LOAD16(kt + c * ATTN_KEYS + j);
            acc0 += q_rows[0][c * qc] * kv;
            acc1 += q_rows[1][c * qc] * kv;
            acc2 += q_rows[2][c * qc] * kv;
            acc3 += q_rows[3][c * qc] * kv;
        }
        STORE16(scores + 0 * ATTN_KEYS + j, acc0);
        STORE16(scores + 1 * ATTN_KEYS + j, acc1);
        STORE16(scores + 2 * ATTN_KEYS + j, acc2);
        STORE16(scores + 3 * ATTN_KEYS + j, acc3);
    }
}

/* o += sum_j p[j] * v_j over the block's keys (rows of V `vk` apart), 64 then 16 then 1
 * columns at a time. */
static inline __attribute__((always_inline)) void accumulate_values(const float *p,
                                                                    const float *v,
                                                                    int64_t vk, int64_t kb,
                                                                    int64_t dv, float *o) {
    int64_t c = 0;
    for (; c + 64 <= dv; c += 64) {
        nn_f32x16 a0 = LOAD16(o + c), a1 = LOAD16(o + c + 16), a2 = LOAD16(o + c + 32),
                  a3 = LOAD16(o + c + 48);
        for (int64_t j = 0; j < kb; j++) {
            const float *vr = v + j * vk + c;
            const float w = p[j];
            a0 += w * LOAD16(vr);
            a1 += w * LOAD16(vr + 16);
            a2 += w * LOAD16(vr + 32);
            a3 += w * LOAD16(vr + 48);
        }
        STORE16(o + c, a0);
        STORE16(o + c + 16, a1);
        STORE16(o + c + 32, a2);
        STORE16(o + c + 48, a3);
    }
    for (; c + 16 <= dv; c += 16) {
        nn_f32x16 a = LOAD16(o + c);
        for (int64_t j = 0; j < kb; j++) {
            a += p[j] * LOAD16(v + j * vk + c);
        }
        STORE16(o + c, a);
    }
    for (; c < dv; c++) {
        float a = o[c];
        for (int64_t j = 0; j < kb; j++) {
            a += p[j] * v[j * vk + c];
        }
        o[c] = a;
    }
}

/* One row's scores for this block: scaled, masked, then exp(score - m_new) in place;
 * updates m and l and rescales the output row. Returns whether the row saw a NaN. */
static inline __attribute__((always_inline)) int softmax_block(const attn_job *job,
                                                               float *s, int64_t kb,
                                                               const float *mask_row,
                                                               float *m, float *l, float *o) {
    const float scale = job->scale;
    if (job->scale_divides) {
        for (int64_t j = 0; j < kb; j++) {
            s[j] = s[j] / scale;
        }
    } else {
        for (int64_t j = 0; j < kb; j++) {
            s[j] = s[j] * scale;
        }
    }
    if (mask_row && job->ms_col == 1) {
        for (int64_t j = 0; j < kb; j++) {
            s[j] = s[j] + mask_row[j];
        }
    } else if (mask_row) {
        for (int64_t j = 0; j < kb; j++) {
            s[j] = s[j] + mask_row[j * job->ms_col];
        }
    }
    /* the maximum and whether a NaN is there, over 16 lanes (a scalar `x > best` loop
     * stays scalar) */
    float lanes_max[16], lanes_nan[16];
    for (int t = 0; t < 16; t++) {
        lanes_max[t] = -INFINITY;
        lanes_nan[t] = 0.0f;
    }
    int64_t j = 0;
    for (; j + 16 <= kb; j += 16) {
        for (int t = 0; t < 16; t++) {
            const float x = s[j + t];
            lanes_max[t] = x > lanes_max[t] ? x : lanes_max[t];
            lanes_nan[t] = x != x ? 1.0f : lanes_nan[t];
        }
    }
    float best = -INFINITY;
    int nan = 0;
    for (int t = 0; t < 16; t++) {
        best = lanes_max[t] > best ? lanes_max[t] : best;
        nan |= lanes_nan[t] != 0.0f;
    }
    for (; j < kb; j++) {
        best = s[j] > best ? s[j] : best;
        nan |= s[j] != s[j];
    }
    const float m_new = *m > best ? *m : best;
    if (m_new == -INFINITY) {  /* every score so far is -inf: no weight yet */
        for (int64_t j = 0; j < kb; j++) {
            s[j] = 0.0f;
        }
        return nan;
    }
    const float correction = nn_expf(*m - m_new);
    if (correction != 1.0f) {
        for (int64_t c = 0; c < job->dv; c++) {
            o[c] *= correction;
        }
    }
    for (j = 0; j < kb; j++) {
        s[j] = nn_expf(s[j] - m_new);
    }
    float lanes[16] = {0};
    for (j = 0; j + 16 <= kb; j += 16) {
        for (int t = 0; t < 16; t++) {
            lanes[t] += s[j + t];
        }
    }
    float total = 0.0f;
    for (int t = 0; t < 16; t++) {
        total += lanes[t];
    }
    for (; j < kb; j++) {
        total += s[j];
    }
    *l = *l * correction + total;
    *m = m_new;
    return nan;
}

static inline __attribute__((always_inline)) void attn_task(const attn_job *job, int64_t task,
                                                            float *slot) {
    float *scores = slot;
    float *kt = scores + (int64_t)ATTN_ROWS * ATTN_KEYS;
    float *m = kt + job->d * ATTN_KEYS;
    float *l = m + ATTN_ROWS;
    const int64_t bh = task / job->row_blocks;
    const int64_t i0 = bh / job->b1, i1 = bh % job->b1;
    const int64_t r0 = (task % job->row_blocks) * ATTN_ROWS;
    const int64_t rows = job->s - r0 < ATTN_ROWS ? job->s - r0 : ATTN_ROWS;
    const int64_t d = job->d, dv = job->dv, sk = job->sk, ys = job->ys_row;
    const float *q = job->q + i0 * job->qs0 + i1 * job->qs1 + r0 * job->qs_row;
    const float *k = job->k + i0 * job->ks0 + i1 * job->ks1;
    const float *v = job->v + i0 * job->vs0 + i1 * job->vs1;
    float *y = job->y + i0 * job->ys0 + i1 * job->ys1 + r0 * ys;
    const float *mask = NULL;
    if (job->mask) {
        mask = job->mask + i0 * job->ms0 + i1 * job->ms1 + r0 * job->ms_row;
    }
    int nan_rows[ATTN_ROWS] = {0};
    for (int64_t r = 0; r < rows; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
        memset(y + r * ys, 0, (size_t)dv * sizeof(float));
    }
    for (int64_t j0 = 0; j0 < sk; j0 += ATTN_KEYS) {
        const int64_t kb = sk - j0 < ATTN_KEYS ? sk - j0 : ATTN_KEYS;
        pack_keys(job, k, j0, kb, kt);
        for (int64_t r = 0; r < rows; r += ATTN_GROUP) {
            const float *q_rows[ATTN_GROUP];
            for (int g = 0; g < ATTN_GROUP; g++) {
                q_rows[g] = q + (r + g < rows ? r + g : rows - 1) * job->qs_row;
            }
            group_scores(q_rows, job->qs_col, kt, d, kb, scores + r * ATTN_KEYS);
        }
        for (int64_t r = 0; r < rows; r++) {
            float *s = scores + r * ATTN_KEYS;
            const float *mask_row = mask ? mask + r * job->ms_row + j0 * job->ms_col : NULL;
            nan_rows[r] |= softmax_block(job, s, kb, mask_row, m + r, l + r, y + r * ys);
            accumulate_values(s, v + j0 * job->vs_key, job->vs_key, kb, dv, y + r * ys);
        }
    }
    for (int64_t r = 0; r < rows; r++) {
        float *o = y + r * ys;
        const float total = nan_rows[r] ? NAN : l[r];
        for (int64_t c = 0; c < dv; c++) {
            o[c] = o[c] / total;
        }
    }
}

/* Slot `slot` runs tasks [slot * tasks / slots, (slot + 1) * tasks / slots). */
static inline __attribute__((always_inline)) void attn_slots(void *arg, int64_t begin,
                                                             int64_t end) {
    const attn_job *job = (const attn_job *)arg;
    for (int64_t slot = begin; slot < end; slot++) {
        float *scratch = job->scratch + slot * ATTN_SLOT_FLOATS(job->d);
        const int64_t first = slot * job->tasks / job->slots;
        const int64_t last = (slot + 1) * job->tasks / job->slots;
        for (int64_t task = first; task < last; task++) {
            attn_task(job, task, scratch);
        }
    }
}

static void attn_slots_generic(void *arg, int64_t begin, int64_t end) {
    attn_slots(arg, begin, end);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ATTN_X86 1
__attribute__((target("avx2,fma"))) static void attn_slots_avx2(void *arg, int64_t begin,
                                                                int64_t end) {
    attn_slots(arg, begin, end);
}

__attribute__((target("avx512f"))) static void attn_slots_avx512(void *arg, int64_t begin,
                                                                int64_t end) {
    attn_slots(arg, begin, end);
}
#endif

/* -- picking the micro-kernel ------------------------------------------------------------ */

static ge_range_fn attn_chosen;
static pthread_once_t attn_once = PTHREAD_ONCE_INIT;

static void attn_choose(void) {
    attn_chosen = attn_slots_generic;
#ifdef ATTN_X86
    switch (ge_simd_choose("GE_HUB_GEMM_KERNEL")) {
    case GE_SIMD_AVX512:
        attn_chosen = attn_slots_avx512;
        break;
    case GE_SIMD_AVX2:
        attn_chosen = attn_slots_avx2;
        break;
    case GE_SIMD_GENERIC:
        break;
    }
#endif
}

/* One past the furthest element a [n0, n1, n2, n3] walk with these strides reaches. */
static int64_t attn_extent(int64_t n0, int64_t n1, int64_t n2, int64_t n3, int64_t s0,
                           int64_t s1, int64_t s2, int64_t s3) {
    return (n0 - 1) * s0 + (n1 - 1) * s1 + (n2 - 1) * s2 + (n3 - 1) * s3 + 1;
}

int ge_nn_attention_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                        const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                        size_t attrs_size) {
    static const char *name = "ge_nn_attention_f32";
    ge_attention_blob r;
    if (!ge_attention_blob_read(attrs, attrs_size, &r) || r.b0 < 1 || r.b1 < 1 || r.s < 1
        || r.sk < 1 || r.d < 1 || r.dv < 1 || r.slots < 1 || (r.scale_divides & ~1)
        || (r.has_mask & ~1) || r.vs_col != 1 || r.ys_col != 1
        || (r.qs0 | r.qs1 | r.qs_row | r.qs_col | r.ks0 | r.ks1 | r.ks_key | r.ks_dim | r.vs0
            | r.vs1 | r.vs_key | r.ys0 | r.ys1 | r.ys_row | r.ms0 | r.ms1 | r.ms_row | r.ms_col)
               < 0) {
        return NN_BAD_BLOB_BYTES(ctx, name, attrs_size);
    }
    if (n_inputs < 3 + r.has_mask || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected inputs Q, K, V%s and 1 output, got %d and %d",
                              name, r.has_mask ? ", Mask" : "", (int)n_inputs,
                              (int)n_outputs);
    }
    const int64_t bh = r.b0 * r.b1;
    if (nn_check_f32(ctx, name, "input Q", &inputs[0], bh * r.s * r.d)
        || nn_check_f32(ctx, name, "input K", &inputs[1], bh * r.sk * r.d)
        || nn_check_f32(ctx, name, "input V", &inputs[2], bh * r.sk * r.dv)
        || nn_check_f32(ctx, name, "output Y", &outputs[0], bh * r.s * r.dv)) {
        return -1;
    }
    /* The strides must stay inside each tensor (they come from the packer, but a blob is
     * data: a wrong one must fail here, not read past the end). */
    if (attn_extent(r.b0, r.b1, r.s, r.d, r.qs0, r.qs1, r.qs_row, r.qs_col) > inputs[0].numel
        || attn_extent(r.b0, r.b1, r.sk, r.d, r.ks0, r.ks1, r.ks_key, r.ks_dim)
               > inputs[1].numel
        || attn_extent(r.b0, r.b1, r.sk, r.dv, r.vs0, r.vs1, r.vs_key, 1) > inputs[2].numel
        || attn_extent(r.b0, r.b1, r.s, r.dv, r.ys0, r.ys1, r.ys_row, 1) > outputs[0].numel) {
        return NN_BAD_BLOB_BYTES(ctx, name, attrs_size);
    }
    if (r.has_mask) {
        const int64_t extent = attn_extent(r.b0, r.b1, r.s, r.sk, r.ms0, r.ms1, r.ms_row,
                                           r.ms_col);
        if (inputs[3].dtype != GE_FLOAT32 || inputs[3].numel < extent) {
            return ctx->set_error(ctx, "%s: input Mask must be float32 with at least %lld "
                                  "elements", name, (long long)extent);
        }
    }
    const size_t need = (size_t)r.slots * (size_t)ATTN_SLOT_FLOATS(r.d) * sizeof(float);
    if (ctx->scratch_bytes < need) {
        return ctx->set_error(ctx, "%s: %zu bytes of scratch, expected %zu", name,
                              ctx->scratch_bytes, need);
    }
    attn_job job = {
        .b0 = r.b0, .b1 = r.b1, .s = r.s, .sk = r.sk, .d = r.d, .dv = r.dv,
        .scale_divides = r.scale_divides, .slots = r.slots,
        .row_blocks = (r.s + ATTN_ROWS - 1) / ATTN_ROWS,
        .qs0 = r.qs0, .qs1 = r.qs1, .qs_row = r.qs_row, .qs_col = r.qs_col,
        .ks0 = r.ks0, .ks1 = r.ks1, .ks_key = r.ks_key, .ks_dim = r.ks_dim,
        .vs0 = r.vs0, .vs1 = r.vs1, .vs_key = r.vs_key,
        .ys0 = r.ys0, .ys1 = r.ys1, .ys_row = r.ys_row,
        .ms0 = r.ms0, .ms1 = r.ms1, .ms_row = r.ms_row, .ms_col = r.ms_col,
        .scale = (float)r.scale,
        .q = (const float *)inputs[0].data, .k = (const float *)inputs[1].data,
        .v = (const float *)inputs[2].data,
        .mask = r.has_mask ? (const float *)inputs[3].data : NULL,
        .y = (float *)outputs[0].data, .scratch = (float *)ctx->scratch,
    };
    job.tasks = bh * job.row_blocks;
    pthread_once(&attn_once, attn_choose);
    ctx->parallel_for(ctx, r.slots, 1, attn_chosen, &job);
    return 0;
}
