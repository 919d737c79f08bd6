"""LRN's C kernel (core/kernels/lrn.c): local response normalization across channels, float32.

The packer flattens the spatial dims into one `inner` extent and divides alpha by size
in double, once, as the op's NumPy reference does. The kernel needs static shapes and
reads channels other than the one it writes, so its output never shares the input's
memory.
"""

from __future__ import annotations

import math

from ge_hub.ir.dtypes import DType
from ge_hub.kernels.base import CKernel, Packed, pack_values
from ge_hub.ops import get_schema
from ge_hub.registry import KernelSpec

F32 = DType.FLOAT32


def _attrs(node) -> dict:
    return get_schema(node.op, node.domain).fill_attrs(dict(node.attrs), node.name)


def pack_lrn(node, input_types, output_types) -> Packed:
    """Blob: ints N, C, inner, size; floats alpha / size, beta, bias."""
    shape = input_types[0].shape
    attrs = _attrs(node)
    size = int(attrs["size"])
    return Packed(pack_values([shape[0], shape[1], math.prod(shape[2:]), size],
                              [float(attrs["alpha"]) / size, float(attrs["beta"]),
                               float(attrs["bias"])]))


def supports_lrn(node, input_types, output_types) -> bool:
    x = input_types[0]
    return x.shape is not None and x.is_static


KERNELS = [
    KernelSpec(op="LRN", name="ge_lrn_f32", dtypes=(F32,),
               impl=CKernel("ge_lrn_f32", pack=pack_lrn, supports=supports_lrn)),
]
