/*
 * The epilogue of ge_hub.FusedConv (ge_hub/ops/conv.py): what a convolution does to each
 * output value after its sum (and bias), as the value is stored instead of as separate
 * steps over memory:
 *
 *     y = activation(sum + bias + residual)
 *
 * The residual (ONNX's Add of a same-shape tensor, ResNet's skip connection) has the
 * output's layout, so the callers pass it at the same offset as the output. Every conv
 * path applies the epilogue to a run of output values while the run is still in cache:
 * the packed GEMM to each finished tile, Winograd to each output row of a tile strip,
 * depthwise to each output row, im2col to each block of columns.
 *
 * The activation codes are the positions in CONV_ACTIVATIONS (ge_hub/ops/conv.py):
 */
#ifndef GE_HUB_CONV_EPILOGUE_H
#define GE_HUB_CONV_EPILOGUE_H

#include <stdint.h>

enum {
    FUSED_ACT_NONE = 0,
    FUSED_ACT_RELU = 1,
    FUSED_ACT_CLIP = 2,          /* alpha: min, beta: max (an omitted bound is +-inf) */
    FUSED_ACT_LEAKY_RELU = 3,    /* alpha */
    FUSED_ACT_SIGMOID = 4,
    FUSED_ACT_HARD_SIGMOID = 5,  /* alpha, beta */
    FUSED_ACT_HARD_SWISH = 6,
    FUSED_ACT_SILU = 7,          /* x * sigmoid(x) */
    FUSED_ACT_GELU = 8,          /* x * Phi(x), the erf form */
    FUSED_ACT_GELU_TANH = 9,     /* the tanh approximation */
    FUSED_ACT_COUNT = 10
};

typedef struct {
    int activation;           /* FUSED_ACT_* */
    double alpha, beta;       /* as the blob holds them (float64) */
    const float *residual;    /* the whole residual tensor (the output's layout), or NULL */
} nn_epilogue;

/* 1 when the epilogue does nothing (no residual, no activation): callers skip it. */
static inline int nn_epilogue_empty(const nn_epilogue *e) {
    return e == 0 || (e->activation == FUSED_ACT_NONE && e->residual == 0);
}

/*
 * y[i] = activation(y[i] + residual[i]) for i < n; `residual` is this run's residual
 * (NULL: none), already offset like `y`. NaN and inf behave as in the unfused ops'
 * kernels (activation.c): Relu and Clip keep NaN, the sigmoids never overflow.
 */
void nn_epilogue_run(const nn_epilogue *e, float *y, const float *residual, int64_t n);

/* The same over a rows x cols block whose rows are `ld` apart in y and in the residual
 * (whose block starts `offset` values into the residual tensor). */
void nn_epilogue_block(const nn_epilogue *e, float *y, int64_t offset, int64_t rows,
                       int64_t cols, int64_t ld);

#endif /* GE_HUB_CONV_EPILOGUE_H */
