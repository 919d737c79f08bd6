"""The program as both readers hand it to the converter, whatever file it came from.

A Paddle inference program is a list of ops over values. The PIR `.json` form numbers
its values and names its ops `pd_op.conv2d`; the legacy `.pdmodel` form names its values
and its ops `conv2d`, with inputs in named slots. `ge_paddle.pir` and `ge_paddle.legacy`
both produce a `Program` of `PdOp`s in the PIR spelling, so that one converter per op
serves both: a legacy attribute that PIR passes as an operand (a reshape's shape) becomes
a literal operand here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Union

import numpy as np

# A value is named by a key (an int in PIR files, a variable name in legacy ones), or is
# a literal array (an operand the legacy form gave as an attribute), or is absent.
Operand = Union[int, str, np.ndarray, None]


@dataclasses.dataclass
class PdType:
    """A dense tensor's element type (Paddle's name: "float32") and shape (-1: unknown)."""

    dtype: str
    shape: tuple[int, ...] | None  # None: rank unknown

    def __str__(self) -> str:
        shape = "?" if self.shape is None else list(self.shape)
        return f"{self.dtype}{shape}"


@dataclasses.dataclass
class PdOp:
    """One op: `name` in PIR spelling ("pd_op.conv2d", "builtin.combine"), attributes
    as plain Python, operands and results by key, result types where the file gives
    them (a `builtin.combine` result is a list of types), and where it is in the file."""

    name: str
    attrs: dict[str, Any]
    inputs: list[Operand]
    outputs: list[Any]
    output_types: list[Any]
    where: str
    # Control flow (pd_op.if, pd_op.while): each block's ops, and its arguments as
    # (key, type) pairs (a while body's loop-carried values).
    regions: list[list[PdOp]] = dataclasses.field(default_factory=list)
    region_args: list[list[tuple]] = dataclasses.field(default_factory=list)

    def describe(self) -> str:
        shown = {k: v for k, v in self.attrs.items() if k not in IGNORED_ATTRS}
        return f"{self.name} at {self.where} with attributes {shown}"


@dataclasses.dataclass
class Parameter:
    """A persistable tensor stored in the `.pdiparams` file."""

    key: Any
    name: str
    type: PdType


@dataclasses.dataclass
class Program:
    ops: list[PdOp]
    parameters: list[Parameter]
    source: str  # the program file, for messages
    format: str  # "pir" or "legacy"


# Attributes that only help debugging or training, never change what an op computes.
IGNORED_ATTRS = frozenset({
    "op_callstack", "op_namescope", "op_role", "op_role_var", "op_device", "struct_name",
    "with_quant_attr", "place", "stop_gradient", "persistable", "use_cudnn", "use_mkldnn",
    "use_onednn", "is_test", "name", "trainable_statistics", "fuse_with_relu",
    "mkldnn_data_type", "onednn_data_type", "use_quantizer", "workspace_size_MB",
    "exhaustive_search", "fix_seed", "seed", "momentum",
})
