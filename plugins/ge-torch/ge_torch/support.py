"""Which FX nodes ge-hub takes: the capability check behind partitioning.

A node goes to ge-hub when its op has a converter, every tensor it reads or produces
has a dtype ge-hub computes exactly like PyTorch (`ge_torch.dtypes`) and lives on the
CPU, and the converter's own check accepts the call. Size arithmetic on SymInts, getitem
of a node that stays in PyTorch, and PyTorch's own assertions stay in PyTorch: they cost
nothing there and would only split ge-hub's partitions.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator

import torch
import torch.fx
from torch.fx.passes.operator_support import OperatorSupportBase

from ge_torch.converters import lookup
from ge_torch.dtypes import is_supported


def _tensors(value) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)


def _meta_tensors(node: torch.fx.Node) -> Iterator[torch.Tensor]:
    """The FakeTensors a node reads and produces."""
    from ge_torch.convert import meta_value

    for arg in node.all_input_nodes:
        yield from _tensors(meta_value(arg))
    yield from _tensors(meta_value(node))


def unsupported_reason(node: torch.fx.Node) -> str | None:
    """Why ge-hub cannot take this call_function node, or None when it can."""
    from ge_torch.convert import ASSERT_OPS, is_symbolic_node

    if node.target is operator.getitem:
        return unsupported_reason(node.args[0]) if node.args[0].op == "call_function" else None
    if node.target in ASSERT_OPS:
        return "an assertion, checked by PyTorch"
    if is_symbolic_node(node):
        return "size arithmetic, done in Python"
    converter = lookup(node.target)
    if converter is None:
        return "no converter"
    for tensor in _meta_tensors(node):
        if tensor.device.type != "cpu":
            return f"a tensor on device {tensor.device}"
        if not is_supported(tensor.dtype):
            return f"a {tensor.dtype} tensor"
    return converter.unsupported_reason(node)


class GeSupport(OperatorSupportBase):
    """The partitioner's view of `unsupported_reason`, minus nodes forced to PyTorch."""

    def __init__(self, forced: set[torch.fx.Node] = frozenset()):
        self.forced = forced

    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
        if node in self.forced:
            return False
        if node.target is operator.getitem and node.args[0] in self.forced:
            return False
        return unsupported_reason(node) is None
