"""The ONNX frontend: which models it accepts and how it opens them.

`accepts` is called on every model handed to `ge_hub.load`, so it stays cheap and never
imports onnx for a model that is not already an onnx object: a path is accepted by its
`.onnx` suffix, or, for another suffix, by the first bytes of an ONNX protobuf; an object
by its type's module and name. `load` reads the file (with external data from beside
it; large initializers read straight into NumPy, `ge_onnx.filedata`) and hands the
ModelProto to `ge_onnx.importer`.
"""

from __future__ import annotations

import os
from typing import Any

from ge_hub.plugin import SerializationError

OLDEST_OPSET = 7  # kept in step with ge_onnx.versions, which imports onnx

# ModelProto fields an ONNX file starts with after ir_version (field 1, a varint):
# producer_name, producer_version, domain, model_version, doc_string, graph,
# opset_import, metadata_props, training_info, functions, configuration.
_SECOND_FIELDS = {2, 3, 4, 5, 6, 7, 8, 14, 20, 25, 26}


def accepts(model: Any) -> bool:
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if os.path.splitext(path)[1].lower() == ".onnx":
            return True
        return _looks_like_onnx_file(path)
    model_type = type(model)
    return model_type.__module__.split(".")[0] == "onnx" and model_type.__name__ == "ModelProto"


def _looks_like_onnx_file(path) -> bool:
    """True for a file that starts as a serialized ModelProto does."""
    try:
        with open(path, "rb") as file:
            head = file.read(3)
    except OSError:
        return False
    # 0x08: field 1 (ir_version) as a varint; a small version; then another model field.
    return (len(head) == 3 and head[0] == 0x08 and 1 <= head[1] <= 64
            and head[2] >> 3 in _SECOND_FIELDS)


def load(model: Any, *, base_dir: str | None = None, ctx: Any = None) -> Any:
    """Import an ONNX model (a path or a ModelProto) as a verified ge-hub Graph.

    `base_dir` is where external tensor data is read from; for a path it defaults to the
    file's directory, for a ModelProto to the current directory. `ctx` is the context
    `ge_hub.load` hands over: ops are looked up, and the graph verified, in its registry.
    """
    import onnx

    from ge_onnx.importer import import_model

    file_data = None
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        proto, file_data = read_model_file_lazily(path)
        if base_dir is None:
            base_dir = os.path.dirname(os.path.abspath(path))
    elif isinstance(model, onnx.ModelProto):
        proto = model
    else:
        raise TypeError(f"the ONNX frontend loads a path or an onnx.ModelProto, got "
                        f"{type(model).__module__}.{type(model).__qualname__}")
    return import_model(proto, base_dir=base_dir or "",
                        registry=None if ctx is None else ctx.registry, file_data=file_data)


def read_model_file_lazily(path: str):
    """(ModelProto, FileData or None): the file parsed without the large initializers'
    data, which the importer reads straight into NumPy (`ge_onnx.filedata`), so each
    weight is in memory once; a file the walk does not take is parsed whole."""
    from google.protobuf.message import DecodeError

    from ge_onnx.filedata import read_stripped

    if os.path.isfile(path):
        stripped = read_stripped(path)
        if stripped is not None:
            import onnx

            data, file_data = stripped
            proto = onnx.ModelProto()
            try:
                proto.ParseFromString(data)
            except DecodeError:
                proto = None  # parsed whole below, which reports the error
            if proto is not None and proto.ir_version != 0 and proto.HasField("graph"):
                return proto, file_data
    return read_model_file(path), None


def read_model_file(path: str):
    """Parse an ONNX file without its external data (tensors read it when imported)."""
    import onnx
    from google.protobuf.message import DecodeError

    if not os.path.exists(path):
        raise FileNotFoundError(f"ONNX model file {path!r} does not exist")
    if os.path.isdir(path):
        raise IsADirectoryError(f"ONNX model path {path!r} is a directory, not a model file")
    with open(path, "rb") as file:
        data = file.read()
    if not data:
        raise SerializationError(f"ONNX model file {path!r} is empty")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except DecodeError as exc:
        raise SerializationError(f"ONNX model file {path!r} ({len(data)} bytes) is not a "
                                 f"valid ONNX protobuf (truncated or another format): "
                                 f"{exc}") from None
    if proto.ir_version == 0 or not proto.HasField("graph"):
        raise SerializationError(f"ONNX model file {path!r} ({len(data)} bytes) does not hold "
                                 "an ONNX model (no ir_version or no graph)")
    return proto
