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

#include "ge_hub/internal/blas.h"  /* ge_sgemm, ge_blas_available: what kernels call */

/* dlopen()s a BLAS exporting scipy_cblas_sgemm; 0 on success, else -1 with a message in
 * `error`. The library stays loaded for the life of the process. */
int ge_blas_load(const char *path, char *error, size_t error_size);

/* Threads the loaded BLAS may use for one call (no effect without one). */
void ge_blas_set_num_threads(int threads);

#endif /* GE_HUB_BLAS_H */
