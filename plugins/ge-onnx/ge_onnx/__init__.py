"""ge-onnx: ONNX models in and out of ge-hub.

    graph = ge_hub.load("model.onnx")          # through the frontend this plugin registers
    graph = ge_onnx.load(model_proto)          # the same, directly
    model_proto = ge_onnx.export(graph)        # any ge-hub graph back to ONNX
    ge_onnx.backend                            # an onnx.backend.base.Backend

Importing ge_onnx imports neither onnx nor ge-hub's op set; each name below is loaded
on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "load": ("ge_onnx.frontend", "load"),
    "import_model": ("ge_onnx.importer", "import_model"),
    "export": ("ge_onnx.exporter", "export"),
    "UnsupportedTypeError": ("ge_onnx.tensors", "UnsupportedTypeError"),
    "NEWEST_OPSET": ("ge_onnx.versions", "NEWEST_OPSET"),
    "OLDEST_OPSET": ("ge_onnx.versions", "OLDEST_OPSET"),
}

__all__ = ["NEWEST_OPSET", "OLDEST_OPSET", "UnsupportedTypeError", "backend", "export",
           "import_model", "load"]


def __getattr__(name: str) -> Any:
    if name == "backend":
        return importlib.import_module("ge_onnx.backend")
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'ge_onnx' has no attribute {name!r}")
