/*
 * Normalizations on float32: BatchNormalization (inference), LayerNormalization and
 * InstanceNormalization. All are elementwise in their main input, so Y may share X's
 * memory: each element is read before it is written.
 *
 * BatchNormalization blob (ge_hub/kernels/norm.py, pack_batch_norm): ints
 *   N, C, inner, folded; floats epsilon, then (when folded) a[C], b[C]
 * Y = X * a[c] + b[c]. When scale, B, mean and var are constants the packer folds them
 * (a = scale / sqrt(var + eps), b = B - mean * a, in float64); otherwise the kernel
 * folds them from its inputs at run time.
 *
 * LayerNormalization blob (pack_layer_norm): ints outer, inner, scale_period,
 * bias_period (0: no bias), n_outputs; floats epsilon. Statistics over each of `outer`
 * rows of `inner` elements; Scale (and B) repeat with their period along a row (they
 * broadcast over the row's leading axes).
 *
 * InstanceNormalization blob (pack_instance_norm; GE_INSTANCE_NORM_BLOB in norm.h): ints
 * N, C, inner; floats epsilon.
 *
 * Means and variances are accumulated in double (two passes), then rounded to float.
 */
#include <math.h>
#include <string.h>

#include "norm.h"
#include "nn_common.h"

#define NN_NORM_GRAIN_WORK 16384

/* -- BatchNormalization ---------------------------------------------------------------- */

typedef struct {
    int64_t channels, inner, folded;
    const unsigned char *folded_a, *folded_b;  /* C float64 values each, when folded */
    const float *scale, *bias, *mean, *var;    /* the inputs, when not folded */
    double epsilon;
    const float *x;
    float *y;
} batch_norm_job;

NN_VECTORIZED static void batch_norm_planes(void *arg, int64_t begin, int64_t end) {
    const batch_norm_job *job = (const batch_norm_job *)arg;
    for (int64_t plane = begin; plane < end; plane++) {
        int64_t c = plane % job->channels;
        float a, b;
        if (job->folded) {
            /* Read in place rather than through ge_blob_load_float: that call out of this
             * AVX-512 clone into baseline code cost more than the plane's arithmetic. */
            double a64, b64;
            memcpy(&a64, job->folded_a + c * GE_BLOB_SLOT, sizeof a64);
            memcpy(&b64, job->folded_b + c * GE_BLOB_SLOT, sizeof b64);
            a = (float)a64;
            b = (float)b64;
        } else {
            double scale = job->scale[c] / sqrt((double)job->var[c] + job->epsilon);
            a = (float)scale;
            b = (float)((double)job->bias[c] - (double)job->mean[c] * scale);
        }
        const float *x = job->x + plane * job->inner;
        float *y = job->y + plane * job->inner;
        for (int64_t i = 0; i < job->inner; i++) {
            y[i] = x[i] * a + b;
        }
    }
}

int ge_nn_batch_norm_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                         const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                         size_t attrs_size) {
    static const char *name = "ge_nn_batch_norm_f32";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    int64_t v[4] = {0};
    batch_norm_job job;
    int ints_ok = ge_blob_ints(&blob, v, 4);
    job.epsilon = ge_blob_float(&blob);
    job.channels = v[1];
    job.inner = v[2];
    job.folded = v[3];
    if (ints_ok && job.folded) {
        job.folded_a = ge_blob_take(&blob, job.channels);
        job.folded_b = ge_blob_take(&blob, job.channels);
    }
    if (!ints_ok || !ge_blob_done(&blob) || v[0] < 0 || job.channels < 1 || job.inner < 0) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    if (n_inputs != 5 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected 5 inputs and 1 output, got %d and %d", name,
                              (int)n_inputs, (int)n_outputs);
    }
    const int64_t numel = v[0] * job.channels * job.inner;
    if (nn_check_f32(ctx, name, "input X", &inputs[0], numel)
        || nn_check_f32(ctx, name, "output Y", &outputs[0], numel)) {
        return -1;
    }
    if (!job.folded) {
        static const char *names[4] = {"input scale", "input B", "input input_mean",
                                       "input input_var"};
        for (int i = 0; i < 4; i++) {
            if (nn_check_f32(ctx, name, names[i], &inputs[1 + i], job.channels)) {
                return -1;
            }
        }
        job.scale = (const float *)inputs[1].data;
        job.bias = (const float *)inputs[2].data;
        job.mean = (const float *)inputs[3].data;
        job.var = (const float *)inputs[4].data;
    }
    job.x = (const float *)inputs[0].data;
    job.y = (float *)outputs[0].data;
    ctx->parallel_for(ctx, v[0] * job.channels, nn_grain(job.inner, NN_NORM_GRAIN_WORK),
                      batch_norm_planes, &job);
    return 0;
}

/* -- row statistics --------------------------------------------------------------------- */

/* Mean and 1 / sqrt(variance + epsilon) of `n` floats. */
static inline void row_stats(const float *x, int64_t n, double epsilon, float *mean_out,
                             float *inv_std_out) {
    const double mean = nn_sum(x, n) / (double)n;
    *mean_out = (float)mean;
    *inv_std_out = (float)(1.0 / sqrt(nn_sum_squares(x, n, mean) / (double)n + epsilon));
}

/* -- LayerNormalization ------------------------------------------------------------------ */

typedef struct {
    int64_t inner, scale_period, bias_period;
    double epsilon;
    const float *x, *scale, *bias;
    float *y, *mean, *inv_std;
} layer_norm_job;

NN_VECTORIZED static void layer_norm_rows(void *arg, int64_t begin, int64_t end) {
    const layer_norm_job *job = (const layer_norm_job *)arg;
    const int64_t inner = job->inner;
    for (int64_t r = begin; r < end; r++) {
        const float *x = job->x + r * inner;
        float *y = job->y + r * inner;
        float mean, inv_std;
        row_stats(x, inner, job->epsilon, &mean, &inv_std);
        if (job->mean) {
            job->mean[r] = mean;
        }
        if (job->inv_std) {
            job->inv_std[r] = inv_std;
        }
        const float *scale = job->scale, *bias = job->bias;
        if (job->scale_period == inner && (bias == NULL || job->bias_period == inner)) {
            if (bias) {
                for (int64_t i = 0; i < inner; i++) {
                    y[i] = (x[i] - mean) * inv_std * scale[i] + bias[i];
                }
            } else {
                for (int64_t i = 0; i < inner; i++) {
                    y[i] = (x[i] - mean) * inv_std * scale[i];
                }
            }
        } else {
            for (int64_t i = 0; i < inner; i++) {
                float v = (x[i] - mean) * inv_std * scale[i % job->scale_period];
                y[i] = bias ? v + bias[i % job->bias_period] : v;
            }
        }
    }
}

int ge_nn_layer_norm_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                         const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                         size_t attrs_size) {
    static const char *name = "ge_nn_layer_norm_f32";
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    int64_t v[5] = {0};
    layer_norm_job job;
    int ints_ok = ge_blob_ints(&blob, v, 5);
    job.epsilon = ge_blob_float(&blob);
    const int64_t outer = v[0];
    job.inner = v[1];
    job.scale_period = v[2];
    job.bias_period = v[3];
    if (!ints_ok || !ge_blob_done(&blob) || outer < 0 || job.inner < 1
        || job.scale_period < 1 || job.inner % job.scale_period || job.bias_period < 0
        || (job.bias_period && job.inner % job.bias_period) || v[4] < 1 || v[4] > 3) {
        return NN_BAD_BLOB(ctx, name, blob);
    }
    if (n_inputs < 2 + (job.bias_period != 0) || n_outputs != v[4]) {
        return ctx->set_error(ctx, "%s: expected inputs X, Scale%s and %d outputs, got %d and %d",
                              name, job.bias_period ? ", B" : "", (int)v[4], (int)n_inputs,
                              (int)n_outputs);
    }
    if (nn_check_f32(ctx, name, "input X", &inputs[0], outer * job.inner)
        || nn_check_f32(ctx, name, "input Scale", &inputs[1], job.scale_period)
        || (job.bias_period && nn_check_f32(ctx, name, "input B", &inputs[2], job.bias_period))
        || nn_check_f32(ctx, name, "output Y", &outputs[0], outer * job.inner)
        || (n_outputs > 1 && nn_check_f32(ctx, name, "output Mean", &outputs[1], outer))
        || (n_outputs > 2 && nn_check_f32(ctx, name, "output InvStdDev", &outputs[2], outer))) {
        return -1;
    }
    job.x = (const float *)inputs[0].data;
    job.scale = (const float *)inputs[1].data;
    job.bias = job.bias_period ? (const float *)inputs[2].data : NULL;
    job.y = (float *)outputs[0].data;
    job.mean = n_outputs > 1 ? (float *)outputs[1].data : NULL;
    job.inv_std = n_outputs > 2 ? (float *)outputs[2].data : NULL;
    ctx->parallel_for(ctx, outer, nn_grain(job.inner, NN_NORM_GRAIN_WORK), layer_norm_rows,
                      &job);
    return 0;
}

/* -- InstanceNormalization --------------------------------------------------------------- */

typedef struct {
    int64_t channels, inner;
    double epsilon;
    const float *x, *scale, *bias;
    float *y;
} instance_norm_job;

NN_VECTORIZED static void instance_norm_planes(void *arg, int64_t begin, int64_t end) {
    const instance_norm_job *job = (const instance_norm_job *)arg;
    for (int64_t plane = begin; plane < end; plane++) {
        int64_t c = plane % job->channels;
        const float *x = job->x + plane * job->inner;
        float *y = job->y + plane * job->inner;
        float mean, inv_std;
        row_stats(x, job->inner, job->epsilon, &mean, &inv_std);
        const float scale = job->scale[c], bias = job->bias[c];
        for (int64_t i = 0; i < job->inner; i++) {
            y[i] = (x[i] - mean) * inv_std * scale + bias;
        }
    }
}

int ge_nn_instance_norm_f32(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                            const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                            size_t attrs_size) {
    static const char *name = "ge_nn_instance_norm_f32";
    ge_instance_norm_blob r;
    instance_norm_job job;
    if (!ge_instance_norm_blob_read(attrs, attrs_size, &r) || r.n < 0 || r.channels < 1
        || r.inner < 1) {
        return NN_BAD_BLOB_BYTES(ctx, name, attrs_size);
    }
    const int64_t v[3] = {r.n, r.channels, r.inner};
    job.epsilon = r.epsilon;
    job.channels = r.channels;
    job.inner = r.inner;
    if (n_inputs != 3 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected 3 inputs and 1 output, got %d and %d", name,
                              (int)n_inputs, (int)n_outputs);
    }
    const int64_t numel = v[0] * job.channels * job.inner;
    if (nn_check_f32(ctx, name, "input input", &inputs[0], numel)
        || nn_check_f32(ctx, name, "input scale", &inputs[1], job.channels)
        || nn_check_f32(ctx, name, "input B", &inputs[2], job.channels)
        || nn_check_f32(ctx, name, "output Y", &outputs[0], numel)) {
        return -1;
    }
    job.x = (const float *)inputs[0].data;
    job.scale = (const float *)inputs[1].data;
    job.bias = (const float *)inputs[2].data;
    job.y = (float *)outputs[0].data;
    ctx->parallel_for(ctx, v[0] * job.channels, nn_grain(job.inner, NN_NORM_GRAIN_WORK),
                      instance_norm_planes, &job);
    return 0;
}
