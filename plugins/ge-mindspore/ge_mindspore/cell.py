"""`mindspore.nn.Cell` -> ge-hub Graph, through a MINDIR file in a temporary directory.

`mindspore.export` traces the Cell in graph mode whatever the context's mode is; it is
tried as the context stands (PYNATIVE by default) and, if that fails, again with the
context switched to GRAPH_MODE (restored afterwards). The file is then read by the same
importer as any .mindir file.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from ge_hub.plugin import Graph, Registry


def load_cell(cell: Any, example_inputs: Any, *, registry: Registry | None = None) -> Graph:
    import mindspore as ms

    from ge_mindspore.importer import load_file

    if example_inputs is None:
        raise TypeError(f"loading a mindspore.nn.Cell ({type(cell).__qualname__}) needs "
                        "example_inputs=(tensor, ...): export traces it with them")
    if not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    inputs = tuple(x if isinstance(x, ms.Tensor) else ms.Tensor(x) for x in example_inputs)
    with tempfile.TemporaryDirectory(prefix="ge-mindspore-") as directory:
        path = os.path.join(directory, "model.mindir")
        export(cell, inputs, path)
        return load_file(path, registry=registry)


def export(cell: Any, inputs: tuple, path: str) -> None:
    """Write `cell` traced with `inputs` to the MINDIR file `path`."""
    import mindspore as ms

    base = path[:-len(".mindir")]
    try:
        ms.export(cell, *inputs, file_name=base, file_format="MINDIR")
    except Exception as first:  # noqa: BLE001 - retried in graph mode, then reported
        mode = ms.get_context("mode")
        if mode == ms.GRAPH_MODE:
            raise
        ms.set_context(mode=ms.GRAPH_MODE)
        try:
            ms.export(cell, *inputs, file_name=base, file_format="MINDIR")
        except Exception as second:
            raise second from first
        finally:
            ms.set_context(mode=mode)
    if not os.path.exists(path):
        # Parameters over 1 GB: export writes <base>_graph.mindir and <base>_variables/.
        split = base + "_graph.mindir"
        if not os.path.exists(split):
            raise FileNotFoundError(f"mindspore.export wrote no MINDIR file at {path!r}")
        os.replace(split, path)
