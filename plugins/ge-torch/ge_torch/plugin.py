"""The ge-hub plugin: what ge-torch registers through the `ge_hub` entry point.

Importing this module is cheap: it imports neither torch nor the converters. `accepts`
recognizes PyTorch objects only when torch is already imported (a model object implies
it is), and `.pt2` files (saved ExportedPrograms) by their suffix.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import ge_hub
from ge_hub.plugin import Frontend


def accepts(model: Any) -> bool:
    if isinstance(model, (str, os.PathLike)):
        return os.path.splitext(os.fspath(model))[1].lower() == ".pt2"
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    return isinstance(model, (torch.nn.Module, torch.export.ExportedProgram))


def executes_code(model: Any) -> bool:
    """Files: torch's formats are zip archives of pickles, and loading one runs them."""
    return isinstance(model, (str, os.PathLike))


def load(model: Any, **options: Any):
    from ge_torch.export import load as load_torch

    return load_torch(model, **options)


def _run_torch(model: Any, feeds, graph, trusted: bool = False):
    from ge_torch.reference import run_torch

    return run_torch(model, feeds, graph, trusted)


@ge_hub.hookimpl
def register_frontends(registry):
    registry.add_frontend(Frontend(
        name="torch",
        accepts=accepts,
        load=load,
        suffixes=(".pt2",),
        object_modules=("torch",),
        # .pt2 archives hold pickles that torch.export.load unpickles.
        executes_code=executes_code,
        reference=_run_torch,  # ge-hub compare --against torch
        reference_name="torch",
        doc="PyTorch: nn.Module (with example_inputs=...), torch.export.ExportedProgram "
            "and .pt2 files, through torch.export and ge-torch's ATen converters",
    ))


@ge_hub.hookimpl
def register_ops(registry):
    from ge_torch.aten_op import aten

    registry.add_op(aten)
