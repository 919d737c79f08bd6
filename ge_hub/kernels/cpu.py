"""What this CPU offers the C core, read without the core: for the plan-time choices whose
best answer depends on it (the kernels layer plans below the executor that loads the core).

core/src/simd.c picks the bf16 micro-kernel at run time: AMX tiles where the CPU has
AVX-512, AMX-TILE and AMX-BF16, GE_HUB_BF16_KERNEL names no lesser variant,
GE_HUB_AMX_DENY is unset (or "0") and Linux grants the tile state; else AVX512-BF16 where
the CPU has it; else plain C. `bf16_micro_kernel` follows the same flags and variables.
Only the core can ask Linux, so where Linux refuses the tile state (kernels before 5.16) it
answers "amx" while the core runs AVX512-BF16: a plan then chose as for AMX, which changes
its speed there, never its results. tests/kernels/test_nn_bf16.py checks that the two
agree in each variant's process.
"""

from __future__ import annotations

import functools
import os
import platform


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux names them (/proc/cpuinfo); empty elsewhere."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


@functools.cache
def bf16_micro_kernel() -> str:
    """"amx", "avx512bf16" or "generic": the bf16 micro-kernel the core will run in this
    process (chosen once per process, as the core chooses)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return "generic"
    flags = cpu_flags()
    wanted = os.environ.get("GE_HUB_BF16_KERNEL")
    if "avx512f" not in flags or wanted == "generic":
        return "generic"
    denied = os.environ.get("GE_HUB_AMX_DENY", "") not in ("", "0")
    if {"amx_tile", "amx_bf16"} <= flags and wanted != "avx512bf16" and not denied:
        return "amx"
    return "avx512bf16" if "avx512_bf16" in flags else "generic"
