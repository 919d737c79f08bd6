"""Which PyTorch dtypes ge-torch hands to ge-hub, and their ge-hub names.

float16 and bfloat16 are deliberately absent: PyTorch computes most half-precision ops
in float32 and rounds once, while a ge-hub kernel or reference may round after every
step, so results would differ from eager by more than rounding. Nodes that touch them
run in PyTorch instead. Complex types have no ge-hub dtype; the wider unsigned types and
the float8 ones, which ge-hub has but PyTorch barely computes on, are left to PyTorch too.
"""

from __future__ import annotations

import torch
from ge_hub.plugin import DType

TORCH_TO_DTYPE = {
    torch.float32: DType.FLOAT32,
    torch.float64: DType.FLOAT64,
    torch.int64: DType.INT64,
    torch.int32: DType.INT32,
    torch.int16: DType.INT16,
    torch.int8: DType.INT8,
    torch.uint8: DType.UINT8,
    torch.bool: DType.BOOL,
}
DTYPE_TO_TORCH = {v: k for k, v in TORCH_TO_DTYPE.items()}


def is_supported(dtype: torch.dtype) -> bool:
    return dtype in TORCH_TO_DTYPE


def to_dtype(dtype: torch.dtype) -> DType:
    """The ge-hub dtype of a supported torch dtype; `Unsupported` for any other."""
    from ge_torch.errors import Unsupported

    try:
        return TORCH_TO_DTYPE[dtype]
    except KeyError:
        raise Unsupported(f"dtype {dtype} is not handed to ge-hub") from None


def to_torch(dtype: DType) -> torch.dtype:
    return DTYPE_TO_TORCH[dtype]
