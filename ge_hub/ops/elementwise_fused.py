"""ge_hub.FusedElementwise: a chain or tree of float32 elementwise ops as one op, what the
`fuse_elementwise` pass (ge_hub/passes/fuse_elementwise.py) makes of it. Its C kernel
(core/kernels/elementwise_fused.c) evaluates the whole expression per tile of the output,
so no intermediate tensor exists.

The expression is a program in SSA form over registers: registers 0..n-1 are the n inputs
(each broadcastable to the output), and instruction i writes register n + i. Attributes:

    ops      the op of each instruction: an ONNX op name from `OPS`
    program  two ints per instruction: the registers it reads (b = -1 for a unary op)
    params   two floats per instruction: Clip's min and max, LeakyRelu's alpha,
             HardSigmoid's alpha and beta, Pow's exponent (0 where unused)

The last instruction's register is the output. The reference evaluates the program with
the plain ops' own references, so the fused op computes what the nodes it replaced did.
"""

from __future__ import annotations

import numpy as np

from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import TensorType
from ge_hub.ops.inference import broadcast_shapes
from ge_hub.ops.norm import FUSED_DOMAIN
from ge_hub.ops.schema import Attr, AttrKind, InferenceContext, Input, Output, op

BINARY_OPS = ("Add", "Sub", "Mul", "Div", "Max", "Min")
UNARY_OPS = ("Neg", "Abs", "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Reciprocal",
             "Erf", "Clip", "LeakyRelu", "HardSigmoid", "Pow")
OPS = BINARY_OPS + UNARY_OPS
F32 = frozenset({DType.FLOAT32})


def check_program(ops, program, params, n_inputs: int) -> str | None:
    """Why the program is malformed, or None."""
    if not ops:
        return "the program has no instruction"
    if len(program) != 2 * len(ops) or len(params) != 2 * len(ops):
        return (f"{len(ops)} ops need {2 * len(ops)} program ints and params floats, got "
                f"{len(program)} and {len(params)}")
    for i, name in enumerate(ops):
        if name not in OPS:
            return f"instruction {i}: unknown op {name!r} (known: {', '.join(OPS)})"
        a, b = program[2 * i], program[2 * i + 1]
        defined = n_inputs + i
        if not 0 <= a < defined:
            return f"instruction {i} ({name}) reads register {a}, defined: 0..{defined - 1}"
        if name in BINARY_OPS and not 0 <= b < defined:
            return f"instruction {i} ({name}) reads register {b}, defined: 0..{defined - 1}"
        if name in UNARY_OPS and b != -1:
            return f"instruction {i} ({name}) is unary: its second register must be -1"
    return None


def _infer(ctx: InferenceContext) -> list[TensorType]:
    n = len(ctx.input_types)
    why = check_program(ctx.attrs["ops"], ctx.attrs["program"], ctx.attrs["params"], n)
    if why is not None:
        ctx.fail(why)
    shape = broadcast_shapes(ctx, [ctx.input(i).shape for i in range(n)])
    return [TensorType(DType.FLOAT32, shape)]


def _apply(name: str, a, b, p0: float, p1: float):
    from ge_hub.ops import get_schema

    reference = get_schema(name).reference
    if name in BINARY_OPS:
        return reference(a, b)
    if name == "Clip":
        return reference(a, np.asarray(p0, np.float32), np.asarray(p1, np.float32))
    if name == "LeakyRelu":
        return reference(a, alpha=p0)
    if name == "HardSigmoid":
        return reference(a, alpha=p0, beta=p1)
    if name == "Pow":
        return reference(a, np.asarray(p0, np.float32))
    return reference(a)


@op("FusedElementwise", domain=FUSED_DOMAIN,
    inputs=[Input("inputs", F32, variadic=True)], outputs=[Output("Y")], infer=_infer,
    attrs=[Attr("ops", AttrKind.STRINGS), Attr("program", AttrKind.INTS),
           Attr("params", AttrKind.FLOATS)])
def fused_elementwise(*inputs, ops, program, params):
    """Y = the program's last register: each instruction applies one elementwise op
    (`ops`) to the registers `program` names, inputs first (see the module docstring)."""
    registers = list(inputs)
    for i, name in enumerate(ops):
        a, b = program[2 * i], program[2 * i + 1]
        registers.append(_apply(name, registers[a], None if b < 0 else registers[b],
                                params[2 * i], params[2 * i + 1]))
    out = registers[-1]
    shape = np.broadcast_shapes(*(x.shape for x in inputs))
    return np.broadcast_to(out, shape).astype(np.float32, copy=True)
