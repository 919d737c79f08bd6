"""Helpers shared by the neural-network op modules (`nn`, `conv`, `pool`, `norm`,
`resize`): attribute and input checks for shape inference, and the dtype policy of
their NumPy references.

The references favour clarity over speed. Floating point work happens in float64 for
float64 data and in float32 otherwise (float16 and bfloat16 go through float32, see
`work_dtype`); every output is cast back to the dtype inference promised.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import Dim, TensorType
from ge_hub.ops.schema import InferenceContext

# Reports a bad attribute or input: `ctx.fail` in inference, `reference_fail` in a
# reference called directly.
Fail = Callable[[str], None]


def is_float(dtype) -> bool:
    """True for float16/32/64 and bfloat16 (whose NumPy kind is 'V', not 'f')."""
    return DType.from_numpy(dtype).is_float


def work_dtype(dtype) -> np.dtype:
    """The dtype a float reference computes in: float64 stays, the rest use float32."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def in_work_dtype(x: np.ndarray) -> np.ndarray:
    """Float data in the dtype its reference computes in (half floats as float32)."""
    return x.astype(work_dtype(x.dtype))


def reference_fail(op_name: str) -> Fail:
    """A `fail` for references called directly, without inference in front of them."""

    def fail(message: str):
        raise OpError(f"{op_name}: {message}")

    return fail


def output_count(ctx: InferenceContext, required: int) -> int:
    """How many outputs the node asks for; optional trailing outputs default to absent."""
    available = len(ctx.schema.outputs)
    count = required if ctx.num_outputs is None else ctx.num_outputs
    if not required <= count <= available:
        names = ", ".join(o.name for o in ctx.schema.outputs)
        ctx.fail(f"expected {required} to {available} outputs ({names}), got {count}")
    return count


def dim_or_sym(ctx: InferenceContext, t: TensorType, axis: int, hint: str) -> Dim:
    """Dim `axis` of `t`, or a fresh symbol when the rank of `t` is unknown."""
    return t.shape[axis] if t.shape is not None else ctx.new_sym(hint)


def check_flag(ctx: InferenceContext, name: str) -> None:
    if ctx.attrs[name] not in (0, 1):
        ctx.fail(f"attribute {name!r} must be 0 or 1, got {ctx.attrs[name]}")


def check_choice(ctx: InferenceContext, name: str, choices: Sequence[str]) -> None:
    if ctx.attrs[name] not in choices:
        ctx.fail(f"attribute {name!r} must be one of {', '.join(choices)}, "
                 f"got {ctx.attrs[name]!r}")


def check_vector(ctx: InferenceContext, index: int, length: Dim, what: str) -> None:
    """Input `index` must be 1-D with `length` entries (one per channel, say)."""
    ctx.require_rank(index, 1)
    t = ctx.input(index)
    if t.shape is not None and isinstance(t.shape[0], int) and isinstance(length, int) \
            and t.shape[0] != length:
        name = ctx.schema.input_name(index)
        ctx.fail(f"input {name!r} must have {length} values ({what}), got {t}")


def check_broadcasts_to(ctx: InferenceContext, index: int, target) -> None:
    """Input `index` must broadcast to `target` without growing it (unidirectional)."""
    t = ctx.input(index)
    if t is None or t.shape is None or target is None:
        return
    name = ctx.schema.input_name(index)
    target_text = str(TensorType(DType.FLOAT32, target)).removeprefix("float32")
    if len(t.shape) > len(target):
        ctx.fail(f"input {name!r} {t} has more dims than the shape {target_text} "
                 f"it must broadcast to")
    for dim, want in zip(t.shape[::-1], target[::-1]):
        if isinstance(dim, int) and isinstance(want, int) and dim not in (1, want):
            ctx.fail(f"input {name!r} {t} cannot be broadcast to {target_text}")
