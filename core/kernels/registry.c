/*
 * The table of built-in kernels: name -> function, read by ge_hub._core.builtin_kernels().
 *
 * One line per kernel, grouped by family, so that families added in parallel merge
 * cleanly. The name is the symbol a CKernel registration gives.
 */
#include <stddef.h>

#include "elementwise.h"
#include "kernels.h"
#include "nn.h"

const ge_builtin_kernel ge_builtin_kernels[] = {
    /* copy.c */
    {"ge_copy", ge_copy},

    /* test_kernels.c */
    {"ge_test_add_f32", ge_test_add_f32},
    {"ge_test_matmul_f32", ge_test_matmul_f32},

    /* elementwise.c: binary and variadic elementwise ops, comparisons, logic, Where */
    {"ge_add_f32", ge_add_f32},
    {"ge_add_i32", ge_add_i32},
    {"ge_add_i64", ge_add_i64},
    {"ge_sub_f32", ge_sub_f32},
    {"ge_sub_i32", ge_sub_i32},
    {"ge_sub_i64", ge_sub_i64},
    {"ge_mul_f32", ge_mul_f32},
    {"ge_mul_i32", ge_mul_i32},
    {"ge_mul_i64", ge_mul_i64},
    {"ge_div_f32", ge_div_f32},
    {"ge_div_i32", ge_div_i32},
    {"ge_div_i64", ge_div_i64},
    {"ge_mod_f32", ge_mod_f32},
    {"ge_mod_i32", ge_mod_i32},
    {"ge_mod_i64", ge_mod_i64},
    {"ge_pow_f32_f32", ge_pow_f32_f32},
    {"ge_pow_f32_i32", ge_pow_f32_i32},
    {"ge_pow_f32_i64", ge_pow_f32_i64},
    {"ge_prelu_f32", ge_prelu_f32},
    {"ge_prelu_i32", ge_prelu_i32},
    {"ge_prelu_i64", ge_prelu_i64},
    {"ge_bitshift_u8", ge_bitshift_u8},
    {"ge_max_f32", ge_max_f32},
    {"ge_max_i32", ge_max_i32},
    {"ge_max_i64", ge_max_i64},
    {"ge_min_f32", ge_min_f32},
    {"ge_min_i32", ge_min_i32},
    {"ge_min_i64", ge_min_i64},
    {"ge_sum_f32", ge_sum_f32},
    {"ge_mean_f32", ge_mean_f32},
    {"ge_equal_f32", ge_equal_f32},
    {"ge_equal_i32", ge_equal_i32},
    {"ge_equal_i64", ge_equal_i64},
    {"ge_equal_bool", ge_equal_bool},
    {"ge_less_f32", ge_less_f32},
    {"ge_less_i32", ge_less_i32},
    {"ge_less_i64", ge_less_i64},
    {"ge_less_equal_f32", ge_less_equal_f32},
    {"ge_less_equal_i32", ge_less_equal_i32},
    {"ge_less_equal_i64", ge_less_equal_i64},
    {"ge_greater_f32", ge_greater_f32},
    {"ge_greater_i32", ge_greater_i32},
    {"ge_greater_i64", ge_greater_i64},
    {"ge_greater_equal_f32", ge_greater_equal_f32},
    {"ge_greater_equal_i32", ge_greater_equal_i32},
    {"ge_greater_equal_i64", ge_greater_equal_i64},
    {"ge_and_bool", ge_and_bool},
    {"ge_or_bool", ge_or_bool},
    {"ge_xor_bool", ge_xor_bool},
    {"ge_not_bool", ge_not_bool},
    {"ge_where", ge_where},

    /* nn_*.c: dense and NN ops (MatMul, Gemm, Conv, pools, normalizations, Softmax,
     * Resize); Python side ge_hub/kernels/nn.py */
    {"ge_nn_matmul_f32", ge_nn_matmul_f32},
    {"ge_nn_gemm_f32", ge_nn_gemm_f32},
    {"ge_nn_conv_f32", ge_nn_conv_f32},
    {"ge_nn_conv_transpose_f32", ge_nn_conv_transpose_f32},
    {"ge_nn_max_pool_f32", ge_nn_max_pool_f32},
    {"ge_nn_average_pool_f32", ge_nn_average_pool_f32},
    {"ge_nn_global_average_pool_f32", ge_nn_global_average_pool_f32},
    {"ge_nn_global_max_pool_f32", ge_nn_global_max_pool_f32},
    {"ge_nn_batch_norm_f32", ge_nn_batch_norm_f32},
    {"ge_nn_layer_norm_f32", ge_nn_layer_norm_f32},
    {"ge_nn_instance_norm_f32", ge_nn_instance_norm_f32},
    {"ge_nn_softmax_f32", ge_nn_softmax_f32},
    {"ge_nn_log_softmax_f32", ge_nn_log_softmax_f32},
    {"ge_nn_resize_f32", ge_nn_resize_f32},

    {NULL, NULL},
};
