/* ge_simd_choose: the run-time choice of a kernel's SIMD variant (ge_hub/internal/simd.h). */
#define _GNU_SOURCE 1 /* syscall() */
#include "ge_hub/internal/simd.h"

#include <stdlib.h>
#include <string.h>

#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#define GE_ARCH_REQ_XCOMP_PERM 0x1023
#define GE_XFEATURE_XTILEDATA 18
#endif

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

/* Whether Linux lets this process use the AMX tile data (asked once per process; the
 * answer holds for all its threads). */
static int amx_permitted(void) {
    const char *deny = getenv("GE_HUB_AMX_DENY");
    if (deny != NULL && deny[0] != '\0' && strcmp(deny, "0") != 0) {
        return 0;
    }
#if defined(__linux__) && defined(__x86_64__)
    return syscall(SYS_arch_prctl, GE_ARCH_REQ_XCOMP_PERM, GE_XFEATURE_XTILEDATA) == 0;
#else
    return 0;
#endif
}

ge_bf16_level ge_simd_choose_bf16(const char *env_var) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (ge_simd_choose(NULL) != GE_SIMD_AVX512) {
        return GE_BF16_GENERIC;
    }
    const int has_bf16 = __builtin_cpu_supports("avx512bf16");
    const int has_amx = __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-bf16");
    const char *wanted = env_var != NULL ? getenv(env_var) : NULL;
    if (wanted != NULL && strcmp(wanted, "generic") == 0) {
        return GE_BF16_GENERIC;
    }
    const int want_avx512 = wanted != NULL && strcmp(wanted, "avx512bf16") == 0;
    if (has_amx && !want_avx512 && amx_permitted()) {
        return GE_BF16_AMX;
    }
    return has_bf16 ? GE_BF16_AVX512 : GE_BF16_GENERIC;
#else
    (void)env_var;
    return GE_BF16_GENERIC;
#endif
}
