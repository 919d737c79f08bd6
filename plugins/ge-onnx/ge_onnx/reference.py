"""ONNX Runtime as the reference of `ge-hub compare --against onnxruntime`.

Every node output of the model becomes a graph output, so that ONNX Runtime returns the
intermediates too; its graph optimizations are off, so that each value is the one the
model's own node computes. Values are returned under their ONNX names, which are the
names ge-onnx gives them in the ge-hub graph.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def run_onnxruntime(model: Any, feeds: Mapping[str, np.ndarray], graph=None,
                    trusted: bool = False) -> dict[str, np.ndarray]:
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise RuntimeError("--against onnxruntime needs the onnxruntime package "
                           "(pip install onnxruntime)") from exc
    import onnx

    proto = onnx.load(model) if not isinstance(model, onnx.ModelProto) else model
    proto = _with_every_output(proto)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(proto.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    wanted = {i.name for i in session.get_inputs()}
    names = [o.name for o in session.get_outputs()]
    results = session.run(names, {k: v for k, v in feeds.items() if k in wanted})
    return {name: np.asarray(value) for name, value in zip(names, results)
            if isinstance(value, np.ndarray)}


def _with_every_output(proto):
    import onnx

    model = onnx.ModelProto()
    model.CopyFrom(proto)
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 (an output without a type is still returned)
        inferred = model
    typed = {v.name: v for v in inferred.graph.value_info}
    present = {o.name for o in model.graph.output}
    for node in model.graph.node:
        for name in node.output:
            if name and name not in present:
                present.add(name)
                model.graph.output.append(typed.get(name) or onnx.ValueInfoProto(name=name))
    return model
