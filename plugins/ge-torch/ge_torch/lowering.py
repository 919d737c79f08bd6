"""Lower an ATen FX graph: the parts ge-hub supports run in ge-hub, the rest in PyTorch.

When every node has a converter the whole graph becomes one ge-hub graph and one
compiled function. Otherwise `CapabilityBasedPartitioner` groups the supported nodes
into partitions (as large as they can be without a cycle through PyTorch nodes); each
partition is converted and compiled on its own and spliced back into the FX graph as a
single call, and the FX graph, now mostly calls into ge-hub, is what runs.

A converter may still refuse a node that its check accepted (a shape it cannot
reproduce, `Unsupported`); the node then joins the PyTorch side and partitioning starts
again. A converter that fails otherwise (`ConverterError`) or a partition that ge-hub
cannot compile (`LoweringError`) is an error and is raised; with `on_error="fallback"`
those nodes join the PyTorch side too, with a `FallbackWarning` (once per reason).

A graph output that is a view (of an input, or of another value) is computed by PyTorch
from its base, so that it has the strides and shares the storage it has in eager: AOT
Autograd rebuilds an output aliasing an input from that input with the returned
tensor's own strides, and a contiguous copy would read the wrong elements. For the same
reason the views feeding an `as_strided` that PyTorch runs are PyTorch's, and a ge-hub
result eager lays out in another dense order comes back in that layout.

The `GraphReport` of each lowering says how much went where.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import operator
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.tools_common import legalize_graph

from ge_torch.convert import ASSERT_OPS, NodeUnsupported, convert_nodes, is_symbolic_node
from ge_torch.errors import ConverterError, FallbackWarning, LoweringError
from ge_torch.runtime import GeFunction, GeModule
from ge_torch.support import GeSupport, unsupported_reason

log = logging.getLogger(__name__)

# Ops that move no data worth a ge-hub call of their own.
_VIEW_OPS = {getattr(torch.ops.aten, name).default for name in (
    "view", "_unsafe_view", "permute", "unsqueeze", "squeeze", "clone", "alias", "t",
    "expand")} | {operator.getitem}


@dataclasses.dataclass
class GraphReport:
    """What happened to one FX graph: how many ATen nodes, how many went to ge-hub, in
    how many partitions, and which ops stayed in PyTorch (op name -> count). Views
    returned as outputs, which PyTorch takes from their base as eager does, are counted
    apart (`output_views`), not among the ATen nodes."""

    aten_nodes: int = 0
    ge_nodes: int = 0
    partitions: int = 0
    output_views: int = 0
    fallback_ops: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    fallback_reasons: dict[str, str] = dataclasses.field(default_factory=dict)
    functions: list[GeFunction] = dataclasses.field(default_factory=list)

    @property
    def ge_steps(self) -> int:
        """Steps of the ge-hub plans (as last compiled) of this graph's partitions."""
        return sum(f.summary()["steps"] for f in self.functions)

    @property
    def reference_steps(self) -> int:
        """Of those, steps ge-hub runs with an op's NumPy reference (no kernel yet)."""
        return sum(f.summary()["fallback_steps"] for f in self.functions)


class _PartitionFailed(Exception):
    def __init__(self, nodes, error):
        super().__init__(str(error))
        self.nodes = nodes
        self.error = error


def _is_compute(node: torch.fx.Node) -> bool:
    return (node.op == "call_function" and node.target is not operator.getitem
            and node.target not in ASSERT_OPS and not is_symbolic_node(node))


def op_name(target: Any) -> str:
    return str(target) if isinstance(target, torch._ops.OpOverload) else getattr(
        target, "__name__", str(target))


ON_ERROR = ("raise", "fallback")

# Reasons already warned about under on_error="fallback".
_WARNED: set[str] = set()

_OUTPUT_VIEW = "a view returned as an output, taken from its base by PyTorch as in eager"
_STRIDED_VIEW = "a view read by as_strided in PyTorch, which needs eager's storage"
_AS_STRIDED = torch.ops.aten.as_strided.default


def lower(gm: torch.fx.GraphModule, frozen: Mapping[torch.fx.Node, torch.Tensor],
          options: Mapping[str, Any] | None = None,
          on_error: str = "raise") -> tuple[Callable, GraphReport]:
    """A callable equivalent to `gm` (positional arguments in, a tuple out), running as
    much of it as possible in ge-hub, and the report of what went where."""
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
    compute = [n for n in gm.graph.nodes if _is_compute(n)]
    compute_set = set(compute)
    # node -> why it must stay in PyTorch
    forced: dict[torch.fx.Node, str] = dict.fromkeys(_output_views(gm), _OUTPUT_VIEW)
    for _ in range(len(compute) + 1):
        support = GeSupport(forced)
        fresh = [v for v in _strided_views(compute, support) if v not in forced]
        if fresh:
            forced.update(dict.fromkeys(fresh, _STRIDED_VIEW))
            continue
        try:
            if all(support.is_node_supported(None, n) for n in compute):
                return _lower_whole(gm, frozen, options, compute)
            partitions = _propose(gm, support)
            built = [_build(gm, nodes, frozen, options) for nodes in partitions]
        except NodeUnsupported as exc:
            log.debug("ge-torch: %s", exc)
            # An input that ge-hub cannot take keeps its readers in PyTorch.
            culprits = [exc.node] if exc.node in compute_set else [
                u for u in exc.node.users if u in compute_set]
            fresh = [n for n in culprits if n not in forced]
            if not fresh:
                raise
            forced.update(dict.fromkeys(fresh, exc.reason))
            continue
        except ConverterError as exc:
            if on_error == "raise" or exc.node not in compute_set or exc.node in forced:
                raise
            reason = f"the converter failed: {exc.reason}"
            _warn_fallback(f"{exc}; node {exc.node.name} runs in PyTorch")
            forced[exc.node] = reason
            continue
        except _PartitionFailed as exc:
            names = ", ".join(n.name for n in exc.nodes[:8])
            more = f" and {len(exc.nodes) - 8} more" if len(exc.nodes) > 8 else ""
            message = (f"ge-hub could not compile the graph of {len(exc.nodes)} nodes "
                       f"({names}{more}): {type(exc.error).__name__}: {exc.error}")
            if on_error == "raise":
                raise LoweringError(message + " (options={'on_error': 'fallback'} runs "
                                    "such graphs in PyTorch)") from exc.error
            _warn_fallback(message + "; they run in PyTorch")
            reason = f"ge-hub could not compile it: {exc.error}"
            forced.update(dict.fromkeys(exc.nodes, reason))
            continue
        return _splice(gm, built), _report(compute, built, forced)
    raise AssertionError("partitioning did not settle")  # each round forces a new node


def _warn_fallback(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, FallbackWarning, stacklevel=3)


def _is_view(node: torch.fx.Node) -> bool:
    """The node's result aliases its first argument (a view op, or an item of one)."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        source = node.args[0]
        return isinstance(source, torch.fx.Node) and _is_view(source)
    return isinstance(node.target, torch._ops.OpOverload) and node.target.is_view


def _output_views(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The view nodes between each graph output and the value it is a view of."""
    views = []
    for node in _flat_outputs(gm):
        while isinstance(node, torch.fx.Node) and _is_view(node):
            views.append(node)
            node = node.args[0]
    return views


def _strided_views(compute, support) -> list[torch.fx.Node]:
    """The views between each as_strided left to PyTorch and the value it is a view of.

    as_strided reads its input's storage, so that input must be eager's tensor: its
    views are taken by PyTorch, and their base, if ge-hub computes it, comes back in
    eager's layout (`ConvertedGraph.layouts`)."""
    views = []
    for node in compute:
        if node.target is _AS_STRIDED and not support.is_node_supported(None, node):
            source = node.args[0]
            while isinstance(source, torch.fx.Node) and _is_view(source):
                views.append(source)
                source = source.args[0]
    return views


def _lower_whole(gm, frozen, options, compute) -> tuple[Callable, GraphReport]:
    nodes = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    inputs = list(gm.graph.find_nodes(op="placeholder"))
    outputs = _flat_outputs(gm)
    function = _compile(nodes, inputs, outputs, frozen, gm, options)
    report = GraphReport(aten_nodes=len(compute), ge_nodes=len(compute), partitions=1,
                         functions=[function])
    return function, report


def _flat_outputs(gm) -> list:
    (result,) = gm.graph.output_node().args
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _compile(nodes, inputs, outputs, frozen, gm, options) -> GeFunction:
    converted = convert_nodes(nodes, inputs, outputs, frozen=frozen, module=gm)
    try:
        return GeFunction(converted, options)
    except Exception as exc:  # ge-hub rejected the graph: PyTorch keeps these nodes
        raise _PartitionFailed([n for n in nodes if _is_compute(n)], exc) from exc


def _propose(gm, support) -> list[list[torch.fx.Node]]:
    partitioner = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True)
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    result = []
    for partition in partitioner.propose_partitions():
        nodes = sorted(partition.nodes, key=order.__getitem__)
        if any(n.target not in _VIEW_OPS for n in nodes):
            result.append(nodes)
    return result


@dataclasses.dataclass
class _Built:
    nodes: list[torch.fx.Node]
    inputs: list[torch.fx.Node]
    outputs: list[torch.fx.Node]
    function: GeFunction


def _build(gm, nodes, frozen, options) -> _Built:
    members = set(nodes)
    inputs: dict[torch.fx.Node, None] = {}
    for node in nodes:
        for arg in node.all_input_nodes:
            if arg not in members:
                inputs.setdefault(arg)
    outputs = [n for n in nodes if any(u not in members for u in n.users)]
    function = _compile(nodes, list(inputs), outputs, frozen, gm, options)
    return _Built(nodes, list(inputs), outputs, function)


def _splice(gm: torch.fx.GraphModule, built: list[_Built]) -> torch.fx.GraphModule:
    """Replace each partition's nodes by one call of its compiled function."""
    graph = gm.graph
    for index, part in enumerate(built):
        name = f"ge_partition_{index}"
        gm.add_submodule(name, GeModule(part.function))
        members = set(part.nodes)
        with graph.inserting_after(part.nodes[-1]):
            call = graph.call_module(name, tuple(part.inputs))
        for position, out in enumerate(reversed(part.outputs)):
            with graph.inserting_after(call):
                item = graph.call_function(operator.getitem,
                                           (call, len(part.outputs) - 1 - position))
            item.meta = dict(out.meta)
            out.replace_all_uses_with(
                item, delete_user_cb=lambda user, members=members: user not in members)
        for node in reversed(part.nodes):
            graph.erase_node(node)
    gm = legalize_graph(gm)  # topological order: outputs may be read before the call
    gm.graph.lint()
    gm.recompile()
    return gm


def _report(compute, built, forced) -> GraphReport:
    in_ge = {n for part in built for n in part.nodes}
    views = [n for n in compute if forced.get(n) == _OUTPUT_VIEW]
    report = GraphReport(aten_nodes=len(compute) - len(views), partitions=len(built),
                         output_views=len(views), functions=[p.function for p in built])
    for node in compute:
        if forced.get(node) == _OUTPUT_VIEW:
            continue
        if node in in_ge:
            report.ge_nodes += 1
            continue
        name = op_name(node.target)
        report.fallback_ops[name] += 1
        reason = forced.get(node) or unsupported_reason(node) or "a view, left to PyTorch"
        report.fallback_reasons.setdefault(name, reason)
    return report
