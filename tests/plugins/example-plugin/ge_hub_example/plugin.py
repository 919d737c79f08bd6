"""The example plugin: an op in its own domain, a Python kernel for it, a fusion pass that
rewrites graphs to use it, and a command. It imports only ge-hub's public modules.

    example.ScaleShift(X) = X * scale + shift      (float tensors; attributes scale, shift)

The fusion pass `example-fusions` holds one rule, `example.scale_shift`: Mul by a scalar
constant followed by Add of a scalar constant (either operand order) becomes one
ScaleShift, one pass over the data instead of two.
"""

from __future__ import annotations

import numpy as np

from ge_hub.plugin import (
    FLOATS,
    Attr,
    AttrKind,
    Command,
    Input,
    KernelSpec,
    Output,
    PyKernel,
    hookimpl,
    op,
    rewrite,
    same_as_input,
)


@op("ScaleShift", domain="example", inputs=[Input("X", FLOATS)], outputs=[Output("Y")],
    infer=same_as_input,
    attrs=[Attr("scale", AttrKind.FLOAT, 1.0), Attr("shift", AttrKind.FLOAT, 0.0)])
def scale_shift(x, *, scale, shift):
    """Y = X * scale + shift."""
    return (x.astype(np.float64) * scale + shift).astype(x.dtype)


def _fast_scale_shift(x, *, scale, shift):
    return (x * x.dtype.type(scale) + x.dtype.type(shift)).astype(x.dtype, copy=False)


# -- the fusion: Add(Mul(x, scale), shift) -> example.ScaleShift(x) ------------------

def _mul_add(op, x, scale, shift):
    return op.Add(op.Mul(x, scale.constant()), shift.constant())


def _scalars(ctx, x, scale, shift):
    return (scale.const.size == 1 and shift.const.size == 1) or ctx.reject(
        "scale and shift must be single values")


def _scale_shift(op, x, scale, shift):
    return op.ScaleShift(x, scale=float(scale.const.flat[0]), shift=float(shift.const.flat[0]),
                         _domain="example")


FUSE_SCALE_SHIFT = rewrite.Rule(_mul_add, _scale_shift, check=_scalars,
                                name="example.scale_shift",
                                doc="Mul by a scalar, then Add of a scalar -> ScaleShift")


@hookimpl
def register_ops(registry):
    registry.add_op(scale_shift)


@hookimpl
def register_kernels(registry):
    registry.add_kernel(KernelSpec(op="ScaleShift", domain="example", name="example.scale_shift",
                                   impl=PyKernel(_fast_scale_shift), priority=1))


@hookimpl
def register_passes(registry):
    registry.add_pass(rewrite.rule_pass("example-fusions", [FUSE_SCALE_SHIFT], stage="fuse",
                                        doc="fuse x * a + b (scalar constants) into "
                                            "example.ScaleShift"))


def _hello(args) -> int:
    print("hello from the example plugin")
    return 0


@hookimpl
def register_commands(registry):
    registry.add_command(Command("example-hello", "print a greeting", _hello))
