"""The built-in frontend for ge-hub's own serialized IR (the files `ge_hub.ir.serialize.save`
writes), so that `ge_hub.load`, `ge_hub.compile` and `ge-hub run` open them like any other
model format.

A path is accepted by its `.gehub` suffix, or, whatever its suffix, when the file starts
with the serialized form's magic bytes; `accepts` reads at most those few bytes, so it
stays cheap for every other model handed to `ge_hub.load`.
"""

from __future__ import annotations

import os
from typing import Any

from ge_hub.ir.graph import Graph
from ge_hub.ir.serialize import MAGIC

SUFFIX = ".gehub"


def accepts(model: Any) -> bool:
    if not isinstance(model, (str, os.PathLike)):
        return False
    path = os.fspath(model)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if os.path.splitext(path)[1].lower() == SUFFIX:
        return True
    return _starts_with_magic(path)


def _starts_with_magic(path: str) -> bool:
    try:
        with open(path, "rb") as file:
            return file.read(len(MAGIC)) == MAGIC
    except OSError:  # missing, a directory, unreadable: not ours to judge
        return False


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
