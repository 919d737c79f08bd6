/*
 * The activation family (activation.c: unary math, activations, rounding, Clip, IsNaN,
 * IsInf; activation_cast.c: Cast and CastLike; activation_copy.c: Identity): one input
 * element makes one
 * output element, so these kernels never look at shapes, only at element counts.
 *
 * Their attribute blobs, packed by ge_hub/kernels/activation.py, are a fixed number of int64
 * values followed by a fixed number of float64 values (native byte order), the same for
 * every node a kernel runs:
 *
 *     LeakyRelu, ThresholdedRelu, Elu, Celu:   alpha
 *     Selu:                                    alpha, gamma
 *     HardSigmoid:                             alpha, beta
 *     IsInf:                                   [int] detect_negative, detect_positive
 *     everything else, Clip and Cast included: nothing
 *
 * Clip reads its optional min and max from their one-element tensors at run time (they
 * may be graph inputs); an omitted bound does not clip. Cast (and CastLike, whose second
 * input only names the target dtype) converts between any two of the thirteen ge_dtypes
 * that are not storage-only (GE_FLOAT32 ... GE_UINT64), reading both from the tensors.
 *
 * Every kernel here allows its output to share memory with its input when both have
 * the same size: each element is read before the element at the same index is written.
 */
#ifndef GE_HUB_ACTIVATION_H
#define GE_HUB_ACTIVATION_H

#include "kernels.h"

/* Name of a ge_dtype code, for error messages. */
static inline const char *ge_dtype_name(int32_t dtype) {
    static const char *const names[GE_NUM_DTYPES] = {
        "float32", "float64", "float16", "bfloat16", "int8",
        "int16", "int32", "int64", "uint8", "bool",
        "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
        "float8_e5m2fnuz", "float8_e8m0fnu", "int4", "uint4", "int2", "uint2",
        "float4_e2m1fn"};
    return (dtype >= 0 && dtype < GE_NUM_DTYPES) ? names[dtype] : "unknown dtype";
}

/* The activation family's kernels, each named once: expanded below into prototypes and in
 * registry.c into the table of built-in kernels (tests/test_kernel_list.py checks it
 * against the Python kernel specs). */
#define GE_ACTIVATION_KERNELS(X)                                                      \
    /* Sign, magnitude, rounding: float32, and int32/int64 where the op allows. */    \
    X(ge_neg_f32)  /* Neg */                                                          \
    X(ge_neg_i32)  /* Neg */                                                          \
    X(ge_neg_i64)  /* Neg */                                                          \
    X(ge_abs_f32)  /* Abs */                                                          \
    X(ge_abs_i32)  /* Abs */                                                          \
    X(ge_abs_i64)  /* Abs */                                                          \
    X(ge_sign_f32)                                                                    \
    X(ge_sign_i32)                                                                    \
    X(ge_sign_i64)                                                                    \
    X(ge_floor_f32)  /* Floor */                                                      \
    X(ge_ceil_f32)  /* Ceil */                                                        \
    X(ge_round_f32)                                                                   \
    /* Exponentials, logarithms, powers. */                                           \
    X(ge_exp_f32)  /* Exp */                                                          \
    X(ge_log_f32)  /* Log */                                                          \
    X(ge_sqrt_f32)  /* Sqrt */                                                        \
    X(ge_reciprocal_f32)  /* Reciprocal */                                            \
    X(ge_erf_f32)  /* Erf */                                                          \
    /* Trigonometric and hyperbolic. */                                               \
    X(ge_sin_f32)  /* Sin */                                                          \
    X(ge_cos_f32)  /* Cos */                                                          \
    X(ge_tan_f32)  /* Tan */                                                          \
    X(ge_asin_f32)  /* Asin */                                                        \
    X(ge_acos_f32)  /* Acos */                                                        \
    X(ge_atan_f32)  /* Atan */                                                        \
    X(ge_sinh_f32)  /* Sinh */                                                        \
    X(ge_cosh_f32)  /* Cosh */                                                        \
    X(ge_tanh_f32)                                                                    \
    X(ge_asinh_f32)  /* Asinh */                                                      \
    X(ge_acosh_f32)  /* Acosh */                                                      \
    X(ge_atanh_f32)  /* Atanh */                                                      \
    /* Activations. */                                                                \
    X(ge_relu_f32)  /* Relu */                                                        \
    X(ge_relu_i32)  /* Relu */                                                        \
    X(ge_relu_i64)  /* Relu */                                                        \
    X(ge_sigmoid_f32)  /* Sigmoid */                                                  \
    X(ge_leaky_relu_f32)                                                              \
    X(ge_thresholded_relu_f32)                                                        \
    X(ge_elu_f32)                                                                     \
    X(ge_selu_f32)                                                                    \
    X(ge_celu_f32)                                                                    \
    X(ge_gelu_f32)  /* approximate="none" */                                          \
    X(ge_gelu_tanh_f32)  /* approximate="tanh" */                                     \
    X(ge_softplus_f32)  /* Softplus */                                                \
    X(ge_softsign_f32)                                                                \
    X(ge_mish_f32)                                                                    \
    X(ge_hard_sigmoid_f32)                                                            \
    X(ge_hard_swish_f32)                                                              \
    /* Clip: input, optional min, optional max. */                                    \
    X(ge_clip_f32)                                                                    \
    X(ge_clip_i32)                                                                    \
    X(ge_clip_i64)                                                                    \
    /* Classification: bool output. */                                                \
    X(ge_isnan_f32)                                                                   \
    X(ge_isinf_f32)                                                                   \
    /* activation_prelu.c: PRelu, the slope broadcast (elementwise.h's machinery). */ \
    X(ge_prelu_f32)                                                                   \
    X(ge_prelu_i32)                                                                   \
    X(ge_prelu_i64)                                                                   \
    /* activation_cast.c: any ge_dtype to any ge_dtype. */                            \
    X(ge_cast)                                                                        \
    /* activation_copy.c: Identity (a byte copy, any dtype). */                       \
    X(ge_copy)

GE_ACTIVATION_KERNELS(GE_DECLARE_KERNEL)

#endif /* GE_HUB_ACTIVATION_H */
