/*
 * Elementwise kernels with two or more inputs (elementwise.c): arithmetic, comparison,
 * logic, Where, BitShift, and the variadic Sum, Mean, Max and Min; and the broadcast
 * binary machinery PRelu (activation_prelu.c) shares.
 *
 * Broadcasting is resolved at compile time by ge_hub/kernels/elementwise.py, which packs
 * this blob (int64 values, native byte order):
 *
 *     n_operands, ndim, shape[ndim], strides[n_operands][ndim], extra...
 *
 * `shape` is the output's shape with size-1 dims dropped and adjacent dims merged
 * wherever every operand allows it (ndim >= 1; a scalar output has shape [1]).
 * `strides[i]` are operand i's strides, in elements, over that shape: 0 on a broadcast
 * dim, and 0 or 1 on the last dim. `extra` holds op-specific ints: Mod's fmod flag,
 * BitShift's direction (0: left, 1: right). Not takes no blob.
 */
#ifndef GE_HUB_ELEMENTWISE_H
#define GE_HUB_ELEMENTWISE_H

#include "kernels.h"

/* -- broadcast binary kernels, for other families too (PRelu: activation_prelu.c) ------ */

/* Elements below which a parallel loop of a cheap op costs more than it saves. */
#define GE_EW_GRAIN_CHEAP 32768

/* One row of a binary op: n outputs; returns non-zero if some element failed. */
typedef int (*ge_ew_loop2)(void *out, const void *a, const void *b, int64_t n);

/* The four loops of a binary op, indexed by (a fixed) << 1 | (b fixed). */
#define GE_EW_BINARY_LOOPS(NAME, TA, TB, TO, EXPR)                                        \
    static int NAME##_vv(void *out_, const void *a_, const void *b_, int64_t n) {         \
        TO *out = out_;                                                                   \
        const TA *a = a_;                                                                 \
        const TB *b = b_;                                                                 \
        for (int64_t i = 0; i < n; i++) {                                                 \
            TA x = a[i];                                                                  \
            TB y = b[i];                                                                  \
            out[i] = (EXPR);                                                              \
        }                                                                                 \
        return 0;                                                                         \
    }                                                                                     \
    static int NAME##_vs(void *out_, const void *a_, const void *b_, int64_t n) {         \
        TO *out = out_;                                                                   \
        const TA *a = a_;                                                                 \
        const TB y = *(const TB *)b_;                                                     \
        for (int64_t i = 0; i < n; i++) {                                                 \
            TA x = a[i];                                                                  \
            out[i] = (EXPR);                                                              \
        }                                                                                 \
        return 0;                                                                         \
    }                                                                                     \
    static int NAME##_sv(void *out_, const void *a_, const void *b_, int64_t n) {         \
        TO *out = out_;                                                                   \
        const TA x = *(const TA *)a_;                                                     \
        const TB *b = b_;                                                                 \
        for (int64_t i = 0; i < n; i++) {                                                 \
            TB y = b[i];                                                                  \
            out[i] = (EXPR);                                                              \
        }                                                                                 \
        return 0;                                                                         \
    }                                                                                     \
    static int NAME##_ss(void *out_, const void *a_, const void *b_, int64_t n) {         \
        TO *out = out_;                                                                   \
        const TA x = *(const TA *)a_;                                                     \
        const TB y = *(const TB *)b_;                                                     \
        const TO value = (EXPR);                                                          \
        for (int64_t i = 0; i < n; i++) {                                                 \
            out[i] = value;                                                               \
        }                                                                                 \
        return 0;                                                                         \
    }                                                                                     \
    __attribute__((unused)) static const ge_ew_loop2 NAME##_loops[4] = {                  \
        NAME##_vv, NAME##_vs, NAME##_sv, NAME##_ss};

/* A binary op: its dtypes, parallel grain, loops, and what a failing row means. */
typedef struct {
    const char *op;
    int32_t a_dtype, b_dtype, out_dtype;
    int64_t grain;
    const ge_ew_loop2 *loops;
    const char *failure;  /* what a failing row means, for the error message */
} ge_ew_binary;

/* Runs `op` over the broadcast layout in the blob (the layout above, no extra ints),
 * checking the blob against the tensors first; a kernel's whole body. */
int ge_ew_binary_kernel(ge_context *ctx, const char *name, const ge_ew_binary *op,
                        const ge_tensor *inputs, int32_t n_inputs, const ge_tensor *outputs,
                        int32_t n_outputs, const void *attrs, size_t attrs_size);

/* The elementwise family's kernels, each named once: expanded below into prototypes and in
 * registry.c into the table of built-in kernels (tests/test_kernel_list.py checks it
 * against the Python kernel specs). */
#define GE_ELEMENTWISE_KERNELS(X)                                         \
    /* Binary arithmetic, one per dtype; Mod reads fmod from the blob. */ \
    X(ge_add_f32)                                                         \
    X(ge_add_f64)                                                         \
    X(ge_add_i32)                                                         \
    X(ge_add_i64)                                                         \
    X(ge_sub_f32)                                                         \
    X(ge_sub_f64)                                                         \
    X(ge_sub_i32)                                                         \
    X(ge_sub_i64)                                                         \
    X(ge_mul_f32)                                                         \
    X(ge_mul_f64)                                                         \
    X(ge_mul_i32)                                                         \
    X(ge_mul_i64)                                                         \
    X(ge_div_f32)                                                         \
    X(ge_div_f64)                                                         \
    X(ge_div_i32)                                                         \
    X(ge_div_i64)                                                         \
    X(ge_mod_f32)                                                         \
    X(ge_mod_i32)                                                         \
    X(ge_mod_i64)                                                         \
    X(ge_pow_f32_f32)                                                     \
    X(ge_pow_f32_i32)                                                     \
    X(ge_pow_f32_i64)                                                     \
    X(ge_bitshift_u8)                                                     \
    /* Variadic: any number of inputs. */                                 \
    X(ge_max_f32)                                                         \
    X(ge_max_i32)                                                         \
    X(ge_max_i64)                                                         \
    X(ge_min_f32)                                                         \
    X(ge_min_i32)                                                         \
    X(ge_min_i64)                                                         \
    X(ge_sum_f32)                                                         \
    X(ge_mean_f32)                                                        \
    /* Comparisons: bool output. */                                       \
    X(ge_equal_f32)                                                       \
    X(ge_equal_f64)                                                       \
    X(ge_equal_i32)                                                       \
    X(ge_equal_i64)                                                       \
    X(ge_equal_bool)                                                      \
    X(ge_less_f32)                                                        \
    X(ge_less_f64)                                                        \
    X(ge_less_i32)                                                        \
    X(ge_less_i64)                                                        \
    X(ge_less_equal_f32)                                                  \
    X(ge_less_equal_f64)                                                  \
    X(ge_less_equal_i32)                                                  \
    X(ge_less_equal_i64)                                                  \
    X(ge_greater_f32)                                                     \
    X(ge_greater_f64)                                                     \
    X(ge_greater_i32)                                                     \
    X(ge_greater_i64)                                                     \
    X(ge_greater_equal_f32)                                               \
    X(ge_greater_equal_f64)                                               \
    X(ge_greater_equal_i32)                                               \
    X(ge_greater_equal_i64)                                               \
    /* Logic on bool. */                                                  \
    X(ge_and_bool)                                                        \
    X(ge_or_bool)                                                         \
    X(ge_xor_bool)                                                        \
    X(ge_not_bool)                                                        \
    /* Where: bool condition, values of any dtype (copied by width). */   \
    X(ge_where)                                                           \
    /* ge_hub.FusedElementwise: a program of float32 ops, per tile. */    \
    X(ge_elementwise_fused_f32)

GE_ELEMENTWISE_KERNELS(GE_DECLARE_KERNEL)

#endif /* GE_HUB_ELEMENTWISE_H */
