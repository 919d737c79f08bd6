"""The machine and software a benchmark ran on, recorded beside every figure."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version

PACKAGES = ("ge-hub", "ge-onnx", "numpy", "onnx", "onnxruntime", "openvino", "torch",
            "scipy-openblas32")
# The vector extensions that decide which kernels the engines pick.
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "neon", "asimd")
REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> list[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    present = set(line.split(":", 1)[1].split())
                    return [flag for flag in CPU_FLAGS if flag in present]
    except OSError:
        pass
    return []


def source_revision() -> dict | None:
    """The checkout's commit, and whether the working tree differed from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", REPOSITORY, *args], capture_output=True,
                              text=True, check=True, timeout=10).stdout.strip()

    try:
        return {"commit": git("rev-parse", "HEAD"),
                "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}
    except (OSError, subprocess.SubprocessError):
        return None


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def package_versions() -> dict[str, str | None]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    return versions


def collect() -> dict:
    return {
        "cpu_model": cpu_model(),
        "cpu_flags": cpu_flags(),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": usable_cpus(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "packages": package_versions(),
        "source": source_revision(),
        "load_average_at_start": load_average(),
        "environment_variables": {k: v for k, v in sorted(os.environ.items())
                                  if k.startswith(("GE_HUB_", "OMP_", "MKL_", "OPENBLAS_",
                                                   "TORCHINDUCTOR_"))},
    }
