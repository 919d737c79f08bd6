/* ge_sgemm: a runtime-loaded BLAS, or a portable fallback loop (see blas.h). */
#include "blas.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>

/* cblas enumerations (cblas.h), which the loaded library expects. */
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

/* scipy-openblas32 is built with 32-bit BLAS integers. */
typedef void (*cblas_sgemm_fn)(int order, int trans_a, int trans_b, int m, int n, int k,
                               float alpha, const float *a, int lda, const float *b, int ldb,
                               float beta, float *c, int ldc);
typedef void (*set_num_threads_fn)(int threads);

/* Stored as data pointers so that C11 atomics apply; written once per load. */
static _Atomic(void *) loaded_sgemm;
static _Atomic(void *) loaded_set_num_threads;

int ge_blas_load(const char *path, char *error, size_t error_size) {
    void *library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        const char *why = dlerror();
        snprintf(error, error_size, "cannot load BLAS %s: %s", path, why ? why : "unknown error");
        return -1;
    }
    void *sgemm = dlsym(library, "scipy_cblas_sgemm");
    if (sgemm == NULL) {
        snprintf(error, error_size, "BLAS %s has no symbol scipy_cblas_sgemm", path);
        dlclose(library);
        return -1;
    }
    /* Never dlclose a loaded BLAS: a kernel may be inside it on another thread. */
    atomic_store(&loaded_set_num_threads, dlsym(library, "scipy_openblas_set_num_threads"));
    atomic_store(&loaded_sgemm, sgemm);
    return 0;
}

int ge_blas_available(void) {
    return atomic_load_explicit(&loaded_sgemm, memory_order_acquire) != NULL;
}

void ge_blas_set_num_threads(int threads) {
    void *fn = atomic_load(&loaded_set_num_threads);
    if (fn != NULL && threads >= 1) {
        ((set_num_threads_fn)fn)(threads);
    }
}

static int fits_blas_int(int64_t value) {
    return value >= 0 && value <= INT_MAX;
}

/* The fallback: row by row, streaming rows of op(B), so the inner loop is contiguous
 * whenever B is not transposed. */
static void portable_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                           float alpha, const float *a, int64_t lda, const float *b,
                           int64_t ldb, float beta, float *c, int64_t ldc) {
    for (int64_t i = 0; i < m; i++) {
        float *c_row = c + i * ldc;
        for (int64_t j = 0; j < n; j++) {
            c_row[j] = beta == 0.0f ? 0.0f : beta * c_row[j];
        }
        for (int64_t p = 0; p < k; p++) {
            float a_ip = alpha * (trans_a ? a[p * lda + i] : a[i * lda + p]);
            if (trans_b) {
                for (int64_t j = 0; j < n; j++) {
                    c_row[j] += a_ip * b[j * ldb + p];
                }
            } else {
                const float *b_row = b + p * ldb;
                for (int64_t j = 0; j < n; j++) {
                    c_row[j] += a_ip * b_row[j];
                }
            }
        }
    }
}

void ge_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
              float *c, int64_t ldc) {
    if (m <= 0 || n <= 0) {
        return;
    }
    void *sgemm = atomic_load_explicit(&loaded_sgemm, memory_order_acquire);
    /* k == 0 goes to the loop: a BLAS rejects the leading dimensions 0 it then gets. */
    if (sgemm != NULL && k > 0 && fits_blas_int(m) && fits_blas_int(n) && fits_blas_int(k)
        && fits_blas_int(lda) && fits_blas_int(ldb) && fits_blas_int(ldc)) {
        ((cblas_sgemm_fn)sgemm)(CBLAS_ROW_MAJOR, trans_a ? CBLAS_TRANS : CBLAS_NO_TRANS,
                                trans_b ? CBLAS_TRANS : CBLAS_NO_TRANS, (int)m, (int)n, (int)k,
                                alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
        return;
    }
    portable_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
