"""The example plugin: one op in its own domain, a Python kernel for it, and a command.

    example.ScaleShift(X) = X * scale + shift      (float tensors; attributes scale, shift)
"""

from __future__ import annotations

import numpy as np

import ge_hub
from ge_hub.kernels.base import PyKernel
from ge_hub.ops import Attr, AttrKind, Input, Output, op
from ge_hub.ops.inference import same_as_input
from ge_hub.ops.schema import FLOATS
from ge_hub.registry import Command, KernelSpec


@op("ScaleShift", domain="example", inputs=[Input("X", FLOATS)], outputs=[Output("Y")],
    infer=same_as_input,
    attrs=[Attr("scale", AttrKind.FLOAT, 1.0), Attr("shift", AttrKind.FLOAT, 0.0)])
def scale_shift(x, *, scale, shift):
    """Y = X * scale + shift."""
    return (x.astype(np.float64) * scale + shift).astype(x.dtype)


def _fast_scale_shift(x, *, scale, shift):
    return (x * x.dtype.type(scale) + x.dtype.type(shift)).astype(x.dtype, copy=False)


@ge_hub.hookimpl
def register_ops(registry):
    registry.add_op(scale_shift)


@ge_hub.hookimpl
def register_kernels(registry):
    registry.add_kernel(KernelSpec(op="ScaleShift", domain="example", name="example.scale_shift",
                                   impl=PyKernel(_fast_scale_shift), priority=1))


def _hello(args) -> int:
    print("hello from the example plugin")
    return 0


@ge_hub.hookimpl
def register_commands(registry):
    registry.add_command(Command("example-hello", "print a greeting", _hello))
