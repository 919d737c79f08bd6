"""The MindSpore frontend: which models it accepts and how it opens them.

`accepts` runs on every model handed to `ge_hub.load`, so it never imports mindspore: a
path is accepted by its `.mindir` suffix, an object when mindspore is already imported
(a Cell implies it) and the object is a `mindspore.nn.Cell`. Reading a file imports
only MINDIR's protobuf module (`ge_mindspore.proto`); a Cell needs mindspore to export
it (`ge_mindspore.cell`).
"""

from __future__ import annotations

import os
import sys
from typing import Any

SUFFIXES = (".mindir",)


def accepts(model: Any) -> bool:
    if isinstance(model, (str, os.PathLike)):
        return os.path.splitext(os.fspath(model))[1].lower() in SUFFIXES
    nn = sys.modules.get("mindspore.nn")
    return nn is not None and isinstance(model, nn.Cell)


def load(model: Any, *, example_inputs: Any = None, ctx: Any = None) -> Any:
    """Import a .mindir file or a `mindspore.nn.Cell` (with `example_inputs`, a tuple of
    mindspore Tensors or NumPy arrays) as a verified ge-hub Graph. `ctx` is the context
    `ge_hub.load` hands over: ops are looked up, and the graph verified, in its registry."""
    registry = None if ctx is None else ctx.registry
    if isinstance(model, (str, os.PathLike)):
        if example_inputs is not None:
            raise TypeError("example_inputs is for mindspore.nn.Cell models; a MINDIR file "
                            "records its input types")
        from ge_mindspore.importer import load_file

        return load_file(os.fspath(model), registry=registry)
    from ge_mindspore.cell import load_cell

    return load_cell(model, example_inputs, registry=registry)
