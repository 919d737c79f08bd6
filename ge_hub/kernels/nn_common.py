"""Helpers shared by the nn-family kernel packers (nn, conv, pool, norm, resize).

The C side of these helpers is core/kernels/nn_common.h: window ops are passed to C as
3-D (1-D and 2-D windows get leading axes of size 1), and `window_ints` writes the 18
window ints that header reads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Node
from ge_hub.ir.types import TensorType
from ge_hub.kernels.base import CKernel
from ge_hub.ops import get_schema
from ge_hub.registry import KernelSpec

F32 = DType.FLOAT32
FLOAT_BYTES = 4
MAX_SPATIAL = 3  # window ops run as 3-D in C

SAME_AS_INPUT = ((0, 0),)  # (output, input) pairs that may share memory


def filled_attrs(node: Node) -> dict:
    """The node's attributes with the op's defaults filled in."""
    return get_schema(node.op, node.domain).fill_attrs(dict(node.attrs), node.name)


def node_fail(node: Node):
    def fail(message: str):
        raise OpError(f"{node.op} node {node.name!r}: {message}")

    return fail


def numel_of(shape: Sequence[int]) -> int:
    return math.prod(int(d) for d in shape)


def all_static(types: Sequence[TensorType | None]) -> bool:
    return all(t is None or (t.shape is not None and t.is_static) for t in types)


def supports_static(node, input_types, output_types) -> bool:
    return all_static(input_types)


def supports_nonempty(node, input_types, output_types) -> bool:
    return all_static(input_types) and numel_of(input_types[0].shape) > 0


def window_ints(in_dims, out_dims, kernel, strides, dilations, pads) -> list[int]:
    """The 18 window ints of nn_common.h, padded in front to 3 spatial axes."""
    lead = MAX_SPATIAL - len(in_dims)
    ints: list[int] = []
    for values, filler in ((in_dims, 1), (out_dims, 1), (kernel, 1), (strides, 1),
                           (dilations, 1), (pads, 0)):
        ints += [filler] * lead + [int(v) for v in values]
    return ints


def spatial_ok(input_types) -> bool:
    x = input_types[0]
    return (all_static(input_types) and 3 <= len(x.shape) <= 2 + MAX_SPATIAL
            and numel_of(x.shape) > 0)


def c_kernel(op: str, symbol: str, dtypes, pack, supports=None, inplace=()) -> KernelSpec:
    return KernelSpec(op=op, name=symbol, dtypes=dtypes,
                      impl=CKernel(symbol, pack=pack, supports=supports, inplace=inplace))

