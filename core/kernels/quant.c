/*
 * QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear (blobs in quant.h).
 *
 * Quantizing divides in float32 (the scale's dtype, as the reference does), rounds half
 * to even and saturates. The quotient is first clamped to [qmin - zp, qmax - zp], both
 * integers, which changes no result (rounding is monotonic and keeps integers) and
 * keeps it small enough for the exact rounding trick (q + 1.5 * 2**23) - 1.5 * 2**23,
 * which rounds half to even in the default rounding mode and vectorizes; NaN becomes 0
 * (then the zero point), as in the reference. Dequantizing an 8- or 16-bit integer
 * computes (x - zp) * scale in float32: the difference is exact and the product rounds
 * once, as the reference's float64 product cast to float32 does; int32 data goes
 * through double, where its difference is still exact.
 */
#include <math.h>
#include <stdint.h>

#include "nn_common.h"
#include "quant.h"

#define QUANT_GRAIN 16384

typedef struct {
    int64_t outer, channels, inner, block, params;
    int has_zero;
    const ge_tensor *x, *scale, *zero, *y;
} quant_plan;

/* Checks the tensors against the blob; `data` is the quantized side (y or x). */
static int quant_open(ge_context *ctx, const char *name, const ge_tensor *inputs,
                      int32_t n_inputs, const ge_tensor *outputs, int32_t n_outputs,
                      const void *attrs, size_t attrs_size, quant_plan *plan) {
    if (n_inputs < 2 || n_inputs > 3 || n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected 2 or 3 inputs and 1 output, got %d and %d",
                              name, (int)n_inputs, (int)n_outputs);
    }
    ge_quantize_blob r;
    if (!ge_quantize_blob_read(attrs, attrs_size, &r) || r.outer < 0 || r.channels < 1
        || r.inner < 0 || r.has_zero_point < 0 || r.has_zero_point > 1 || r.block < 0
        || (r.has_zero_point && (n_inputs < 3 || inputs[2].data == NULL))) {
        return ctx->set_error(ctx, "%s: malformed attribute blob (%zu bytes)", name, attrs_size);
    }
    plan->outer = r.outer;
    plan->channels = r.channels;
    plan->inner = r.inner;
    plan->has_zero = (int)r.has_zero_point;
    plan->block = r.block;
    /* scale values: one per channel, or per block of channels of each (outer, inner) */
    plan->params = r.block ? r.outer * ((r.channels + r.block - 1) / r.block) * r.inner
                           : r.channels;
    plan->x = &inputs[0];
    plan->scale = &inputs[1];
    plan->zero = plan->has_zero ? &inputs[2] : NULL;
    plan->y = &outputs[0];
    int64_t numel = r.outer * r.channels * r.inner;
    if (plan->x->numel != numel || plan->y->numel != numel) {
        return ctx->set_error(ctx, "%s: input 'x' (%lld elements) and output 'y' (%lld) "
                              "must have %lld elements", name, (long long)plan->x->numel,
                              (long long)plan->y->numel, (long long)numel);
    }
    if (plan->scale->dtype != GE_FLOAT32 || plan->scale->numel != plan->params) {
        return ctx->set_error(ctx, "%s: the scale must be float32 with %lld values, got dtype "
                              "%d with %lld", name, (long long)plan->params,
                              (int)plan->scale->dtype, (long long)plan->scale->numel);
    }
    if (plan->zero != NULL && plan->zero->numel != plan->params) {
        return ctx->set_error(ctx, "%s: the zero point must have %lld values, got %lld", name,
                              (long long)plan->params, (long long)plan->zero->numel);
    }
    return 0;
}

/* A 4- or 2-bit integer from the low bits of its byte (ml_dtypes' layout), sign-extended
 * for int4 and int2. */
static inline int32_t quant_narrow_load(int32_t dtype, uint8_t byte) {
    switch (dtype) {
    case GE_INT4: return (int32_t)((byte & 0xF) ^ 0x8) - 0x8;
    case GE_UINT4: return byte & 0xF;
    case GE_INT2: return (int32_t)((byte & 0x3) ^ 0x2) - 0x2;
    case GE_UINT2: return byte & 0x3;
    default: return 0;
    }
}

/* One zero point as an int32 (every quantized dtype fits). */
static int32_t quant_zero_at(const ge_tensor *zero, int64_t i) {
    if (zero == NULL) {
        return 0;
    }
    switch (zero->dtype) {
    case GE_UINT8: return ((const uint8_t *)zero->data)[i];
    case GE_INT8: return ((const int8_t *)zero->data)[i];
    case GE_UINT16: return ((const uint16_t *)zero->data)[i];
    case GE_INT16: return ((const int16_t *)zero->data)[i];
    case GE_INT32: return ((const int32_t *)zero->data)[i];
    default: return quant_narrow_load(zero->dtype, ((const uint8_t *)zero->data)[i]);
    }
}

static int quant_range(int32_t dtype, int32_t *lo, int32_t *hi) {
    switch (dtype) {
    case GE_UINT8: *lo = 0; *hi = 255; return 1;
    case GE_INT8: *lo = -128; *hi = 127; return 1;
    case GE_UINT16: *lo = 0; *hi = 65535; return 1;
    case GE_INT16: *lo = -32768; *hi = 32767; return 1;
    case GE_INT4: *lo = -8; *hi = 7; return 1;
    case GE_UINT4: *lo = 0; *hi = 15; return 1;
    case GE_INT2: *lo = -2; *hi = 1; return 1;
    case GE_UINT2: *lo = 0; *hi = 3; return 1;
    default: return 0;
    }
}

/* -- QuantizeLinear ----------------------------------------------------------------- */

#define QUANT_MAGIC 12582912.0f /* 1.5 * 2**23 */

#define DEFINE_QUANTIZE_RUN(NAME, T)                                                      \
    NN_VECTORIZED static void NAME(const float *x, T *y, int64_t n, float scale, float lo, \
                                   float hi, int32_t zero) {                              \
        for (int64_t i = 0; i < n; i++) {                                                 \
            float q = x[i] / scale;                                                       \
            q = q == q ? q : 0.0f;                                                        \
            q = q < lo ? lo : q;                                                          \
            q = q > hi ? hi : q;                                                          \
            q = (q + QUANT_MAGIC) - QUANT_MAGIC;                                          \
            y[i] = (T)((int32_t)q + zero);                                                \
        }                                                                                 \
    }

DEFINE_QUANTIZE_RUN(quantize_run_u8, uint8_t)
DEFINE_QUANTIZE_RUN(quantize_run_i8, int8_t)
DEFINE_QUANTIZE_RUN(quantize_run_u16, uint16_t)
DEFINE_QUANTIZE_RUN(quantize_run_i16, int16_t)

static int quant_is_narrow(int32_t dtype) {
    return dtype == GE_INT4 || dtype == GE_UINT4 || dtype == GE_INT2 || dtype == GE_UINT2;
}

/* Index of the scale (and zero point) of element i of row `row` ([outer, channels]). */
static inline int64_t quant_param(const quant_plan *plan, int64_t row, int64_t i) {
    if (!plan->block) {
        return row % plan->channels;
    }
    int64_t o = row / plan->channels, c = row % plan->channels;
    int64_t blocks = (plan->channels + plan->block - 1) / plan->block;
    return (o * blocks + c / plan->block) * plan->inner + i;
}

/* Rows of blocked quantization or of a 4-/2-bit output: one element at a time, the same
 * arithmetic as the vectorized runs. */
static void quantize_rows_generic(const quant_plan *plan, int64_t begin, int64_t end) {
    int32_t lo = 0, hi = 0;
    int32_t dtype = plan->y->dtype;
    quant_range(dtype, &lo, &hi);
    const float *scales = (const float *)plan->scale->data;
    size_t size = ge_dtype_itemsize(dtype);
    for (int64_t row = begin; row < end; row++) {
        const float *x = (const float *)plan->x->data + row * plan->inner;
        for (int64_t i = 0; i < plan->inner; i++) {
            int64_t at = quant_param(plan, row, i);
            int32_t zero = quant_zero_at(plan->zero, at);
            float q = x[i] / scales[at];
            float flo = (float)(lo - zero), fhi = (float)(hi - zero);
            q = q == q ? q : 0.0f;
            q = q < flo ? flo : (q > fhi ? fhi : q);
            int32_t v = (int32_t)((q + QUANT_MAGIC) - QUANT_MAGIC) + zero;
            char *y = (char *)plan->y->data + (row * plan->inner + i) * (int64_t)size;
            switch (dtype) {
            case GE_UINT8: *(uint8_t *)y = (uint8_t)v; break;
            case GE_INT8: *(int8_t *)y = (int8_t)v; break;
            case GE_UINT16: *(uint16_t *)y = (uint16_t)v; break;
            case GE_INT16: *(int16_t *)y = (int16_t)v; break;
            case GE_INT4: case GE_UINT4: *(uint8_t *)y = (uint8_t)(v & 0xF); break;
            default: *(uint8_t *)y = (uint8_t)(v & 0x3); break;
            }
        }
    }
}

static void quantize_rows(void *arg, int64_t begin, int64_t end) {
    const quant_plan *plan = (const quant_plan *)arg;
    if (plan->block || quant_is_narrow(plan->y->dtype)) {
        quantize_rows_generic(plan, begin, end);
        return;
    }
    int32_t lo = 0, hi = 0;
    quant_range(plan->y->dtype, &lo, &hi);
    const float *scales = (const float *)plan->scale->data;
    for (int64_t row = begin; row < end; row++) {
        int64_t c = row % plan->channels;
        int32_t zero = quant_zero_at(plan->zero, c);
        const float *x = (const float *)plan->x->data + row * plan->inner;
        size_t item = ge_dtype_itemsize(plan->y->dtype);
        void *y = (char *)plan->y->data + row * plan->inner * (int64_t)item;
        float flo = (float)(lo - zero), fhi = (float)(hi - zero);
        switch (plan->y->dtype) {
        case GE_UINT8: quantize_run_u8(x, y, plan->inner, scales[c], flo, fhi, zero); break;
        case GE_INT8: quantize_run_i8(x, y, plan->inner, scales[c], flo, fhi, zero); break;
        case GE_UINT16: quantize_run_u16(x, y, plan->inner, scales[c], flo, fhi, zero); break;
        default: quantize_run_i16(x, y, plan->inner, scales[c], flo, fhi, zero); break;
        }
    }
}

GE_KERNEL(ge_quantize_linear) {
    quant_plan plan;
    if (quant_open(ctx, "ge_quantize_linear", inputs, n_inputs, outputs, n_outputs, attrs,
                   attrs_size, &plan)) {
        return -1;
    }
    int32_t lo, hi;
    if (plan.x->dtype != GE_FLOAT32 || !quant_range(plan.y->dtype, &lo, &hi)
        || (plan.zero != NULL && plan.zero->dtype != plan.y->dtype)) {
        return ctx->set_error(ctx, "ge_quantize_linear: input 'x' must be float32 and output "
                              "'y' (u)int2/4/8/16 of the zero point's dtype, got %d -> %d",
                              (int)plan.x->dtype, (int)plan.y->dtype);
    }
    int64_t rows = plan.outer * plan.channels;
    int64_t grain = QUANT_GRAIN / (plan.inner > 0 ? plan.inner : 1);
    ctx->parallel_for(ctx, rows, grain > 0 ? grain : 1, quantize_rows, &plan);
    return 0;
}

/* -- DequantizeLinear --------------------------------------------------------------- */

#define DEFINE_DEQUANTIZE_RUN(NAME, T)                                                    \
    NN_VECTORIZED static void NAME(const T *x, float *y, int64_t n, float scale,          \
                                   int32_t zero) {                                        \
        for (int64_t i = 0; i < n; i++) {                                                 \
            y[i] = (float)((int32_t)x[i] - zero) * scale;                                 \
        }                                                                                 \
    }

DEFINE_DEQUANTIZE_RUN(dequantize_run_u8, uint8_t)
DEFINE_DEQUANTIZE_RUN(dequantize_run_i8, int8_t)
DEFINE_DEQUANTIZE_RUN(dequantize_run_u16, uint16_t)
DEFINE_DEQUANTIZE_RUN(dequantize_run_i16, int16_t)

static void dequantize_run_i32(const int32_t *x, float *y, int64_t n, float scale,
                               int32_t zero) {
    for (int64_t i = 0; i < n; i++) {
        y[i] = (float)(((double)x[i] - (double)zero) * (double)scale);
    }
}

/* Rows of blocked dequantization or of 4-/2-bit data, one element at a time. */
static void dequantize_rows_generic(const quant_plan *plan, int64_t begin, int64_t end) {
    const float *scales = (const float *)plan->scale->data;
    int32_t dtype = plan->x->dtype;
    for (int64_t row = begin; row < end; row++) {
        float *y = (float *)plan->y->data + row * plan->inner;
        for (int64_t i = 0; i < plan->inner; i++) {
            int64_t at = quant_param(plan, row, i), e = row * plan->inner + i;
            int64_t v;
            switch (dtype) {
            case GE_UINT8: v = ((const uint8_t *)plan->x->data)[e]; break;
            case GE_INT8: v = ((const int8_t *)plan->x->data)[e]; break;
            case GE_UINT16: v = ((const uint16_t *)plan->x->data)[e]; break;
            case GE_INT16: v = ((const int16_t *)plan->x->data)[e]; break;
            case GE_INT32: v = ((const int32_t *)plan->x->data)[e]; break;
            default: v = quant_narrow_load(dtype, ((const uint8_t *)plan->x->data)[e]); break;
            }
            y[i] = (float)((double)(v - quant_zero_at(plan->zero, at)) * (double)scales[at]);
        }
    }
}

static void dequantize_rows(void *arg, int64_t begin, int64_t end) {
    const quant_plan *plan = (const quant_plan *)arg;
    if (plan->block || quant_is_narrow(plan->x->dtype)) {
        dequantize_rows_generic(plan, begin, end);
        return;
    }
    const float *scales = (const float *)plan->scale->data;
    size_t size = ge_dtype_itemsize(plan->x->dtype);
    for (int64_t row = begin; row < end; row++) {
        int64_t c = row % plan->channels;
        int32_t zero = quant_zero_at(plan->zero, c);
        const void *x = (const char *)plan->x->data + row * plan->inner * (int64_t)size;
        float *y = (float *)plan->y->data + row * plan->inner;
        switch (plan->x->dtype) {
        case GE_UINT8: dequantize_run_u8(x, y, plan->inner, scales[c], zero); break;
        case GE_INT8: dequantize_run_i8(x, y, plan->inner, scales[c], zero); break;
        case GE_UINT16: dequantize_run_u16(x, y, plan->inner, scales[c], zero); break;
        case GE_INT16: dequantize_run_i16(x, y, plan->inner, scales[c], zero); break;
        default: dequantize_run_i32(x, y, plan->inner, scales[c], zero); break;
        }
    }
}

GE_KERNEL(ge_dequantize_linear) {
    quant_plan plan;
    if (quant_open(ctx, "ge_dequantize_linear", inputs, n_inputs, outputs, n_outputs, attrs,
                   attrs_size, &plan)) {
        return -1;
    }
    int32_t lo, hi;
    if (plan.y->dtype != GE_FLOAT32
        || !(quant_range(plan.x->dtype, &lo, &hi) || plan.x->dtype == GE_INT32)
        || (plan.zero != NULL && plan.zero->dtype != plan.x->dtype)) {
        return ctx->set_error(ctx, "ge_dequantize_linear: input 'x' must be (u)int2/4/8/16 "
                              "or int32 (its zero point alike) and output 'y' "
                              "float32, got %d -> %d", (int)plan.x->dtype, (int)plan.y->dtype);
    }
    int64_t rows = plan.outer * plan.channels;
    int64_t grain = QUANT_GRAIN / (plan.inner > 0 ? plan.inner : 1);
    ctx->parallel_for(ctx, rows, grain > 0 ? grain : 1, dequantize_rows, &plan);
    return 0;
}

/* -- DynamicQuantizeLinear ---------------------------------------------------------- */

/* The reference's Python max(0, x.max()) and min(0, x.min()): a NaN anywhere makes
 * NumPy's extreme NaN, which then loses both comparisons with 0. */
GE_KERNEL(ge_dynamic_quantize_linear) {
    (void)attrs;
    if (n_inputs != 1 || n_outputs != 3 || attrs_size != 0) {
        return ctx->set_error(ctx, "ge_dynamic_quantize_linear: expected 1 input, 3 outputs "
                              "and no attributes, got %d, %d and %zu bytes", (int)n_inputs,
                              (int)n_outputs, attrs_size);
    }
    const ge_tensor *x = &inputs[0], *y = &outputs[0];
    if (x->dtype != GE_FLOAT32 || y->dtype != GE_UINT8 || y->numel != x->numel
        || outputs[1].dtype != GE_FLOAT32 || outputs[1].numel != 1
        || outputs[2].dtype != GE_UINT8 || outputs[2].numel != 1) {
        return ctx->set_error(ctx, "ge_dynamic_quantize_linear: expected float32 'x' -> "
                              "uint8 'y' of its size, a float32 scale and a uint8 zero point");
    }
    const float *data = (const float *)x->data;
    float high = -INFINITY, low = INFINITY;
    int nan = 0;
    for (int64_t i = 0; i < x->numel; i++) {
        float v = data[i];
        nan |= v != v;
        high = v > high ? v : high;
        low = v < low ? v : low;
    }
    high = (!nan && x->numel > 0 && high > 0.0f) ? high : 0.0f;
    low = (!nan && x->numel > 0 && low < 0.0f) ? low : 0.0f;
    float scale = high == low ? 1.0f : (high - low) / 255.0f;
    float zero_real = 0.0f - low / scale;
    zero_real = zero_real < 0.0f ? 0.0f : (zero_real > 255.0f ? 255.0f : zero_real);
    int32_t zero = (int32_t)nearbyintf(zero_real);
    ((float *)outputs[1].data)[0] = scale;
    ((uint8_t *)outputs[2].data)[0] = (uint8_t)zero;
    quantize_run_u8(data, (uint8_t *)y->data, x->numel, scale, (float)(0 - zero),
                    (float)(255 - zero), zero);
    return 0;
}
