"""The executor's test kernels (core/testing/test_kernels.c), built only for the tests.

They are not in ge_hub._core's table of built-in kernels: the first caller compiles them
with gcc against the public kernel ABI (`ge_hub.executor.include_dir()`), as an outside
plugin library would be, into a per-user cache keyed by the source's hash (so the
subprocesses some tests start reuse it), and loads it with ctypes.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ge_hub.executor import include_dir

SOURCE = Path(__file__).resolve().parents[1] / "core" / "testing" / "test_kernels.c"
SYMBOLS = ("ge_test_add_f32",)


def library_path() -> str:
    """The compiled library, built on first use."""
    source = SOURCE.read_bytes()
    header = Path(include_dir(), "ge_hub", "kernel.h").read_bytes()
    key = hashlib.sha256(source + header).hexdigest()[:16]
    directory = Path(tempfile.gettempdir()) / f"ge-hub-test-kernels-{os.getuid()}"
    library = directory / f"libge_test_kernels-{key}.so"
    if library.exists():
        return str(library)
    gcc = shutil.which("gcc")
    if gcc is None:
        raise RuntimeError("gcc is required to build the executor's test kernels "
                           "(core/testing/test_kernels.c); install gcc")
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / f".{library.name}.{os.getpid()}"
    done = subprocess.run(
        [gcc, "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror",
         "-shared", "-fPIC", "-I", include_dir(), str(SOURCE), "-o", str(partial), "-pthread"],
        capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"building {SOURCE} failed:\n{done.stderr}")
    os.replace(partial, library)  # atomic: a concurrent build loses nothing
    return str(library)


@functools.cache
def build_test_kernels() -> dict[str, int]:
    """{symbol: address} of every test kernel, for an executor's resolver."""
    library = ctypes.CDLL(library_path())  # cached: the library stays loaded
    return {name: ctypes.cast(getattr(library, name), ctypes.c_void_p).value
            for name in SYMBOLS}
