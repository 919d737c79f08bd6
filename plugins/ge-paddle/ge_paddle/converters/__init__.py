"""The op converters: Paddle op name (PIR spelling) -> function(converter, op).

A converter reads its operands with `cv.input(op, i)` (or `cv.const` for operands that
must be known data), emits core ops with `cv.emit`/`cv.one`, and returns the values of
the op's results in order (None for a result nothing reads, such as batch_norm's saved
statistics or dropout's mask). Each module registers its converters into `CONVERTERS`.
"""

from __future__ import annotations

from ge_paddle.converters import elementwise, nn, shape
from ge_paddle.converters.table import CONVERTERS

__all__ = ["CONVERTERS", "elementwise", "nn", "shape"]
