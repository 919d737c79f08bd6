"""The ge-hub plugin: what ge-paddle registers through the `ge_hub` entry point.

Importing this module is cheap: it imports neither paddle nor the readers.
"""

from __future__ import annotations

import ge_hub
from ge_hub.plugin import Frontend

# The first bytes PIR's serializer writes into a program `.json`.
PIR_MAGIC = b'{"base_code":{"magic":"pir"'


def _run_paddle(model, feeds, graph=None, trusted=False):
    from ge_paddle.reference import run_paddle

    return run_paddle(model, feeds, graph, trusted)


@ge_hub.hookimpl
def register_frontends(registry):
    from ge_paddle import frontend

    registry.add_frontend(Frontend(
        name="paddle",
        accepts=frontend.accepts,
        load=frontend.load,
        suffixes=(".pdmodel", ".pdiparams"),
        magic=(PIR_MAGIC,),
        object_modules=("paddle",),
        # `model` for model.json + model.pdiparams, and a published model's directory.
        claims_path=frontend.claims_path,
        reference=_run_paddle,  # ge-hub compare --against paddle (outputs only)
        reference_name="paddle",
        doc="PaddlePaddle: saved inference models (PIR .json or legacy .pdmodel, with "
            ".pdiparams; a path, prefix or directory) read without paddle, and "
            "paddle.nn.Layer objects (input_spec= or example_inputs=)",
    ))
