"""MINDIR's protobuf classes, loaded from the installed mindspore without importing it.

`mindspore.export(..., file_format="MINDIR")` writes a `mind_ir.ModelProto`. Its message
classes ship inside the mindspore package as `mindspore/train/mind_ir_pb2.py`, a plain
protoc module that needs only `google.protobuf`. Importing `mindspore` itself costs about
1.5 s and hundreds of MB, so the module is found with `importlib.util.find_spec`, which
locates the package without running its `__init__`, and executed from its file. When
mindspore is already imported, its own module is used, so that the process has one set
of classes.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from types import ModuleType

from ge_hub.plugin import SerializationError

_MODULE = "mindspore.train.mind_ir_pb2"


@functools.cache
def mind_ir() -> ModuleType:
    """The `mind_ir_pb2` module of the installed mindspore."""
    loaded = sys.modules.get(_MODULE)
    if loaded is not None:
        return loaded
    spec = importlib.util.find_spec("mindspore")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("reading MINDIR needs the mindspore package installed (its "
                          "mind_ir_pb2 module defines the format): pip install ge-mindspore")
    for location in spec.submodule_search_locations:
        path = os.path.join(location, "train", "mind_ir_pb2.py")
        if os.path.isfile(path):
            break
    else:
        raise ImportError(f"the installed mindspore ({list(spec.submodule_search_locations)}) "
                          "has no train/mind_ir_pb2.py")
    # A private name: the module must not pose as part of a mindspore package that was
    # never initialized.
    module_spec = importlib.util.spec_from_file_location("_ge_mindspore_mind_ir_pb2", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def read_model_file(path: str):
    """Parse a .mindir file into a `mind_ir.ModelProto`, with a clear error for what is
    not one."""
    from google.protobuf.message import DecodeError

    if not os.path.exists(path):
        raise FileNotFoundError(f"MINDIR file {path!r} does not exist")
    if os.path.isdir(path):
        raise IsADirectoryError(f"MINDIR path {path!r} is a directory, not a model file")
    with open(path, "rb") as file:
        data = file.read()
    if not data:
        raise SerializationError(f"MINDIR file {path!r} is empty")
    model = mind_ir().ModelProto()
    try:
        model.ParseFromString(data)
    except DecodeError as exc:
        raise SerializationError(f"MINDIR file {path!r} ({len(data)} bytes) is not a valid "
                                 f"MINDIR protobuf (truncated, encrypted or another format): "
                                 f"{exc}") from None
    if not model.HasField("graph") or not model.graph.name:
        raise SerializationError(f"MINDIR file {path!r} ({len(data)} bytes) holds no graph")
    return model
