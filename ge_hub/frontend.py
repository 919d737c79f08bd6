"""`ge_hub.load`: hand a model to the frontend plugin that accepts it.

Frontends come from plugins (`register_frontends`). Each says whether it accepts a
model (a path by suffix or magic bytes, a Python object by type); the first that does
loads it. When none does, the error lists the installed frontends and names the extra
that would add the missing one.
"""

from __future__ import annotations

import os
from typing import Any

from ge_hub.errors import FrontendNotFoundError
from ge_hub.ir.graph import Graph

# Which extra brings the frontend for a file suffix or a framework's Python objects.
EXTRA_BY_SUFFIX = {
    ".onnx": "onnx",
    ".pt": "torch",
    ".pt2": "torch",
    ".pdmodel": "paddle",
    ".json": "paddle",
    ".mindir": "mindspore",
}
EXTRA_BY_MODULE = {
    "onnx": "onnx",
    "torch": "torch",
    "paddle": "paddle",
    "mindspore": "mindspore",
}


def load(model: Any, **options: Any) -> Graph:
    """Import `model` (a path or a framework object) as a ge-hub Graph."""
    from ge_hub.plugins import get_registry

    if isinstance(model, Graph):
        return model
    frontends = get_registry().frontends()
    for frontend, _plugin in frontends:
        if frontend.accepts(model):
            return frontend.load(model, **options)
    raise FrontendNotFoundError(_not_found_message(model, [f.name for f, _ in frontends]))


def _describe(model: Any) -> str:
    if isinstance(model, (str, os.PathLike)):
        return f"model file {os.fspath(model)!r}"
    return f"model of type {type(model).__module__}.{type(model).__qualname__}"


def suggested_extra(model: Any) -> str | None:
    """The `ge-hub[...]` extra whose frontend would load this model, if we can tell."""
    if isinstance(model, (str, os.PathLike)):
        suffix = os.path.splitext(os.fspath(model))[1].lower()
        return EXTRA_BY_SUFFIX.get(suffix)
    root = type(model).__module__.split(".")[0]
    return EXTRA_BY_MODULE.get(root)


def _not_found_message(model: Any, installed: list[str]) -> str:
    listing = ", ".join(sorted(installed)) if installed else "none"
    message = (f"no installed frontend accepts the {_describe(model)} "
               f"(installed frontends: {listing})")
    if isinstance(model, (str, os.PathLike)) and not os.path.exists(model):
        message += "; the file does not exist"
    extra = suggested_extra(model)
    if extra:
        message += f"; install one with: pip install ge-hub[{extra}]"
    return message
