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

/* The bf16 products' variants (core/kernels/nn_gemm_bf16.c): AMX tiles (AMX-BF16, with the
 * process's permission for the tile state), AVX512-BF16 (vdpbf16ps), or plain C. */
typedef enum { GE_BF16_GENERIC = 0, GE_BF16_AVX512 = 1, GE_BF16_AMX = 2 } ge_bf16_level;

/* The best bf16 variant this CPU runs, lowered to "generic" or "avx512bf16" when `env_var`
 * (may be NULL) names one. AMX needs the kernel's permission for the tile state
 * (arch_prctl ARCH_REQ_XCOMP_PERM), asked here; refused, or GE_HUB_AMX_DENY=1 (which
 * simulates a refusal for tests), the answer falls back to AVX512-BF16 or generic.
 * Callers keep the answer (pthread_once). */
ge_bf16_level ge_simd_choose_bf16(const char *env_var);

#endif /* GE_HUB_INTERNAL_SIMD_H */
