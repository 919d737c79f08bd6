"""ge-hub as an `onnx.backend`: what the ONNX backend test suite drives.

    rep = ge_onnx.backend.prepare(model)      # import once
    outputs = rep.run([x])                    # run as often as wanted

`prepare` imports the model; running it is `execute`, the one function that decides how
a ge-hub graph runs: ge-hub's compiler and C executor. `execute_with_summary` also returns
what the compiled plan ran where (`CompiledModel.summary()`), which the conformance
suite reports per test group (its Python steps and plan-time folds).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from ge_hub.plugin import Graph
from onnx.backend.base import Backend, BackendRep

from ge_onnx.importer import import_model

DEVICES = ("CPU",)


def execute(graph: Graph, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Run `graph` on inputs given by name through ge-hub's compiler and C executor."""
    return execute_with_summary(graph, inputs)[0]


def execute_with_summary(graph: Graph, inputs: Mapping[str, np.ndarray]
                         ) -> tuple[list[np.ndarray], dict[str, Any]]:
    """`execute`, and the compiled model's `summary()` after the run."""
    import ge_hub

    compiled = ge_hub.compile(graph)
    outputs = compiled.run(dict(inputs))
    return outputs, compiled.summary()


class GeHubRep(BackendRep):
    """A prepared model: the imported graph, ready to run."""

    def __init__(self, graph: Graph):
        self.graph = graph

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        names = self.graph.input_names
        if isinstance(inputs, Mapping):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) != len(names):
                raise ValueError(f"the model takes {len(names)} inputs ({', '.join(names)}), "
                                 f"got {len(inputs)}")
            feeds = dict(zip(names, inputs))
        return tuple(execute(self.graph, feeds))


class GeHubBackend(Backend):
    """onnx.backend interface over ge-hub."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> GeHubRep:
        if not cls.supports_device(device):
            raise ValueError(f"ge-hub runs on {', '.join(DEVICES)}, not {device!r}")
        return GeHubRep(import_model(model, base_dir=kwargs.get("base_dir", "")))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Sequence[np.ndarray], device: str = "CPU",
                 outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None,
                 **kwargs: Any) -> tuple[np.ndarray, ...]:
        """Run one node on concrete inputs, by wrapping it in a one-node model."""
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        model = single_node_model(node, inputs, opset)
        return cls.run_model(model, [x for x in inputs if x is not None], device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return str(device).split(":")[0].upper() in DEVICES


def single_node_model(node: onnx.NodeProto, inputs: Sequence[np.ndarray | None],
                      opset: int) -> onnx.ModelProto:
    """A model whose graph is `node` alone, with graph inputs typed like `inputs`."""
    graph_inputs = []
    for name, array in zip(node.input, inputs):
        if not name or array is None:
            continue
        array = np.asarray(array)
        graph_inputs.append(onnx.helper.make_tensor_value_info(
            name, onnx.helper.np_dtype_to_tensor_dtype(array.dtype), array.shape))
    graph_outputs = [onnx.helper.make_empty_tensor_value_info(name)
                     for name in node.output if name]
    graph = onnx.helper.make_graph([node], f"{node.op_type}_node", graph_inputs, graph_outputs)
    domains = {"", node.domain} if node.domain else {""}
    return onnx.helper.make_model(
        graph, opset_imports=[onnx.helper.make_opsetid(d, opset if d in ("", "ai.onnx") else 1)
                              for d in sorted(domains)])


# The module itself is a backend too: onnx.backend.test.BackendTest(ge_onnx.backend).
is_compatible = GeHubBackend.is_compatible
prepare = GeHubBackend.prepare
run_model = GeHubBackend.run_model
run_node = GeHubBackend.run_node
supports_device = GeHubBackend.supports_device
