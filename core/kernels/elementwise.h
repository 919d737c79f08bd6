/*
 * Elementwise kernels with two or more inputs (elementwise.c): arithmetic, comparison,
 * logic, Where, PRelu, BitShift, and the variadic Sum, Mean, Max and Min.
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

/* The elementwise family's kernels, each named once: expanded below into prototypes and in
 * registry.c into the table of built-in kernels (tests/test_kernel_list.py checks it
 * against the Python kernel specs). */
#define GE_ELEMENTWISE_KERNELS(X)                                         \
    /* Binary arithmetic, one per dtype; Mod reads fmod from the blob. */ \
    X(ge_add_f32)                                                         \
    X(ge_add_i32)                                                         \
    X(ge_add_i64)                                                         \
    X(ge_sub_f32)                                                         \
    X(ge_sub_i32)                                                         \
    X(ge_sub_i64)                                                         \
    X(ge_mul_f32)                                                         \
    X(ge_mul_i32)                                                         \
    X(ge_mul_i64)                                                         \
    X(ge_div_f32)                                                         \
    X(ge_div_i32)                                                         \
    X(ge_div_i64)                                                         \
    X(ge_mod_f32)                                                         \
    X(ge_mod_i32)                                                         \
    X(ge_mod_i64)                                                         \
    X(ge_pow_f32_f32)                                                     \
    X(ge_pow_f32_i32)                                                     \
    X(ge_pow_f32_i64)                                                     \
    X(ge_prelu_f32)                                                       \
    X(ge_prelu_i32)                                                       \
    X(ge_prelu_i64)                                                       \
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
    X(ge_equal_i32)                                                       \
    X(ge_equal_i64)                                                       \
    X(ge_equal_bool)                                                      \
    X(ge_less_f32)                                                        \
    X(ge_less_i32)                                                        \
    X(ge_less_i64)                                                        \
    X(ge_less_equal_f32)                                                  \
    X(ge_less_equal_i32)                                                  \
    X(ge_less_equal_i64)                                                  \
    X(ge_greater_f32)                                                     \
    X(ge_greater_i32)                                                     \
    X(ge_greater_i64)                                                     \
    X(ge_greater_equal_f32)                                               \
    X(ge_greater_equal_i32)                                               \
    X(ge_greater_equal_i64)                                               \
    /* Logic on bool. */                                                  \
    X(ge_and_bool)                                                        \
    X(ge_or_bool)                                                         \
    X(ge_xor_bool)                                                        \
    X(ge_not_bool)                                                        \
    /* Where: bool condition, values of any dtype (copied by width). */   \
    X(ge_where)

GE_ELEMENTWISE_KERNELS(GE_DECLARE_KERNEL)

#endif /* GE_HUB_ELEMENTWISE_H */
