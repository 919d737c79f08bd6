"""Kernels: the executable side of ops, registered through `register_kernels`.

`base` defines what a kernel registration carries (a C symbol with its Python-side
attribute packer, or a Python callable). Each family module listed in `FAMILY_MODULES`
defines a module-level list `KERNELS` of `KernelSpec`s for ge-hub's built-in CPU
kernels; `builtin_kernels()` gathers them for the built-in plugin.
"""

from __future__ import annotations

import importlib

# One module per op family of ge_hub/ops (a family may add `<family>_<part>` modules), so
# that an op's schema, its kernel spec and its C kernel sit in files named alike.
FAMILY_MODULES = (
    "ge_hub.kernels.activation",
    "ge_hub.kernels.nn",
    "ge_hub.kernels.nn_bf16",
    "ge_hub.kernels.nn_strided",
    "ge_hub.kernels.nn_linear",
    "ge_hub.kernels.conv",
    "ge_hub.kernels.conv_pointwise_depthwise",
    "ge_hub.kernels.conv_depthwise_nhwc",
    "ge_hub.kernels.pool",
    "ge_hub.kernels.norm",
    "ge_hub.kernels.resize",
    "ge_hub.kernels.resize_sample",
    "ge_hub.kernels.elementwise",
    "ge_hub.kernels.elementwise_fused",
    "ge_hub.kernels.shape",
    "ge_hub.kernels.index",
    "ge_hub.kernels.reduce",
    "ge_hub.kernels.reduce_einsum",
    "ge_hub.kernels.rnn",
    "ge_hub.kernels.select",
    "ge_hub.kernels.quant",
    "ge_hub.kernels.control",
    "ge_hub.kernels.closure",
)


def builtin_kernels() -> list:
    """Every built-in KernelSpec, family by family."""
    kernels = []
    for name in FAMILY_MODULES:
        kernels.extend(importlib.import_module(name).KERNELS)
    return kernels
