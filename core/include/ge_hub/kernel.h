/*
 * ge-hub kernel ABI: what a kernel sees, built-in or shipped by a plugin.
 *
 * A kernel is one C function of type ge_kernel_fn. The executor calls it once per
 * step of a compiled plan with descriptors of the step's input and output tensors
 * (contiguous, row-major, already allocated), the step's packed attribute blob, and a
 * context giving scratch memory, a thread pool and error reporting.
 *
 * The attribute blob is produced at compile time by the kernel's Python-side packer
 * (see ge_hub/kernels/); its layout is a contract between that packer and the kernel,
 * documented beside both. Most kernels take a sequence of int64 values followed by
 * float64 values, so that shapes, strides and axes are resolved once at compile time
 * and never in the run loop.
 *
 * An outside plugin compiles a shared library against this header, exports its
 * kernels and `ge_kernel_abi_version` (= GE_KERNEL_ABI_VERSION), and registers each
 * kernel from Python with its library path and symbol name:
 *
 *     const int32_t ge_kernel_abi_version = GE_KERNEL_ABI_VERSION;
 */
#ifndef GE_HUB_KERNEL_H
#define GE_HUB_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GE_KERNEL_ABI_VERSION 1
#define GE_MAX_RANK 8

/* Element types; the numbering is shared with ge_hub.plan.DTYPE_CODES. */
typedef enum {
    GE_FLOAT32 = 0,
    GE_FLOAT64 = 1,
    GE_FLOAT16 = 2,
    GE_BFLOAT16 = 3,
    GE_INT8 = 4,
    GE_INT16 = 5,
    GE_INT32 = 6,
    GE_INT64 = 7,
    GE_UINT8 = 8,
    GE_BOOL = 9,
    GE_UINT16 = 10,
    GE_UINT32 = 11,
    GE_UINT64 = 12,
    /* Storage types (the encodings of ml_dtypes and ONNX) that built-in kernels only move
     * as bytes; conversions run in Python (Cast's reference). 8-bit floats: */
    GE_FLOAT8_E4M3FN = 13,
    GE_FLOAT8_E4M3FNUZ = 14,
    GE_FLOAT8_E5M2 = 15,
    GE_FLOAT8_E5M2FNUZ = 16,
    GE_FLOAT8_E8M0FNU = 17,
    /* 4- and 2-bit integers and the 4-bit float, one element in the low bits of each byte
     * (ONNX files pack them; in memory they are never packed): */
    GE_INT4 = 18,
    GE_UINT4 = 19,
    GE_INT2 = 20,
    GE_UINT2 = 21,
    GE_FLOAT4_E2M1FN = 22,
} ge_dtype;

#define GE_NUM_DTYPES 23

/* Bytes per element of a ge_dtype; 0 for a code that is not one. */
static inline size_t ge_dtype_itemsize(int32_t dtype) {
    static const unsigned char sizes[GE_NUM_DTYPES] = {4, 8, 2, 2, 1, 2, 4, 8, 1, 1, 2, 4, 8,
                                                       1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    return (dtype >= 0 && dtype < GE_NUM_DTYPES) ? sizes[dtype] : 0;
}

/* A contiguous row-major tensor. `data` is NULL only for an omitted optional input (which
 * then has ndim 0 and numel 0); an empty tensor has a valid, non-NULL `data`. */
typedef struct {
    void *data;
    int32_t dtype;          /* a ge_dtype */
    int32_t ndim;
    const int64_t *shape;   /* ndim entries */
    int64_t numel;
} ge_tensor;

typedef struct ge_context ge_context;

/* A slice of a parallel loop: process items [begin, end). */
typedef void (*ge_range_fn)(void *arg, int64_t begin, int64_t end);

struct ge_context {
    /* Scratch memory reserved for this step (the packer asked for scratch_bytes). */
    void *scratch;
    size_t scratch_bytes;

    /* Run fn over [0, n) split into chunks of at least `grain` items on the executor's
     * thread pool; returns when every chunk is done. Runs inline for small n or when the
     * pool is busy with another run. */
    void (*parallel_for)(ge_context *ctx, int64_t n, int64_t grain, ge_range_fn fn, void *arg);

    /* Record an error message (printf-style); the kernel then returns non-zero. Returns
     * -1, so that `return ctx->set_error(ctx, ...);` does both. Safe to call from a
     * parallel_for chunk: the first message of a step is kept. */
    int (*set_error)(ge_context *ctx, const char *fmt, ...);

    void *executor_private;
};

/*
 * Kernels whose output size depends on data (NonZero, Compress, Unique,
 * NonMaxSuppression: core/kernels/select.c). Every tensor of a plan has a static shape,
 * so such a kernel is given each output at a bound shape, the largest it can produce for
 * its input shapes (NonZero of X: [rank, numel(X)]), plus one extra last output, an int64
 * tensor of shape [1]. The kernel writes each output contiguously, row-major, at its real
 * shape, in the leading elements of its buffer, and the real length n of the data-
 * dependent axis into that last output; the real shape of each output is its bound shape
 * with that axis set to n. The executor does not read n: such a step ends a segment of
 * a segmented plan (ge_hub/segments.py), which views the leading elements at the real
 * shape and plans the next segment for it. A kernel never writes past its bound: more
 * results than the bound is an error, not a wild write.
 *
 * A kernel: returns 0 on success; on failure calls ctx->set_error and returns non-zero.
 * It must not keep pointers to its tensors after it returns and must be safe to call
 * from several threads at once (different runs of the same plan).
 */
typedef int (*ge_kernel_fn)(ge_context *ctx,
                            const ge_tensor *inputs, int32_t n_inputs,
                            const ge_tensor *outputs, int32_t n_outputs,
                            const void *attrs, size_t attrs_size);

#ifdef __cplusplus
}
#endif

#endif /* GE_HUB_KERNEL_H */
