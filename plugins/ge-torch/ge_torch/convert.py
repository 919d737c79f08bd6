"""FX nodes -> one ge-hub Graph.

`convert_nodes` turns a set of nodes of an ATen-level FX graph (a whole graph, or one
partition of it) into a ge-hub `Graph`. Its `inputs` are the FX nodes whose values come
from outside the set; each becomes a graph input, a constant (when it is a frozen
parameter or buffer) or a symbolic size. Its `outputs` are the FX nodes read outside.
Each node in between goes through its converter (`ge_torch.converters`), and every
result is checked against the dtype and shape PyTorch recorded for the node, so that a
converter can never silently change what a node computes.

A node that cannot be converted raises `NodeUnsupported`, naming the node, so that the
caller can leave it to PyTorch and try again. A converter that fails in any other way
(an exception other than `Unsupported`, a result PyTorch would not compute) raises
`ConverterError`: a bug is reported, not hidden behind a run in PyTorch.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import sympy
import torch
import torch.fx
from ge_hub.plugin import DType, Graph, TensorType, Value

from ge_torch import symbolic
from ge_torch.context import ConvertContext
from ge_torch.converters import lookup
from ge_torch.dtypes import is_supported, to_dtype
from ge_torch.errors import ConverterError, Unsupported

# Ops that only check something PyTorch already guaranteed when it traced the graph.
ASSERT_OPS = frozenset(
    getattr(torch.ops.aten, name).default for name in (
        "_assert_tensor_metadata", "_assert_scalar", "sym_constrain_range_for_size",
        "sym_constrain_range", "_assert_async")
    if hasattr(torch.ops.aten, name))


class NodeUnsupported(Unsupported):
    """`node` cannot be converted; `reason` says why."""

    def __init__(self, node: torch.fx.Node, reason: str):
        super().__init__(f"{node.name} ({node.target}): {reason}")
        self.node = node
        self.reason = reason


@dataclasses.dataclass(frozen=True, eq=False)
class FrozenInput:
    """A graph constant copied from the FX input at `position` (a parameter or buffer):
    `tensor` is the one it was copied from, when the graph was converted."""

    name: str
    position: int
    tensor: torch.Tensor


@dataclasses.dataclass
class ConvertedGraph:
    """A ge-hub graph and how to call it with the FX subgraph's input values."""

    graph: Graph
    input_args: list[int]  # for each graph input, its position among the FX inputs
    # Per FX output: ("ge", graph output index), ("arg", FX input position),
    # ("sym", size expression) or ("py", a Python value).
    outputs: list[tuple[str, Any]]
    symbols: symbolic.SymbolTable
    frozen: list[FrozenInput]  # the constants copied from FX inputs
    example_shapes: dict[str, list[int]] | None  # input shapes of the traced example
    # Per graph output: the strides (ints or size expressions) eager gives it when that
    # layout is dense but not row-major (a permuted elementwise result), else None.
    layouts: list[tuple | None] = dataclasses.field(default_factory=list)


def meta_value(node: Any) -> Any:
    if not isinstance(node, torch.fx.Node):
        return node
    return node.meta.get("val", node.meta.get("example_value"))


def is_symbolic_node(node: torch.fx.Node) -> bool:
    """A node computing a size or another Python scalar rather than a tensor."""
    val = meta_value(node)
    return isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool))


def tensor_to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A copy of a tensor's data as a NumPy array (for constants)."""
    return tensor.detach().cpu().contiguous().numpy().copy()


def convert_nodes(nodes: Sequence[torch.fx.Node], inputs: Sequence[torch.fx.Node],
                  outputs: Sequence[Any], *, frozen: dict[torch.fx.Node, torch.Tensor],
                  module: torch.nn.Module | None = None, name: str = "torch",
                  escape: Callable | None = None) -> ConvertedGraph:
    """Convert `nodes` (in graph order) reading `inputs` into a graph returning `outputs`.

    `escape(cx, node, args, kwargs)`, when given, converts a node no converter takes
    (the ahead-of-time path makes it a `torch.ATen` node); without it such a node raises
    `NodeUnsupported`.
    """
    builder = _Builder(Graph(name), module, escape)
    input_args = builder.add_inputs(inputs, frozen)
    source_names: dict[str, str] = {}
    for node in nodes:
        builder.convert(node)
        _note_source(source_names, builder.env.get(node), node.name)
    specs = builder.set_outputs(outputs, inputs)
    graph = builder.cx.graph
    # The FX node each value came from, for tools that speak the user's names
    # (ge-hub compare); values a converter made on the way have none.
    graph.attrs["source_names"] = source_names
    graph.remove_unused_constants()
    kept = {v.name for v in graph.constants}
    return ConvertedGraph(graph, input_args, specs, builder.cx.symbols,
                          [f for f in builder.frozen if f.name in kept],
                          builder.example_shapes, builder.layouts)


def _note_source(names: dict[str, str], result: Any, fx_name: str) -> None:
    results = result if isinstance(result, (tuple, list)) else (result,)
    for position, value in enumerate(results):
        if hasattr(value, "producer") and value.producer is not None:
            suffix = f"[{position}]" if len(results) > 1 else ""
            names.setdefault(value.name, fx_name + suffix)


class _Builder:
    def __init__(self, graph: Graph, module, escape):
        self.cx = ConvertContext(graph)
        self.module = module
        self.escape = escape
        self.env: dict[torch.fx.Node, Any] = {}
        self.frozen: list[FrozenInput] = []
        self.example_shapes: dict[str, list[int]] | None = {}
        self.layouts: list[tuple | None] = []

    # -- inputs ------------------------------------------------------------------

    def add_inputs(self, inputs, frozen) -> list[int]:
        graph = self.cx.graph
        input_args = []
        for position, node in enumerate(inputs):
            val = meta_value(node)
            if node in frozen:
                tensor = frozen[node]
                value = graph.add_constant(tensor_to_numpy(tensor), node.name)
                self.cx.frozen_ids.add(id(value))
                self.frozen.append(FrozenInput(value.name, position, tensor))
                self.env[node] = value
            elif isinstance(val, torch.Tensor):
                self.env[node] = self._add_tensor_input(node, val, position)
                input_args.append(position)
            else:
                self.env[node] = symbolic.as_expr(val)
        # A SymInt argument whose symbol no input tensor's shape carries (a Python int
        # Dynamo made dynamic) is read from an int64 scalar input.
        for position, node in enumerate(inputs):
            expr = self.env[node]
            if (isinstance(meta_value(node), torch.SymInt) and isinstance(expr, sympy.Symbol)
                    and expr not in self.cx.symbols.sources):
                value = graph.add_input(node.name, TensorType(DType.INT64, ()))
                self.cx.symbols.add_scalar_input(value, position, expr)
                input_args.append(position)
                if self.example_shapes is not None:
                    self.example_shapes[node.name] = []
        return input_args

    def _add_tensor_input(self, node, val: torch.Tensor, position: int) -> Value:
        if val.device.type != "cpu":
            raise NodeUnsupported(node, f"input on device {val.device}")
        if not is_supported(val.dtype):
            raise NodeUnsupported(node, f"input of dtype {val.dtype}")
        dims = [symbolic.as_dim(s) for s in val.shape]
        value = self.cx.graph.add_input(node.name, TensorType(to_dtype(val.dtype), dims))
        self.cx.symbols.add_input(value, position, val.shape)
        self._record_example_shape(node.name, val.shape)
        return value

    def _record_example_shape(self, name: str, sizes) -> None:
        if self.example_shapes is None:
            return
        try:
            from torch.fx.experimental.symbolic_shapes import optimization_hint

            self.example_shapes[name] = [int(optimization_hint(s)) for s in sizes]
        except Exception:  # an unbacked size has no example value
            self.example_shapes = None

    # -- nodes -------------------------------------------------------------------

    def convert(self, node: torch.fx.Node) -> None:
        self.cx.node = node
        if node.op == "get_attr":
            self.env[node] = self._attribute(node)
        elif node.op != "call_function":
            raise NodeUnsupported(node, f"an FX {node.op} node")
        elif node.target in ASSERT_OPS:
            self.env[node] = None
        elif node.target is operator.getitem:
            self.env[node] = self._getitem(node)
        elif is_symbolic_node(node):
            self.env[node] = symbolic.as_expr(meta_value(node))
        elif self.escape is None:
            self.env[node] = self._call(node)
        else:
            try:
                self.env[node] = self._call(node)
            except NodeUnsupported as exc:
                self.cx.node = node
                args = torch.fx.node.map_arg(node.args, self.env.__getitem__)
                kwargs = torch.fx.node.map_arg(node.kwargs, self.env.__getitem__)
                self.env[node] = self.escape(self.cx, node, args, kwargs, exc)

    def _attribute(self, node):
        target = self.module
        for part in node.target.split("."):
            target = getattr(target, part)
        if not isinstance(target, torch.Tensor) or not is_supported(target.dtype):
            raise NodeUnsupported(node, "an attribute that is not a tensor ge-hub supports")
        return self.cx.graph.add_constant(tensor_to_numpy(target), prefix=node.name)

    def _getitem(self, node):
        source, index = node.args
        items = self.env[source]
        if not isinstance(items, (tuple, list)) or items[index] is None:
            raise NodeUnsupported(node, f"output {index} of {source.name} was not converted")
        return items[index]

    def _call(self, node):
        from ge_torch.support import unsupported_reason

        reason = unsupported_reason(node)
        if reason:
            raise NodeUnsupported(node, reason)
        converter = lookup(node.target)
        args = torch.fx.node.map_arg(node.args, self.env.__getitem__)
        kwargs = torch.fx.node.map_arg(node.kwargs, self.env.__getitem__)
        try:
            result = converter.convert(self.cx, node, *args, **kwargs)
        except NodeUnsupported:
            raise
        except Unsupported as exc:
            raise NodeUnsupported(node, str(exc)) from exc
        except Exception as exc:  # a converter bug, or ge-hub itself is broken
            raise ConverterError(node, f"{type(exc).__name__}: {exc}") from exc
        _check_result(node, result, meta_value(node))
        return result

    # -- outputs -----------------------------------------------------------------

    def _eager_layout(self, val: Any) -> tuple | None:
        """Eager's strides for an output, when ge-hub's row-major result must be laid out
        like them: PyTorch code after the graph may read the storage (`as_strided`)."""
        if not isinstance(val, torch.Tensor) or val.ndim < 2:
            return None
        try:
            from torch.fx.experimental.symbolic_shapes import optimization_hint

            sizes = [int(optimization_hint(s)) for s in val.shape]
            strides = [int(optimization_hint(s)) for s in val.stride()]
        except Exception:  # an unbacked size: no example to decide from
            return None
        if val.storage_offset() != 0 or not _dense_permuted(sizes, strides):
            return None
        layout = tuple(symbolic.as_expr(s) for s in val.stride())
        known = self.cx.symbols.sources.keys()
        if any(symbolic.is_symbolic(e) and e.free_symbols - known for e in layout):
            return None
        return layout

    def set_outputs(self, outputs, inputs) -> list[tuple[str, Any]]:
        graph = self.cx.graph
        input_positions = {node: i for i, node in enumerate(inputs)}
        specs, graph_outputs = [], []
        for out in outputs:
            if not isinstance(out, torch.fx.Node):
                specs.append(("py", out))
                continue
            if out in input_positions:
                specs.append(("arg", input_positions[out]))
                continue
            value = self.env[out]
            if not isinstance(value, Value):
                if isinstance(value, (tuple, list)):
                    raise NodeUnsupported(out, "a tuple-valued node read outside its graph")
                specs.append(("sym", value) if symbolic.is_symbolic(value) else ("py", value))
                continue
            if value.producer is None or any(v is value for v in graph_outputs):
                # Constants and repeated outputs get their own output value.
                self.cx.node = out
                value = self.cx.op("Identity", value)
            specs.append(("ge", len(graph_outputs)))
            graph_outputs.append(value)
            self.layouts.append(self._eager_layout(meta_value(out)))
        graph.set_outputs(graph_outputs)
        return specs


def _dense_permuted(sizes: list[int], strides: list[int]) -> bool:
    """The strides lay the tensor out densely, in some order of its dims, but not in
    row-major order."""
    dims = sorted((d for d, n in enumerate(sizes) if n > 1), key=lambda d: -strides[d])
    expected = 1
    for d in reversed(dims):
        if strides[d] != expected:
            return False
        expected *= sizes[d]
    return dims != sorted(dims)


def _check_result(node: torch.fx.Node, result: Any, val: Any) -> None:
    """The converter's values must have the dtypes and shapes PyTorch recorded."""
    if isinstance(val, (tuple, list)):
        if not isinstance(result, (tuple, list)) or len(result) != len(val):
            raise ConverterError(node, f"it returned {result!r} for {len(val)} outputs")
        for r, v in zip(result, val):
            if r is not None:
                _check_result(node, r, v)
        return
    if not isinstance(result, Value) or not isinstance(val, torch.Tensor):
        raise ConverterError(node, f"it returned {result!r} for {type(val).__name__}")
    want = to_dtype(val.dtype)
    got = result.type
    sizes = [symbolic.as_expr(s) for s in val.shape]
    mismatch = got.dtype != want or got.rank != len(sizes) or any(
        isinstance(g, int) and isinstance(w, int) and g != w
        for g, w in zip(got.shape or (), sizes))
    if mismatch:
        raise ConverterError(node, f"it produced {got}, PyTorch computes {want}{sizes}")
