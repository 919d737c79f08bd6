"""Elementwise kernels with two or more inputs: arithmetic, comparison, logic, Where.

The C side is core/kernels/elementwise.c. Broadcasting is resolved here, once per node at
compile time: `broadcast_layout` turns the input shapes and the output shape into a
collapsed shape and per-input strides (0 on a broadcast dim), merging adjacent dims that
every input walks alike, so that same-shape inputs become one flat loop and a bias row
becomes rows of a flat loop. The blob is `n_inputs, ndim, shape, strides per input` and
then the op's extra ints (Mod's fmod, BitShift's direction); elementwise.h documents it
for the C side.

In-place pairs are declared only where the output and the input have one dtype: with
equal byte sizes they then have the same elements in the same order, which is what the
C loops need to read each element before writing it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Node
from ge_hub.ir.types import TensorType
from ge_hub.kernels.base import CKernel, Packed, no_attrs, pack_values
from ge_hub.registry import KernelSpec

# GE_MAX_RANK in core/include/ge_hub/kernel.h: the most dims a collapsed layout may have.
MAX_RANK = 8
# Variadic ops may share their output with any of their first inputs (see module doc).
VARIADIC_INPLACE = tuple((0, i) for i in range(8))
BOTH_INPUTS = ((0, 0), (0, 1))

F32, F64, I32, I64, BOOL, U8 = (DType.FLOAT32, DType.FLOAT64, DType.INT32, DType.INT64,
                                DType.BOOL, DType.UINT8)


def broadcast_layout(input_shapes: Sequence[Sequence[int]],
                     output_shape: Sequence[int]) -> tuple[list[int], list[list[int]]]:
    """The collapsed output shape and each input's element strides over it.

    Output dims of size 1 are dropped; a dim is merged into the one before it when every
    input steps over the pair as over one dim. The result has at least one dim (a scalar
    output is [1]); an empty output is [0].
    """
    rank = len(output_shape)
    strides: list[list[int]] = []
    for shape in input_shapes:
        if len(shape) > rank:
            raise ValueError(f"input shape {list(shape)} has more dims than the output "
                             f"shape {list(output_shape)}")
        padded = [1] * (rank - len(shape)) + list(shape)
        step, own = 1, [0] * rank
        for axis in reversed(range(rank)):
            dim, out = padded[axis], output_shape[axis]
            if dim == out and dim != 1:
                own[axis] = step
            elif dim != 1:
                raise ValueError(f"input shape {list(shape)} does not broadcast to "
                                 f"{list(output_shape)}")
            step *= dim
        strides.append(own)
    if any(d == 0 for d in output_shape):
        return [0], [[0] for _ in input_shapes]

    dims: list[int] = []
    merged: list[list[int]] = [[] for _ in input_shapes]
    for axis, dim in enumerate(output_shape):
        if dim == 1:
            continue
        # The previous kept dim is the outer one: mergeable when each input's outer stride
        # is its inner stride times the inner dim (both 0 when broadcast).
        if dims and all(m[-1] == s[axis] * dim for s, m in zip(strides, merged)):
            dims[-1] *= dim
            for s, m in zip(strides, merged):
                m[-1] = s[axis]
            continue
        dims.append(dim)
        for s, m in zip(strides, merged):
            m.append(s[axis])
    if not dims:
        return [1], [[0] for _ in input_shapes]
    return dims, merged


def _static(types: Sequence[TensorType | None]) -> bool:
    return all(t is not None and t.is_static for t in types)


def _layout_ints(input_types: Sequence[TensorType], output_type: TensorType) -> list[int]:
    shape, strides = broadcast_layout([t.shape for t in input_types], output_type.shape)
    return [len(input_types), len(shape), *shape, *(s for st in strides for s in st)]


def supports_layout(node: Node, input_types, output_types) -> bool:
    """Static shapes whose collapsed layout fits the C kernels' rank limit."""
    if not _static([*input_types, *output_types]):
        return False
    shape, _ = broadcast_layout([t.shape for t in input_types], output_types[0].shape)
    return len(shape) <= MAX_RANK


def layout_packer(extra: Callable[[Node], list[int]] = lambda node: []):
    """A packer writing the broadcast layout, then `extra(node)` ints."""

    def pack(node: Node, input_types, output_types) -> Packed:
        return Packed(pack_values(_layout_ints(input_types, output_types[0]) + extra(node)))

    return pack


pack_layout = layout_packer()


def _mod_fmod(node: Node) -> list[int]:
    return [int(node.attrs.get("fmod", 0))]


def _shift_direction(node: Node) -> list[int]:
    return [0 if node.attrs["direction"] == "LEFT" else 1]


def _supports_float_mod(node: Node, input_types, output_types) -> bool:
    # The float kernel is C's fmod (fmod=1) only; float floor modulo (fmod=0) runs the
    # reference as a counted fallback.
    return node.attrs.get("fmod", 0) == 1 and supports_layout(node, input_types, output_types)


def _supports_shift(node: Node, input_types, output_types) -> bool:
    return (node.attrs.get("direction") in ("LEFT", "RIGHT")
            and supports_layout(node, input_types, output_types))


def _kernel(op: str, symbol: str, dtypes: tuple[DType, ...], inplace=BOTH_INPUTS,
            pack=pack_layout, supports=supports_layout) -> KernelSpec:
    return KernelSpec(op=op, name=symbol.removeprefix("ge_"), dtypes=dtypes,
                      impl=CKernel(symbol, pack=pack, inplace=inplace, supports=supports))


_SUFFIX = {F32: "f32", F64: "f64", I32: "i32", I64: "i64", BOOL: "bool", U8: "u8"}


def _binary(op: str, stem: str, dtypes: Sequence[DType], **options) -> list[KernelSpec]:
    return [_kernel(op, f"ge_{stem}_{_SUFFIX[d]}", (d, d), **options) for d in dtypes]


def _variadic(op: str, stem: str, dtypes: Sequence[DType]) -> list[KernelSpec]:
    return [_kernel(op, f"ge_{stem}_{_SUFFIX[d]}", (d,), inplace=VARIADIC_INPLACE)
            for d in dtypes]


_COMPARISONS = (("Equal", "equal"), ("Less", "less"), ("LessOrEqual", "less_equal"),
                ("Greater", "greater"), ("GreaterOrEqual", "greater_equal"))

KERNELS = [
    *_binary("Add", "add", (F32, F64, I32, I64)),
    *_binary("Sub", "sub", (F32, F64, I32, I64)),
    *_binary("Mul", "mul", (F32, F64, I32, I64)),
    *_binary("Div", "div", (F32, F64, I32, I64)),
    *_binary("Mod", "mod", (I32, I64), pack=layout_packer(_mod_fmod)),
    *_binary("Mod", "mod", (F32,), pack=layout_packer(_mod_fmod), supports=_supports_float_mod),
    _kernel("Pow", "ge_pow_f32_f32", (F32, F32)),
    # An integer exponent never shares the float output's memory (see module doc).
    _kernel("Pow", "ge_pow_f32_i32", (F32, I32), inplace=((0, 0),)),
    _kernel("Pow", "ge_pow_f32_i64", (F32, I64), inplace=((0, 0),)),
    *_binary("BitShift", "bitshift", (U8,), pack=layout_packer(_shift_direction),
             supports=_supports_shift),
    *_variadic("Max", "max", (F32, I32, I64)),
    *_variadic("Min", "min", (F32, I32, I64)),
    *_variadic("Sum", "sum", (F32,)),
    *_variadic("Mean", "mean", (F32,)),
    # Comparisons write bool: only bool inputs may share the output's memory.
    *(spec for op, stem in _COMPARISONS
      for spec in _binary(op, stem, (F32, F64, I32, I64), inplace=())),
    *_binary("Equal", "equal", (BOOL,)),
    *_binary("And", "and", (BOOL,)),
    *_binary("Or", "or", (BOOL,)),
    *_binary("Xor", "xor", (BOOL,)),
    _kernel("Not", "ge_not_bool", (BOOL,), inplace=((0, 0),), pack=no_attrs, supports=None),
    # Any value dtype: the C copies elements by width. The condition may share the output
    # only when both are one byte wide, and then they line up element for element.
    _kernel("Where", "ge_where", (BOOL,), inplace=((0, 0), (0, 1), (0, 2))),
]
