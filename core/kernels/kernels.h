/*
 * Internal declarations shared by the built-in kernels: the kernel signature, the
 * X-macro plumbing of the per-family kernel lists, the table that names every kernel
 * (registry.c), and the executor services built-in kernels may call (ge_sgemm,
 * ge_threadpool_size: headers under core/include/ge_hub/internal/).
 *
 * Each family header (activation.h, elementwise.h, shape.h, index.h, nn.h, conv.h,
 * pool.h, norm.h, resize.h, rnn.h, reduce.h) names its kernels once, in a list macro
 * GE_<FAMILY>_KERNELS(X); the header expands it with GE_DECLARE_KERNEL into prototypes
 * and registry.c expands it into the table that ge_hub._core.builtin_kernels() exposes
 * by name. A new kernel is one line in its family's list, and the Python spec that
 * registers it as a CKernel with that symbol (tests/test_kernel_list.py checks the two
 * agree).
 */
#ifndef GE_HUB_KERNELS_H
#define GE_HUB_KERNELS_H

#include "ge_hub/blob.h"
#include "ge_hub/internal/blas.h"
#include "ge_hub/internal/threadpool.h"
#include "ge_hub/kernel.h"

/* The signature every kernel shares, spelled out once for declarations. */
#define GE_KERNEL(name)                                                              \
    int name(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,              \
             const ge_tensor *outputs, int32_t n_outputs, const void *attrs,          \
             size_t attrs_size)

/* Expands one entry of a family's kernel list into its prototype. */
#define GE_DECLARE_KERNEL(name) GE_KERNEL(name);

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

#endif /* GE_HUB_KERNELS_H */
