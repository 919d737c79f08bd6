/*
 * Kernels that exist to exercise the executor in its tests, not to run models.
 *
 * ge_test_add_f32 adds two float32 tensors of one shape, splitting the work over the
 * thread pool above a grain, and allows its output to be one of its inputs (in place).
 * ge_test_matmul_f32 multiplies two float32 matrices through ge_sgemm.
 */
#include "kernels.h"

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

GE_KERNEL(ge_test_matmul_f32) {
    if (n_inputs != 2 || n_outputs != 1) {
        return ctx->set_error(ctx, "ge_test_matmul_f32 takes 2 inputs and 1 output, got %d "
                              "and %d", n_inputs, n_outputs);
    }
    if (check_f32(ctx, "ge_test_matmul_f32", "input", 0, &inputs[0])
        || check_f32(ctx, "ge_test_matmul_f32", "input", 1, &inputs[1])
        || check_f32(ctx, "ge_test_matmul_f32", "output", 0, &outputs[0])) {
        return -1;
    }
    const ge_tensor *a = &inputs[0], *b = &inputs[1], *c = &outputs[0];
    if (a->ndim != 2 || b->ndim != 2 || c->ndim != 2 || a->shape[1] != b->shape[0]
        || c->shape[0] != a->shape[0] || c->shape[1] != b->shape[1]) {
        return ctx->set_error(ctx, "ge_test_matmul_f32: expects [m, k] @ [k, n] -> [m, n]");
    }
    int64_t m = a->shape[0], k = a->shape[1], n = b->shape[1];
    ge_sgemm(0, 0, m, n, k, 1.0f, a->data, k, b->data, n, 0.0f, c->data, n);
    return 0;
}
