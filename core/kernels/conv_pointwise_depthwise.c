/*
 * ge_hub.PointwiseDepthwise (ge_hub/ops/conv.py): a pointwise (1x1) Conv whose product runs
 * in bf16 and the depthwise Conv that alone reads its output, in one step, band by band,
 * so that the wide intermediate never leaves the core's L2. It is what MobileNetV2's
 * inverted residual blocks start with: 16 -> 96 channels over 112x112, then a 3x3
 * depthwise, where the 96-channel map (4.8 MB in fp32) was written to memory by one step
 * and read back by the next, and both steps ran at the memory's speed, not the CPU's.
 *
 * Work: tasks of (image, band of `band` output rows, group of channel blocks). A task
 * packs the input rows its band reads (those of the depthwise window's rows, the halo
 * included) once as the bf16 product's B (nn_bf16_pack_matrix), then for each block of
 * 2 * NN_BF16_MR channels computes the pointwise rows into `mid` (fp32, with its bias and
 * activation stored in the micro-kernel's registers; nn_gemm_bf16_here) and runs the
 * depthwise kernel over them (nn_conv_depthwise_here, with its bias and activation), into
 * the band's rows of Y. Bands overlap by the window's halo rows, which are computed once
 * per band that reads them: the packer picks bands tall enough that this costs little
 * (ge_hub/kernels/conv_pointwise_depthwise.py). Tasks run in `slots` (each its own area
 * of the scratch, round robin over the tasks), one thread at a time per slot.
 *
 * Values are what the two steps give: the same bf16 product, rounded to fp32 and
 * activated, then the depthwise sums in the same order.
 *
 * Blob (pack_pointwise_depthwise): ints N, C, E, band, groups, slots, act1, act2, then the
 * depthwise window (window[18]: its `in` the pointwise output's spatial dims), then
 * floats alpha1, beta1, alpha2, beta2. Inputs: X [N, C, H, W] fp32; W1 the pointwise
 * weights as nn_gemm_bf16.h's packed A (E rows, depth C; uint16); B1 [E]; W2 the depthwise
 * weights [E, 1, kh, kw]; B2 [E]. Output Y [N, E, out_h, out_w]. Scratch: `slots` areas,
 * each the B panels of a band's rows, then `mid`.
 */
#include <stdint.h>
#include <string.h>

#include "conv.h"
#include "conv_depthwise.h"
#include "conv_epilogue.h"
#include "nn_common.h"
#include "nn_gemm_bf16.h"
#include "nn_gemm_packed.h"

/* Channels per pointwise block: a whole block of the bf16 product's rows. */
#define PD_CHANNELS (2 * NN_BF16_MR)

typedef struct {
    int64_t n, c, e, band, groups, slots;
    nn_window w;  /* the depthwise window over the pointwise output */
    nn_epilogue pointwise, depthwise;
} pd_params;

typedef struct {
    ge_context *ctx;
    const pd_params *p;
    const float *x, *b1, *w2, *b2;
    const uint16_t *w1;
    float *y;
    char *scratch;
    int64_t area_bytes, panel_bytes, bands, blocks_per_group;
    int failed;
} pd_job;

/* Input rows of the band whose output rows start at o0 and end before o1: the first and
 * one past the last, within the plane. */
static void band_rows(const nn_window *w, int64_t o0, int64_t o1, int64_t *r0, int64_t *r1) {
    const int64_t top = o0 * w->stride[1] - w->pad[1];
    const int64_t bottom = (o1 - 1) * w->stride[1] - w->pad[1] + (w->k[1] - 1) * w->dil[1] + 1;
    *r0 = top > 0 ? top : 0;
    *r1 = bottom < w->in[1] ? bottom : w->in[1];
}

/* The most input rows a band reads. */
static int64_t band_rows_max(const pd_params *p) {
    const int64_t rows = (p->band - 1) * p->w.stride[1] + (p->w.k[1] - 1) * p->w.dil[1] + 1;
    return rows < p->w.in[1] ? rows : p->w.in[1];
}

static int64_t panel_bytes(const pd_params *p) {
    const int64_t cols = band_rows_max(p) * p->w.in[2];
    const int64_t bytes = nn_pack_panels(cols, NN_BF16_NR) * nn_bf16_depth(p->c) * NN_BF16_NR * 2;
    return (bytes + 63) / 64 * 64;
}

static int64_t area_bytes(const pd_params *p) {
    const int64_t mid = PD_CHANNELS * band_rows_max(p) * p->w.in[2] * (int64_t)sizeof(float);
    return panel_bytes(p) + (mid + 63) / 64 * 64;
}

static void run_task(pd_job *job, int64_t task, char *area) {
    const pd_params *p = job->p;
    const nn_window *w = &p->w;
    const int64_t per_image = job->bands * p->groups;
    const int64_t image = task / per_image, band = task % per_image / p->groups;
    const int64_t group = task % p->groups;
    const int64_t o0 = band * p->band;
    const int64_t o1 = o0 + p->band < w->out[1] ? o0 + p->band : w->out[1];
    int64_t r0, r1;
    band_rows(w, o0, o1, &r0, &r1);
    const int64_t in_w = w->in[2], cols = (r1 - r0) * in_w;
    const int64_t out_size = w->out[1] * w->out[2], in_size = w->in[1] * in_w;
    uint16_t *panels = (uint16_t *)area;
    float *mid = (float *)(area + job->panel_bytes);
    const int64_t kp = nn_bf16_depth(p->c), panel_stride = kp * NN_BF16_NR;
    const nn_bf16_matrix x_rows = {job->x + image * p->c * in_size, in_size};
    nn_bf16_pack_matrix(&x_rows, r0 * in_w, cols, panels, panel_stride, p->c);
    nn_window band_window = *w;  /* the band's rows, padded only at the plane's edges */
    band_window.in[1] = r1 - r0;
    band_window.out[1] = o1 - o0;
    band_window.pad[1] = r0 - (o0 * w->stride[1] - w->pad[1]);
    const int64_t taps = w->k[1] * w->k[2];
    const int64_t blocks = (p->e + PD_CHANNELS - 1) / PD_CHANNELS;
    const int64_t first = group * job->blocks_per_group;
    const int64_t last = first + job->blocks_per_group < blocks ? first + job->blocks_per_group
                                                                 : blocks;
    for (int64_t block = first; block < last; block++) {
        const int64_t e0 = block * PD_CHANNELS;
        const int64_t rows = p->e - e0 < PD_CHANNELS ? p->e - e0 : PD_CHANNELS;
        nn_bf16_gemm gemm;
        memset(&gemm, 0, sizeof gemm);
        gemm.m = rows;
        gemm.n = cols;
        gemm.k = p->c;
        gemm.a_packed = job->w1 + (e0 / NN_BF16_MR) * kp * NN_BF16_MR;
        gemm.bias = job->b1 + e0;
        gemm.c = mid;
        gemm.ldc_row = cols;
        gemm.ldc_col = 1;
        gemm.panel_stride = panel_stride;
        gemm.epilogue = nn_epilogue_empty(&p->pointwise) ? NULL : &p->pointwise;
        gemm.b_packed = panels;
        nn_gemm_bf16_here(&gemm);
        if (nn_conv_depthwise_here(job->ctx, &band_window, rows, mid, cols,
                                   job->w2 + e0 * taps, job->b2 + e0,
                                   job->y + (image * p->e + e0) * out_size + o0 * w->out[2],
                                   out_size,
                                   nn_epilogue_empty(&p->depthwise) ? NULL : &p->depthwise)) {
            __atomic_store_n(&job->failed, 1, __ATOMIC_RELAXED);
            return;
        }
    }
}

/* Slots [begin, end): slot s takes tasks s, s + slots, ... in its own scratch area. */
static void run_slots(void *arg, int64_t begin, int64_t end) {
    pd_job *job = (pd_job *)arg;
    const int64_t tasks = job->p->n * job->bands * job->p->groups;
    for (int64_t slot = begin; slot < end; slot++) {
        for (int64_t task = slot; task < tasks; task += job->p->slots) {
            run_task(job, task, job->scratch + slot * job->area_bytes);
        }
    }
}

/* The blob's values, checked: 0 when they do not describe a step this kernel runs. */
static int read_params(ge_blob *blob, pd_params *p) {
    int64_t v[8] = {0};
    double f[4] = {0.0, 0.0, 0.0, 0.0};
    if (!ge_blob_ints(blob, v, 8) || !nn_blob_window(blob, &p->w, 0)
        || !ge_blob_floats(blob, f, 4) || !ge_blob_done(blob)) {
        return 0;
    }
    p->n = v[0];
    p->c = v[1];
    p->e = v[2];
    p->band = v[3];
    p->groups = v[4];
    p->slots = v[5];
    p->pointwise = (nn_epilogue){(int)v[6], f[0], f[1], NULL};
    p->depthwise = (nn_epilogue){(int)v[7], f[2], f[3], NULL};
    for (int i = 0; i < 6; i++) {
        if (v[i] > NN_MAX_NUMEL) {
            return 0;
        }
    }
    const nn_window *w = &p->w;
    const int64_t blocks = (p->e + PD_CHANNELS - 1) / PD_CHANNELS;
    if (!(p->n >= 0 && p->c >= NN_BF16_MIN_K && p->e >= 1 && p->band >= 1 && p->groups >= 1
          && p->groups <= blocks && p->slots >= 1 && p->slots <= 64
          && v[6] >= FUSED_ACT_NONE && v[6] < FUSED_ACT_COUNT
          && v[7] >= FUSED_ACT_NONE && v[7] < FUSED_ACT_COUNT
          && w->in[0] == 1 && w->out[0] == 1 && w->k[0] == 1 && nn_conv_depthwise_fits(w))) {
        return 0;
    }
    /* every band reads at least one input row (the packer fuses no window that would
     * read only padding somewhere) */
    if (w->pad[1] > (w->k[1] - 1) * w->dil[1]
        || (w->out[1] - 1) * w->stride[1] - w->pad[1] > w->in[1] - 1) {
        return 0;
    }
    const int64_t in_size = nn_window_in_size(w), out_size = nn_window_out_size(w);
    return nn_numel3(p->n, p->c, in_size) >= 0 && nn_numel3(p->n, p->e, out_size) >= 0
           && nn_numel3(p->n, p->e, in_size) >= 0
           && nn_numel3(p->slots, PD_CHANNELS + nn_bf16_depth(p->c), in_size + NN_BF16_NR) >= 0
           && nn_numel3(p->e + NN_BF16_MR, nn_bf16_depth(p->c), 1) >= 0
           && nn_numel3(p->e, nn_window_taps(w), 1) >= 0;
}

int ge_conv_pointwise_depthwise_f32(ge_context *ctx, const ge_tensor *inputs,
                                    int32_t n_inputs, const ge_tensor *outputs,
                                    int32_t n_outputs, const void *attrs, size_t attrs_size) {
    static const char *name = "ge_conv_pointwise_depthwise_f32";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    pd_params p;
    if (!read_params(&blob, &p)) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    if (n_inputs != 5 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected inputs X, W1, B1, W2, B2 and 1 output, got "
                              "%d and %d", name, (int)n_inputs, (int)n_outputs);
    }
    const nn_window *w = &p.w;
    const int64_t a_values = nn_bf16_a_values(p.e, p.c);
    if (inputs[1].dtype != GE_UINT16 || inputs[1].numel != a_values) {
        return ctx->set_error(ctx, "%s: input W1 must be the bf16 weights packed at compile "
                              "time (%lld uint16 values)", name, (long long)a_values);
    }
    if (nn_check_f32(ctx, name, "input X", &inputs[0], p.n * p.c * nn_window_in_size(w))
        || nn_check_f32(ctx, name, "input B1", &inputs[2], p.e)
        || nn_check_f32(ctx, name, "input W2", &inputs[3], p.e * nn_window_taps(w))
        || nn_check_f32(ctx, name, "input B2", &inputs[4], p.e)
        || nn_check_f32(ctx, name, "output Y", &outputs[0], p.n * p.e * nn_window_out_size(w))) {
        return -1;
    }
    const size_t needed = (size_t)(p.slots * area_bytes(&p));
    if (ctx->scratch_bytes < needed || ctx->scratch == NULL) {
        return ctx->set_error(ctx, "%s: needs %zu bytes of scratch, got %zu", name, needed,
                              ctx->scratch_bytes);
    }
    const int64_t blocks = (p.e + PD_CHANNELS - 1) / PD_CHANNELS;
    pd_job job = {ctx,
                  &p,
                  (const float *)inputs[0].data,
                  (const float *)inputs[2].data,
                  (const float *)inputs[3].data,
                  (const float *)inputs[4].data,
                  (const uint16_t *)inputs[1].data,
                  (float *)outputs[0].data,
                  (char *)ctx->scratch,
                  area_bytes(&p),
                  panel_bytes(&p),
                  (w->out[1] + p.band - 1) / p.band,
                  (blocks + p.groups - 1) / p.groups,
                  0};
    if (p.n == 0) {
        return 0;
    }
    ctx->parallel_for(ctx, p.slots, 1, run_slots, &job);
    return job.failed ? -1 : 0;
}
