/*
 * Single-precision GEMM for the built-in MatMul, Gemm and Conv kernels (core/src/blas.c).
 *
 * Internal to the core: not installed with the kernel ABI, since these symbols are hidden
 * inside ge_hub._core and a plugin's library cannot link them. The BLAS is found at run
 * time, not linked (core/src/blas.h: ge_blas_load); until one is loaded, ge_sgemm runs a
 * portable C loop: correct, only slower.
 */
#ifndef GE_HUB_INTERNAL_BLAS_H
#define GE_HUB_INTERNAL_BLAS_H

#include <stddef.h>
#include <stdint.h>

/*
 * C = alpha * op(A) @ op(B) + beta * C, all row-major (cblas_sgemm with CblasRowMajor):
 * op(A) is m x k (A is k x m when trans_a), op(B) is k x n (B is n x k when trans_b),
 * C is m x n; lda, ldb, ldc are row strides in elements. With beta == 0, C is written
 * without being read. Safe to call from several threads at once.
 */
void ge_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
              float *c, int64_t ldc);

/* 1 when ge_sgemm calls a loaded BLAS, 0 when it runs the portable loop. */
int ge_blas_available(void);

#endif /* GE_HUB_INTERNAL_BLAS_H */
