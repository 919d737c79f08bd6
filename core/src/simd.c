/* ge_simd_choose: the run-time choice of a kernel's SIMD variant (ge_hub/internal/simd.h). */
#include "ge_hub/internal/simd.h"

#include <stdlib.h>
#include <string.h>

ge_simd_level ge_simd_choose(const char *env_var) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    const int has_avx512 = __builtin_cpu_supports("avx512f");
    const int has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const char *wanted = env_var != NULL ? getenv(env_var) : NULL;
    if (wanted != NULL && strcmp(wanted, "generic") == 0) {
        return GE_SIMD_GENERIC;
    }
    if (wanted != NULL && strcmp(wanted, "avx2") == 0 && has_avx2) {
        return GE_SIMD_AVX2;
    }
    if (has_avx512) {
        return GE_SIMD_AVX512;
    }
    if (has_avx2) {
        return GE_SIMD_AVX2;
    }
#else
    (void)env_var;
#endif
    return GE_SIMD_GENERIC;
}
