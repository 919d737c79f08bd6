"""The ge-hub plugin: what ge-mindspore registers through the `ge_hub` entry point.

Importing this module is cheap: it imports neither mindspore nor the importer.
"""

from __future__ import annotations

import ge_hub
from ge_hub.plugin import Frontend


def _run_mindspore(model, feeds, graph=None, trusted=False):
    from ge_mindspore.reference import run_mindspore

    return run_mindspore(model, feeds, graph, trusted)


@ge_hub.hookimpl
def register_frontends(registry):
    from ge_mindspore import frontend

    registry.add_frontend(Frontend(
        name="mindspore",
        accepts=frontend.accepts,
        load=frontend.load,
        suffixes=frontend.SUFFIXES,
        object_modules=("mindspore",),
        reference=_run_mindspore,  # ge-hub compare --against mindspore (outputs only)
        reference_name="mindspore",
        doc="MindSpore: .mindir files (read without importing mindspore) and "
            "mindspore.nn.Cell objects (with example_inputs=..., exported to MINDIR)",
    ))
