"""The activation family's kernels: math functions, activations, rounding, Clip, IsNaN,
IsInf, PRelu, Cast, CastLike and Identity.

The C side is core/kernels/activation*.c. One input element makes one
output element, so no shape reaches the C: a kernel loops over the element count. The
blob carries only an op's attributes, as float64 (alpha, beta, gamma: the reference
computes with them in float64) or int64 (IsInf's flags); activation.h lists each layout.

PRelu is the one with a second tensor to broadcast (its slope): it packs the elementwise
family's broadcast layout and its C (activation_prelu.c) runs on elementwise.h's machinery.

Every kernel whose output has its input's element size may write in place: each C loop
reads an element before it writes the one at the same index. Clip's min and max are
read from their tensors at run time, since they may be graph inputs; Cast reads both
dtypes from its tensors, so one kernel serves every (source, target) pair.
"""

from __future__ import annotations

from collections.abc import Sequence

from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Node
from ge_hub.ir.types import TensorType
from ge_hub.kernels.base import CKernel, Packed, Packer, no_attrs, pack_values
from ge_hub.kernels.elementwise import pack_layout, supports_layout
from ge_hub.ops import get_schema
from ge_hub.registry import KernelSpec

F32, I32, I64 = DType.FLOAT32, DType.INT32, DType.INT64
IN_PLACE = ((0, 0),)
SUFFIX = {F32: "f32", I32: "i32", I64: "i64"}

# Ops without attributes: (op, C name stem, input dtypes with a kernel).
PLAIN_OPS = (
    ("Neg", "neg", (F32, I32, I64)),
    ("Abs", "abs", (F32, I32, I64)),
    ("Sign", "sign", (F32, I32, I64)),
    ("Relu", "relu", (F32, I32, I64)),
    ("Floor", "floor", (F32,)),
    ("Ceil", "ceil", (F32,)),
    ("Round", "round", (F32,)),
    ("Exp", "exp", (F32,)),
    ("Log", "log", (F32,)),
    ("Sqrt", "sqrt", (F32,)),
    ("Reciprocal", "reciprocal", (F32,)),
    ("Erf", "erf", (F32,)),
    ("Sin", "sin", (F32,)),
    ("Cos", "cos", (F32,)),
    ("Tan", "tan", (F32,)),
    ("Asin", "asin", (F32,)),
    ("Acos", "acos", (F32,)),
    ("Atan", "atan", (F32,)),
    ("Sinh", "sinh", (F32,)),
    ("Cosh", "cosh", (F32,)),
    ("Tanh", "tanh", (F32,)),
    ("Asinh", "asinh", (F32,)),
    ("Acosh", "acosh", (F32,)),
    ("Atanh", "atanh", (F32,)),
    ("Sigmoid", "sigmoid", (F32,)),
    ("Softplus", "softplus", (F32,)),
    ("Softsign", "softsign", (F32,)),
    ("Mish", "mish", (F32,)),
    ("HardSwish", "hard_swish", (F32,)),
)

# float32 ops whose blob is some float attributes, in this order.
FLOAT_ATTR_OPS = (
    ("LeakyRelu", "leaky_relu", ("alpha",)),
    ("ThresholdedRelu", "thresholded_relu", ("alpha",)),
    ("Elu", "elu", ("alpha",)),
    ("Celu", "celu", ("alpha",)),
    ("Selu", "selu", ("alpha", "gamma")),
    ("HardSigmoid", "hard_sigmoid", ("alpha", "beta")),
)

# Cast converts between any two of these (bfloat16 included: cast.c rounds it correctly).
CAST_DTYPES = frozenset({DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.BFLOAT16,
                         DType.INT8, DType.INT16, DType.INT32, DType.INT64, DType.UINT8,
                         DType.BOOL, DType.UINT16, DType.UINT32, DType.UINT64})


def _attrs(node: Node) -> dict:
    return get_schema(node.op, node.domain).fill_attrs(dict(node.attrs), node.name)


def pack_attrs(ints: Sequence[str] = (), floats: Sequence[str] = ()) -> Packer:
    """A packer writing the named int attributes, then the named float attributes."""

    def pack(node: Node, input_types, output_types) -> Packed:
        attrs = _attrs(node)
        return Packed(pack_values([int(attrs[name]) for name in ints],
                                  [float(attrs[name]) for name in floats]))

    return pack


def gelu_approximate_is(mode: str):
    """A `supports` check: the Gelu node's `approximate` attribute is `mode`."""

    def supports(node: Node, input_types, output_types) -> bool:
        return _attrs(node)["approximate"] == mode

    return supports


def clip_bounds_are_scalars(node: Node, input_types: Sequence[TensorType | None],
                            output_types) -> bool:
    """Clip's C kernel reads one value from min and max (checked again at run time)."""
    return all(t is None or (t.is_static and t.numel == 1) for t in input_types[1:3])


def cast_dtypes_supported(node: Node, input_types: Sequence[TensorType | None],
                          output_types: Sequence[TensorType]) -> bool:
    return input_types[0].dtype in CAST_DTYPES and output_types[0].dtype in CAST_DTYPES


def _spec(op: str, symbol: str, dtypes, pack: Packer = no_attrs, inplace=IN_PLACE,
          supports=None) -> KernelSpec:
    return KernelSpec(op=op, name=symbol.removeprefix("ge_"), dtypes=dtypes,
                      impl=CKernel(symbol, pack=pack, inplace=inplace, supports=supports))


def _kernels() -> list[KernelSpec]:
    kernels = [_spec(op, f"ge_{stem}_{SUFFIX[dtype]}", (dtype,))
               for op, stem, dtypes in PLAIN_OPS for dtype in dtypes]
    kernels += [_spec(op, f"ge_{stem}_f32", (F32,), pack_attrs(floats=names))
                for op, stem, names in FLOAT_ATTR_OPS]
    kernels += [
        _spec("Gelu", "ge_gelu_f32", (F32,), supports=gelu_approximate_is("none")),
        _spec("Gelu", "ge_gelu_tanh_f32", (F32,), supports=gelu_approximate_is("tanh")),
        # A bool output has another element size, so these never run in place.
        _spec("IsNaN", "ge_isnan_f32", (F32,), inplace=()),
        _spec("IsInf", "ge_isinf_f32", (F32,),
              pack_attrs(ints=("detect_negative", "detect_positive")), inplace=()),
    ]
    kernels += [_spec("Clip", f"ge_clip_{SUFFIX[dtype]}", (dtype,),
                      supports=clip_bounds_are_scalars) for dtype in (F32, I32, I64)]
    # The memory planner shares buffers only of equal byte sizes, which for a Cast means
    # equal element sizes (float32 -> int32): then in place is safe.
    kernels += [
        KernelSpec(op="Cast", name="cast",
                   impl=CKernel("ge_cast", inplace=IN_PLACE, supports=cast_dtypes_supported)),
        KernelSpec(op="CastLike", name="cast_like",
                   impl=CKernel("ge_cast", inplace=IN_PLACE, supports=cast_dtypes_supported)),
        # PRelu broadcasts its slope: the elementwise family's layout packer and C machinery
        # (core/kernels/activation_prelu.c), named as before.
        *(KernelSpec(op="PRelu", name=f"prelu_{SUFFIX[dtype]}", dtypes=(dtype, dtype),
                     impl=CKernel(f"ge_prelu_{SUFFIX[dtype]}", pack=pack_layout,
                                  inplace=((0, 0), (0, 1)), supports=supports_layout))
          for dtype in (F32, I32, I64)),
        # Any dtype: a byte copy. Named "copy" because plans use it for output copies too.
        KernelSpec(op="Identity", name="copy", impl=CKernel("ge_copy")),
    ]
    return kernels


KERNELS = _kernels()
