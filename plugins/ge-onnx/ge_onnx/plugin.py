"""The ge-hub plugin: what ge-onnx registers through the `ge_hub` entry point.

Importing this module is cheap: it imports neither onnx nor the importer. onnx is
imported when a model is actually loaded.
"""

from __future__ import annotations

import ge_hub
from ge_hub.plugin import Frontend


def _run_onnxruntime(model, feeds, graph=None, trusted=False):
    from ge_onnx.reference import run_onnxruntime

    return run_onnxruntime(model, feeds, graph, trusted)


@ge_hub.hookimpl
def register_frontends(registry):
    from ge_onnx import frontend

    registry.add_frontend(Frontend(
        name="onnx",
        accepts=frontend.accepts,
        load=frontend.load,
        suffixes=(".onnx",),
        # A serialized ModelProto starts with field 1 (ir_version, a small varint).
        magic=tuple(bytes([0x08, version]) for version in range(1, 65)),
        object_modules=("onnx",),
        reference=_run_onnxruntime,  # ge-hub compare --against onnxruntime
        reference_name="onnxruntime",
        doc="ONNX models: .onnx files and onnx.ModelProto objects, opsets "
            f"{frontend.OLDEST_OPSET} to the newest the installed onnx knows",
    ))
