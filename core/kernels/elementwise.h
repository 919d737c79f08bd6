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

/* Binary arithmetic, one per dtype; Mod reads fmod from the blob. */
GE_KERNEL(ge_add_f32);
GE_KERNEL(ge_add_i32);
GE_KERNEL(ge_add_i64);
GE_KERNEL(ge_sub_f32);
GE_KERNEL(ge_sub_i32);
GE_KERNEL(ge_sub_i64);
GE_KERNEL(ge_mul_f32);
GE_KERNEL(ge_mul_i32);
GE_KERNEL(ge_mul_i64);
GE_KERNEL(ge_div_f32);
GE_KERNEL(ge_div_i32);
GE_KERNEL(ge_div_i64);
GE_KERNEL(ge_mod_f32);
GE_KERNEL(ge_mod_i32);
GE_KERNEL(ge_mod_i64);
GE_KERNEL(ge_pow_f32_f32);
GE_KERNEL(ge_pow_f32_i32);
GE_KERNEL(ge_pow_f32_i64);
GE_KERNEL(ge_prelu_f32);
GE_KERNEL(ge_prelu_i32);
GE_KERNEL(ge_prelu_i64);
GE_KERNEL(ge_bitshift_u8);

/* Variadic: any number of inputs. */
GE_KERNEL(ge_max_f32);
GE_KERNEL(ge_max_i32);
GE_KERNEL(ge_max_i64);
GE_KERNEL(ge_min_f32);
GE_KERNEL(ge_min_i32);
GE_KERNEL(ge_min_i64);
GE_KERNEL(ge_sum_f32);
GE_KERNEL(ge_mean_f32);

/* Comparisons: bool output. */
GE_KERNEL(ge_equal_f32);
GE_KERNEL(ge_equal_i32);
GE_KERNEL(ge_equal_i64);
GE_KERNEL(ge_equal_bool);
GE_KERNEL(ge_less_f32);
GE_KERNEL(ge_less_i32);
GE_KERNEL(ge_less_i64);
GE_KERNEL(ge_less_equal_f32);
GE_KERNEL(ge_less_equal_i32);
GE_KERNEL(ge_less_equal_i64);
GE_KERNEL(ge_greater_f32);
GE_KERNEL(ge_greater_i32);
GE_KERNEL(ge_greater_i64);
GE_KERNEL(ge_greater_equal_f32);
GE_KERNEL(ge_greater_equal_i32);
GE_KERNEL(ge_greater_equal_i64);

/* Logic on bool. */
GE_KERNEL(ge_and_bool);
GE_KERNEL(ge_or_bool);
GE_KERNEL(ge_xor_bool);
GE_KERNEL(ge_not_bool);

/* Where: bool condition, values of any dtype (copied by width). */
GE_KERNEL(ge_where);

#endif /* GE_HUB_ELEMENTWISE_H */
