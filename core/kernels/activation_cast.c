/*
 * Cast (and CastLike): convert every element between any two of the thirteen ge_dtypes
 * that hold numbers C computes on (not the storage-only float8, 4- and 2-bit ones, which
 * Cast's NumPy reference converts; ge_hub/kernels/activation.py does not offer them here).
 *
 * The rules are those of ge_hub.ops.activation.cast_array, the reference:
 *
 * - float to integer truncates toward zero, saturates out-of-range values and
 *   infinities to the integer's min or max, and makes NaN 0;
 * - integer to integer wraps around (two's complement), as C's conversions do;
 * - anything to bool is `x != 0` (NaN is true); bool to anything is 0 or 1;
 * - to a float type: round to nearest, ties to even, once; too large becomes inf.
 *
 * Every source element is first widened exactly: float16, bfloat16 and float32 to float,
 * float64 stays double, uint64 stays uint64_t, any other integer or bool becomes an int64.
 * The conversion to the target then depends only on that kind and the target, so each of
 * the 169 (source, target) loops is one line of macros. float16 and bfloat16 are converted bit by bit here (C has
 * no portable half types), the float ones without branches so that those loops
 * vectorize. The one double rounding the reference documents is kept: an int64 or uint64
 * beyond 2^53 goes to bfloat16 through float64.
 */
#include <math.h>
#include <string.h>

#include "activation.h"
#include "nn_common.h" /* NN_VECTORIZED */

/* A memory-bound loop: below this many elements a single chunk is cheaper. */
#define CAST_GRAIN 16384

/* -- float16 and bfloat16 ------------------------------------------------------------------- */

static inline float bits_to_float(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint32_t float_to_bits(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

/* float16 to float, exactly, without branches (so the loops vectorize). A half's exponent
 * and mantissa shifted into a float's places make a float 2^112 times too small, for
 * subnormal halves too, so one exact multiplication rebiases; inf and NaN (exponent 31)
 * get the float's exponent 0xFF and keep their mantissa. */
static inline float half_to_float(uint16_t h) {
    uint32_t magnitude = (uint32_t)(h & 0x7FFF) << 13;
    uint32_t finite = float_to_bits(bits_to_float(magnitude) * 0x1p112f);
    uint32_t bits = (h & 0x7C00) == 0x7C00 ? (magnitude | 0x7F800000u) : finite;
    return bits_to_float(bits | ((uint32_t)(h & 0x8000) << 16));
}

/* float to float16, rounding to nearest even, without branches. */
static inline uint16_t float_to_half(float f) {
    uint32_t bits = float_to_bits(f);
    uint32_t magnitude = bits & 0x7FFFFFFFu;
    /* A normal half: rebias the exponent (127 -> 15) and round away the 13 low mantissa
     * bits to nearest even; a carry moves into the exponent. */
    uint32_t odd = (magnitude >> 13) & 1;
    uint32_t normal = (magnitude - 0x38000000u + 0x0FFFu + odd) >> 13;
    /* Below 2^-14 the half is subnormal, in units of 2^-24: adding 0.5 (whose ulp is
     * 2^-24) makes the FPU round |f| to that unit, in the sum's low mantissa bits. */
    uint32_t subnormal = float_to_bits(bits_to_float(magnitude) + 0.5f) - 0x3F000000u;
    uint32_t result = magnitude < 0x38800000u ? subnormal : normal;
    result = magnitude >= 0x477FF000u ? 0x7C00u : result;  /* 65520 and up round to inf */
    result = magnitude > 0x7F800000u ? (0x7E00u | ((magnitude >> 13) & 0x3FFu)) : result;
    return (uint16_t)(((bits >> 16) & 0x8000u) | result);
}

static inline float bfloat16_to_float(uint16_t b) {
    return bits_to_float((uint32_t)b << 16);
}

/* float to bfloat16, rounding to nearest even; a NaN stays a (quiet) NaN. */
static inline uint16_t float_to_bfloat16(float f) {
    uint32_t bits = float_to_bits(f);
    uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1)) >> 16;
    uint32_t quiet_nan = (bits >> 16) | 0x0040u;
    return (uint16_t)((bits & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
}

/* Round a double to float16 once, to nearest even, straight from its bits (going through
 * float would round twice). */
static inline uint16_t double_to_half(double d) {
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    uint16_t sign = (uint16_t)((bits >> 48) & 0x8000);
    uint64_t magnitude = bits & 0x7FFFFFFFFFFFFFFFull;
    if (magnitude >= 0x7FF0000000000000ull) {  /* inf, or NaN kept quiet */
        return magnitude == 0x7FF0000000000000ull ? (uint16_t)(sign | 0x7C00)
                                                  : (uint16_t)(sign | 0x7E00);
    }
    int exponent = (int)(magnitude >> 52) - 1023;
    if (exponent >= 16) {
        return (uint16_t)(sign | 0x7C00);  /* at least 2^16: far above the largest half */
    }
    if (exponent < -25) {
        return sign;  /* below half the smallest subnormal (2^-24): rounds to zero */
    }
    uint64_t significand = (magnitude & 0xFFFFFFFFFFFFFull) | (1ull << 52);
    /* Bits of the 53-bit significand that do not fit: 42 for a normal half (10 mantissa
     * bits kept), more below 2^-14 where the half is subnormal (units of 2^-24). */
    int drop = exponent >= -14 ? 42 : 28 - exponent;
    uint64_t kept = significand >> drop;
    uint64_t rest = significand & ((1ull << drop) - 1);
    uint64_t halfway = 1ull << (drop - 1);
    kept += (rest > halfway || (rest == halfway && (kept & 1))) ? 1 : 0;
    if (exponent < -14) {
        return (uint16_t)(sign | kept);  /* kept == 0x400 is the smallest normal, correctly */
    }
    /* kept holds the implicit bit (0x400); a carry to 0x800 moves into the exponent,
     * and past the largest exponent into inf (0x7C00). */
    return (uint16_t)(sign | (((uint64_t)(exponent + 14) << 10) + kept));
}

/* Round a double to bfloat16 once, to nearest even: round to float "to odd" first
 * (truncate, then set the last bit when inexact), which keeps what the second rounding
 * needs to know; then to bfloat16. */
static inline uint16_t double_to_bfloat16(double d) {
    float f = (float)d;
    uint32_t bits = float_to_bits(f);
    double back = f;
    if (back != d && !isnan(d)) {
        if (fabs(back) > fabs(d)) {
            bits -= 1;  /* one float ulp toward zero */
        }
        bits |= 1;
    }
    return float_to_bfloat16(bits_to_float(bits));
}

/* -- to integers ---------------------------------------------------------------------------- */

/* Float to integer: trunc(d) >= max + 1 saturates high, trunc(d) < min low, NaN is 0.
 * Comparing d itself is equivalent (for integer bounds) and needs no trunc call; in
 * between, C's conversion truncates toward zero. */
#define FLOAT_TO_INT(T, d, MIN, MAX, MAX_PLUS_ONE, TOO_LOW)                                \
    ((d) >= (MAX_PLUS_ONE) ? (T)(MAX) : (TOO_LOW) ? (T)(MIN) : (d) == (d) ? (T)(int64_t)(d) : (T)0)

static inline int8_t double_to_i8(double d) {
    return FLOAT_TO_INT(int8_t, d, INT8_MIN, INT8_MAX, 128.0, d <= -129.0);
}
static inline int16_t double_to_i16(double d) {
    return FLOAT_TO_INT(int16_t, d, INT16_MIN, INT16_MAX, 32768.0, d <= -32769.0);
}
static inline int32_t double_to_i32(double d) {
    return FLOAT_TO_INT(int32_t, d, INT32_MIN, INT32_MAX, 2147483648.0, d <= -2147483649.0);
}
/* -2^63 - 1 is not a double; below -2^63 the next double is -2^63 - 2048. */
static inline int64_t double_to_i64(double d) {
    return FLOAT_TO_INT(int64_t, d, INT64_MIN, INT64_MAX, 9223372036854775808.0,
                        d < -9223372036854775808.0);
}
static inline uint8_t double_to_u8(double d) {
    return FLOAT_TO_INT(uint8_t, d, 0, UINT8_MAX, 256.0, d <= -1.0);
}
static inline uint16_t double_to_u16(double d) {
    return FLOAT_TO_INT(uint16_t, d, 0, UINT16_MAX, 65536.0, d <= -1.0);
}
static inline uint32_t double_to_u32(double d) {
    return FLOAT_TO_INT(uint32_t, d, 0, UINT32_MAX, 4294967296.0, d <= -1.0);
}
/* Not FLOAT_TO_INT: a double in [2^63, 2^64) does not fit the int64 it goes through. */
static inline uint64_t double_to_u64(double d) {
    return d >= 18446744073709551616.0 ? UINT64_MAX : d <= -1.0 ? 0 : d == d ? (uint64_t)d : 0;
}

/* -- the loops ------------------------------------------------------------------------------ */

/* Per dtype: its C storage type, how an element widens (LOAD) and to what kind of value:
 * NARROW floats (float32 and the 16-bit floats) widen exactly to float, float64 stays a
 * double (FLOAT), uint64 stays a uint64_t (UINT: half its values do not fit an int64), other
 * integers and bool widen to int64 (INT). */
#define CTYPE_f32 float
#define CTYPE_f64 double
#define CTYPE_f16 uint16_t
#define CTYPE_bf16 uint16_t
#define CTYPE_i8 int8_t
#define CTYPE_i16 int16_t
#define CTYPE_i32 int32_t
#define CTYPE_i64 int64_t
#define CTYPE_u8 uint8_t
#define CTYPE_bool uint8_t
#define CTYPE_u16 uint16_t
#define CTYPE_u32 uint32_t
#define CTYPE_u64 uint64_t

#define LOAD_f32(v) (v)
#define LOAD_f64(v) (v)
#define LOAD_f16(v) half_to_float(v)
#define LOAD_bf16(v) bfloat16_to_float(v)
#define LOAD_i8(v) ((int64_t)(v))
#define LOAD_i16(v) ((int64_t)(v))
#define LOAD_i32(v) ((int64_t)(v))
#define LOAD_i64(v) (v)
#define LOAD_u8(v) ((int64_t)(v))
#define LOAD_bool(v) ((int64_t)((v) != 0))
#define LOAD_u16(v) ((int64_t)(v))
#define LOAD_u32(v) ((int64_t)(v))
#define LOAD_u64(v) (v)

#define KIND_f32 NARROW
#define KIND_f64 FLOAT
#define KIND_f16 NARROW
#define KIND_bf16 NARROW
#define KIND_i8 INT
#define KIND_i16 INT
#define KIND_i32 INT
#define KIND_i64 INT
#define KIND_u8 INT
#define KIND_bool INT
#define KIND_u16 INT
#define KIND_u32 INT
#define KIND_u64 UINT

/* STORE_<kind>_<target>(v): a widened value of that kind as a target element, rounded
 * once. A float converts to an integer through double, which holds it exactly. An int64
 * or uint64 converts to float or double in one rounding; to float16 through double, which
 * is exact wherever the result is finite (|v| < 65520). Integer to integer keeps the low
 * bits (two's complement wraparound). */
#define STORE_NARROW_f32(v) (v)
#define STORE_NARROW_f64(v) ((double)(v))
#define STORE_NARROW_f16(v) float_to_half(v)
#define STORE_NARROW_bf16(v) float_to_bfloat16(v)
#define STORE_NARROW_i8(v) double_to_i8(v)
#define STORE_NARROW_i16(v) double_to_i16(v)
#define STORE_NARROW_i32(v) double_to_i32(v)
#define STORE_NARROW_i64(v) double_to_i64(v)
#define STORE_NARROW_u8(v) double_to_u8(v)
#define STORE_NARROW_bool(v) ((uint8_t)((v) != 0.0f))
#define STORE_NARROW_u16(v) double_to_u16(v)
#define STORE_NARROW_u32(v) double_to_u32(v)
#define STORE_NARROW_u64(v) double_to_u64(v)
#define STORE_FLOAT_f32(v) ((float)(v))
#define STORE_FLOAT_f64(v) (v)
#define STORE_FLOAT_f16(v) double_to_half(v)
#define STORE_FLOAT_bf16(v) double_to_bfloat16(v)
#define STORE_FLOAT_i8(v) double_to_i8(v)
#define STORE_FLOAT_i16(v) double_to_i16(v)
#define STORE_FLOAT_i32(v) double_to_i32(v)
#define STORE_FLOAT_i64(v) double_to_i64(v)
#define STORE_FLOAT_u8(v) double_to_u8(v)
#define STORE_FLOAT_bool(v) ((uint8_t)((v) != 0.0))
#define STORE_FLOAT_u16(v) double_to_u16(v)
#define STORE_FLOAT_u32(v) double_to_u32(v)
#define STORE_FLOAT_u64(v) double_to_u64(v)
#define STORE_INT_f32(v) ((float)(v))
#define STORE_INT_f64(v) ((double)(v))
#define STORE_INT_f16(v) double_to_half((double)(v))
#define STORE_INT_bf16(v) double_to_bfloat16((double)(v))
#define STORE_INT_i8(v) ((int8_t)(v))     /* gcc and clang wrap out-of-range values */
#define STORE_INT_i16(v) ((int16_t)(v))
#define STORE_INT_i32(v) ((int32_t)(v))
#define STORE_INT_i64(v) (v)
#define STORE_INT_u8(v) ((uint8_t)(v))
#define STORE_INT_bool(v) ((uint8_t)((v) != 0))
#define STORE_INT_u16(v) ((uint16_t)(v))
#define STORE_INT_u32(v) ((uint32_t)(v))
#define STORE_INT_u64(v) ((uint64_t)(v))
#define STORE_UINT_f32(v) ((float)(v))
#define STORE_UINT_f64(v) ((double)(v))
#define STORE_UINT_f16(v) double_to_half((double)(v))
#define STORE_UINT_bf16(v) double_to_bfloat16((double)(v))
#define STORE_UINT_i8(v) ((int8_t)(v))
#define STORE_UINT_i16(v) ((int16_t)(v))
#define STORE_UINT_i32(v) ((int32_t)(v))
#define STORE_UINT_i64(v) ((int64_t)(v))
#define STORE_UINT_u8(v) ((uint8_t)(v))
#define STORE_UINT_bool(v) ((uint8_t)((v) != 0))
#define STORE_UINT_u16(v) ((uint16_t)(v))
#define STORE_UINT_u32(v) ((uint32_t)(v))
#define STORE_UINT_u64(v) (v)

typedef struct {
    const void *in;
    void *out;  /* may be `in` when both dtypes have one size: read, then write, per index */
} cast_job;

#define CAST_LOOP(S, D) cast_##S##_to_##D

#define DEFINE_CAST_WITH(S, D, KIND)                                                       \
    static void CAST_LOOP(S, D)(void *arg, int64_t begin, int64_t end) {                   \
        const cast_job *job = arg;                                                         \
        const CTYPE_##S *in = job->in;                                                     \
        CTYPE_##D *out = job->out;                                                         \
        for (int64_t i = begin; i < end; i++) {                                            \
            out[i] = STORE_##KIND##_##D(LOAD_##S(in[i]));                                  \
        }                                                                                  \
    }
#define DEFINE_CAST_EXPANDED(S, D, KIND) DEFINE_CAST_WITH(S, D, KIND)
#define DEFINE_CAST(S, D) DEFINE_CAST_EXPANDED(S, D, KIND_##S)

/* Targets in ge_dtype order (GE_FLOAT32 = 0 ... GE_UINT64 = 12). */
#define DEFINE_CASTS_FROM(S)                                                               \
    DEFINE_CAST(S, f32) DEFINE_CAST(S, f64) DEFINE_CAST(S, f16) DEFINE_CAST(S, bf16)       \
    DEFINE_CAST(S, i8) DEFINE_CAST(S, i16) DEFINE_CAST(S, i32) DEFINE_CAST(S, i64)         \
    DEFINE_CAST(S, u8) DEFINE_CAST(S, bool) DEFINE_CAST(S, u16) DEFINE_CAST(S, u32)        \
    DEFINE_CAST(S, u64)
#define CAST_ROW(S)                                                                        \
    {CAST_LOOP(S, f32), CAST_LOOP(S, f64), CAST_LOOP(S, f16), CAST_LOOP(S, bf16),          \
     CAST_LOOP(S, i8), CAST_LOOP(S, i16), CAST_LOOP(S, i32), CAST_LOOP(S, i64),            \
     CAST_LOOP(S, u8), CAST_LOOP(S, bool), CAST_LOOP(S, u16), CAST_LOOP(S, u32),           \
     CAST_LOOP(S, u64)}

DEFINE_CASTS_FROM(f32)
DEFINE_CASTS_FROM(f64)
DEFINE_CASTS_FROM(f16)
DEFINE_CASTS_FROM(bf16)
DEFINE_CASTS_FROM(i8)
DEFINE_CASTS_FROM(i16)
DEFINE_CASTS_FROM(i32)
DEFINE_CASTS_FROM(i64)
DEFINE_CASTS_FROM(u8)
DEFINE_CASTS_FROM(bool)
DEFINE_CASTS_FROM(u16)
DEFINE_CASTS_FROM(u32)
DEFINE_CASTS_FROM(u64)

/* cast_loops[source][target], indexed by ge_dtype; NULL where a dtype has no C loops. */
static const ge_range_fn cast_loops[GE_NUM_DTYPES][GE_NUM_DTYPES] = {
    [GE_FLOAT32] = CAST_ROW(f32), [GE_FLOAT64] = CAST_ROW(f64), [GE_FLOAT16] = CAST_ROW(f16),
    [GE_BFLOAT16] = CAST_ROW(bf16), [GE_INT8] = CAST_ROW(i8), [GE_INT16] = CAST_ROW(i16),
    [GE_INT32] = CAST_ROW(i32), [GE_INT64] = CAST_ROW(i64), [GE_UINT8] = CAST_ROW(u8),
    [GE_BOOL] = CAST_ROW(bool), [GE_UINT16] = CAST_ROW(u16), [GE_UINT32] = CAST_ROW(u32),
    [GE_UINT64] = CAST_ROW(u64),
};

/* float32 <-> bfloat16 again, compiled for the CPU's vectors (NN_VECTORIZED): the
 * `channels_last` pass rounds activations into and out of its bf16 Conv chains with these
 * Casts (ResNet-18's 64 x 56 x 56 one: 96 us through the plain loop). The same rounding
 * as float_to_bfloat16's, written branch-free. */
NN_VECTORIZED static void cast_f32_to_bf16_wide(void *arg, int64_t begin, int64_t end) {
    const cast_job *job = arg;
    const uint32_t *in = job->in;
    uint16_t *out = job->out;
    for (int64_t i = begin; i < end; i++) {
        const uint32_t bits = in[i];
        const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
        const uint32_t quiet_nan = (bits >> 16) | 0x0040u;
        out[i] = (uint16_t)((bits & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
    }
}

NN_VECTORIZED static void cast_bf16_to_f32_wide(void *arg, int64_t begin, int64_t end) {
    const cast_job *job = arg;
    const uint16_t *in = job->in;
    uint32_t *out = job->out;
    for (int64_t i = begin; i < end; i++) {
        out[i] = (uint32_t)in[i] << 16;
    }
}

/* -- the kernel ----------------------------------------------------------------------------- */

/* Input 0 converted to output 0's dtype; a second input (CastLike's target_type) only
 * names that dtype and is not read. */
GE_KERNEL(ge_cast) {
    if (n_inputs < 1 || n_inputs > 2 || n_outputs != 1) {
        return ctx->set_error(ctx, "ge_cast takes 1 or 2 inputs and 1 output, got %d and %d",
                              n_inputs, n_outputs);
    }
    const ge_tensor *x = &inputs[0], *y = &outputs[0];
    if (x->data == NULL) {
        return ctx->set_error(ctx, "ge_cast: input 0 is omitted");
    }
    if (ge_dtype_itemsize(x->dtype) == 0 || ge_dtype_itemsize(y->dtype) == 0) {
        return ctx->set_error(ctx, "ge_cast: unknown dtype code (input 0: %d, output 0: %d)",
                              x->dtype, y->dtype);
    }
    if (x->numel != y->numel) {
        return ctx->set_error(ctx, "ge_cast: input 0 has %lld elements, output 0 has %lld; "
                              "they must be equal", (long long)x->numel, (long long)y->numel);
    }
    if (attrs_size != 0) {
        return ctx->set_error(ctx, "ge_cast: attribute blob has %zu bytes, expected none",
                              attrs_size);
    }
    if (x->numel == 0) {
        return 0;
    }
    if (x->dtype == y->dtype && x->dtype != GE_BOOL) {
        /* a no-op Cast; bool still goes through the loop, which makes every value 0 or 1 */
        if (y->data != x->data) {
            memmove(y->data, x->data, ge_tensor_nbytes(x));
        }
        return 0;
    }
    ge_range_fn loop = cast_loops[x->dtype][y->dtype];
    if (x->dtype == GE_FLOAT32 && y->dtype == GE_BFLOAT16) {
        loop = cast_f32_to_bf16_wide;
    } else if (x->dtype == GE_BFLOAT16 && y->dtype == GE_FLOAT32) {
        loop = cast_bf16_to_f32_wide;
    }
    if (loop == NULL) {
        return ctx->set_error(ctx, "ge_cast: no C conversion from %s to %s (Cast's reference "
                              "converts those)", ge_dtype_name(x->dtype), ge_dtype_name(y->dtype));
    }
    cast_job job = {x->data, y->data};
    if (x->numel <= CAST_GRAIN) {
        loop(&job, 0, x->numel);
    } else {
        ctx->parallel_for(ctx, x->numel, CAST_GRAIN, loop, &job);
    }
    return 0;
}
