/*
 * The FusedConv and FusedMatMul epilogue (conv_epilogue.h): a residual add and an
 * activation over a run of freshly computed output values. The simple activations (Relu,
 * Clip, LeakyRelu, the hard sigmoids) and Gelu's erf form (activation_math.h, the
 * standalone kernel's formula) vectorize (NN_VECTORIZED); the others call libm per value,
 * in the same forms as the standalone kernels of activation.c, so that fused and unfused
 * graphs agree to the last bit or two.
 */
#include "conv_epilogue.h"

#include <math.h>

#include "activation_math.h"
#include "nn_common.h"

/* exp(-|x|) never overflows; for x < 0, e / (1 + e) keeps the tiny results. */
static inline float epilogue_sigmoid(float x) {
    float e = expf(-fabsf(x));
    return x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

/* 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), u = sqrt(2 / pi) (x + 0.044715 x^3). */
static inline float epilogue_gelu_tanh(float x) {
    double w = (double)x;
    double u = 0.79788456080286535588 * (w + 0.044715 * w * w * w);
    return (float)(w / (1.0 + exp(-2.0 * u)));
}

static inline float clamp01(float v) {
    v = v < 0.0f ? 0.0f : v;
    return v > 1.0f ? 1.0f : v;
}

NN_VECTORIZED void nn_epilogue_run(const nn_epilogue *e, float *y, const float *residual,
                                   int64_t n) {
    if (residual) {
        for (int64_t i = 0; i < n; i++) {
            y[i] += residual[i];
        }
    }
    const double alpha = e->alpha, beta = e->beta;
    const float low = (float)alpha, high = (float)beta;  /* Clip's bounds, as float32 */
    switch (e->activation) {
    case FUSED_ACT_RELU:
        for (int64_t i = 0; i < n; i++) {
            y[i] = y[i] < 0.0f ? 0.0f : y[i];  /* NaN stays NaN */
        }
        break;
    case FUSED_ACT_CLIP:  /* min first, max last: max wins where min > max, as in Clip */
        for (int64_t i = 0; i < n; i++) {
            float v = y[i] < low ? low : y[i];
            y[i] = v > high ? high : v;
        }
        break;
    case FUSED_ACT_LEAKY_RELU:
        for (int64_t i = 0; i < n; i++) {
            y[i] = y[i] >= 0.0f ? y[i] : (float)(alpha * (double)y[i]);
        }
        break;
    case FUSED_ACT_HARD_SIGMOID:
        for (int64_t i = 0; i < n; i++) {
            y[i] = clamp01((float)(alpha * (double)y[i] + beta));
        }
        break;
    case FUSED_ACT_HARD_SWISH:
        for (int64_t i = 0; i < n; i++) {
            double w = (double)y[i], h = w / 6.0 + 0.5;
            h = h < 0.0 ? 0.0 : h;
            y[i] = (float)(w * (h > 1.0 ? 1.0 : h));
        }
        break;
    case FUSED_ACT_SIGMOID:
        for (int64_t i = 0; i < n; i++) {
            y[i] = epilogue_sigmoid(y[i]);
        }
        break;
    case FUSED_ACT_SILU:
        for (int64_t i = 0; i < n; i++) {
            y[i] = y[i] * epilogue_sigmoid(y[i]);
        }
        break;
    case FUSED_ACT_GELU:
        for (int64_t i = 0; i < n; i++) {
            y[i] = nn_gelu_erf_f32(y[i]);  /* the standalone Gelu's own formula */
        }
        break;
    case FUSED_ACT_GELU_TANH:
        for (int64_t i = 0; i < n; i++) {
            y[i] = epilogue_gelu_tanh(y[i]);
        }
        break;
    default:
        break;
    }
}

void nn_epilogue_block(const nn_epilogue *e, float *y, int64_t offset, int64_t rows,
                       int64_t cols, int64_t ld) {
    for (int64_t r = 0; r < rows; r++) {
        nn_epilogue_run(e, y + r * ld, e->residual ? e->residual + offset + r * ld : 0, cols);
    }
}
