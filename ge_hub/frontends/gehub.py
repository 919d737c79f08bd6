"""The built-in frontend for ge-hub's own serialized IR (the files `ge_hub.ir.serialize.save`
writes), so that `ge_hub.load`, `ge_hub.compile` and `ge-hub run` open them like any other
model format.

A path is accepted by its `.gehub` suffix, or, whatever its suffix, when the file starts
with the serialized form's magic bytes; `accepts` reads only the file's first bytes, so it
stays cheap for every other model handed to `ge_hub.load`.
"""

from __future__ import annotations

import os
from typing import Any

from ge_hub.frontend import is_file_of
from ge_hub.ir.graph import Graph
from ge_hub.ir.serialize import MAGIC

SUFFIX = ".gehub"


def accepts(model: Any) -> bool:
    return is_file_of(model, (SUFFIX,), (MAGIC,))


def load(model: str | os.PathLike) -> Graph:
    """Read a serialized ge-hub graph and verify it (frontends hand out verified graphs)."""
    from ge_hub.ir import serialize

    path = os.fspath(model)
    if not os.path.exists(path):
        raise FileNotFoundError(f"ge-hub IR file {path!r} does not exist")
    if os.path.isdir(path):
        raise IsADirectoryError(f"ge-hub IR path {path!r} is a directory, not a model file")
    graph = serialize.load(path)
    graph.verify()
    return graph
