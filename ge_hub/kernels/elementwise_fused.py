"""The kernel of ge_hub.FusedElementwise (core/kernels/elementwise_fused.c): the packer
turns the op's SSA program into the C kernel's blob, with the broadcast layout of its
inputs (ge_hub.kernels.elementwise.broadcast_layout) and the instructions' results placed
in as few tile buffers as their lifetimes allow.
"""

from __future__ import annotations

from ge_hub.kernels.base import CKernel, Packed, pack_values
from ge_hub.kernels.elementwise import MAX_RANK, broadcast_layout
from ge_hub.kernels.nn_common import filled_attrs
from ge_hub.ops.elementwise_fused import BINARY_OPS, OPS
from ge_hub.ops.norm import FUSED_DOMAIN
from ge_hub.registry import KernelSpec

SYMBOL = "ge_elementwise_fused_f32"
# The C kernel's opcodes (elementwise_fused.c: FE_ADD...).
OPCODES = {name: code for code, name in enumerate(BINARY_OPS, start=1)}
OPCODES.update({name: code for code, name in enumerate(OPS[len(BINARY_OPS):], start=10)})
# Its limits: inputs, tile buffers, instructions.
MAX_OPERANDS = 16
MAX_BUFFERS = 12
MAX_INSTRUCTIONS = 256


def allocate_buffers(program, n_inputs: int) -> tuple[list[int], int]:
    """The tile buffer of each instruction's result (-1 for the last, which goes to the
    output), reusing a buffer once no later instruction reads it; and how many it takes."""
    count = len(program) // 2
    last_read = {}
    for i in range(count):
        for r in program[2 * i: 2 * i + 2]:
            if r >= n_inputs:
                last_read[r] = i
    free: list[int] = []
    where: dict[int, int] = {}
    placed, used = [], 0
    for i in range(count):
        reads = [r for r in program[2 * i: 2 * i + 2] if r >= n_inputs]
        # registers read for the last time here free their buffer for this result: the
        # kernel's loops read each element before they write it
        for r in dict.fromkeys(reads):
            if last_read[r] == i:
                free.append(where[r])
        if i == count - 1:
            placed.append(-1)
            break
        if free:
            buffer = free.pop()
        else:
            buffer, used = used, used + 1
        where[n_inputs + i] = buffer
        placed.append(buffer)
    return placed, used


def _layout(input_types, output_type):
    return broadcast_layout([t.shape for t in input_types], output_type.shape)


def pack_fused_elementwise(node, input_types, output_types) -> Packed:
    """The blob of core/kernels/elementwise_fused.c (its layout is documented there)."""
    attrs = filled_attrs(node)
    ops, program, params = attrs["ops"], list(attrs["program"]), list(attrs["params"])
    n = len(input_types)
    shape, strides = _layout(input_types, output_types[0])
    placed, used = allocate_buffers(program, n)

    def ref(r):
        if r < n:
            return r
        return n + placed[r - n]

    ints = [n, len(shape), *shape, *(s for st in strides for s in st), used, len(ops)]
    for i, name in enumerate(ops):
        a, b = program[2 * i], program[2 * i + 1]
        ints += [OPCODES[name], placed[i], ref(a), -1 if b < 0 else ref(b)]
    return Packed(pack_values(ints, params))


def supports_fused_elementwise(node, input_types, output_types) -> bool:
    if not all(t is not None and t.is_static for t in (*input_types, *output_types)):
        return False
    attrs = filled_attrs(node)
    if not 0 < len(input_types) <= MAX_OPERANDS or len(attrs["ops"]) > MAX_INSTRUCTIONS:
        return False
    shape, _ = _layout(input_types, output_types[0])
    _, used = allocate_buffers(list(attrs["program"]), len(input_types))
    return len(shape) <= MAX_RANK and used <= MAX_BUFFERS


KERNELS = [
    # Inputs are read in place tile by tile while earlier tiles of Y are written: no
    # inplace.
    KernelSpec(op="FusedElementwise", domain=FUSED_DOMAIN, name=SYMBOL, dtypes=None,
               impl=CKernel(SYMBOL, pack=pack_fused_elementwise,
                            supports=supports_fused_elementwise)),
]
