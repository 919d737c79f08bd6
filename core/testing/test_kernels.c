/*
 * Kernels that exist to exercise the executor in its tests, not to run models.
 *
 * Not part of ge_hub._core: tests/testing_kernels.py compiles this file at test time into
 * a small library against the public kernel ABI (ge_hub/kernel.h only), so the production
 * table of built-in kernels holds no test kernels.
 *
 * ge_test_add_f32 adds two float32 tensors of one shape, splitting the work over the
 * thread pool above a grain, and allows its output to be one of its inputs (in place).
 * (The executor's BLAS tests run the built-in MatMul kernel, ge_nn_matmul_f32.)
 */
#include "ge_hub/kernel.h"

#define GE_KERNEL(name)                                                              \
    int name(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,              \
             const ge_tensor *outputs, int32_t n_outputs, const void *attrs,          \
             size_t attrs_size)

const int32_t ge_kernel_abi_version = GE_KERNEL_ABI_VERSION;

/* Elements below which a parallel loop costs more than it saves. */
#define ADD_GRAIN 16384

typedef struct {
    const float *a;
    const float *b;
    float *out;  /* may be a or b: each element is read before it is written */
} add_args;

static void add_range(void *arg, int64_t begin, int64_t end) {
    const add_args *args = arg;
    for (int64_t i = begin; i < end; i++) {
        args->out[i] = args->a[i] + args->b[i];
    }
}

static int check_f32(ge_context *ctx, const char *kernel, const char *role, int index,
                     const ge_tensor *tensor) {
    if (tensor->data == NULL) {
        return ctx->set_error(ctx, "%s: %s %d is omitted", kernel, role, index);
    }
    if (tensor->dtype != GE_FLOAT32) {
        return ctx->set_error(ctx, "%s: %s %d has dtype code %d, expected float32 (%d)",
                              kernel, role, index, tensor->dtype, GE_FLOAT32);
    }
    return 0;
}

GE_KERNEL(ge_test_add_f32) {
    if (n_inputs != 2 || n_outputs != 1) {
        return ctx->set_error(ctx, "ge_test_add_f32 takes 2 inputs and 1 output, got %d and %d",
                              n_inputs, n_outputs);
    }
    if (check_f32(ctx, "ge_test_add_f32", "input", 0, &inputs[0])
        || check_f32(ctx, "ge_test_add_f32", "input", 1, &inputs[1])
        || check_f32(ctx, "ge_test_add_f32", "output", 0, &outputs[0])) {
        return -1;
    }
    int64_t n = outputs[0].numel;
    if (inputs[0].numel != n || inputs[1].numel != n) {
        return ctx->set_error(ctx, "ge_test_add_f32: inputs have %lld and %lld elements, "
                              "the output %lld; they must be equal",
                              (long long)inputs[0].numel, (long long)inputs[1].numel,
                              (long long)n);
    }
    add_args args = {inputs[0].data, inputs[1].data, outputs[0].data};
    ctx->parallel_for(ctx, n, ADD_GRAIN, add_range, &args);
    return 0;
}
