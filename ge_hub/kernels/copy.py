"""Copy kernels: Identity, and the copy step that fills a graph output from a view."""

from __future__ import annotations

from ge_hub.kernels.base import CKernel
from ge_hub.registry import KernelSpec

KERNELS = [
    # Any dtype: a byte copy. Named "copy" because plans use it for output copies too.
    KernelSpec(op="Identity", name="copy", impl=CKernel("ge_copy")),
]
