"""MINDIR tensors and attribute values as NumPy arrays and Python values.

A `TensorProto` holds its data in `raw_data` (little-endian bytes, what export writes),
in typed repeated fields, or in an external file beside the model (`external_data`:
location relative to the model file's directory, offset, length; what export writes for
models over 1 GB). An `AttributeProto` is a scalar, a string, a tensor, a tuple or list
of attributes, `None`, or a monad (the side-effect tokens, `MONAD` here).
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
from ge_hub.plugin import SerializationError

# TensorProto.DataType -> NumPy dtype (the same numbers as AttributeProto's scalar types).
_DTYPES = {
    1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32,
    7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32,
    13: np.uint64, 14: np.complex64, 15: np.complex128, 17: np.float64,
}


class Monad:
    """A side-effect token (UMonad, IOMonad): ordering only, no data."""

    def __repr__(self) -> str:
        return "<monad>"


MONAD = Monad()


def numpy_dtype(data_type: int, where: str) -> np.dtype:
    if data_type == 16:
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    try:
        return np.dtype(_DTYPES[data_type])
    except KeyError:
        raise SerializationError(f"{where}: unsupported MINDIR data type {data_type}") from None


def tensor_to_array(tensor, where: str, base_dir: str = "") -> np.ndarray:
    """The data of a TensorProto (inline or external) as an array of its shape."""
    dtype = numpy_dtype(tensor.data_type, where)
    shape = tuple(int(d) for d in tensor.dims)
    if any(d < 0 for d in shape):
        raise SerializationError(f"{where}: a stored tensor has unknown dims {list(shape)}")
    count = math.prod(shape)  # exact: a NumPy product could wrap around to 0
    if tensor.HasField("external_data") and tensor.external_data.location:
        data = _read_external(tensor.external_data, where, base_dir)
    elif tensor.raw_data:
        data = tensor.raw_data
    else:
        for field in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
            values = getattr(tensor, field)
            if len(values):
                if len(values) != count:
                    raise SerializationError(f"{where}: {len(values)} values in {field} for "
                                             f"shape {list(shape)}")
                return np.asarray(values).astype(dtype).reshape(shape)
        if count == 0:
            return np.zeros(shape, dtype)
        raise SerializationError(f"{where}: the tensor of shape {list(shape)} has no data")
    expected = count * dtype.itemsize
    if len(data) != expected:
        raise SerializationError(f"{where}: {len(data)} bytes of data for {dtype.name} "
                                 f"{list(shape)}, which needs {expected}")
    return np.frombuffer(data, dtype=dtype.newbyteorder("<")).astype(dtype).reshape(shape)


def _read_external(external, where: str, base_dir: str) -> bytes:
    location = external.location
    if os.path.isabs(location) or ".." in location.replace("\\", "/").split("/"):
        raise SerializationError(f"{where}: external data location {location!r} must be a "
                                 "relative path inside the model's directory")
    path = os.path.join(base_dir, location)
    root = os.path.realpath(base_dir or ".")
    if not os.path.realpath(path).startswith(root + os.sep):
        raise SerializationError(f"{where}: external data {location!r} leads outside the "
                                 f"model's directory {root!r}")
    if external.offset < 0 or external.length < 0:
        raise SerializationError(f"{where}: negative offset or length in external data")
    try:
        with open(path, "rb") as file:
            file.seek(external.offset)
            data = file.read(external.length)
    except OSError as exc:
        raise SerializationError(f"{where}: cannot read external data {path!r}: {exc}") from None
    if len(data) != external.length:
        raise SerializationError(f"{where}: external data {path!r} ends before offset "
                                 f"{external.offset} + length {external.length}")
    return data


def attribute_value(attr, where: str, base_dir: str = "") -> Any:
    """A Python value for an AttributeProto: int, float, bool, str, array, tuple, None,
    MONAD, or the name of a function graph (for closures)."""
    kind = type(attr).AttributeType.Name(attr.type)
    if kind in ("TUPLE", "LIST"):
        return tuple(attribute_value(v, where, base_dir) for v in attr.values)
    if kind == "BOOL":
        return bool(attr.ints[0] if attr.ints else attr.i)
    if kind in ("INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"):
        return int(attr.ints[0] if attr.ints else attr.i)
    if kind == "FLOAT":
        return float(attr.floats[0] if attr.floats else attr.f)
    if kind == "DOUBLE":
        return float(attr.doubles[0] if attr.doubles else attr.d)
    if kind == "STRING":
        return (attr.strings[0] if attr.strings else attr.s).decode()
    if kind == "TENSORS":
        if len(attr.tensors) != 1:
            return tuple(tensor_to_array(t, where, base_dir) for t in attr.tensors)
        return tensor_to_array(attr.tensors[0], where, base_dir)
    if kind == "TENSOR":
        return tensor_to_array(attr.t, where, base_dir)
    if kind == "NONE":
        return None
    if kind in ("UMONAD", "IOMONAD"):
        return MONAD
    if kind == "TYPE_NULL":
        return None
    raise SerializationError(f"{where}: MINDIR attribute {attr.name!r} of kind {kind} is not "
                             "supported")
