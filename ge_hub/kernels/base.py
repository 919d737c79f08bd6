"""What a kernel registration carries: a C function with its packer, or a Python callable.

A C kernel (`CKernel`) is a `ge_kernel_fn` (core/include/ge_hub/kernel.h) found by
symbol name, among the executor's built-in kernels or in a plugin's shared library.
Its `pack` function runs once at compile time for each node it is selected for and
turns the node's attributes and static shapes into the attribute blob the C function
reads, plus the scratch bytes it needs; so shapes, strides and axes are resolved at
compile time and never in the run loop.

A C kernel may also lay out some of its constant inputs its own way (`prepack`): Conv
packs its weights into the panels its GEMM micro-kernel streams through. The prepacker
runs once at compile time and returns, per input index, the array the kernel receives in
place of that constant; the plan carries it as one more constant, so the run loop never
re-arranges weights.

A Python kernel (`PyKernel`) takes NumPy arrays (and the node's attributes as keyword
arguments) and returns arrays; every op's NumPy reference is one, used as the counted
fallback when no C kernel fits.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ge_hub.ir.graph import Node
from ge_hub.ir.types import TensorType


@dataclasses.dataclass(frozen=True)
class Packed:
    """A packer's result: the attribute blob and the scratch the kernel needs."""

    attrs: bytes = b""
    scratch_bytes: int = 0


# pack(node, input_types, output_types) -> Packed; input_types[i] is None when omitted.
Packer = Callable[[Node, Sequence[TensorType | None], Sequence[TensorType]], Packed]
# supports(node, input_types, output_types) -> whether the kernel handles this node.
Support = Callable[[Node, Sequence[TensorType | None], Sequence[TensorType]], bool]
# prepack(node, input_types, output_types) -> {input index: array given in its place};
# only constant inputs may be replaced, and an empty dict leaves every input as it is.
Prepacker = Callable[[Node, Sequence[TensorType | None], Sequence[TensorType]],
                     "dict[int, np.ndarray]"]


def no_attrs(node, input_types, output_types) -> Packed:
    return Packed()


@dataclasses.dataclass(frozen=True)
class CKernel:
    symbol: str
    pack: Packer = no_attrs
    library: str | None = None  # path of a plugin's shared library; None: built in
    # (output, input) pairs the kernel tolerates sharing memory (elementwise in-place).
    inplace: tuple[tuple[int, int], ...] = ()
    # Optional compile-time check that the kernel handles this node (shapes, attrs).
    supports: Support | None = None
    # Optional compile-time re-layout of constant inputs (see the module docstring).
    prepack: Prepacker | None = None


@dataclasses.dataclass(frozen=True)
class PyKernel:
    fn: Callable[..., Any]  # fn(*arrays, **attrs) -> array or tuple of arrays


def pack_values(ints: Sequence[int] = (), floats: Sequence[float] = ()) -> bytes:
    """The common blob layout: int64 values, then float64 values, native byte order."""
    return struct.pack(f"={len(ints)}q{len(floats)}d", *ints, *floats)
