"""The ahead-of-time path: `torch.export` -> ge-hub Graph, compiled once, run without
PyTorch in the loop.

    graph = ge_hub.load(model, example_inputs=(x,))       # through the torch frontend
    graph = ge_torch.from_module(model, (x,), dynamic_shapes=...)
    graph = ge_torch.from_exported(torch.export.export(model, (x,)))
    compiled = ge_hub.compile(graph)
    (y,) = compiled.run([x.numpy()])

The program is decomposed with the same table as the `torch.compile` backend and its
nodes go through the same converters. Parameters, buffers and lifted constants become
constants of the graph; the user inputs (tensors) become its inputs, named as in the
model's `forward`, with symbolic dims where `dynamic_shapes` made them dynamic. A node
without a converter becomes a `torch.ATen` node (`ge_torch.aten_op`), which needs PyTorch
when it runs; `allow_torch_ops=False` raises a `ConversionError` listing them instead.
A program that mutates a buffer or an input in place (a module in training mode) is
refused: the mutation would be lost.
"""

from __future__ import annotations

import collections
import logging
import os
from collections.abc import Sequence
from typing import Any

import torch
from ge_hub.plugin import Graph, UntrustedModelError
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

from ge_torch import aten_op
from ge_torch.convert import convert_nodes, meta_value
from ge_torch.errors import ConversionError

log = logging.getLogger(__name__)


def from_module(module: torch.nn.Module, example_inputs: Sequence[Any] | None = None, *,
                example_kwargs: dict | None = None, dynamic_shapes=None,
                allow_torch_ops: bool = True, name: str | None = None) -> Graph:
    """Export `module` with `torch.export` on the example inputs and convert it."""
    if example_inputs is None and not example_kwargs:
        raise ConversionError(f"converting a {type(module).__name__} ahead of time needs "
                              "example inputs: ge_hub.load(model, example_inputs=(x,))")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    if module.training:
        log.warning("ge-torch: %s is in training mode; exporting it as it is (call "
                    ".eval() for inference)", type(module).__name__)
    with torch.no_grad():
        exported = torch.export.export(module, tuple(example_inputs or ()),
                                       kwargs=example_kwargs, dynamic_shapes=dynamic_shapes,
                                       strict=False)
    return from_exported(exported, allow_torch_ops=allow_torch_ops,
                         name=name or type(module).__name__)


def from_exported(program: ExportedProgram, *, allow_torch_ops: bool = True,
                  name: str = "exported") -> Graph:
    """Convert an ExportedProgram to a verified ge-hub Graph."""
    from ge_torch.decompositions import decomposition_table, lowering_mode

    with lowering_mode():
        program = program.run_decompositions(decomposition_table())
    gm = program.graph_module
    signature = program.graph_signature
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    frozen, user_inputs = _classify_inputs(program, signature, placeholders)
    outputs = _user_outputs(gm, signature)
    nodes = [n for n in gm.graph.nodes if n.op in ("call_function", "get_attr")]
    if not allow_torch_ops:
        _require_converters(nodes)
    escaped: collections.Counter = collections.Counter()
    escape = _escape_to_torch(escaped) if allow_torch_ops else None
    try:
        converted = convert_nodes(nodes, user_inputs + list(frozen), outputs, frozen=frozen,
                                  module=gm, name=name, escape=escape)
    except ConversionError:
        raise
    except Exception as exc:
        raise ConversionError(f"cannot convert the exported program: {exc}") from exc
    if any(kind != "ge" for kind, _ in converted.outputs):
        raise ConversionError("the exported program returns an input, a size or a Python "
                              "value; a ge-hub graph returns computed tensors only")
    if escaped:
        log.info("ge-torch: ops run by PyTorch inside the graph: %s",
                 ", ".join(f"{op} x{n}" for op, n in escaped.most_common()))
    graph = converted.graph
    graph.attrs["torch_ops"] = dict(escaped)
    graph.verify()
    return graph


def _require_converters(nodes) -> None:
    from ge_torch.lowering import _is_compute
    from ge_torch.support import unsupported_reason

    missing: dict[str, tuple[int, str]] = {}
    for node in nodes:
        reason = _is_compute(node) and unsupported_reason(node)
        if reason:
            count, _ = missing.get(str(node.target), (0, reason))
            missing[str(node.target)] = (count + 1, reason)
    if missing:
        listing = "; ".join(f"{op} x{n} ({why})" for op, (n, why) in missing.items())
        raise ConversionError(f"ops without a ge-hub equivalent: {listing} (with "
                              "allow_torch_ops=True they run in PyTorch inside the graph)")


def _classify_inputs(program, signature, placeholders):
    frozen: dict[torch.fx.Node, torch.Tensor] = {}
    user_inputs = []
    for spec, node in zip(signature.input_specs, placeholders):
        if spec.kind == InputKind.USER_INPUT:
            user_inputs.append(node)
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            tensor = program.state_dict.get(spec.target)
            frozen[node] = program.constants[spec.target] if tensor is None else tensor
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            frozen[node] = program.constants[spec.target]
        else:
            raise ConversionError(f"input {spec.arg.name!r} of kind {spec.kind.name} has no "
                                  "ge-hub equivalent")
    return frozen, user_inputs


def _user_outputs(gm, signature) -> list:
    (results,) = gm.graph.output_node().args
    outputs = []
    for spec, result in zip(signature.output_specs, results):
        if spec.kind == OutputKind.USER_OUTPUT:
            outputs.append(result)
        else:
            target = spec.target or spec.arg.name
            raise ConversionError(f"the program mutates {target!r} in place "
                                  f"({spec.kind.name}), which a ge-hub graph cannot do; "
                                  "export the model in eval mode")
    return outputs


def _escape_to_torch(escaped: collections.Counter):
    """Make a node without converter a `torch.ATen` node calling PyTorch."""

    def escape(cx, node, args, kwargs, reason):
        tensors: list = []

        def tensor_index(value):
            if hasattr(value, "type") and hasattr(value, "producer"):  # a ge-hub Value
                tensors.append(value)
                return len(tensors) - 1
            return None

        try:
            arguments = aten_op.encode_arguments(args, kwargs, tensor_index)
            dtypes, shapes = aten_op.describe_outputs(meta_value(node))
        except Exception as exc:
            raise ConversionError(f"node {node.name} ({node.target}) has no converter "
                                  f"({reason}) and cannot be recorded for PyTorch: "
                                  f"{exc}") from exc
        if not tensors:
            raise ConversionError(f"node {node.name} ({node.target}) has no converter and "
                                  "no tensor input")
        target = f"{node.target._schema.name}.{node.target._overloadname}"
        results = cx.op("ATen", *tensors, domain=aten_op.DOMAIN, outputs=len(dtypes),
                        target=target, arguments=arguments, output_dtypes=dtypes,
                        output_shapes=shapes)
        escaped[str(node.target)] += 1
        val = meta_value(node)
        return tuple(results) if isinstance(val, (tuple, list)) else results[0]

    return escape


def load(model: Any, *, example_inputs: Sequence[Any] | None = None, trusted: bool = False,
         **options: Any) -> Graph:
    """The torch frontend's `load`: a module, an ExportedProgram or a .pt2 file.

    A .pt2 file is a zip archive of pickles, and `torch.export.load` runs them: a file
    from a stranger can execute any code. It is opened only with `trusted=True`; without
    it, `UntrustedModelError` is raised before the file is read. Objects (a module, an
    ExportedProgram) are already in memory and need no trust."""
    if isinstance(model, ExportedProgram):
        return from_exported(model, **options)
    if isinstance(model, torch.nn.Module):
        return from_module(model, example_inputs, **options)
    if not trusted:
        raise UntrustedModelError(
            f"refusing to open {os.fspath(model)!r}: torch.export.load unpickles the "
            "archive, which can run code hidden in it; pass trusted=True only for a file "
            "from a source you trust")
    return from_exported(torch.export.load(model), **options)
