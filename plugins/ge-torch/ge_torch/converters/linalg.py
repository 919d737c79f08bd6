"""Matrix products: mm, bmm, addmm and matmul as MatMul and Gemm."""

from __future__ import annotations

import torch

from ge_torch.converters import converter

aten = torch.ops.aten


def _floats_only(node) -> str | None:
    val = node.meta.get("val")
    if val is not None and not val.dtype.is_floating_point:
        return f"{node.target} of {val.dtype} tensors"
    return None


@converter(aten.mm.default, aten.bmm.default, aten.matmul.default, check=_floats_only)
def matmul(cx, node, a, b):
    return cx.op("MatMul", a, b)


@converter(aten.addmm.default, check=_floats_only)
def addmm(cx, node, bias, a, b, *, beta=1, alpha=1):
    # Gemm: alpha * A @ B + beta * C, with C broadcast to [M, N] like addmm's input.
    return cx.op("Gemm", a, b, bias, alpha=float(alpha), beta=float(beta))
