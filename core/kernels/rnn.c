/*
 * RNN, GRU and LSTM on float32, one layer each, with the semantics of their ONNX ops and
 * of the NumPy references in ge_hub/ops/rnn.py (which documents the frame: layouts,
 * directions, per-row sequence lengths, activation queues, clip).
 *
 * Inputs: X, W, R, B, sequence_lens (int32), initial_h, and for LSTM initial_c and P;
 * every input after R may be omitted. Outputs: Y, Y_h and for LSTM Y_c; a node may have
 * fewer (the trailing ones it does not use are dropped), and each one it has is written.
 *
 * Blob (ge_hub/kernels/rnn.py, the packers of _packer): ints
 *   seq, batch, input, hidden, directions, reverse, layout, has_clip, flag, block,
 *   r_packed, then directions * F activation codes (RNN_* below; F = 1, 2, 3 for RNN,
 *   GRU, LSTM)
 * floats
 *   clip, then directions * F alphas, then directions * F betas.
 * `reverse` is 1 for direction="reverse" (a bidirectional layer's second direction is
 * always reversed); `flag` is GRU's linear_before_reset or LSTM's input_forget (0 for
 * RNN); `block` is how many time steps one input projection covers; `r_packed` is 1 when
 * R arrives as the panels of R^T described at rnn_panels (the packer's prepack lays a
 * constant R out so for a batch of at most RNN_SMALL_BATCH rows).
 *
 * How a direction runs: its input projection X W^T, for `block` time steps at once, is
 * one GEMM (layout 0, or layout 1 over the whole sequence) or one GEMM per batch row
 * (layout 1 in blocks), into xw. Each step then computes H R^T for the whole batch into
 * hr (GRU without linear_before_reset: the z and r gates first, then (r * H) Rh^T) and
 * finishes every batch row elementwise: biases, peepholes, clip, activations, the new
 * states, Y. A row whose sequence has ended keeps its state and
 * writes zeros to Y; a row of length 0 ends with zero states. When the whole sequence is
 * projected at once, the projections of all directions run first, split over the
 * thread pool; then the two directions of a bidirectional layer run side by side.
 *
 * The step's product H R^T has few rows (the batch) against a large R: a BLAS packs all
 * of R again at every call, which costs more than the product itself (2.5 times the time
 * of the tiles below for batch 4, hidden 256). So up to RNN_SMALL_BATCH rows it is
 * computed here, from panels of R^T laid out once (at compile time for a constant R, else
 * at the start of each run), in tiles of up to 4 rows by 64 columns that stream through
 * their panel once per step; a larger batch uses the BLAS with R as it is. The tiles sum
 * over k in order, whatever the CPU or the threads.
 *
 * Scratch (sized by the packer): batch int64 lengths, then per direction the floats
 *   xw [block * batch, G * hidden], hr [batch, G * hidden], h [batch, hidden],
 *   c [batch, hidden] (LSTM), rh [batch, hidden] (GRU)
 * with G the gate count (1, 3, 4), then, for a small batch whose R is not packed yet,
 * every direction's panels.
 *
 * Sigmoid and Tanh, on the hot path, are branch-free float expressions that vectorize
 * (within a few ulp of libm); the other activations call libm.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ge_hub/internal/simd.h"
#include "nn_common.h"
#include "rnn.h"

/* Activation codes, shared with ge_hub/kernels/rnn.py (ACTIVATION_CODES). */
enum {
    RNN_RELU,
    RNN_TANH,
    RNN_SIGMOID,
    RNN_AFFINE,
    RNN_LEAKY_RELU,
    RNN_THRESHOLDED_RELU,
    RNN_SCALED_TANH,
    RNN_HARD_SIGMOID,
    RNN_ELU,
    RNN_SOFTSIGN,
    RNN_SOFTPLUS,
    RNN_NUM_ACTIVATIONS
};

typedef enum { CELL_RNN, CELL_GRU, CELL_LSTM } rnn_cell;

#define RNN_MAX_FUNCTIONS 3
#define RNN_HEADER_INTS 11
/* No dimension may exceed ge_hub.ops.limits.MAX_ELEMENTS; products are checked too. */
#define RNN_MAX_DIM ((int64_t)1 << 40)
/* A chunk of batch rows in one parallel_for item holds about this much work: a step
 * with less elementwise work runs it on the calling thread (waking the pool at every
 * step would cost more than it saves). */
#define RNN_ROW_GRAIN_WORK (1 << 17)
/* The step's product: batches up to RNN_SMALL_BATCH rows use the tiles, larger ones the
 * BLAS; one parallel chunk of tiles holds about RNN_TILE_GRAIN_WORK multiply-adds. */
#define RNN_SMALL_BATCH 16  /* ge_hub/kernels/rnn.py: SMALL_BATCH */
#define RNN_TILE_ROWS 4
#define RNN_PANEL 64  /* ge_hub/kernels/rnn.py: PANEL */
#define RNN_TILE_GRAIN_WORK (1 << 19)

typedef struct {
    int code;
    float alpha, beta;
} rnn_activation;

typedef struct {
    const char *name;
    rnn_cell cell;
    int64_t gates, functions, states;
    int64_t seq, batch, input, hidden, directions, reverse, layout, has_clip, flag, block;
    int64_t r_packed;
    int avx512;  /* the tiles may use AVX-512 */
    int64_t gate_width;  /* gates * hidden */
    int64_t dir_floats;  /* scratch floats per direction */
    float clip;
    rnn_activation act[2][RNN_MAX_FUNCTIONS];
    const float *x, *w, *r, *b, *p, *init_h, *init_c;
    const float *panels;  /* R^T's panels, every direction (a small batch only) */
    int64_t *lengths;
    int64_t max_length;
    float *y, *y_h, *y_c;
    float *scratch;
    ge_context *ctx;
} rnn_job;

/* One direction's run: its weights, buffers and the step being computed. */
typedef struct {
    const rnn_job *job;
    int64_t d;
    int reverse;
    const float *w, *r, *panels, *wb, *rb, *p;  /* wb, rb, p NULL without B or P */
    float *xw, *hr, *h, *c, *rh;
    int64_t t0, nt;  /* the time steps [t0, t0 + nt) that xw holds */
    int64_t t;       /* the step */
    int pass;        /* GRU without linear_before_reset: 0 gates z and r, 1 the rest */
} rnn_dir;

/* -- activations ------------------------------------------------------------------------ */

/* exp(-|x|) never overflows; e / (1 + e) keeps the small results for x < 0. */
static inline float rnn_sigmoid(float x) {
    const float e = nn_expf(-fabsf(x));
    const float inverse = 1.0f / (1.0f + e);
    return x >= 0.0f ? inverse : e * inverse;
}

/* tanh|x| from its Taylor series below 0.5 (the first term left out is under 2^-27 of
 * the result there), else (1 - e) / (1 + e) with e = exp(-2|x|), whose cancellation costs
 * at most a couple of ulp from 0.5 on; the sign put back. NaN takes the second arm. */
static inline float rnn_tanh(float x) {
    const float a = fabsf(x);
    const float z = a * a;
    float p = -1.455834387051e-3f;  /* -929569 / 638512875 */
    p = p * z + 3.592128036572e-3f;  /* 21844 / 6081075 */
    p = p * z - 8.863235529902e-3f;  /* -1382 / 155925 */
    p = p * z + 2.186948853616e-2f;  /* 62 / 2835 */
    p = p * z - 5.396825396825e-2f;  /* -17 / 315 */
    p = p * z + 1.333333333333e-1f;  /* 2 / 15 */
    p = p * z - 3.333333333333e-1f;  /* -1 / 3 */
    const float series = a + a * z * p;
    const float e = nn_expf(-2.0f * a);
    const float from_exp = (1.0f - e) / (1.0f + e);
    return copysignf(a < 0.5f ? series : from_exp, x);
}

/* x[i] = f(clip(x[i])) over n values. The clamps keep NaN, as np.clip does. */
NN_VECTORIZED static void rnn_activate_span(const rnn_activation *f, int has_clip, float clip,
                                            float *x, int64_t n) {
    if (has_clip) {
        for (int64_t i = 0; i < n; i++) {
            float v = x[i] < -clip ? -clip : x[i];
            x[i] = v > clip ? clip : v;
        }
    }
    const float alpha = f->alpha, beta = f->beta;
    switch (f->code) {
    case RNN_RELU:
        for (int64_t i = 0; i < n; i++) {
            x[i] = x[i] < 0.0f ? 0.0f : x[i];
        }
        break;
    case RNN_TANH:
        for (int64_t i = 0; i < n; i++) {
            x[i] = rnn_tanh(x[i]);
        }
        break;
    case RNN_SIGMOID:
        for (int64_t i = 0; i < n; i++) {
            x[i] = rnn_sigmoid(x[i]);
        }
        break;
    case RNN_AFFINE:
        for (int64_t i = 0; i < n; i++) {
            x[i] = alpha * x[i] + beta;
        }
        break;
    case RNN_LEAKY_RELU:
        for (int64_t i = 0; i < n; i++) {
            float scaled = alpha * x[i];
            x[i] = x[i] >= 0.0f ? x[i] : scaled;
        }
        break;
    case RNN_THRESHOLDED_RELU:
        for (int64_t i = 0; i < n; i++) {
            x[i] = x[i] > alpha ? x[i] : 0.0f;  /* ONNX: X where X > alpha */
        }
        break;
    case RNN_SCALED_TANH:
        for (int64_t i = 0; i < n; i++) {
            x[i] = alpha * rnn_tanh(beta * x[i]);
        }
        break;
    case RNN_HARD_SIGMOID:
        for (int64_t i = 0; i < n; i++) {
            float v = alpha * x[i] + beta;
            v = v < 0.0f ? 0.0f : v;
            x[i] = v > 1.0f ? 1.0f : v;
        }
        break;
    case RNN_ELU:
        for (int64_t i = 0; i < n; i++) {
            /* min(x, 0) as np.minimum computes it: NaN stays NaN */
            float negative = alpha * expm1f(x[i] > 0.0f ? 0.0f : x[i]);
            x[i] = x[i] >= 0.0f ? x[i] : negative;
        }
        break;
    case RNN_SOFTSIGN:
        for (int64_t i = 0; i < n; i++) {
            x[i] = x[i] / (1.0f + fabsf(x[i]));
        }
        break;
    case RNN_SOFTPLUS:  /* log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)), never overflows */
        for (int64_t i = 0; i < n; i++) {
            float positive_part = x[i] > 0.0f ? x[i] : 0.0f;
            x[i] = positive_part + log1pf(expf(-fabsf(x[i])));
        }
        break;
    default:  /* codes are checked when the blob is read */
        break;
    }
}

/* rnn_activate_span over n values, the last n % 16 of them in a zero-padded block of 16:
 * a whole vector instead of the scalar tail loop, which costs as much as the vectors when
 * hidden is not a multiple of 16 (the math is elementwise, the zeros are dropped). */
static void rnn_activate(const rnn_activation *f, int has_clip, float clip, float *x,
                         int64_t n) {
    const int64_t body = n - n % 16;
    rnn_activate_span(f, has_clip, clip, x, body);
    if (body < n) {
        float tail[16] = {0};
        memcpy(tail, x + body, (size_t)(n - body) * sizeof(float));
        rnn_activate_span(f, has_clip, clip, tail, 16);
        memcpy(x + body, tail, (size_t)(n - body) * sizeof(float));
    }
}

/* -- positions ------------------------------------------------------------------------- */

/* Row of xw holding (t, b): rows follow X's order within the projected block. */
static inline int64_t rnn_xw_row(const rnn_dir *dir, int64_t t, int64_t b) {
    const rnn_job *job = dir->job;
    return job->layout == 0 ? (t - dir->t0) * job->batch + b : b * dir->nt + (t - dir->t0);
}

/* Offset of Y's row (t, d, b): [seq, D, batch, H] or [batch, seq, D, H]. */
static inline int64_t rnn_y_offset(const rnn_job *job, int64_t t, int64_t d, int64_t b) {
    const int64_t row = job->layout == 0 ? (t * job->directions + d) * job->batch + b
                                         : (b * job->seq + t) * job->directions + d;
    return row * job->hidden;
}

/* Offset of a state's row (d, b): [D, batch, H] or [batch, D, H]. */
static inline int64_t rnn_state_offset(const rnn_job *job, int64_t d, int64_t b) {
    const int64_t row = job->layout == 0 ? d * job->batch + b : b * job->directions + d;
    return row * job->hidden;
}

/* -- one step of one batch row --------------------------------------------------------- */

/* pre[j] = xw[j] + hr[j] + wb[j] + rb[j] (the reference's order), for n values. */
NN_VECTORIZED static void rnn_gate_sum(float *pre, const float *xw, const float *hr,
                                       const float *wb, const float *rb, int64_t n) {
    if (wb != NULL) {
        for (int64_t j = 0; j < n; j++) {
            pre[j] = xw[j] + hr[j] + wb[j] + rb[j];
        }
    } else {
        for (int64_t j = 0; j < n; j++) {
            pre[j] = xw[j] + hr[j];
        }
    }
}

/* pre[j] = xw[j] + hr[j] + p[j] * c[j] + wb[j] + rb[j] (LSTM gates with peepholes). */
NN_VECTORIZED static void rnn_peephole_sum(float *pre, const float *xw, const float *hr,
                                           const float *p, const float *c, const float *wb,
                                           const float *rb, int64_t n) {
    if (wb != NULL) {
        for (int64_t j = 0; j < n; j++) {
            pre[j] = xw[j] + hr[j] + p[j] * c[j] + wb[j] + rb[j];
        }
    } else {
        for (int64_t j = 0; j < n; j++) {
            pre[j] = xw[j] + hr[j] + p[j] * c[j];
        }
    }
}

static void rnn_row_rnn(const rnn_dir *dir, int64_t b, float *h_out) {
    const rnn_job *job = dir->job;
    const int64_t H = job->hidden;
    const float *xw = dir->xw + rnn_xw_row(dir, dir->t, b) * H;
    float *hr = dir->hr + b * H;
    rnn_gate_sum(hr, xw, hr, dir->wb, dir->rb, H);
    rnn_activate(&job->act[dir->d][0], (int)job->has_clip, job->clip, hr, H);
    memcpy(h_out, hr, (size_t)H * sizeof(float));
}

NN_VECTORIZED static void rnn_gru_update(float *h, const float *z, const float *candidate,
                                         int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        h[j] = (1.0f - z[j]) * candidate[j] + z[j] * h[j];
    }
}

NN_VECTORIZED static void rnn_gru_linear_reset(float *pre, const float *xw, const float *reset,
                                               const float *hr, const float *wb,
                                               const float *rb, int64_t n) {
    /* xw + r * (hr + Rbh) + Wbh, as the reference groups it */
    if (wb != NULL) {
        for (int64_t j = 0; j < n; j++) {
            pre[j] = xw[j] + reset[j] * (hr[j] + rb[j]) + wb[j];
        }
    } else {
        for (int64_t j = 0; j < n; j++) {
            pre[j] = xw[j] + reset[j] * hr[j];
        }
    }
}

NN_VECTORIZED static void rnn_gru_after_reset(float *pre, const float *xw, const float *hr,
                                              const float *wb, const float *rb, int64_t n) {
    /* xw + (r * H) Rh^T + Rbh + Wbh, as the reference groups it */
    if (wb != NULL) {
        for (int64_t j = 0; j < n; j++) {
            pre[j] = xw[j] + hr[j] + rb[j] + wb[j];
        }
    } else {
        for (int64_t j = 0; j < n; j++) {
            pre[j] = xw[j] + hr[j];
        }
    }
}

NN_VECTORIZED static void rnn_product(float *out, const float *a, const float *b, int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        out[j] = a[j] * b[j];
    }
}

/* GRU gates z, r, h. Without linear_before_reset a row runs in two passes around the
 * GEMM (r * H) Rh^T: pass 0 leaves z in hr's z block and r * H in rh. */
static void rnn_row_gru(const rnn_dir *dir, int64_t b, int pass) {
    const rnn_job *job = dir->job;
    const int64_t H = job->hidden, width = job->gate_width;
    const float *xw = dir->xw + rnn_xw_row(dir, dir->t, b) * width;
    float *hr = dir->hr + b * width, *h = dir->h + b * H;
    const rnn_activation *f = &job->act[dir->d][0], *g = &job->act[dir->d][1];
    const int clip_on = (int)job->has_clip;
    const float *wb = dir->wb, *rb = dir->rb;
    float *z = hr, *reset = hr + H, *hidden = hr + 2 * H;
    if (pass == 0) {
        rnn_gate_sum(z, xw, z, wb, rb, 2 * H);  /* z and r blocks together */
        rnn_activate(f, clip_on, job->clip, z, 2 * H);
        if (!job->flag) {
            rnn_product(dir->rh + b * H, reset, h, H);
            return;
        }
    }
    if (job->flag) {
        rnn_gru_linear_reset(hidden, xw + 2 * H, reset, hidden, wb ? wb + 2 * H : NULL,
                             rb ? rb + 2 * H : NULL, H);
    } else {
        rnn_gru_after_reset(hidden, xw + 2 * H, hidden, wb ? wb + 2 * H : NULL,
                            rb ? rb + 2 * H : NULL, H);
    }
    rnn_activate(g, clip_on, job->clip, hidden, H);
    rnn_gru_update(h, z, hidden, H);
}

NN_VECTORIZED static void rnn_lstm_cell(float *c, const float *i_gate, const float *f_gate,
                                        const float *candidate, int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        c[j] = f_gate[j] * c[j] + i_gate[j] * candidate[j];
    }
}

NN_VECTORIZED static void rnn_one_minus(float *out, const float *x, int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        out[j] = 1.0f - x[j];
    }
}

/* LSTM gates i, o, f, c (W's order), each H wide in xw and hr. Without peepholes or
 * input_forget, i, o and f are one block of 3 H through one activation call; otherwise
 * i and f read the old cell state, o the new one, and f may be 1 - i. */
static void rnn_row_lstm(const rnn_dir *dir, int64_t b) {
    const rnn_job *job = dir->job;
    const int64_t H = job->hidden, width = job->gate_width;
    const float *xw = dir->xw + rnn_xw_row(dir, dir->t, b) * width;
    float *hr = dir->hr + b * width, *h = dir->h + b * H, *c = dir->c + b * H;
    const rnn_activation *f = &job->act[dir->d][0], *g = &job->act[dir->d][1],
                         *h_fn = &job->act[dir->d][2];
    const int clip_on = (int)job->has_clip;
    const float clip = job->clip;
    const float *wb = dir->wb, *rb = dir->rb, *p = dir->p;
    float *i_gate = hr, *o_gate = hr + H, *f_gate = hr + 2 * H, *candidate = hr + 3 * H;
#define RNN_BIAS(base, k) ((base) ? (base) + (k) * H : NULL)
    const int fused = p == NULL && !job->flag;
    if (fused) {
        rnn_gate_sum(i_gate, xw, i_gate, wb, rb, 3 * H);
        rnn_activate(f, clip_on, clip, i_gate, 3 * H);
    } else {
        if (p != NULL) {  /* P holds i, o, f */
            rnn_peephole_sum(i_gate, xw, i_gate, p, c, wb, rb, H);
        } else {
            rnn_gate_sum(i_gate, xw, i_gate, wb, rb, H);
        }
        rnn_activate(f, clip_on, clip, i_gate, H);
        if (job->flag) {  /* input_forget: the forget gate is 1 - i */
            rnn_one_minus(f_gate, i_gate, H);
        } else {
            rnn_peephole_sum(f_gate, xw + 2 * H, f_gate, p + 2 * H, c, RNN_BIAS(wb, 2),
                             RNN_BIAS(rb, 2), H);
            rnn_activate(f, clip_on, clip, f_gate, H);
        }
    }
    rnn_gate_sum(candidate, xw + 3 * H, candidate, RNN_BIAS(wb, 3), RNN_BIAS(rb, 3), H);
    rnn_activate(g, clip_on, clip, candidate, H);
    rnn_lstm_cell(c, i_gate, f_gate, candidate, H);
    if (!fused) {
        if (p != NULL) {  /* the output gate's peephole reads the new cell state */
            rnn_peephole_sum(o_gate, xw + H, o_gate, p + H, c, RNN_BIAS(wb, 1),
                             RNN_BIAS(rb, 1), H);
        } else {
            rnn_gate_sum(o_gate, xw + H, o_gate, RNN_BIAS(wb, 1), RNN_BIAS(rb, 1), H);
        }
        rnn_activate(f, clip_on, clip, o_gate, H);
    }
    memcpy(candidate, c, (size_t)H * sizeof(float));  /* candidate is spent: h(C) there */
    rnn_activate(h_fn, 0, 0.0f, candidate, H);
    rnn_product(h, o_gate, candidate, H);
#undef RNN_BIAS
}

/* Rows [begin, end) of one step (one pass for a two-pass GRU step). */
static void rnn_rows(void *arg, int64_t begin, int64_t end) {
    const rnn_dir *dir = (const rnn_dir *)arg;
    const rnn_job *job = dir->job;
    const int64_t H = job->hidden;
    for (int64_t b = begin; b < end; b++) {
        float *y = job->y != NULL ? job->y + rnn_y_offset(job, dir->t, dir->d, b) : NULL;
        if (dir->t >= job->lengths[b]) {  /* this row's sequence has ended */
            if (job->cell == CELL_GRU && dir->pass == 0 && !job->flag) {
                memset(dir->rh + b * H, 0, (size_t)H * sizeof(float));
            } else if (y != NULL) {
                memset(y, 0, (size_t)H * sizeof(float));
            }
            continue;
        }
        switch (job->cell) {
        case CELL_RNN:
            rnn_row_rnn(dir, b, dir->h + b * H);
            break;
        case CELL_GRU:
            rnn_row_gru(dir, b, dir->pass);
            break;
        case CELL_LSTM:
            rnn_row_lstm(dir, b);
            break;
        }
        if (y != NULL && !(job->cell == CELL_GRU && dir->pass == 0 && !job->flag)) {
            memcpy(y, dir->h + b * H, (size_t)H * sizeof(float));
        }
    }
}

/* -- the step's product H R^T ------------------------------------------------------------ */

/* Panels of 64 columns of R^T (RNN_PANEL) for the column range [c0, c0 + cols) of R^T:
 * ceil(cols / 64) panels of hidden rows each, row kk of panel p holding
 * R[c0 + 64 p + j][kk] for j < 64 (zeros past the range), so that a tile streams through
 * its panel contiguously. */
static inline int64_t rnn_panels(int64_t cols) {
    return (cols + RNN_PANEL - 1) / RNN_PANEL;
}

/* Floats of one direction's panels: the whole width, or for GRU without
 * linear_before_reset the z and r gates and the h gate apart (its two products). */
static int64_t rnn_panel_floats(const rnn_job *job) {
    const int64_t H = job->hidden;
    if (job->cell == CELL_GRU && !job->flag) {
        return (rnn_panels(2 * H) + rnn_panels(H)) * RNN_PANEL * H;
    }
    return rnn_panels(job->gate_width) * RNN_PANEL * H;
}

static void rnn_pack_range(const float *r, int64_t H, int64_t c0, int64_t cols, float *out) {
    for (int64_t p = 0; p < rnn_panels(cols); p++) {
        for (int64_t kk = 0; kk < H; kk++) {
            float *row = out + (p * H + kk) * RNN_PANEL;
            for (int64_t j = 0; j < RNN_PANEL; j++) {
                const int64_t c = p * RNN_PANEL + j;
                row[j] = c < cols ? r[(c0 + c) * H + kk] : 0.0f;
            }
        }
    }
}

/* R [D, width, H] into every direction's panels (what prepack_recurrent does for a
 * constant R). */
static void rnn_pack_r(const rnn_job *job, float *packed) {
    const int64_t H = job->hidden, width = job->gate_width, per = rnn_panel_floats(job);
    for (int64_t d = 0; d < job->directions; d++) {
        const float *r = job->r + d * width * H;
        float *out = packed + d * per;
        if (job->cell == CELL_GRU && !job->flag) {
            rnn_pack_range(r, H, 0, 2 * H, out);
            rnn_pack_range(r, H, 2 * H, H, out + rnn_panels(2 * H) * RNN_PANEL * H);
        } else {
            rnn_pack_range(r, H, 0, width, out);
        }
    }
}

/* out[b, j] = sum over kk of a[b, kk] * panel[kk, j] for b < rows <= RNN_TILE_ROWS and
 * j < cols <= RNN_PANEL, k in order; rows of a and out lda and ldo apart. Plain loops,
 * vectorized by the compiler: for CPUs without AVX-512. */
NN_VECTORIZED static void rnn_tile_portable(const float *a, int64_t lda, int64_t rows,
                                            const float *panel, int64_t k, float *out,
                                            int64_t ldo, int64_t cols) {
    float acc[RNN_TILE_ROWS][RNN_PANEL];
    for (int64_t b = 0; b < rows; b++) {
        for (int64_t j = 0; j < RNN_PANEL; j++) {
            acc[b][j] = 0.0f;
        }
    }
    for (int64_t kk = 0; kk < k; kk++) {
        const float *r = panel + kk * RNN_PANEL;
        for (int64_t b = 0; b < rows; b++) {
            const float ab = a[b * lda + kk];
            for (int64_t j = 0; j < RNN_PANEL; j++) {
                acc[b][j] += ab * r[j];
            }
        }
    }
    for (int64_t b = 0; b < rows; b++) {
        memcpy(out + b * ldo, acc[b], (size_t)cols * sizeof(float));
    }
}

/*
 * The same with AVX-512, used on CPUs that have it: the 4 x 4 sums of 16 floats stay in
 * registers, which needs AVX-512's 32 (with AVX2's 16 they spill, and the loops above
 * do as well). Identical results: the same products and sums, in the same order (a test
 * runs both).
 */
#if defined(__x86_64__) && defined(__GNUC__)
#define RNN_HAVE_AVX512_TILES 1

/* 16 floats as one value (GCC/Clang vector extensions): sums held in local variables of
 * this type stay in registers; the same sums in a float array stay in memory. */
typedef float rnn_f32x16 __attribute__((vector_size(64)));

#define RNN_DEFINE_TILE(ROWS)                                                              \
    __attribute__((target("avx512f"))) static void rnn_tile_##ROWS(                        \
        const float *a, int64_t lda, const float *panel, int64_t k, float *out,            \
        int64_t ldo, int64_t cols) {                                                       \
        rnn_f32x16 acc[ROWS][4];                                                           \
        for (int b = 0; b < ROWS; b++) {                                                   \
            for (int c = 0; c < 4; c++) {                                                  \
                acc[b][c] = (rnn_f32x16){0};                                               \
            }                                                                              \
        }                                                                                  \
        for (int64_t kk = 0; kk < k; kk++) {                                               \
            rnn_f32x16 r0, r1, r2, r3;                                                     \
            memcpy(&r0, panel + kk * RNN_PANEL, sizeof r0);                                \
            memcpy(&r1, panel + kk * RNN_PANEL + 16, sizeof r1);                           \
            memcpy(&r2, panel + kk * RNN_PANEL + 32, sizeof r2);                           \
            memcpy(&r3, panel + kk * RNN_PANEL + 48, sizeof r3);                           \
            for (int b = 0; b < ROWS; b++) {                                               \
                const float ab = a[b * lda + kk];                                          \
                acc[b][0] += ab * r0;                                                      \
                acc[b][1] += ab * r1;                                                      \
                acc[b][2] += ab * r2;                                                      \
                acc[b][3] += ab * r3;                                                      \
            }                                                                              \
        }                                                                                  \
        for (int b = 0; b < ROWS; b++) {                                                   \
            float sums[RNN_PANEL];                                                         \
            for (int c = 0; c < 4; c++) {                                                  \
                const rnn_f32x16 part = acc[b][c];                                         \
                memcpy(sums + 16 * c, &part, sizeof part);                                 \
            }                                                                              \
            memcpy(out + b * ldo, sums, (size_t)cols * sizeof(float));                     \
        }                                                                                  \
    }

RNN_DEFINE_TILE(1)
RNN_DEFINE_TILE(2)
RNN_DEFINE_TILE(3)
RNN_DEFINE_TILE(4)
#else
#define RNN_HAVE_AVX512_TILES 0
#endif

/* Whether the AVX-512 tiles run: the CPU decides once per process, unless
 * GE_HUB_GEMM_KERNEL (which also picks nn_gemm_packed.c's micro-kernel) names "avx2" or
 * "generic", which here mean the portable tiles. */
static int rnn_avx512_chosen;
static pthread_once_t rnn_avx512_once = PTHREAD_ONCE_INIT;

static void rnn_choose_avx512(void) {
#if RNN_HAVE_AVX512_TILES
    rnn_avx512_chosen = ge_simd_choose("GE_HUB_GEMM_KERNEL") == GE_SIMD_AVX512;
#endif
}

static int rnn_have_avx512(void) {
    pthread_once(&rnn_avx512_once, rnn_choose_avx512);
    return rnn_avx512_chosen;
}

static void rnn_tile(int avx512, const float *a, int64_t lda, int64_t rows, const float *panel,
                     int64_t k, float *out, int64_t ldo, int64_t cols) {
#if RNN_HAVE_AVX512_TILES
    if (avx512) {
        switch (rows) {
        case 1:
            rnn_tile_1(a, lda, panel, k, out, ldo, cols);
            return;
        case 2:
            rnn_tile_2(a, lda, panel, k, out, ldo, cols);
            return;
        case 3:
            rnn_tile_3(a, lda, panel, k, out, ldo, cols);
            return;
        default:
            rnn_tile_4(a, lda, panel, k, out, ldo, cols);
            return;
        }
    }
#endif
    (void)avx512;
    rnn_tile_portable(a, lda, rows, panel, k, out, ldo, cols);
}

typedef struct {
    const float *a, *panels;
    float *out;
    int64_t rows, k, cols, ldo;
    int avx512;
} rnn_product_job;

static void rnn_product_tiles(void *arg, int64_t begin, int64_t end) {
    const rnn_product_job *job = (const rnn_product_job *)arg;
    for (int64_t p = begin; p < end; p++) {
        const int64_t j0 = p * RNN_PANEL;
        const int64_t cols = job->cols - j0 < RNN_PANEL ? job->cols - j0 : RNN_PANEL;
        const float *panel = job->panels + p * job->k * RNN_PANEL;
        for (int64_t b0 = 0; b0 < job->rows; b0 += RNN_TILE_ROWS) {
            const int64_t rows = job->rows - b0 < RNN_TILE_ROWS ? job->rows - b0 : RNN_TILE_ROWS;
            rnn_tile(job->avx512, job->a + b0 * job->k, job->k, rows, panel, job->k,
                     job->out + b0 * job->ldo + j0, job->ldo, cols);
        }
    }
}

/* hr[:, n0:n0 + cols] = a @ R^T[:, n0:n0 + cols], a being [batch, hidden] (h, or GRU's
 * r * h); `panels` are that column range's (for a small batch). */
static void rnn_recurrent_product(ge_context *ctx, const rnn_dir *dir, const float *a,
                                  int64_t n0, int64_t cols, const float *panels) {
    const rnn_job *job = dir->job;
    const int64_t H = job->hidden, width = job->gate_width;
    if (job->batch > RNN_SMALL_BATCH) {
        nn_sgemm(ctx, 0, 1, job->batch, cols, H, 1.0f, a, H, dir->r + n0 * H, H, 0.0f,
                 dir->hr + n0, width);
        return;
    }
    rnn_product_job product = {a, panels, dir->hr + n0, job->batch, H, cols, width,
                               job->avx512};
    ctx->parallel_for(ctx, rnn_panels(cols),
                      nn_grain(job->batch * RNN_PANEL * H, RNN_TILE_GRAIN_WORK),
                      rnn_product_tiles, &product);
}

/* -- the recurrence -------------------------------------------------------------------- */

/* xw = X W_d^T for the time steps [t0, t0 + nt). */
static void rnn_project(ge_context *ctx, rnn_dir *dir, int64_t t0, int64_t nt) {
    const rnn_job *job = dir->job;
    const int64_t I = job->input, width = job->gate_width, batch = job->batch;
    dir->t0 = t0;
    dir->nt = nt;
    if (nt == 0 || batch == 0) {
        return;
    }
    if (job->layout == 0) {  /* X [seq, batch, I]: the block's rows are contiguous */
        nn_sgemm(ctx, 0, 1, nt * batch, width, I, 1.0f, job->x + t0 * batch * I, I, dir->w, I,
                 0.0f, dir->xw, width);
    } else if (nt == job->seq) {  /* X [batch, seq, I], every step: one GEMM */
        nn_sgemm(ctx, 0, 1, batch * nt, width, I, 1.0f, job->x, I, dir->w, I, 0.0f, dir->xw,
                 width);
    } else {
        for (int64_t b = 0; b < batch; b++) {
            nn_sgemm(ctx, 0, 1, nt, width, I, 1.0f, job->x + (b * job->seq + t0) * I, I,
                     dir->w, I, 0.0f, dir->xw + b * nt * width, width);
        }
    }
}

static void rnn_step_rows(ge_context *ctx, rnn_dir *dir, int pass) {
    const rnn_job *job = dir->job;
    dir->pass = pass;
    ctx->parallel_for(ctx, job->batch, nn_grain(job->gate_width * 8, RNN_ROW_GRAIN_WORK),
                      rnn_rows, dir);
}

/* Runs direction d over every time step; `projected`: xw already holds the whole
 * sequence. */
static void rnn_run_direction(ge_context *ctx, rnn_dir *dir, int projected) {
    const rnn_job *job = dir->job;
    const int64_t H = job->hidden, width = job->gate_width, batch = job->batch;
    const int64_t blocks = job->seq == 0 ? 0 : (job->seq + job->block - 1) / job->block;
    for (int64_t k = 0; k < blocks; k++) {
        const int64_t block = dir->reverse ? blocks - 1 - k : k;
        const int64_t t0 = block * job->block;
        const int64_t nt = job->seq - t0 < job->block ? job->seq - t0 : job->block;
        if (!projected) {
            rnn_project(ctx, dir, t0, nt);
        }
        for (int64_t s = 0; s < nt; s++) {
            dir->t = dir->reverse ? t0 + nt - 1 - s : t0 + s;
            if (dir->t >= job->max_length) {  /* every row has ended: Y only */
                if (job->y != NULL) {
                    for (int64_t b = 0; b < batch; b++) {
                        memset(job->y + rnn_y_offset(job, dir->t, dir->d, b), 0,
                               (size_t)H * sizeof(float));
                    }
                }
                continue;
            }
            if (job->cell == CELL_GRU && !job->flag) {
                rnn_recurrent_product(ctx, dir, dir->h, 0, 2 * H, dir->panels);
                rnn_step_rows(ctx, dir, 0);
                rnn_recurrent_product(ctx, dir, dir->rh, 2 * H, H,
                                      dir->panels + rnn_panels(2 * H) * RNN_PANEL * H);
                rnn_step_rows(ctx, dir, 1);
            } else {
                rnn_recurrent_product(ctx, dir, dir->h, 0, width, dir->panels);
                rnn_step_rows(ctx, dir, 0);
            }
        }
    }
}

/* The states a direction starts from: the initial ones given, else zeros. */
static void rnn_init_states(rnn_dir *dir) {
    const rnn_job *job = dir->job;
    const int64_t H = job->hidden;
    for (int64_t b = 0; b < job->batch; b++) {
        const int64_t at = rnn_state_offset(job, dir->d, b);
        if (job->init_h != NULL) {
            memcpy(dir->h + b * H, job->init_h + at, (size_t)H * sizeof(float));
        } else {
            memset(dir->h + b * H, 0, (size_t)H * sizeof(float));
        }
        if (dir->c != NULL) {
            if (job->init_c != NULL) {
                memcpy(dir->c + b * H, job->init_c + at, (size_t)H * sizeof(float));
            } else {
                memset(dir->c + b * H, 0, (size_t)H * sizeof(float));
            }
        }
    }
}

/* Y_h (and Y_c): the final states, zeros for rows of length 0. */
static void rnn_final_states(const rnn_dir *dir) {
    const rnn_job *job = dir->job;
    const int64_t H = job->hidden;
    for (int64_t b = 0; b < job->batch; b++) {
        const int64_t at = rnn_state_offset(job, dir->d, b);
        const int empty = job->lengths[b] == 0;
        if (job->y_h != NULL) {
            if (empty) {
                memset(job->y_h + at, 0, (size_t)H * sizeof(float));
            } else {
                memcpy(job->y_h + at, dir->h + b * H, (size_t)H * sizeof(float));
            }
        }
        if (job->y_c != NULL) {
            if (empty) {
                memset(job->y_c + at, 0, (size_t)H * sizeof(float));
            } else {
                memcpy(job->y_c + at, dir->c + b * H, (size_t)H * sizeof(float));
            }
        }
    }
}

static void rnn_setup_direction(const rnn_job *job, int64_t d, rnn_dir *dir) {
    const int64_t H = job->hidden, width = job->gate_width, batch = job->batch;
    memset(dir, 0, sizeof *dir);
    dir->job = job;
    dir->d = d;
    dir->reverse = job->reverse || d == 1;
    dir->w = job->w + d * width * job->input;
    dir->r = job->r + d * width * H;
    dir->panels = job->panels != NULL ? job->panels + d * rnn_panel_floats(job) : NULL;
    if (job->b != NULL) {
        dir->wb = job->b + d * 2 * width;
        dir->rb = dir->wb + width;
    }
    dir->p = job->p != NULL ? job->p + d * 3 * H : NULL;
    float *at = job->scratch + d * job->dir_floats;
    dir->xw = at;
    at += job->block * batch * width;
    dir->hr = at;
    at += batch * width;
    dir->h = at;
    at += batch * H;
    if (job->cell == CELL_LSTM) {
        dir->c = at;
        at += batch * H;
    }
    if (job->cell == CELL_GRU) {
        dir->rh = at;
    }
}

typedef struct {
    const rnn_job *job;
    rnn_dir *dirs;
    int projected;
} rnn_directions_job;

static void rnn_directions(void *arg, int64_t begin, int64_t end) {
    const rnn_directions_job *all = (const rnn_directions_job *)arg;
    for (int64_t d = begin; d < end; d++) {
        rnn_run_direction(all->job->ctx, &all->dirs[d], all->projected);
    }
}

/* -- entry points ----------------------------------------------------------------------- */

/* a * b into *out; 0 when it overflows int64. */
static int rnn_mul(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}

static int rnn_check_optional(ge_context *ctx, const char *name, const char *what,
                              const ge_tensor *inputs, int32_t n_inputs, int32_t index,
                              int64_t numel, const float **data) {
    *data = NULL;
    if (index >= n_inputs || inputs[index].data == NULL) {
        return 0;
    }
    if (nn_check_f32(ctx, name, what, &inputs[index], numel)) {
        return -1;
    }
    *data = (const float *)inputs[index].data;
    return 0;
}

static int rnn_run(ge_context *ctx, rnn_cell cell, const char *name, const ge_tensor *inputs,
                   int32_t n_inputs, const ge_tensor *outputs, int32_t n_outputs,
                   const void *attrs, size_t attrs_size) {
    rnn_job job;
    memset(&job, 0, sizeof job);
    job.name = name;
    job.cell = cell;
    job.ctx = ctx;
    job.gates = cell == CELL_RNN ? 1 : cell == CELL_GRU ? 3 : 4;
    job.functions = cell == CELL_RNN ? 1 : cell == CELL_GRU ? 2 : 3;
    job.states = cell == CELL_LSTM ? 2 : 1;
    const int32_t max_inputs = cell == CELL_LSTM ? 8 : 6;

    ge_blob blob = ge_blob_open(attrs, attrs_size);
    int64_t header[RNN_HEADER_INTS] = {0};
    int ok = ge_blob_ints(&blob, header, RNN_HEADER_INTS);
    job.seq = header[0];
    job.batch = header[1];
    job.input = header[2];
    job.hidden = header[3];
    job.directions = header[4];
    job.reverse = header[5];
    job.layout = header[6];
    job.has_clip = header[7];
    job.flag = header[8];
    job.block = header[9];
    job.r_packed = header[10];
    ok = ok && job.seq >= 0 && job.seq <= RNN_MAX_DIM && job.batch >= 0
         && job.batch <= RNN_MAX_DIM && job.input >= 1 && job.input <= RNN_MAX_DIM
         && job.hidden >= 1 && job.hidden <= RNN_MAX_DIM
         && (job.directions == 1 || job.directions == 2) && (job.reverse == 0 || job.reverse == 1)
         && !(job.reverse && job.directions == 2) && (job.layout == 0 || job.layout == 1)
         && (job.has_clip == 0 || job.has_clip == 1) && (job.flag == 0 || job.flag == 1)
         && !(cell == CELL_RNN && job.flag) && (job.r_packed == 0 || job.r_packed == 1)
         && !(job.r_packed && job.batch > RNN_SMALL_BATCH)
         && job.block >= 1
         && job.block <= (job.seq > 0 ? job.seq : 1);
    int64_t codes[2 * RNN_MAX_FUNCTIONS] = {0};
    const int64_t n_functions = ok ? job.directions * job.functions : 0;
    ok = ok && ge_blob_ints(&blob, codes, n_functions);
    const double clip = ge_blob_float(&blob);
    const unsigned char *alphas = ge_blob_take(&blob, n_functions);
    const unsigned char *betas = ge_blob_take(&blob, n_functions);
    ok = ok && ge_blob_done(&blob) && (!job.has_clip || clip > 0.0);
    for (int64_t k = 0; ok && k < n_functions; k++) {
        ok = codes[k] >= 0 && codes[k] < RNN_NUM_ACTIVATIONS;
        if (ok) {
            rnn_activation *a = &job.act[k / job.functions][k % job.functions];
            a->code = (int)codes[k];
            a->alpha = (float)ge_blob_load_float(alphas, k);
            a->beta = (float)ge_blob_load_float(betas, k);
        }
    }
    job.clip = (float)clip;

    /* Sizes, each product checked: tensors, then scratch. */
    int64_t width = 0, x_numel = 0, w_numel = 0, r_numel = 0, y_numel = 0, state_numel = 0;
    int64_t steps_rows = 0, xw_floats = 0, batch_width = 0, batch_hidden = 0, dir_floats = 0;
    int64_t all_floats = 0;
    ok = ok && rnn_mul(job.gates, job.hidden, &width) && rnn_mul(job.seq, job.batch, &x_numel)
         && rnn_mul(x_numel, job.input, &x_numel) && rnn_mul(job.directions, width, &w_numel)
         && rnn_mul(w_numel, job.hidden, &r_numel) && rnn_mul(w_numel, job.input, &w_numel)
         && rnn_mul(job.directions, job.batch, &state_numel)
         && rnn_mul(state_numel, job.hidden, &state_numel)
         && rnn_mul(state_numel, job.seq, &y_numel)
         && rnn_mul(job.block, job.batch, &steps_rows)
         && rnn_mul(steps_rows, width, &xw_floats) && rnn_mul(job.batch, width, &batch_width)
         && rnn_mul(job.batch, job.hidden, &batch_hidden)
         && rnn_mul(batch_hidden, cell == CELL_RNN ? 1 : 2, &dir_floats)
         && !__builtin_add_overflow(dir_floats, xw_floats, &dir_floats)
         && !__builtin_add_overflow(dir_floats, batch_width, &dir_floats)
         && rnn_mul(dir_floats, job.directions, &all_floats) && all_floats <= RNN_MAX_DIM * 16;
    if (!ok) {
        return ctx->set_error(ctx, "%s: attribute blob of %zu bytes does not have the layout "
                              "its packer (ge_hub/kernels/rnn.py) writes", name, blob.size);
    }
    job.gate_width = width;
    job.dir_floats = dir_floats;
    /* A small batch's panels: with r_numel below 2^62, padding each of at most two column
     * ranges to 64 columns adds under 128 * hidden floats, which cannot overflow. */
    const int small = job.batch <= RNN_SMALL_BATCH;
    const int64_t panel_floats = small ? job.directions * rnn_panel_floats(&job) : 0;
    if (small && !job.r_packed) {
        all_floats += panel_floats;  /* packed at the start of the run */
    }

    if (n_inputs < 3 || n_inputs > max_inputs || n_outputs < 1 || n_outputs > 1 + job.states) {
        return ctx->set_error(ctx, "%s: expected 3 to %d inputs and 1 to %d outputs, got %d and "
                              "%d", name, (int)max_inputs, (int)(1 + job.states), (int)n_inputs,
                              (int)n_outputs);
    }
    if (nn_check_f32(ctx, name, "input X", &inputs[0], x_numel)
        || nn_check_f32(ctx, name, "input W", &inputs[1], w_numel)
        || nn_check_f32(ctx, name, "input R", &inputs[2], job.r_packed ? panel_floats : r_numel)
        || rnn_check_optional(ctx, name, "input B", inputs, n_inputs, 3, 2 * w_numel / job.input,
                              &job.b)
        || rnn_check_optional(ctx, name, "input initial_h", inputs, n_inputs, 5, state_numel,
                              &job.init_h)) {
        return -1;
    }
    if (cell == CELL_LSTM
        && (rnn_check_optional(ctx, name, "input initial_c", inputs, n_inputs, 6, state_numel,
                               &job.init_c)
            || rnn_check_optional(ctx, name, "input P", inputs, n_inputs, 7,
                                  job.directions * 3 * job.hidden, &job.p))) {
        return -1;
    }
    job.x = (const float *)inputs[0].data;
    job.w = (const float *)inputs[1].data;
    job.r = (const float *)inputs[2].data;
    job.avx512 = rnn_have_avx512();
    const ge_tensor *lens = n_inputs > 4 && inputs[4].data != NULL ? &inputs[4] : NULL;
    if (lens != NULL && (lens->dtype != GE_INT32 || lens->numel != job.batch)) {
        return ctx->set_error(ctx, "%s: input sequence_lens must be int32 with %lld elements, "
                              "got dtype code %d with %lld", name, (long long)job.batch,
                              (int)lens->dtype, (long long)lens->numel);
    }
    float *outs[3] = {NULL, NULL, NULL};
    static const char *const output_names[3] = {"output Y", "output Y_h", "output Y_c"};
    for (int32_t k = 0; k < n_outputs; k++) {
        if (nn_check_f32(ctx, name, output_names[k], &outputs[k], k == 0 ? y_numel : state_numel)) {
            return -1;
        }
        outs[k] = (float *)outputs[k].data;
    }
    job.y = outs[0];
    job.y_h = outs[1];
    job.y_c = outs[2];

    const size_t lengths_bytes = (size_t)job.batch * sizeof(int64_t);
    const size_t need = lengths_bytes + (size_t)all_floats * sizeof(float);
    if (ctx->scratch_bytes < need || (need > 0 && ctx->scratch == NULL)) {
        return ctx->set_error(ctx, "%s: needs %zu bytes of scratch, the plan gives %zu", name,
                              need, ctx->scratch_bytes);
    }
    job.lengths = (int64_t *)ctx->scratch;
    job.scratch = (float *)((unsigned char *)ctx->scratch + lengths_bytes);
    job.max_length = 0;
    for (int64_t b = 0; b < job.batch; b++) {
        int64_t length = job.seq;
        if (lens != NULL) {
            length = ((const int32_t *)lens->data)[b];
            if (length < 0 || length > job.seq) {
                return ctx->set_error(ctx, "%s: input sequence_lens[%lld] = %lld is outside "
                                      "[0, %lld] (the sequence length)", name, (long long)b,
                                      (long long)length, (long long)job.seq);
            }
        }
        job.lengths[b] = length;
        job.max_length = length > job.max_length ? length : job.max_length;
    }

    if (small && job.r_packed) {
        job.panels = job.r;
    } else if (small) {  /* the panels after every direction's buffers */
        float *panels = job.scratch + job.directions * job.dir_floats;
        rnn_pack_r(&job, panels);
        job.panels = panels;
    }
    rnn_dir dirs[2];
    for (int64_t d = 0; d < job.directions; d++) {
        rnn_setup_direction(&job, d, &dirs[d]);
        rnn_init_states(&dirs[d]);
    }
    /* The whole sequence in one block: project every direction first, over the pool. */
    const int projected = job.block >= job.seq;
    if (projected) {
        for (int64_t d = 0; d < job.directions; d++) {
            rnn_project(ctx, &dirs[d], 0, job.seq);
        }
    }
    rnn_directions_job all = {&job, dirs, projected};
    if (job.directions == 2) {
        ctx->parallel_for(ctx, 2, 1, rnn_directions, &all);
    } else {
        rnn_directions(&all, 0, 1);
    }
    for (int64_t d = 0; d < job.directions; d++) {
        rnn_final_states(&dirs[d]);
    }
    return 0;
}

int ge_rnn_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
               const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
               size_t attrs_size) {
    return rnn_run(ctx, CELL_RNN, "ge_rnn_f32", inputs, n_inputs, outputs, n_outputs, attrs,
                   attrs_size);
}

int ge_gru_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
               const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
               size_t attrs_size) {
    return rnn_run(ctx, CELL_GRU, "ge_gru_f32", inputs, n_inputs, outputs, n_outputs, attrs,
                   attrs_size);
}

int ge_lstm_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                size_t attrs_size) {
    return rnn_run(ctx, CELL_LSTM, "ge_lstm_f32", inputs, n_inputs, outputs, n_outputs, attrs,
                   attrs_size);
}
