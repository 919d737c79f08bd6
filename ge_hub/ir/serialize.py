"""Lossless serialization of graphs (`dumps`/`loads`, `save`/`load`) and deep copies (`clone`).

The file format, version `FORMAT_VERSION`:

    offset 0   header, 32 bytes, little-endian: magic b"GEHUBIR\\0", u32 format version,
               u32 flags (0), u64 length of the JSON section, u64 length of the data section
    offset 32  JSON section (UTF-8): {"format": "ge-hub-ir", "graph": <graph>}
    then       zero padding up to a multiple of 64
    then       data section: the raw bytes of every constant and tensor attribute, each
               starting at a multiple of 64 (so they can be used in place, aligned)

In the JSON, a graph is {name, attrs, inputs, constants, nodes, outputs}; a value is
{id, name, type: {dtype, shape}} plus `data` when it carries constant data; a node is
{name, op, domain, inputs, outputs, attrs}. Node inputs and graph outputs refer to values
by id (null for an omitted input), so a subgraph can refer to the values of the graphs
around it. Shapes list ints and symbolic dims in `ge_hub.ir.symbolic.to_json`'s form: a
symbol's name as a string, an expression as a small tree ({"mul": [3, "N"]}); a string
with operators in it, as files written before that form hold ("N*C"), reads as the
expression it spells. Tensor data is {dtype, shape, offset, nbytes}, with the dtype by
ge-hub name (so bfloat16 survives) and the offset relative to the data section. Attribute
values are tagged by their Python kind (`{"int": 1}`, `{"floats": [0.5, "nan"]}`,
`{"graph": {...}}`) so that ints stay ints, floats stay floats (NaN and infinities
included), and an empty list stays an empty list. Data are stored in the byte order of
the machine (little-endian everywhere ge-hub runs).

Serialization does not verify: a graph that breaks invariants round-trips as it is, so
a broken graph can be saved and looked at. Malformed input to `loads` raises
`SerializationError`, never anything else.
"""

from __future__ import annotations

import copy
import json
import math
import os
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from ge_hub.errors import SerializationError
from ge_hub.ir import symbolic
from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Graph, Node, Value
from ge_hub.ir.types import TensorType

MAGIC = b"GEHUBIR\0"
FORMAT_VERSION = 1
FORMAT_NAME = "ge-hub-ir"
ALIGNMENT = 64
_HEADER = struct.Struct("<8sIIQQ")  # magic, version, flags, JSON length, data length


# -- public API ---------------------------------------------------------------------


def dumps(graph: Graph) -> bytes:
    """The serialized form of `graph` and its subgraphs."""
    if not isinstance(graph, Graph):
        raise SerializationError(f"dumps expects a Graph, got {type(graph).__name__}")
    encoder = _Encoder()
    document = {"format": FORMAT_NAME, "graph": encoder.graph(graph, outer=())}
    text = json.dumps(document, allow_nan=False, separators=(",", ":")).encode("utf-8")
    data = encoder.data()
    header = _HEADER.pack(MAGIC, FORMAT_VERSION, 0, len(text), len(data))
    head = header + text
    return head + bytes(_padding(len(head))) + data


def loads(data: bytes) -> Graph:
    """The graph serialized in `data`; raises `SerializationError` when it is malformed."""
    in_place = isinstance(data, memoryview) and data.readonly and data.format == "B" \
        and data.ndim == 1  # a read-only file mapping (ge_hub.offline): nothing copied
    if isinstance(data, (bytearray, memoryview)) and not in_place:
        data = bytes(data)  # constants are views of the payload: it must not change
    if not isinstance(data, bytes) and not in_place:
        raise SerializationError(f"loads expects bytes, got {type(data).__name__}")
    document, payload = _split(data)
    try:
        return _Decoder(payload).graph(document["graph"], scopes=(), where="graph")
    except SerializationError:
        raise
    except RecursionError:
        raise SerializationError("malformed ge-hub IR: subgraphs nested too deeply") from None
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as exc:
        # The decoder checks what it reads; this is the net under those checks.
        raise SerializationError(f"malformed ge-hub IR: {type(exc).__name__}: {exc}") from None


def save(graph: Graph, path: str | os.PathLike) -> None:
    """Write `graph` to a file in the serialized form."""
    with open(path, "wb") as f:
        f.write(dumps(graph))


def load(path: str | os.PathLike) -> Graph:
    """Read a graph written by `save`."""
    with open(path, "rb") as f:
        return loads(f.read())


def clone(graph: Graph, outer: Mapping[Value, Value] | None = None) -> Graph:
    """A deep copy of `graph` and its subgraphs.

    Constants' arrays are shared (they are read-only); names, types, attributes (tensor
    attributes included), subgraphs and `node.meta` dicts are copied. A subgraph that
    reads a value of an enclosing graph reads the copy of that value. A value the graph
    reads but does not own (when copying a subgraph on its own) becomes `outer[value]`
    when `outer` maps it (a body moved under a new enclosing graph reads that graph's
    values), else stays the original object; either records the copy's nodes among its
    uses.
    """
    return _clone_graph(graph, {id(old): new for old, new in (outer or {}).items()})


# -- writing ------------------------------------------------------------------------


def _padding(size: int) -> int:
    return -size % ALIGNMENT


class _Encoder:
    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self._size = 0
        self._blobs: dict[int, tuple[np.ndarray, dict]] = {}  # shared arrays stored once
        self._next_id = 0

    def data(self) -> bytes:
        return b"".join(self._chunks)

    def blob(self, array: np.ndarray, where: str) -> dict:
        if id(array) in self._blobs:
            return dict(self._blobs[id(array)][1])
        try:
            dtype = DType.from_numpy(array.dtype)
        except TypeError:
            raise SerializationError(f"{where}: NumPy dtype {array.dtype} has no ge-hub "
                                     "dtype") from None
        raw = np.ascontiguousarray(array).tobytes()
        pad = _padding(self._size)
        if pad:
            self._chunks.append(bytes(pad))
        entry = {"dtype": dtype.value, "shape": list(array.shape), "offset": self._size + pad,
                 "nbytes": len(raw)}
        self._chunks.append(raw)
        self._size += pad + len(raw)
        self._blobs[id(array)] = (array, entry)  # the array is kept alive: ids stay unique
        return dict(entry)

    def graph(self, graph: Graph, outer: tuple[dict[int, int], ...]) -> dict:
        where = f"graph {graph.name!r}"
        ids: dict[int, int] = {}
        # Every owned value gets its id first, so references may point forwards (an
        # unverified graph out of order still round-trips).
        for value in graph.values():
            if not isinstance(value, Value):
                raise SerializationError(f"{where}: owns a {type(value).__name__}, "
                                         "not a Value")
            if id(value) in ids:
                raise SerializationError(f"{where}: value {value.name!r} is owned twice")
            ids[id(value)] = self._next_id
            self._next_id += 1
        scopes = (*outer, ids)

        def ref(value: Value | None, what: str) -> int | None:
            if value is None:
                return None
            for scope in reversed(scopes):
                if id(value) in scope:
                    return scope[id(value)]
            raise SerializationError(
                f"{where}: {what} is value {getattr(value, 'name', value)!r}, which neither "
                "this graph nor an enclosing one owns; only a whole graph tree serializes")

        nodes = []
        for node in graph.nodes:
            label = f"{where}: node {node.name!r}"
            nodes.append({
                "name": node.name, "op": node.op, "domain": node.domain,
                "inputs": [ref(v, f"node {node.name!r} input {i}")
                           for i, v in enumerate(node.inputs)],
                "outputs": [self.value(v, ids, label) for v in node.outputs],
                "attrs": self.attrs(node.attrs, scopes, label),
            })
        return {
            "name": graph.name,
            "attrs": self.attrs(graph.attrs, scopes, where),
            "inputs": [self.value(v, ids, where) for v in graph.inputs],
            "constants": [self.value(v, ids, where) for v in graph.constants],
            "nodes": nodes,
            "outputs": [ref(v, f"output {i}") for i, v in enumerate(graph.outputs)],
        }

    def value(self, value: Value, ids: dict[int, int], where: str) -> dict:
        if not isinstance(value.type, TensorType):
            raise SerializationError(f"{where}: value {value.name!r} has type "
                                     f"{value.type!r}, not a TensorType")
        shape = None if value.type.shape is None else \
            [symbolic.to_json(d) for d in value.type.shape]
        entry = {"id": ids[id(value)], "name": value.name,
                 "type": {"dtype": value.type.dtype.value, "shape": shape}}
        if value.const is not None:
            entry["data"] = self.blob(np.asarray(value.const), f"{where}: value {value.name!r}")
        return entry

    def attrs(self, attrs: dict, scopes: tuple[dict[int, int], ...], where: str) -> dict:
        encoded = {}
        for key, value in attrs.items():
            if not isinstance(key, str):
                raise SerializationError(f"{where}: attribute name {key!r} is not a string")
            encoded[key] = self.attr(value, scopes, f"{where}: attribute {key!r}")
        return encoded

    def attr(self, value: Any, scopes: tuple[dict[int, int], ...], where: str) -> dict:
        # bool before int and DType before str: each is a subclass of the other.
        if isinstance(value, (bool, np.bool_)):
            return {"bool": bool(value)}
        if isinstance(value, (int, np.integer)):
            return {"int": int(value)}
        if isinstance(value, (float, np.floating)):
            return {"float": _float_to_json(float(value))}
        if isinstance(value, DType):
            return {"dtype": value.value}
        if isinstance(value, str):
            return {"string": str(value)}
        if value is None:
            return {"none": None}
        if isinstance(value, np.ndarray):
            return {"tensor": self.blob(value, where)}
        if isinstance(value, Graph):
            return {"graph": self.graph(value, scopes)}
        if isinstance(value, tuple):
            return {"tuple": [self.attr(v, scopes, where) for v in value]}
        if isinstance(value, list):
            return self.attr_list(value, scopes, where)
        if isinstance(value, dict):
            return {"dict": self.attrs(value, scopes, where)}
        raise SerializationError(f"{where}: cannot serialize a {type(value).__name__} "
                                 f"({value!r})")

    def attr_list(self, value: list, scopes: tuple[dict[int, int], ...], where: str) -> dict:
        """Homogeneous lists get a compact tag; anything else is a list of tagged items."""
        if value and all(type(v) is int for v in value):
            return {"ints": list(value)}
        if value and all(type(v) is float for v in value):
            return {"floats": [_float_to_json(v) for v in value]}
        if value and all(type(v) is str for v in value):
            return {"strings": list(value)}
        if value and all(isinstance(v, Graph) for v in value):
            return {"graphs": [self.graph(v, scopes) for v in value]}
        return {"list": [self.attr(v, scopes, where) for v in value]}


_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _float_to_json(value: float) -> float | str:
    # Standard JSON has no NaN or infinity; they are written as these strings.
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


# -- reading ------------------------------------------------------------------------


def _split(data: bytes) -> tuple[dict, memoryview]:
    """Check the header; return the parsed JSON document and the data section."""
    if len(data) < _HEADER.size:
        raise SerializationError(f"not a ge-hub IR file: {len(data)} bytes is shorter than "
                                 f"the {_HEADER.size}-byte header (truncated?)")
    magic, version, flags, text_size, data_size = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise SerializationError(f"not a ge-hub IR file: magic {magic!r}, expected {MAGIC!r}")
    if version != FORMAT_VERSION:
        raise SerializationError(f"unsupported ge-hub IR format version {version}; this "
                                 f"ge-hub reads version {FORMAT_VERSION}")
    if flags != 0:
        raise SerializationError(f"ge-hub IR header has unknown flags {flags:#x}")
    text_end = _HEADER.size + text_size
    data_start = text_end + _padding(text_end)
    expected = data_start + data_size
    if len(data) != expected:
        problem = "truncated" if len(data) < expected else "has trailing bytes"
        raise SerializationError(f"ge-hub IR data {problem}: the header announces "
                                 f"{expected} bytes, got {len(data)}")
    try:
        document = json.loads(bytes(data[_HEADER.size:text_end]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise SerializationError(f"ge-hub IR JSON section is malformed: {exc}") from None
    except RecursionError:
        raise SerializationError("ge-hub IR JSON section is nested too deeply") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT_NAME:
        raise SerializationError(f"ge-hub IR JSON section is not a {FORMAT_NAME!r} document")
    if not isinstance(document.get("graph"), dict):
        raise SerializationError("ge-hub IR JSON section has no graph")
    return document, memoryview(data)[data_start:]


def _field(obj: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(obj, dict):
        raise SerializationError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if key not in obj:
        raise SerializationError(f"{where}: missing field {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise SerializationError(f"{where}: field {key!r} must be {names}, got {value!r:.80}")
    return value


def _parse_dtype(name: Any, where: str) -> DType:
    try:
        if not isinstance(name, str):
            raise ValueError(name)
        return DType(name)
    except ValueError:
        known = ", ".join(d.value for d in DType)
        raise SerializationError(f"{where}: unknown dtype {name!r:.40} (known: {known})") \
            from None


class _Decoder:
    def __init__(self, payload: memoryview) -> None:
        self._payload = payload
        # Constants that shared one array when written share one array again.
        self._constants: dict[tuple, np.ndarray] = {}

    def graph(self, obj: Any, scopes: tuple[dict[int, Value], ...], where: str) -> Graph:
        name = _field(obj, "name", str, where)
        where = f"graph {name!r}"
        graph = Graph(name)
        ids: dict[int, Value] = {}

        def own(entry: Any, what: str) -> Value:
            value = self.value(entry, f"{where}: {what}")
            value_id = entry["id"]
            if value_id in ids or any(value_id in scope for scope in scopes):
                raise SerializationError(f"{where}: value id {value_id} is defined twice")
            ids[value_id] = value
            graph._names.add(value.name)  # keeps graph.unique_name from reusing it
            return value

        graph.inputs = [own(v, f"input {i}")
                        for i, v in enumerate(_field(obj, "inputs", list, where))]
        graph.constants = [own(v, f"constant {i}")
                           for i, v in enumerate(_field(obj, "constants", list, where))]
        node_objs = _field(obj, "nodes", list, where)
        # Nodes and their outputs first, inputs and attributes second: references may
        # point forwards, and subgraphs see every value of this graph.
        for i, node_obj in enumerate(node_objs):
            label = f"{where}: node {i}"
            node = Node(_field(node_obj, "op", str, label), _field(node_obj, "domain", str, label),
                        _field(node_obj, "name", str, label))
            node.graph = graph
            graph._names.add(node.name)
            for index, entry in enumerate(_field(node_obj, "outputs", list, label)):
                out = own(entry, f"node {node.name!r} output {index}")
                out.producer, out.index = node, index
                node.outputs.append(out)
            graph.nodes.append(node)
        scopes = (*scopes, ids)
        for node, node_obj in zip(graph.nodes, node_objs):
            label = f"{where}: node {node.name!r}"
            for index, ref in enumerate(_field(node_obj, "inputs", list, label)):
                node.inputs.append(None)
                node.set_input(index, self.ref(ref, scopes, f"{label} input {index}"))
            node.attrs = self.attrs(_field(node_obj, "attrs", dict, label), scopes, label)
        graph.attrs = self.attrs(_field(obj, "attrs", dict, where), scopes, where)
        graph.outputs = [self.ref(ref, scopes, f"{where}: output {i}")
                         for i, ref in enumerate(_field(obj, "outputs", list, where))]
        return graph

    def ref(self, ref: Any, scopes: tuple[dict[int, Value], ...], where: str) -> Value | None:
        if ref is None:
            return None
        if not isinstance(ref, int) or isinstance(ref, bool):
            raise SerializationError(f"{where}: a value reference must be an id, got {ref!r:.80}")
        for scope in reversed(scopes):
            if ref in scope:
                return scope[ref]
        raise SerializationError(f"{where}: refers to value id {ref}, which this graph and "
                                 "its enclosing graphs do not define")

    def value(self, entry: Any, where: str) -> Value:
        _field(entry, "id", int, where)
        name = _field(entry, "name", str, where)
        type_obj = _field(entry, "type", dict, where)
        dtype = _parse_dtype(_field(type_obj, "dtype", str, where), where)
        shape = type_obj.get("shape")
        if shape is not None:
            if not isinstance(shape, list):
                raise SerializationError(f"{where}: shape must be a list of dims (ints >= 0 "
                                         f"or symbolic dims), got {shape!r:.80}")
            try:
                shape = [symbolic.from_json(d) for d in shape]
            except ValueError as exc:
                raise SerializationError(f"{where}: shape must be a list of dims (ints >= 0 "
                                         f"or symbolic dims), got {shape!r:.80}: {exc}") from None
        value = Value(name, TensorType(dtype, shape))
        if "data" in entry:
            value.const = self.tensor(entry["data"], f"{where} data", writable=False)
        return value

    def tensor(self, obj: Any, where: str, *, writable: bool) -> np.ndarray:
        dtype = _parse_dtype(_field(obj, "dtype", str, where), where)
        shape = _field(obj, "shape", list, where)
        if not all(type(d) is int and d >= 0 for d in shape):
            raise SerializationError(f"{where}: shape must be a list of ints >= 0, "
                                     f"got {shape!r:.80}")
        offset = _field(obj, "offset", int, where)
        nbytes = _field(obj, "nbytes", int, where)
        expected = math.prod(shape) * dtype.itemsize
        if nbytes != expected:
            raise SerializationError(f"{where}: {dtype}{shape} needs {expected} bytes, "
                                     f"the file says {nbytes}")
        if offset < 0 or offset % ALIGNMENT or offset + nbytes > len(self._payload):
            raise SerializationError(f"{where}: data at offset {offset} ({nbytes} bytes) is "
                                     f"outside the {len(self._payload)}-byte data section or "
                                     f"not {ALIGNMENT}-byte aligned")
        key = (dtype, tuple(shape), offset)
        if not writable and key in self._constants:
            return self._constants[key]
        raw = self._payload[offset:offset + nbytes]
        array = np.frombuffer(raw, dtype=dtype.numpy).reshape(shape) if nbytes else \
            np.zeros(shape, dtype=dtype.numpy)
        if dtype is DType.BOOL and np.any(array.view(np.uint8) > 1):
            raise SerializationError(f"{where}: bool data holds bytes other than 0 and 1")
        if writable:
            return array.copy()
        array.setflags(write=False)
        self._constants[key] = array
        return array

    def attrs(self, obj: dict, scopes: tuple[dict[int, Value], ...], where: str) -> dict:
        return {key: self.attr(value, scopes, f"{where}: attribute {key!r}")
                for key, value in obj.items()}

    def attr(self, obj: Any, scopes: tuple[dict[int, Value], ...], where: str) -> Any:
        if not isinstance(obj, dict) or len(obj) != 1:
            raise SerializationError(f"{where}: expected one tagged value like "
                                     f"{{\"int\": 1}}, got {obj!r:.80}")
        ((tag, body),) = obj.items()
        if tag == "bool" and isinstance(body, bool):
            return body
        if tag == "int" and type(body) is int:
            return body
        if tag == "float":
            return _float_from_json(body, where)
        if tag == "string" and isinstance(body, str):
            return body
        if tag == "dtype":
            return _parse_dtype(body, where)
        if tag == "none" and body is None:
            return None
        if tag == "tensor":
            return self.tensor(body, where, writable=True)
        if tag == "graph":
            return self.graph(body, scopes, f"{where} graph")
        if tag == "dict" and isinstance(body, dict):
            return self.attrs(body, scopes, where)
        if not isinstance(body, list):
            raise SerializationError(f"{where}: unknown attribute tag {tag!r:.40} or bad "
                                     f"value {body!r:.80}")
        if tag == "ints" and all(type(v) is int for v in body):
            return list(body)
        if tag == "floats":
            return [_float_from_json(v, where) for v in body]
        if tag == "strings" and all(isinstance(v, str) for v in body):
            return list(body)
        if tag == "graphs":
            return [self.graph(g, scopes, f"{where} graph") for g in body]
        if tag == "list":
            return [self.attr(v, scopes, where) for v in body]
        if tag == "tuple":
            return tuple(self.attr(v, scopes, where) for v in body)
        raise SerializationError(f"{where}: unknown attribute tag {tag!r:.40} or bad "
                                 f"value {body!r:.80}")


def _float_from_json(value: Any, where: str) -> float:
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise SerializationError(f"{where}: expected a float, got {value!r:.80}")


# -- copying ------------------------------------------------------------------------


def _clone_graph(graph: Graph, copies: dict[int, Value]) -> Graph:
    """Copy one graph; `copies` maps every already-copied value (enclosing graphs' too)."""
    new = Graph(graph.name)

    def copy_value(value: Value) -> Value:
        twin = Value(value.name, value.type, const=value.const)
        copies[id(value)] = twin
        new._names.add(value.name)
        return twin

    new.inputs = [copy_value(v) for v in graph.inputs]
    new.constants = [copy_value(v) for v in graph.constants]
    for node in graph.nodes:
        twin = Node(node.op, node.domain, node.name)
        twin.graph = new
        twin.meta = dict(node.meta)
        new._names.add(node.name)
        for index, out in enumerate(node.outputs):
            out_twin = copy_value(out)
            out_twin.producer, out_twin.index = twin, index
            twin.outputs.append(out_twin)
        new.nodes.append(twin)
    # Inputs and attributes after every output exists, as in `loads`.
    for node, twin in zip(graph.nodes, new.nodes):
        for index, value in enumerate(node.inputs):
            twin.inputs.append(None)
            twin.set_input(index, None if value is None else copies.get(id(value), value))
        twin.attrs = {key: _copy_attr(v, copies) for key, v in node.attrs.items()}
    new.attrs = {key: _copy_attr(v, copies) for key, v in graph.attrs.items()}
    new.outputs = [None if v is None else copies.get(id(v), v) for v in graph.outputs]
    return new


def _copy_attr(value: Any, copies: dict[int, Value]) -> Any:
    if isinstance(value, Graph):
        return _clone_graph(value, copies)
    if isinstance(value, list):
        return [_copy_attr(v, copies) for v in value]
    if isinstance(value, tuple):
        return tuple(_copy_attr(v, copies) for v in value)
    if isinstance(value, dict):
        return {k: _copy_attr(v, copies) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return value.copy()
    return copy.deepcopy(value)
