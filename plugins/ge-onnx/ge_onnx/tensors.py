"""ONNX element types, tensors and value types, both ways, in ge-hub's terms.

ONNX numbers its element types (`TensorProto.FLOAT` is 1); ge-hub names them
(`DType.FLOAT32`). ONNX has types ge-hub lacks (strings, complex numbers, float6);
meeting one is an `UnsupportedTypeError` that says where the type was found, never a
silent conversion.

A TensorProto packs 4-bit elements two to a byte and 2-bit ones four to a byte; ge-hub
(like ml_dtypes) keeps one element per byte. onnx's numpy_helper packs in `from_array`
and unpacks in `to_array` (into ml_dtypes arrays), so tensors pass through it both ways.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable

import numpy as np
import onnx
from ge_hub.plugin import DType, GeHubError, SerializationError, Sym, TensorType
from onnx import TensorProto, numpy_helper

TO_ONNX: dict[DType, int] = {
    DType.FLOAT32: TensorProto.FLOAT,
    DType.FLOAT64: TensorProto.DOUBLE,
    DType.FLOAT16: TensorProto.FLOAT16,
    DType.BFLOAT16: TensorProto.BFLOAT16,
    DType.INT8: TensorProto.INT8,
    DType.INT16: TensorProto.INT16,
    DType.INT32: TensorProto.INT32,
    DType.INT64: TensorProto.INT64,
    DType.UINT8: TensorProto.UINT8,
    DType.BOOL: TensorProto.BOOL,
    DType.UINT16: TensorProto.UINT16,
    DType.UINT32: TensorProto.UINT32,
    DType.UINT64: TensorProto.UINT64,
    DType.FLOAT8_E4M3FN: TensorProto.FLOAT8E4M3FN,
    DType.FLOAT8_E4M3FNUZ: TensorProto.FLOAT8E4M3FNUZ,
    DType.FLOAT8_E5M2: TensorProto.FLOAT8E5M2,
    DType.FLOAT8_E5M2FNUZ: TensorProto.FLOAT8E5M2FNUZ,
    DType.FLOAT8_E8M0FNU: TensorProto.FLOAT8E8M0,
    DType.INT4: TensorProto.INT4,
    DType.UINT4: TensorProto.UINT4,
    DType.INT2: TensorProto.INT2,
    DType.UINT2: TensorProto.UINT2,
    DType.FLOAT4_E2M1FN: TensorProto.FLOAT4E2M1,
}
FROM_ONNX: dict[int, DType] = {code: dtype for dtype, code in TO_ONNX.items()}

# A sparse tensor is stored densely in ge-hub; a few bytes of file must not ask for
# terabytes of zeros.
MAX_SPARSE_DENSE_ELEMENTS = 1 << 28


class UnsupportedTypeError(GeHubError, TypeError):
    """An ONNX tensor, value or attribute has a type ge-hub cannot represent."""


def onnx_type_name(code: int) -> str:
    """'FLOAT', 'STRING', ... for an ONNX element type code (for messages)."""
    try:
        return TensorProto.DataType.Name(code)
    except ValueError:
        return f"<unknown element type {code}>"


def dtype_from_onnx(code: int, where: str) -> DType:
    """The ge-hub dtype of an ONNX element type; `where` says what had it, for the error."""
    try:
        return FROM_ONNX[code]
    except KeyError:
        supported = ", ".join(onnx_type_name(c) for c in FROM_ONNX)
        raise UnsupportedTypeError(
            f"{where} has ONNX element type {onnx_type_name(code)}, which ge-hub does not "
            f"support (supported: {supported})") from None


def dtype_to_onnx(dtype: DType) -> int:
    return TO_ONNX[DType.parse(dtype)]


def tensor_to_array(tensor: onnx.TensorProto, where: str, base_dir: str = "") -> np.ndarray:
    """The data of a TensorProto (loading external data from `base_dir`) as NumPy.

    External data is read only from inside `base_dir` (see `check_external_location`).
    """
    dtype_from_onnx(tensor.data_type, where)
    if tensor.data_location == TensorProto.EXTERNAL:
        check_external_location(tensor, where, base_dir)
    try:
        array = numpy_helper.to_array(tensor, base_dir=base_dir)
    except (OSError, ValueError, onnx.checker.ValidationError) as exc:
        location = ""
        if tensor.data_location == TensorProto.EXTERNAL:
            entries = {e.key: e.value for e in tensor.external_data}
            location = (f" (external data {entries.get('location', '?')!r} under "
                        f"{base_dir or '.'!r})")
        raise SerializationError(f"{where}: cannot read tensor data{location}: "
                                 f"{type(exc).__name__}: {exc}") from exc
    return _c_contiguous(array)


def check_external_location(tensor: onnx.TensorProto, where: str, base_dir: str) -> None:
    """Refuse external data that lies outside the model's directory.

    A model file is input from strangers: its `location` could name "/etc/passwd" or
    "../../secret" and have ge-hub read (and, through the outputs, disclose) any file.
    The location must be a relative path that, with symbolic links resolved, stays
    inside `base_dir` (the current directory when it is "").
    """
    entries = {e.key: e.value for e in tensor.external_data}
    location = entries.get("location", "")
    root = os.path.realpath(base_dir or os.curdir)
    if not location or "\0" in location:
        raise SerializationError(f"{where}: external data has no usable location "
                                 f"({location!r})")
    if os.path.isabs(location) or os.path.splitdrive(location)[0]:
        raise SerializationError(f"{where}: external data location {location!r} is an "
                                 "absolute path; ge-hub reads external data only from the "
                                 f"model's directory {root!r}")
    target = os.path.realpath(os.path.join(root, location))
    if os.path.commonpath([root, target]) != root:
        raise SerializationError(f"{where}: external data location {location!r} leads out "
                                 f"of the model's directory {root!r} (to {target!r}); ge-hub "
                                 "reads external data only from inside it")


def _c_contiguous(array: np.ndarray) -> np.ndarray:
    # Not np.ascontiguousarray: it turns a 0-d array (a scalar tensor) into shape (1,).
    return array if array.flags.c_contiguous else array.copy(order="C")


def sparse_to_array(sparse: onnx.SparseTensorProto, where: str,
                    base_dir: str = "") -> np.ndarray:
    """A SparseTensorProto made dense: zeros except at its indices."""
    values = tensor_to_array(sparse.values, where, base_dir).reshape(-1)
    indices = tensor_to_array(sparse.indices, f"{where} (indices)", base_dir)
    shape = tuple(int(d) for d in sparse.dims)
    if any(d < 0 for d in shape):
        raise SerializationError(f"{where}: sparse tensor has negative dims {list(shape)}")
    size = math.prod(shape)
    if size > MAX_SPARSE_DENSE_ELEMENTS:
        raise SerializationError(f"{where}: sparse tensor of dims {list(shape)} would be "
                                 f"{size} elements dense, more than ge-hub densifies "
                                 f"({MAX_SPARSE_DENSE_ELEMENTS})")
    if not np.issubdtype(indices.dtype, np.integer):
        raise SerializationError(f"{where}: sparse indices have dtype {indices.dtype}, "
                                 "expected integers")
    indices = indices.astype(np.int64)
    # Linearized positions (1-D), or one row of coordinates per value ([nnz, rank]).
    linear = indices.ndim == 1
    if not linear and (indices.ndim != 2 or indices.shape[1] != len(shape)):
        raise SerializationError(f"{where}: sparse indices of shape {list(indices.shape)} "
                                 f"fit neither [{values.size}] nor [{values.size}, "
                                 f"{len(shape)}] for dims {list(shape)}")
    if indices.shape[0] != values.size:
        raise SerializationError(f"{where}: {indices.shape[0]} sparse indices for "
                                 f"{values.size} values")
    bounds = np.asarray([size]) if linear else np.asarray(shape, dtype=np.int64)
    if indices.size and (indices.min() < 0 or (indices >= bounds).any()):
        raise SerializationError(f"{where}: sparse indices out of range for dims "
                                 f"{list(shape)}")
    dense = np.zeros(shape, dtype=values.dtype)
    if linear:
        dense.reshape(-1)[indices] = values
    else:
        dense[tuple(indices.T)] = values
    return dense


def array_to_tensor(array: np.ndarray, name: str) -> onnx.TensorProto:
    return numpy_helper.from_array(_c_contiguous(np.asarray(array)), name)


def type_from_value_info(info: onnx.ValueInfoProto, where: str,
                         unknown_dim: Callable[[int], Sym]) -> TensorType:
    """The TensorType of an ONNX graph input or output.

    A named dim (dim_param) becomes the symbol of that name, so inputs sharing "N"
    share a symbol; a dim with neither value nor name gets `unknown_dim(axis)`, a fresh
    symbol; a missing shape means the rank is unknown.
    """
    kind = info.type.WhichOneof("value")
    if kind != "tensor_type":
        raise UnsupportedTypeError(f"{where} is a {kind or 'value of no declared type'}; "
                                   "ge-hub supports only tensors")
    tensor_type = info.type.tensor_type
    dtype = dtype_from_onnx(tensor_type.elem_type, where)
    if not tensor_type.HasField("shape"):
        return TensorType(dtype, None)
    dims = []
    for axis, dim in enumerate(tensor_type.shape.dim):
        if dim.HasField("dim_value"):
            if dim.dim_value < 0:
                raise SerializationError(f"{where}: dim {axis} is {dim.dim_value}; a declared "
                                         "dim must be >= 0 (or a dim_param name)")
            dims.append(int(dim.dim_value))
        elif dim.HasField("dim_param") and dim.dim_param:
            dims.append(Sym.named(dim.dim_param))  # a name, even "seq + 1": never parsed
        else:
            dims.append(unknown_dim(axis))
    return TensorType(dtype, dims)


def value_info_from_type(name: str, value_type: TensorType) -> onnx.ValueInfoProto:
    """An ONNX ValueInfo for a ge-hub type: int dims as dim_value, symbols as dim_param
    (an expression dim as its printed form, "C*N")."""
    shape = None
    if value_type.shape is not None:
        shape = [str(d) if isinstance(d, Sym) else int(d) for d in value_type.shape]
    return onnx.helper.make_tensor_value_info(name, dtype_to_onnx(value_type.dtype), shape)
