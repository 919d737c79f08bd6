"""The built-in frontend for `.ghm` offline model files, so that `ge_hub.load`, `ge-hub run`
and `ge-hub inspect` take them like any other model format (claimed by the `.ghm` suffix
and by the file's magic bytes, whatever its name).

`ge_hub.load("m.ghm")` returns the model's stored graph (portable files; a file compiled
without it is refused with a pointer to `load_compiled`). To run the stored plans without
compiling, use `ge_hub.load_compiled`; `ge-hub run` does so for these files.
"""

from __future__ import annotations

import os
from typing import Any

from ge_hub.errors import OfflineModelError
from ge_hub.frontend import is_file_of
from ge_hub.ir.graph import Graph
from ge_hub.offline.layout import MAGIC, SUFFIX


def is_offline_file(model: Any) -> bool:
    """Whether `model` is a path to a `.ghm` file (by suffix, or by its magic bytes)."""
    return is_file_of(model, (SUFFIX,), (MAGIC,))


accepts = is_offline_file


def load(model: str | os.PathLike) -> Graph:
    """The graph stored in a portable `.ghm` file (verified, like every frontend's)."""
    from ge_hub.offline.reader import open_file

    file = open_file(model)
    graph = file.graph()
    if graph is None:
        raise OfflineModelError(f"{file.where} was compiled without its graph (not "
                                "portable): run its plans with ge_hub.load_compiled")
    graph.verify()
    return graph
