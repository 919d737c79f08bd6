/*
 * The dense and NN kernels (nn_*.c), for the table in registry.c. Their Python side,
 * packers included, is ge_hub/kernels/nn.py.
 */
#ifndef GE_HUB_NN_H
#define GE_HUB_NN_H

#include "kernels.h"

/* nn_matmul.c */
GE_KERNEL(ge_nn_matmul_f32);
GE_KERNEL(ge_nn_gemm_f32);

/* nn_conv.c */
GE_KERNEL(ge_nn_conv_f32);
GE_KERNEL(ge_nn_conv_transpose_f32);

/* nn_pool.c */
GE_KERNEL(ge_nn_max_pool_f32);
GE_KERNEL(ge_nn_average_pool_f32);
GE_KERNEL(ge_nn_global_average_pool_f32);
GE_KERNEL(ge_nn_global_max_pool_f32);

/* nn_norm.c */
GE_KERNEL(ge_nn_batch_norm_f32);
GE_KERNEL(ge_nn_layer_norm_f32);
GE_KERNEL(ge_nn_instance_norm_f32);

/* nn_softmax.c */
GE_KERNEL(ge_nn_softmax_f32);
GE_KERNEL(ge_nn_log_softmax_f32);

/* nn_resize.c */
GE_KERNEL(ge_nn_resize_f32);

#endif /* GE_HUB_NN_H */
