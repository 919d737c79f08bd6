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
    # Compiled sub-plans (`ge_hub.plan.Plan`) the step runs: a control step's bodies.
    subplans: tuple = ()


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
    """The common blob layout: int64 values, then float64 values, native byte order.

    The C side reads it with the one reader of core/include/ge_hub/blob.h (`ge_blob_*`,
    installed as ge_hub/include/ge_hub/blob.h for plugin kernels): 8 bytes a value, no
    header, no padding, no alignment promise. A value that does not fit an int64 slot is
    refused by `ge_hub.kernels.bounds.pack_checked`, naming the node.
    """
    return struct.pack(f"={len(ints)}q{len(floats)}d", *ints, *floats)


@dataclasses.dataclass(frozen=True)
class BlobRecord:
    """A fixed blob layout: named int64 fields, then named float64 fields.

    The C side declares the same fields once, as a field list that GE_BLOB_RECORD
    (ge_hub/blob.h) turns into a struct and its reader, e.g. in core/kernels/norm.h:

        #define GE_LRN_BLOB(INT, FLOAT) INT(n) INT(channels) ... FLOAT(bias)

    `c_list` names that macro; tests/test_blob_records.py checks every built-in record
    against it, field for field, so that the two sides cannot drift apart.
    """

    c_list: str
    ints: tuple[str, ...]
    floats: tuple[str, ...] = ()

    def pack(self, **values: float) -> bytes:
        """The blob of `values`, one per field (a missing or unknown field is an error)."""
        fields = (*self.ints, *self.floats)
        if set(values) != set(fields):
            raise TypeError(f"{self.c_list}: expected fields {list(fields)}, got "
                            f"{sorted(values)}")
        return pack_values([int(values[name]) for name in self.ints],
                           [float(values[name]) for name in self.floats])
