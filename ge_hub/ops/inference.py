"""Shape and dtype inference helpers shared by many ops.

Each helper either is an `infer` function itself (`same_as_input`, `broadcast`,
`broadcast_to_bool`) or is a building block for one (`broadcast_shapes`,
`normalize_axis`). They understand symbolic dims: a symbol broadcast against 1 stays
the symbol, two different symbols broadcast to a fresh one.
"""

from __future__ import annotations

from collections.abc import Sequence

from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import Dim, TensorType
from ge_hub.ops.schema import InferenceContext


def same_as_input(ctx: InferenceContext) -> list[TensorType]:
    """One output with the type of the first input (unary elementwise ops)."""
    return [ctx.input(0)]


def broadcast_shapes(ctx: InferenceContext, shapes: Sequence[tuple[Dim, ...] | None]):
    """NumPy (multidirectional) broadcasting of several shapes; None if any is unknown."""
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes), default=0)
    result: list[Dim] = []
    for axis in range(rank):
        dims = [s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0]
        out: Dim = 1
        for d in dims:
            if d == 1 or d == out:
                continue
            if out == 1:
                out = d
            elif isinstance(out, int) and isinstance(d, int):
                given = ", ".join(str(TensorType(DType.FLOAT32, s)).removeprefix("float32")
                                  for s in shapes)
                ctx.fail(f"shapes {given} cannot be broadcast (dim {axis}: {out} vs {d})")
            elif isinstance(out, int):
                pass  # a symbol broadcast against a concrete dim > 1 must equal it
            elif isinstance(d, int):
                out = d
            else:
                out = ctx.new_sym("bcast")
        result.append(out)
    return tuple(result)


def broadcast(ctx: InferenceContext) -> list[TensorType]:
    """One output: inputs broadcast together, dtype of the first input."""
    present = [t for t in ctx.input_types if t is not None]
    shape = broadcast_shapes(ctx, [t.shape for t in present])
    return [TensorType(present[0].dtype, shape)]


def broadcast_to_bool(ctx: InferenceContext) -> list[TensorType]:
    """Comparisons and logic: broadcast shape, bool dtype."""
    return [broadcast(ctx)[0].with_dtype(DType.BOOL)]


def normalize_axis(ctx: InferenceContext, axis: int, rank: int | None, what: str = "axis") -> int:
    """Turn a possibly negative axis into 0..rank-1, failing clearly when out of range."""
    if rank is None:
        return axis
    if not -rank <= axis < rank:
        ctx.fail(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank


def normalize_axes(ctx: InferenceContext, axes: Sequence[int], rank: int | None,
                   what: str = "axes") -> list[int]:
    result = [normalize_axis(ctx, a, rank, what) for a in axes]
    if len(set(result)) != len(result):
        ctx.fail(f"{what} {list(axes)} repeats an axis")
    return result


def const_ints(ctx: InferenceContext, index: int) -> list[int] | None:
    """The data of an int tensor input when it is a known constant (Reshape's shape)."""
    data = ctx.const(index)
    if data is None:
        return None
    return [int(v) for v in data.reshape(-1)]
