"""The `torch.compile` backend: `torch.compile(model, backend="ge")`.

PyTorch finds it through the `torch_dynamo_backends` entry point named `ge`, which
points at `ge_backend`, a plain function (a module that also called `register_backend`
for the same name would trip PyTorch's duplicate-name assertion). Options come through
`torch.compile(..., options={...})`:

    freeze           parameters and buffers become constants of the ge-hub graph (default
                     True); each call checks that the tensors passed in their places
                     are the ones copied, unchanged (`ge_torch.runtime`): another
                     instance's get a plan of their own, a changed one is re-copied
    compile_options  the `options` of `ge_hub.compile` (disable_passes, dump_after, ...)
    on_error         "raise" (default): a converter that fails or a graph ge-hub cannot
                     compile raises (`ConverterError`, `LoweringError`); "fallback": those
                     nodes run in PyTorch, with a `FallbackWarning` saying why (once per
                     reason). Ops ge-hub does not have always run in PyTorch (see
                     `ge_torch.explain`); they are no error.

For each graph Dynamo captures (graph breaks make several), `aot_autograd` lowers it to
core ATen with `ge_torch.decompositions`, functionalized: an input mutated in place
comes back as an extra output that AOT Autograd's wrapper copies into the input, so the
mutation is honoured. `ge_torch.lowering` then runs the supported parts in ge-hub and
the rest in PyTorch. Inference is the scope: a graph called with grad mode on and
tensors that require grad (training) runs in eager PyTorch, with a warning.

Each lowering appends a `GraphReport` to `ge_torch.backend.REPORTS` (the last few, for
`ge_torch.explain`) and logs a one-line summary on the `ge_torch` logger.
"""

from __future__ import annotations

import collections
import functools
import logging
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.fx

log = logging.getLogger("ge_torch")

# The reports of the most recent lowerings, newest last.
REPORTS: collections.deque = collections.deque(maxlen=64)

KNOWN_OPTIONS = {"freeze", "compile_options", "on_error"}


def ge_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any):
    """The `torch.compile` backend function (`backend="ge"`)."""
    options = dict(kwargs.pop("options", None) or {})
    unknown = set(options) - KNOWN_OPTIONS
    if unknown or kwargs:
        raise ValueError(f"ge backend: unknown options {sorted(unknown | set(kwargs))}; "
                         f"known: {sorted(KNOWN_OPTIONS)}")
    return GeBackend(**options)(gm, example_inputs)


class GeBackend:
    """A configured backend; `torch.compile(model, backend=GeBackend(freeze=False))` works
    too."""

    def __init__(self, freeze: bool = True, compile_options: Mapping[str, Any] | None = None,
                 reports: list | None = None, on_error: str = "raise"):
        from ge_torch.lowering import ON_ERROR

        if on_error not in ON_ERROR:
            raise ValueError(f"ge backend: on_error must be one of {ON_ERROR}, "
                             f"got {on_error!r}")
        self.freeze = freeze
        self.compile_options = dict(compile_options or {})
        self.reports = reports
        self.on_error = on_error

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]):
        from torch._dynamo.backends.common import aot_autograd

        from ge_torch.decompositions import decomposition_table, lowering_mode

        if _needs_grad(example_inputs):
            warnings.warn("ge backend: this graph records autograd (grad mode is on and "
                          "inputs require grad, as in training); ge-hub covers inference, "
                          "so it runs in eager PyTorch. Call the model under "
                          "torch.no_grad() or torch.inference_mode() to run it in ge-hub.",
                          stacklevel=2)
            return gm.forward
        compiler = functools.partial(self._compile_inference, dynamo_gm=gm,
                                     real_inputs=list(example_inputs))
        with lowering_mode():
            return aot_autograd(fw_compiler=compiler, decompositions=decomposition_table(),
                                keep_inference_input_mutations=False)(gm, example_inputs)

    def _compile_inference(self, aot_gm: torch.fx.GraphModule, fake_inputs, *, dynamo_gm,
                           real_inputs):
        from torch._functorch.aot_autograd import make_boxed_func
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        from ge_torch.lowering import lower

        frozen = self._frozen(aot_gm, dynamo_gm, real_inputs) if self.freeze else {}
        # AOT Autograd calls its compiler under a FakeTensorMode; the conversion copies
        # real parameters and must not be traced.
        with unset_fake_temporarily():
            function, report = lower(aot_gm, frozen, self.compile_options, self.on_error)
        REPORTS.append(report)
        if self.reports is not None:
            self.reports.append(report)
        _log_report(report)
        return make_boxed_func(function)

    @staticmethod
    def _frozen(aot_gm, dynamo_gm, real_inputs) -> dict[torch.fx.Node, torch.Tensor]:
        """Placeholders of the AOT graph that are parameters or buffers nobody mutates."""
        placeholders = list(aot_gm.graph.find_nodes(op="placeholder"))
        # AOT Autograd's inputs: the Dynamo graph's own parameters and buffers (none when
        # Dynamo inlines modules, the default), then Dynamo's inputs.
        real = [*dict(dynamo_gm.named_parameters(remove_duplicate=False)).values(),
                *dict(dynamo_gm.named_buffers(remove_duplicate=False)).values(), *real_inputs]
        metadata = _fw_metadata()
        if metadata is None or len(real) != len(placeholders) or len(
                metadata.input_info) != len(placeholders):
            log.debug("ge-torch: cannot match AOT inputs to real tensors; nothing is frozen")
            return {}
        static = set(metadata.static_input_indices or ())
        frozen = {}
        for index, (node, tensor) in enumerate(zip(placeholders, real)):
            info = metadata.input_info[index]
            if type(tensor) not in (torch.Tensor, torch.nn.Parameter):
                continue  # a SymInt, or a tensor subclass
            if info.mutates_data or info.mutates_metadata:
                continue  # its value changes from call to call
            if index in static or isinstance(tensor, torch.nn.Parameter):
                frozen[node] = tensor
        return frozen


def _fw_metadata():
    from torch._guards import TracingContext

    context = TracingContext.try_get()
    return None if context is None else context.fw_metadata


def _needs_grad(example_inputs) -> bool:
    return torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs)


def _log_report(report) -> None:
    fallback = ", ".join(f"{op} x{n}" for op, n in report.fallback_ops.most_common())
    log.info("ge-torch: graph of %d ATen ops: %d in ge-hub (%d partitions)%s",
             report.aten_nodes, report.ge_nodes, report.partitions,
             f"; in PyTorch: {fallback}" if fallback else "")
