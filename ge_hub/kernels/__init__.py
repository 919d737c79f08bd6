"""Kernels: the executable side of ops, registered through `register_kernels`.

`base` defines what a kernel registration carries (a C symbol with its Python-side
attribute packer, or a Python callable). Each family module listed in `FAMILY_MODULES`
defines a module-level list `KERNELS` of `KernelSpec`s for ge-hub's built-in CPU
kernels; `builtin_kernels()` gathers them for the built-in plugin.
"""

from __future__ import annotations

import importlib

FAMILY_MODULES = (
    "ge_hub.kernels.copy",
    "ge_hub.kernels.nn",
    "ge_hub.kernels.elementwise",
    "ge_hub.kernels.movement",
    "ge_hub.kernels.index",
    "ge_hub.kernels.unary",
    "ge_hub.kernels.reduce",
    "ge_hub.kernels.einsum",
    "ge_hub.kernels.lrn",
    "ge_hub.kernels.rnn",
    "ge_hub.kernels.control",
)


def builtin_kernels() -> list:
    """Every built-in KernelSpec, family by family."""
    kernels = []
    for name in FAMILY_MODULES:
        kernels.extend(importlib.import_module(name).KERNELS)
    return kernels
