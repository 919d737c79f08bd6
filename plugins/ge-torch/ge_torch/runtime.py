"""GeFunction: a converted graph compiled by ge-hub, called with PyTorch values.

Calling it hands the tensor arguments to the compiled model as NumPy arrays (sharing
memory when they are contiguous CPU tensors), and returns its outputs as tensors sharing
the arrays ge-hub wrote. Sizes and Python values among the outputs are computed from the
arguments' shapes.

Frozen parameters are constants of the compiled graph. PyTorch counts every in-place
change of a tensor in `tensor._version`; when a frozen tensor's count moved since it was
copied (an optimizer step, `load_state_dict`, `p.add_(...)` under no_grad), the function
recompiles the graph with the current values instead of using stale ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ge_hub
import numpy as np
import torch

from ge_torch.convert import ConvertedGraph, tensor_to_numpy


class GeFunction:
    """Call with the FX subgraph's input values (positionally); returns a tuple."""

    def __init__(self, converted: ConvertedGraph, options: Mapping[str, Any] | None = None):
        self.converted = converted
        self.options = dict(options or {})
        self.model = self._compile(converted.graph)
        self._versions = [t._version for _, t in converted.frozen]

    def _compile(self, graph: ge_hub.Graph) -> ge_hub.CompiledModel:
        shapes = self.converted.example_shapes
        if graph.inputs and all(v.type.is_static for v in graph.inputs):
            shapes = None
        # Compiling the plan for the traced example now, rather than on the first call,
        # reports a ge-hub problem while the caller can still leave the graph to PyTorch.
        return ge_hub.compile(graph, input_shapes=shapes, options=self.options)

    def __call__(self, *args: Any) -> tuple:
        if self.converted.frozen and self._stale():
            self._refresh_constants()
        arrays = [_to_numpy(args[i]) for i in self.converted.input_args]
        results = self.model.run(arrays)
        return tuple(self._output(spec, results, args) for spec in self.converted.outputs)

    def _output(self, spec: tuple[str, Any], results: list[np.ndarray], args) -> Any:
        kind, what = spec
        if kind == "ge":
            array = results[what]
            if not array.flags.writeable:  # a folded constant: the caller may write to it
                array = array.copy()
            return torch.from_numpy(array)
        if kind == "arg":
            return args[what]
        if kind == "sym":
            return self.converted.symbols.evaluate(what, args)
        return what

    # -- frozen parameters -------------------------------------------------------

    def _stale(self) -> bool:
        return any(t._version != v for (_, t), v in zip(self.converted.frozen, self._versions))

    def _refresh_constants(self) -> None:
        graph = self.converted.graph.copy()
        for name, tensor in self.converted.frozen:
            value = graph.find_value(name)
            array = tensor_to_numpy(tensor)
            array.setflags(write=False)
            value.const = array
        self.converted.graph = graph
        self.model = self._compile(graph)
        self._versions = [t._version for _, t in self.converted.frozen]

    def summary(self) -> dict[str, Any]:
        """ge-hub's summary of the plan used last (steps, fallback steps, memory)."""
        return self.model.summary()


class GeModule(torch.nn.Module):
    """A GeFunction as a module, so that it can be a call_module node of an FX graph."""

    def __init__(self, function: GeFunction):
        super().__init__()
        self.function = function

    def forward(self, *args):
        return self.function(*args)


def _to_numpy(value: Any) -> np.ndarray:
    if isinstance(value, int) and not isinstance(value, bool):
        return np.array(value, dtype=np.int64)  # a SymInt argument, as a scalar input
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"ge-torch: expected a tensor argument, got {type(value).__name__}")
    if value.requires_grad:
        value = value.detach()
    if value.device.type != "cpu":
        raise ValueError(f"ge-torch: a ge-hub graph runs on the CPU, got a tensor on "
                         f"{value.device}")
    if not value.is_contiguous():
        value = value.contiguous()
    return value.resolve_conj().resolve_neg().numpy()
