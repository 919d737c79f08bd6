/*
 * Which SIMD variant a built-in kernel runs (core/src/simd.c). Internal to the core, like
 * blas.h beside it: not installed.
 *
 * Kernels with AVX-512, AVX2 and generic variants pick one at run time, never at build
 * time, so that one build runs on every x86-64 CPU. Tests force each variant through an
 * environment variable (GE_HUB_GEMM_KERNEL, GE_HUB_DEPTHWISE_KERNEL) that may name a lesser
 * variant than the CPU offers, never a greater one.
 */
#ifndef GE_HUB_INTERNAL_SIMD_H
#define GE_HUB_INTERNAL_SIMD_H

typedef enum { GE_SIMD_GENERIC = 0, GE_SIMD_AVX2 = 1, GE_SIMD_AVX512 = 2 } ge_simd_level;

/* The best variant this CPU runs (AVX-512 = AVX512F; AVX2 = AVX2 with FMA), lowered to
 * "generic" or "avx2" when `env_var` (may be NULL) names one the CPU runs; any other value
 * is ignored. Always GE_SIMD_GENERIC on other architectures. Reads the CPU and the
 * environment each call: callers keep the answer (pthread_once). */
ge_simd_level ge_simd_choose(const char *env_var);

#endif /* GE_HUB_INTERNAL_SIMD_H */
