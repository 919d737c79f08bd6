"""Reading a `.pdiparams` file without Paddle.

`paddle.jit.save` and `paddle.static.save_inference_model` write every persistable
tensor of the program into one file, one after another, in the byte order of their names
(`save_combine` sorts them). Each tensor is Paddle's DenseTensor stream:

    uint32 version (0)
    uint64 LoD level count, then per level: uint64 byte size and that many bytes
    uint32 tensor version (0)
    int32 size of a TensorDesc protobuf, then the TensorDesc (field 1: data type enum,
          field 2: dims, int64)
    the elements, little-endian, row-major

The file has no names: the program says which tensors it holds (their names and types),
and the reader checks every shape and data type against what the program declares.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence

import numpy as np
from ge_hub.plugin import SerializationError

from ge_paddle import wire

# framework.proto's VarType.Type numbers of the tensor element types.
DTYPE_BY_ENUM: dict[int, str] = {
    0: "bool", 1: "int16", 2: "int32", 3: "int64", 4: "float16", 5: "float32",
    6: "float64", 20: "uint8", 21: "int8", 22: "bfloat16",
}


def numpy_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def read_params(path: str, expected: Sequence[tuple[str, str, Sequence[int]]]
                ) -> dict[str, np.ndarray]:
    """The tensors of `path`, by name. `expected` is (name, dtype, shape) per persistable
    tensor of the program, in any order; the file holds them sorted by name."""
    try:
        stream = open(path, "rb")
    except OSError as exc:
        raise SerializationError(f"cannot read Paddle parameter file {path!r}: {exc}") from None
    ordered = sorted(expected, key=lambda item: item[0].encode())
    arrays: dict[str, np.ndarray] = {}
    with stream:
        size = os.fstat(stream.fileno()).st_size
        for name, dtype, shape in ordered:
            where = f"parameter {name!r} in {path!r} (byte {stream.tell()})"
            array = _read_tensor(stream, size, where)
            if array.dtype != numpy_dtype(dtype) or \
                    list(array.shape) != [int(d) for d in shape]:
                raise SerializationError(
                    f"{where}: the file holds {array.dtype}{list(array.shape)}, the program "
                    f"declares {dtype}{list(shape)} (the parameter file does not belong to "
                    "this program)")
            arrays[name] = array
        left = size - stream.tell()
    if left:
        raise SerializationError(f"Paddle parameter file {path!r}: {left} bytes left after "
                                 f"the {len(ordered)} tensors the program declares")
    return arrays


def _read(stream, count: int, where: str) -> bytes:
    data = stream.read(count)
    if len(data) != count:
        raise SerializationError(f"{where}: the file ends inside a tensor")
    return data


def _read_tensor(stream, file_size: int, where: str) -> np.ndarray:
    (version, levels) = struct.unpack("<IQ", _read(stream, 12, where))
    if version != 0:
        raise SerializationError(f"{where}: tensor stream version {version}, expected 0")
    if levels > 64:
        raise SerializationError(f"{where}: {levels} LoD levels")
    for _ in range(levels):
        (size,) = struct.unpack("<Q", _read(stream, 8, where))
        if size > file_size:
            raise SerializationError(f"{where}: a LoD level of {size} bytes")
        _read(stream, size, where)
    (_, desc_size) = struct.unpack("<Ii", _read(stream, 8, where))
    if not 0 <= desc_size <= file_size:
        raise SerializationError(f"{where}: a TensorDesc of {desc_size} bytes")
    fields = wire.decode(_read(stream, desc_size, where), where)
    enum = wire.first(fields, 1, 5)
    if enum not in DTYPE_BY_ENUM:
        raise SerializationError(f"{where}: unsupported data type number {enum}")
    dims = [wire.signed(d) for d in wire.ints(fields, 2)]
    if any(d < 0 for d in dims):
        raise SerializationError(f"{where}: negative dimension in {dims}")
    dtype = numpy_dtype(DTYPE_BY_ENUM[enum])
    nbytes = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if nbytes > file_size - stream.tell():
        raise SerializationError(f"{where}: {dims} of {dtype} needs {nbytes} bytes, the file "
                                 f"has {file_size - stream.tell()} left")
    # Read straight into an aligned array: one copy of the data, in its final place.
    array = np.empty(dims, dtype=dtype.newbyteorder("<"))
    if nbytes and stream.readinto(memoryview(array.reshape(-1)).cast("B")) != nbytes:
        raise SerializationError(f"{where}: the file ends inside the tensor's data")
    return array if array.dtype == dtype else array.astype(dtype)
