"""Builds ge_hub._core, the C executor, from core/ (metadata lives in pyproject.toml).

Every .c file under core/src (executor, arena pool, thread pool, BLAS loader, binding)
and core/kernels (the built-in kernels) is compiled, so a kernel family added later is
picked up without touching this file. The executor's test kernels (core/testing/) are
not: the tests build them themselves (tests/testing_kernels.py).

    GE_HUB_DEBUG_BUILD=1   build with -O0 -g and AddressSanitizer + UBSan; run it with
                           LD_PRELOAD=$(gcc -print-file-name=libasan.so) (see tox.ini)
    GE_HUB_DEBUG_BUILD=tsan  build with -O1 -g and ThreadSanitizer; run it with
                           LD_PRELOAD=$(gcc -print-file-name=libtsan.so) (tox -e tsan)

The public headers, the kernel ABI (kernel.h) and the attribute-blob reader (blob.h), are
installed beside the package (ge_hub/include/ge_hub/); core/include/ge_hub/internal/ (what
only the built-in kernels may call) is not.
No BLAS is linked: ge_hub/_blas.py loads the one of the scipy-openblas32 wheel at run
time, since a library in pip's isolated build environment is gone after the build.
"""

from __future__ import annotations

import glob
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
DEBUG_MODE = os.environ.get("GE_HUB_DEBUG_BUILD", "")
DEBUG = DEBUG_MODE not in ("", "0")
TSAN = DEBUG_MODE == "tsan"
VARIANT = ("debug-tsan" if TSAN else "debug-asan") if DEBUG else "release"


def _files(pattern: str) -> list[str]:
    # setuptools wants paths relative to the project root.
    return sorted(glob.glob(pattern, root_dir=HERE))


# -O3 but neither -ffast-math (NaN and inf semantics are part of every op's contract)
# nor -march=native (a wheel must run on any CPU of its platform).
COMPILE_ARGS = ["-std=c11", "-O3", "-fvisibility=hidden", "-Wall", "-Wextra",
                "-Wno-unused-parameter", "-Wno-missing-field-initializers"]
LINK_ARGS: list[str] = []
if TSAN:
    SANITIZE = ["-fsanitize=thread", "-fno-omit-frame-pointer"]
    COMPILE_ARGS += ["-O1", "-g", *SANITIZE]
    LINK_ARGS += SANITIZE
elif DEBUG:
    SANITIZE = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
    COMPILE_ARGS += ["-O0", "-g", *SANITIZE]  # the last -O wins over Python's own -O3
    LINK_ARGS += SANITIZE


class BuildCore(build_ext):
    """build_ext that rebuilds when the variant (release or debug) changes.

    setuptools skips an extension whose output is newer than its sources, which would
    otherwise hand a sanitizer build to a release install (or back) from a stale build/.
    """

    def build_extension(self, ext):
        marker = os.path.join(self.build_temp, f"{ext.name}.variant")
        previous = open(marker).read() if os.path.exists(marker) else None
        if previous != VARIANT:
            self.force = True
        super().build_extension(ext)
        os.makedirs(self.build_temp, exist_ok=True)
        with open(marker, "w") as out:
            out.write(VARIANT)


class BuildPy(build_py):
    """build_py that also installs the public headers as ge_hub/include/ge_hub/*.h,
    so an outside kernel library can compile against an installed ge_hub
    (`ge_hub.executor.include_dir()`)."""

    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "ge_hub", "include", "ge_hub")
        self.mkpath(target)
        for header in _files("core/include/ge_hub/*.h"):
            self.copy_file(header, os.path.join(target, os.path.basename(header)))


core = Extension(
    "ge_hub._core",
    sources=_files("core/src/*.c") + _files("core/kernels/*.c"),
    depends=_files("core/include/ge_hub/*.h") + _files("core/include/ge_hub/internal/*.h")
    + _files("core/src/*.h")
    + _files("core/kernels/*.h"),
    include_dirs=["core/include"],
    define_macros=[("_GNU_SOURCE", "1")],  # pthread and sched_getaffinity under -std=c11
    extra_compile_args=COMPILE_ARGS,
    extra_link_args=LINK_ARGS,
    libraries=["pthread", "dl"],
)

setup(ext_modules=[core], cmdclass={"build_ext": BuildCore, "build_py": BuildPy})
