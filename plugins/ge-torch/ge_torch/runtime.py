"""GeFunction: a converted graph compiled by ge-hub, called with PyTorch values.

Calling it hands the tensor arguments to the compiled model as NumPy arrays (sharing
memory when they are contiguous CPU tensors), and returns its outputs as tensors sharing
the arrays ge-hub wrote, except an output that eager lays out densely in another order
(a permuted elementwise result): that one is copied into eager's strides, because
PyTorch code after the graph may read its storage (`as_strided`). Sizes and Python
values among the outputs are computed from the arguments' shapes.

A compiled graph is a function of every argument it is called with, parameters
included. Frozen parameters are constants of the compiled graph, copied from the tensors
the FX graph was traced with; but Dynamo passes parameters as arguments and reuses one
graph for every instance of a module class (a repeated block), so nothing guarantees
that the next call passes the same tensors. Each call therefore checks, for every frozen
constant, that the argument in its place is the tensor the constant was copied from (the
same object, or the same memory seen the same way) and that PyTorch's count of in-place
changes (`tensor._version`) has not moved since the copy:

- same tensors, unchanged: the compiled model is used as it is;
- same tensors, changed in place (an optimizer step, `load_state_dict`): the graph is
  compiled again with the current values;
- other tensors (another instance): a model frozen on those is compiled and cached
  beside the first, up to `MAX_FROZEN_VARIANTS`; beyond that, one model compiled with
  the constants turned back into inputs serves every other set of tensors.

Cached variants hold their tensors weakly, so a deleted module's entry is dropped.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import ge_hub
import numpy as np
import torch

from ge_torch.convert import ConvertedGraph, FrozenInput, tensor_to_numpy

# Frozen copies per function; Dynamo's own cache holds 8 graphs per code object, and a
# model whose repeated blocks share a graph has as many parameter sets as blocks.
MAX_FROZEN_VARIANTS = 64


class GeFunction:
    """Call with the FX subgraph's input values (positionally); returns a tuple."""

    def __init__(self, converted: ConvertedGraph, options: Mapping[str, Any] | None = None):
        self.converted = converted
        self.options = dict(options or {})
        self.model = self._compile(converted.graph)
        # Newest first: the frozen models and the tensors each was copied from.
        self._variants: list[_Variant] = []
        if converted.frozen:
            self._variants.append(_Variant([f.tensor for f in converted.frozen], self.model))
        self._unfrozen: ge_hub.CompiledModel | None = None

    def _compile(self, graph: ge_hub.Graph) -> ge_hub.CompiledModel:
        shapes = self.converted.example_shapes
        if graph.inputs and all(v.type.is_static for v in graph.inputs):
            shapes = None
        elif shapes is not None:
            shapes = {v.name: shapes.get(v.name, list(v.type.shape)) for v in graph.inputs}
        # Compiling the plan for the traced example now, rather than on the first call,
        # reports a ge-hub problem while the caller can still leave the graph to PyTorch.
        return ge_hub.compile(graph, input_shapes=shapes, options=self.options)

    def __call__(self, *args: Any) -> tuple:
        arrays = [_to_numpy(args[i]) for i in self.converted.input_args]
        if self.converted.frozen:
            current = [args[f.position] for f in self.converted.frozen]
            model = self._model_for(current)
            if model is self._unfrozen:
                arrays += [_to_numpy(t) for t in current]
            self.model = model
        results = self.model.run(arrays)
        return tuple(self._output(spec, results, args) for spec in self.converted.outputs)

    def _output(self, spec: tuple[str, Any], results: list[np.ndarray], args) -> Any:
        kind, what = spec
        if kind == "ge":
            array = results[what]
            if not array.flags.writeable:  # a folded constant: the caller may write to it
                array = array.copy()
            tensor = torch.from_numpy(array)
            layout = self.converted.layouts[what] if self.converted.layouts else None
            if layout is not None:  # eager's dense, permuted layout (see convert.py)
                strides = [self.converted.symbols.evaluate(e, args) for e in layout]
                tensor = torch.empty_strided(tensor.shape, strides,
                                             dtype=tensor.dtype).copy_(tensor)
            return tensor
        if kind == "arg":
            return args[what]
        if kind == "sym":
            return self.converted.symbols.evaluate(what, args)
        return what

    # -- frozen parameters -------------------------------------------------------

    def _model_for(self, current: list[torch.Tensor]) -> ge_hub.CompiledModel:
        """The compiled model that computes with `current` as the frozen tensors."""
        _check_like(self.converted.frozen, current)
        self._variants = [v for v in self._variants if v.alive()]
        for index, variant in enumerate(self._variants):
            if variant.holds(current):
                if variant.versions != _versions(current):
                    variant.model = self._compile(self._frozen_graph(current))
                    variant.versions = _versions(current)
                if index:
                    self._variants.insert(0, self._variants.pop(index))
                return variant.model
        if len(self._variants) < MAX_FROZEN_VARIANTS:
            variant = _Variant(current, self._compile(self._frozen_graph(current)))
            self._variants.insert(0, variant)
            return variant.model
        if self._unfrozen is None:
            self._unfrozen = self._compile(self._unfrozen_graph())
        return self._unfrozen

    def _frozen_graph(self, tensors: Sequence[torch.Tensor]) -> ge_hub.Graph:
        """The converted graph with its frozen constants copied from `tensors`."""
        graph = self.converted.graph.copy()
        for frozen, tensor in zip(self.converted.frozen, tensors):
            array = tensor_to_numpy(tensor)
            array.setflags(write=False)
            graph.find_value(frozen.name).const = array
        return graph

    def _unfrozen_graph(self) -> ge_hub.Graph:
        """The converted graph with its frozen constants as inputs, after the others."""
        graph = self.converted.graph.copy()
        for frozen in self.converted.frozen:
            value = graph.find_value(frozen.name)
            graph.constants.remove(value)
            value.const = None
            graph.inputs.append(value)
        graph.verify()
        return graph

    def summary(self) -> dict[str, Any]:
        """ge-hub's summary of the plan used last (steps, fallback steps, memory)."""
        return self.model.summary()


class _Variant:
    """A model compiled with constants copied from `tensors` (held weakly) at `versions`."""

    def __init__(self, tensors: Sequence[torch.Tensor], model: ge_hub.CompiledModel):
        self.refs = [weakref.ref(t) for t in tensors]
        self.versions = _versions(tensors)
        self.model = model

    def alive(self) -> bool:
        return all(r() is not None for r in self.refs)

    def holds(self, tensors: Sequence[torch.Tensor]) -> bool:
        return all(_same_tensor(r(), t) for r, t in zip(self.refs, tensors))


def _versions(tensors: Sequence[torch.Tensor]) -> list[int]:
    return [t._version for t in tensors]


def _same_tensor(a: torch.Tensor | None, b: torch.Tensor) -> bool:
    """`a` and `b` are one tensor, or views of one storage that see the same elements
    (AOT Autograd may pass an alias of a parameter rather than the parameter itself).
    `a` is alive while this runs, so its storage cannot have been reused by another."""
    if a is None:
        return False
    if a is b:
        return True
    return (a.dtype == b.dtype and a.device == b.device and a.shape == b.shape
            and a.stride() == b.stride() and a.storage_offset() == b.storage_offset()
            and a.numel() > 0
            and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())


def _check_like(frozen: Sequence[FrozenInput], current: Sequence[Any]) -> None:
    for spec, tensor in zip(frozen, current):
        if not isinstance(tensor, torch.Tensor) or (
                tensor.dtype != spec.tensor.dtype or tensor.shape != spec.tensor.shape):
            got = (f"{tensor.dtype}{list(tensor.shape)}" if isinstance(tensor, torch.Tensor)
                   else type(tensor).__name__)
            raise TypeError(f"ge-torch: argument {spec.position} was a "
                            f"{spec.tensor.dtype}{list(spec.tensor.shape)} tensor when the "
                            f"graph was compiled (frozen as {spec.name!r}), got {got}")


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
