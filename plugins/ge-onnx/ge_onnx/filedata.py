"""Reading an ONNX file without holding its weights twice.

`onnx.load` reads the whole file into one bytes object and parses it into a ModelProto
that copies every initializer's `raw_data`; converting those to NumPy copies them once
more. For a model whose weights are most of its file (BERT-base: 324 of 340 MB), the
peak is two to three times the weights. `read_stripped` instead walks the protobuf wire
format of the file (ModelProto -> graph -> initializer -> raw_data) reading everything
except the large `raw_data` fields of the main graph's initializers, which it records
as (offset, length) in the file; the small rest is parsed by protobuf as usual, and
`FileData.array` later reads each initializer straight into its NumPy array. So each
weight is in memory once, in its own mapping where large (freed to the system as soon as
the compiler has replaced it by its prepacked form).

Only plain little-endian element types are deferred (float64/32/16, signed and unsigned
integers, bool); anything else, and any file the walk does not understand, is parsed
whole as before (the caller falls back to plain parsing, which reports errors).
"""

from __future__ import annotations

import dataclasses
import io
import mmap
import os
import sys

import numpy as np
from onnx import TensorProto

# Initializers smaller than this stay in the parsed proto (not worth a read each).
DEFER_BYTES = 4096
# Initializers at least this large get their own anonymous mapping (`_empty`).
MAP_BYTES = 1 << 20

_PLAIN = {
    TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64,
    TensorProto.FLOAT16: np.float16, TensorProto.INT8: np.int8, TensorProto.INT16: np.int16,
    TensorProto.INT32: np.int32, TensorProto.INT64: np.int64, TensorProto.UINT8: np.uint8,
    TensorProto.UINT16: np.uint16, TensorProto.UINT32: np.uint32,
    TensorProto.UINT64: np.uint64, TensorProto.BOOL: np.bool_,
}

# Field numbers (onnx.proto): ModelProto.graph, GraphProto.initializer,
# TensorProto.dims, .data_type, .raw_data.
_MODEL_GRAPH, _GRAPH_INITIALIZER = 7, 5
_TENSOR_DIMS, _TENSOR_DATA_TYPE, _TENSOR_RAW_DATA = 1, 2, 9


class _NotUnderstood(Exception):
    """The walk met something it does not handle: parse the file whole instead."""


@dataclasses.dataclass
class FileData:
    """Where the deferred initializers' bytes are: initializer index -> (offset, length)
    in `path`."""

    path: str
    spans: dict[int, tuple[int, int]]

    def array(self, index: int, tensor: TensorProto, where: str) -> np.ndarray:
        """The deferred data of initializer `index` (`tensor`: its stripped proto)."""
        from ge_hub.plugin import SerializationError

        offset, length = self.spans[index]
        dtype = np.dtype(_PLAIN[tensor.data_type])
        shape = tuple(int(d) for d in tensor.dims)
        count = int(np.prod(shape, dtype=np.int64))
        if count * dtype.itemsize != length:
            raise SerializationError(f"{where}: raw data of {length} bytes does not hold "
                                     f"shape {list(shape)} of {dtype}")
        array = _empty(shape, dtype, length)
        with open(self.path, "rb") as file:
            file.seek(offset)
            got = file.readinto(memoryview(array.reshape(-1).view(np.uint8)))
        if got != length:
            raise SerializationError(f"{where}: the model file ended inside its raw data")
        if sys.byteorder != "little" and dtype.itemsize > 1:
            array = array.byteswap()  # ONNX raw data is little-endian
        return array


def _empty(shape: tuple[int, ...], dtype: np.dtype, nbytes: int) -> np.ndarray:
    """An array for a large weight in its own anonymous mapping: when the compiler lets
    it go (once prepacked), its pages go back to the system at once. From malloc, it
    could sit in the middle of the heap (glibc raises its mmap threshold after the first
    large free), and its freed memory would stay with the process."""
    if nbytes < MAP_BYTES:
        return np.empty(shape, dtype)
    return np.frombuffer(mmap.mmap(-1, nbytes), dtype).reshape(shape)


def read_stripped(path: str) -> tuple[bytes, FileData] | None:
    """The file's bytes without the main graph's large plain initializer data, and where
    that data is; None when nothing was deferred or the walk did not understand the file."""
    size = os.path.getsize(path)
    try:
        with open(path, "rb", buffering=1 << 16) as file:
            spans: dict[int, tuple[int, int]] = {}
            data = _strip_model(file, size, spans)
    except (_NotUnderstood, EOFError):
        return None
    return (data, FileData(path, spans)) if spans else None


def _read_varint(file: io.BufferedReader) -> int:
    result = shift = 0
    while True:
        byte = file.read(1)
        if not byte:
            raise EOFError
        result |= (byte[0] & 0x7F) << shift
        if not byte[0] & 0x80:
            return result
        shift += 7
        if shift > 63:
            raise _NotUnderstood


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_exact(file: io.BufferedReader, count: int, end: int) -> bytes:
    if count < 0 or file.tell() + count > end:
        raise _NotUnderstood
    data = file.read(count)
    if len(data) != count:
        raise EOFError
    return data


def _copy_field(file: io.BufferedReader, key: int, end: int) -> bytes:
    """One field as it is in the file (its key already read), re-encoded."""
    wire = key & 7
    if wire == 0:
        return _varint(key) + _varint(_read_varint(file))
    if wire == 1:
        return _varint(key) + _read_exact(file, 8, end)
    if wire == 5:
        return _varint(key) + _read_exact(file, 4, end)
    if wire == 2:
        length = _read_varint(file)
        return _varint(key) + _varint(length) + _read_exact(file, length, end)
    raise _NotUnderstood  # groups: not in ONNX files


def _fields(file: io.BufferedReader, end: int):
    while file.tell() < end:
        key = _read_varint(file)
        if key >> 3 == 0:
            raise _NotUnderstood
        yield key
    if file.tell() != end:
        raise _NotUnderstood


def _strip_model(file, size: int, spans: dict) -> bytes:
    out = bytearray()
    for key in _fields(file, size):
        if key == (_MODEL_GRAPH << 3 | 2):
            length = _read_varint(file)
            graph = _strip_graph(file, file.tell() + length, spans)
            out += _varint(key) + _varint(len(graph)) + graph
        else:
            out += _copy_field(file, key, size)
    return bytes(out)


def _strip_graph(file, end: int, spans: dict) -> bytes:
    out = bytearray()
    index = 0
    for key in _fields(file, end):
        if key == (_GRAPH_INITIALIZER << 3 | 2):
            length = _read_varint(file)
            if length < DEFER_BYTES:
                tensor = _read_exact(file, length, end)
            else:
                tensor = _strip_tensor(file, file.tell() + length, index, spans)
            out += _varint(key) + _varint(len(tensor)) + tensor
            index += 1
        else:
            out += _copy_field(file, key, end)
    return bytes(out)


def _strip_tensor(file, end: int, index: int, spans: dict) -> bytes:
    out = bytearray()
    data_type = None
    for key in _fields(file, end):
        if key == (_TENSOR_DATA_TYPE << 3):
            data_type = _read_varint(file)
            out += _varint(key) + _varint(data_type)
        elif key == (_TENSOR_RAW_DATA << 3 | 2) and data_type in _PLAIN:
            length = _read_varint(file)
            offset = file.tell()
            if offset + length > end:
                raise _NotUnderstood
            file.seek(offset + length)
            spans[index] = (offset, length)
        else:
            out += _copy_field(file, key, end)
    return bytes(out)
