/*
 * Internal declarations shared by the built-in kernels: every kernel function, the
 * table that names them (registry.c), and the helpers kernels may call (ge_sgemm).
 *
 * A kernel family adds its functions here, grouped under a comment, and one line per
 * kernel to the table in registry.c; ge_hub._core.builtin_kernels() then exposes them by
 * name to the Python side, which registers each as a CKernel with that symbol.
 */
#ifndef GE_HUB_KERNELS_H
#define GE_HUB_KERNELS_H

#include "ge_hub/kernel.h"
#include "../src/blas.h"

/* The signature every kernel shares, spelled out once for declarations. */
#define GE_KERNEL(name)                                                              \
    int name(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,              \
             const ge_tensor *outputs, int32_t n_outputs, const void *attrs,          \
             size_t attrs_size)

typedef struct {
    const char *name;
    ge_kernel_fn fn;
} ge_builtin_kernel;

/* Every built-in kernel, ending with {NULL, NULL}. */
extern const ge_builtin_kernel ge_builtin_kernels[];

/* Bytes of a tensor's data. */
static inline size_t ge_tensor_nbytes(const ge_tensor *tensor) {
    return (size_t)tensor->numel * ge_dtype_itemsize(tensor->dtype);
}

/* -- copy.c ---------------------------------------------------------------------------- */
GE_KERNEL(ge_copy);

/* -- test_kernels.c: small kernels that exercise the executor in tests ----------------- */
GE_KERNEL(ge_test_add_f32);
GE_KERNEL(ge_test_matmul_f32);

#endif /* GE_HUB_KERNELS_H */
