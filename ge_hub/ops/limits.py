"""The size limits ge-hub holds every graph to: the one place they are written down.

A model file is input from strangers, and a few bytes of it can declare a tensor of 2**62
elements or a window stride of 2**63 - 1. Shape inference and the C kernels' packers refuse
anything past these limits with a `GraphError` naming the node and the attribute, so that
nothing downstream allocates for a declared size, loops over it, or does index arithmetic
that wraps around int64:

- `MAX_RANK`: dims per tensor. NumPy (the references' engine) holds at most 64, and
  inference makes one symbol per dim of an unknown shape, so a declared shape of length
  2**40 is refused here instead of being enumerated.
- `MAX_ELEMENTS`: elements per tensor (2**40, i.e. 4 TiB of float32). Any element offset
  then fits in int64 with room for a stride and an element size multiplied in.
- `MAX_SCRATCH_BYTES`: the scratch one C kernel may ask for, the bytes of the largest
  tensor (2**40 elements of 16 bytes), so that memory planning sums stay far from 2**63.
- `MAX_COORDINATE`: the largest magnitude a sliding window's coordinates (pads, strides,
  dilations, the span the windows cover) may reach along one axis (2**60). The C kernels
  add and subtract a few such values (at most four), which then stays below 2**62.

Shape inference (`ge_hub.ops.schema.OpSchema.infer_types`) checks every node's input and
output types against them; `ge_hub.kernels.bounds` checks the types and window attributes
each C kernel is packed for. Both raise `ge_hub.errors.LimitError`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from ge_hub.ir.types import TensorType

MAX_RANK = 64
MAX_ELEMENTS = 2**40
MAX_SCRATCH_BYTES = MAX_ELEMENTS * 16
MAX_COORDINATE = 2**60


def shape_problem(t: TensorType | None) -> str | None:
    """Why a tensor type breaks the limits (None when it keeps them). Symbolic dims are
    unknown, so only the concrete ones count."""
    if t is None or t.shape is None:
        return None
    if len(t.shape) > MAX_RANK:
        return f"has rank {len(t.shape)}, more than the limit of {MAX_RANK} (ge_hub.ops.limits)"
    concrete = [d for d in t.shape if isinstance(d, int)]
    if any(d < 0 for d in concrete):
        return f"has a negative dim {min(concrete)}"
    big = max(concrete, default=0)
    if big > MAX_ELEMENTS:
        return (f"has a dim of {big}, more than the limit of 2**40 elements per tensor "
                "(ge_hub.ops.limits.MAX_ELEMENTS)")
    if 0 not in concrete:
        count = math.prod(concrete)
        if count > MAX_ELEMENTS:
            return (f"has {count} elements, more than the limit of 2**40 per tensor "
                    "(ge_hub.ops.limits.MAX_ELEMENTS)")
    return None


def check_rank(rank: int, fail: Callable[[str], object], what: str) -> int:
    """`rank` (a count of dims about to be created one by one), or a failure naming `what`
    when it is past MAX_RANK."""
    if rank > MAX_RANK:
        fail(f"{what} gives rank {rank}, more than the limit of {MAX_RANK} dims "
             "(ge_hub.ops.limits.MAX_RANK)")
    return rank


def check_types(types: Sequence[TensorType | None], names: Sequence[str],
                fail: Callable[[str], object]) -> None:
    """Fail naming the first of `types` (called `names`) that breaks the limits."""
    for t, name in zip(types, names):
        problem = shape_problem(t)
        if problem is not None:
            fail(f"{name} {t} {problem}")
