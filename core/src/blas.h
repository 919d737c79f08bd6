/*
 * Single-precision GEMM for the MatMul, Gemm and Conv kernels.
 *
 * The BLAS is found at run time, not linked: ge_hub/_blas.py locates the shared library
 * of the `scipy-openblas32` wheel and calls ge_blas_load(), which dlopen()s it and looks
 * up `scipy_cblas_sgemm`. Until then (or when no BLAS is installed) ge_sgemm runs a
 * portable C loop: correct, only slower, and ge_blas_available() says which is in use.
 */
#ifndef GE_HUB_BLAS_H
#define GE_HUB_BLAS_H

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

/* dlopen()s a BLAS exporting scipy_cblas_sgemm; 0 on success, else -1 with a message in
 * `error`. The library stays loaded for the life of the process. */
int ge_blas_load(const char *path, char *error, size_t error_size);

/* Threads the loaded BLAS may use for one call (no effect without one). */
void ge_blas_set_num_threads(int threads);

#endif /* GE_HUB_BLAS_H */
