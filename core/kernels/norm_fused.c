/*
 * ge_hub.SkipLayerNormalization on float32 (the fuse_layer_norm pass makes it from a
 * residual Add, optionally the bias Add before it, and a LayerNormalization):
 *
 *     Y = LayerNormalization((X + Bias) + Skip, Scale, B)
 *
 * in one pass over each row instead of three steps that each read and write the whole
 * tensor. Blob (ge_hub/kernels/norm.py, pack_skip_layer_norm; GE_SKIP_LAYER_NORM_BLOB in
 * norm.h): ints outer, inner, scale_period, b_period (0: no B), bias_period (0: no
 * Bias); floats epsilon. Scale, B and Bias repeat with their period along a row.
 *
 * Each row's sum is written to Y first (or to the optional Sum output, a pre-norm
 * block's residual stream), then its statistics (in double, two passes, as
 * LayerNormalization's kernel in norm.c) and the normalized row overwrite Y, so Y may
 * share X's or Skip's memory: every element reads only its own position. Sum never
 * shares an input's memory.
 */
#include <math.h>

#include "nn_common.h"
#include "norm.h"

#define NN_SKIP_NORM_GRAIN_WORK 16384

typedef struct {
    int64_t inner, scale_period, b_period, bias_period;
    double epsilon;
    const float *x, *skip, *scale, *b, *bias;
    float *y, *sum; /* sum: NULL unless the Sum output is asked for */
} skip_norm_job;

NN_VECTORIZED static void skip_norm_rows(void *arg, int64_t begin, int64_t end) {
    const skip_norm_job *job = (const skip_norm_job *)arg;
    const int64_t inner = job->inner;
    const int whole = job->scale_period == inner && (job->b == NULL || job->b_period == inner)
                      && (job->bias == NULL || job->bias_period == inner);
    for (int64_t r = begin; r < end; r++) {
        const float *x = job->x + r * inner, *skip = job->skip + r * inner;
        float *y = job->y + r * inner;
        /* the sum goes to the Sum output when there is one, else straight into Y */
        float *t = job->sum ? job->sum + r * inner : y;
        if (job->bias && job->bias_period == inner) {
            for (int64_t i = 0; i < inner; i++) {
                t[i] = (x[i] + job->bias[i]) + skip[i];
            }
        } else if (job->bias) {
            for (int64_t i = 0; i < inner; i++) {
                t[i] = (x[i] + job->bias[i % job->bias_period]) + skip[i];
            }
        } else {
            for (int64_t i = 0; i < inner; i++) {
                t[i] = x[i] + skip[i];
            }
        }
        const double mean = nn_sum(t, inner) / (double)inner;
        const float mean_f = (float)mean;
        const float inv_std =
            (float)(1.0 / sqrt(nn_sum_squares(t, inner, mean) / (double)inner + job->epsilon));
        const float *scale = job->scale, *b = job->b;
        if (whole && b) {
            for (int64_t i = 0; i < inner; i++) {
                y[i] = (t[i] - mean_f) * inv_std * scale[i] + b[i];
            }
        } else if (whole) {
            for (int64_t i = 0; i < inner; i++) {
                y[i] = (t[i] - mean_f) * inv_std * scale[i];
            }
        } else {
            for (int64_t i = 0; i < inner; i++) {
                float v = (t[i] - mean_f) * inv_std * scale[i % job->scale_period];
                y[i] = b ? v + b[i % job->b_period] : v;
            }
        }
    }
}

int ge_nn_skip_layer_norm_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                              const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                              size_t attrs_size) {
    static const char *name = "ge_nn_skip_layer_norm_f32";
    ge_skip_layer_norm_blob r;
    skip_norm_job job;
    if (!ge_skip_layer_norm_blob_read(attrs, attrs_size, &r) || r.outer < 0 || r.inner < 1
        || r.scale_period < 1 || r.inner % r.scale_period || r.b_period < 0
        || (r.b_period && r.inner % r.b_period) || r.bias_period < 0
        || (r.bias_period && r.inner % r.bias_period)) {
        return NN_BAD_BLOB_BYTES(ctx, name, attrs_size);
    }
    if (n_inputs < 3 + (r.b_period || r.bias_period) + (r.bias_period != 0) || n_inputs > 5
        || n_outputs < 1 || n_outputs > 2) {
        return ctx->set_error(ctx, "%s: expected inputs X, Skip, Scale%s%s and 1 or 2 "
                              "outputs, got %d inputs and %d outputs", name, r.b_period ? ", B" : "",
                              r.bias_period ? ", Bias" : "", (int)n_inputs, (int)n_outputs);
    }
    const int64_t numel = r.outer * r.inner;
    if (nn_check_f32(ctx, name, "input X", &inputs[0], numel)
        || nn_check_f32(ctx, name, "input Skip", &inputs[1], numel)
        || nn_check_f32(ctx, name, "input Scale", &inputs[2], r.scale_period)
        || (r.b_period && nn_check_f32(ctx, name, "input B", &inputs[3], r.b_period))
        || (r.bias_period && nn_check_f32(ctx, name, "input Bias", &inputs[4], r.bias_period))
        || nn_check_f32(ctx, name, "output Y", &outputs[0], numel)
        || (n_outputs > 1 && nn_check_f32(ctx, name, "output Sum", &outputs[1], numel))) {
        return -1;
    }
    job.inner = r.inner;
    job.scale_period = r.scale_period;
    job.b_period = r.b_period;
    job.bias_period = r.bias_period;
    job.epsilon = r.epsilon;
    job.x = (const float *)inputs[0].data;
    job.skip = (const float *)inputs[1].data;
    job.scale = (const float *)inputs[2].data;
    job.b = r.b_period ? (const float *)inputs[3].data : NULL;
    job.bias = r.bias_period ? (const float *)inputs[4].data : NULL;
    job.y = (float *)outputs[0].data;
    job.sum = n_outputs > 1 ? (float *)outputs[1].data : NULL;
    ctx->parallel_for(ctx, r.outer, nn_grain(job.inner, NN_SKIP_NORM_GRAIN_WORK),
                      skip_norm_rows, &job);
    return 0;
}
