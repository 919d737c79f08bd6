"""Mutations of model files: ONNX protobuf fields, `.gehub` JSON, and raw bytes.

Every function takes a `random.Random` and returns the mutated bytes plus a short
description of what it did (kept with a finding). Structural mutations aim at what
a hostile file controls: attribute values (huge, negative, wrong type, missing),
declared dims and dtypes, initializer data, node inputs and outputs (removed, renamed,
added), op types and opset versions.
"""

from __future__ import annotations

import copy
import json
import math
import random
import struct

import onnx
from onnx import AttributeProto as A
from onnx import TensorProto as T

INTERESTING_INTS = [0, 1, -1, 2, 3, -2, 7, 64, 2**16, 2**31 - 1, 2**31, -2**31, 2**32,
                    2**40, -2**40, 2**62, 2**63 - 1, -2**63]
INTERESTING_FLOATS = [0.0, -0.0, 1e-45, 3.4e38, -3.4e38, math.inf, -math.inf, math.nan,
                      2.0**63, 0.5, -1.0]
INTERESTING_BYTES = [0x00, 0xFF, 0x7F, 0x80, 0x01]
ATTR_NAMES = ["axis", "axes", "pads", "strides", "kernel_shape", "dilations", "group",
              "perm", "keepdims", "to", "mode", "k", "num_outputs", "split", "starts",
              "ends", "blocksize", "output_padding", "output_shape", "auto_pad",
              "ceil_mode", "storage_order", "batch_dims", "largest", "sorted", "alpha",
              "beta", "epsilon", "transA", "transB", "reduction", "allowzero"]
OPS = ["Relu", "Add", "Conv", "MaxPool", "AveragePool", "Reshape", "Transpose", "Gather",
       "Slice", "Concat", "Split", "Resize", "Pad", "Expand", "ConstantOfShape", "Tile",
       "TopK", "Squeeze", "Unsqueeze", "ConvTranspose", "Softmax", "MatMul", "Gemm",
       "ReduceSum", "Cast", "Where", "Range", "DepthToSpace", "SpaceToDepth", "OneHot",
       "ScatterND", "GatherND", "Einsum", "LpPool", "GlobalAveragePool", "Flatten", "If",
       "Loop", "Scan", "CumSum", "Trilu", "Identity"]


def _big_int(rng: random.Random) -> int:
    """An interesting int; a small one a third of the time (an off-by-some value often
    gets further into the compiler than a huge one)."""
    if rng.random() < 0.33:
        return rng.randint(-4, 9)
    return rng.choice(INTERESTING_INTS)


# -- ONNX ------------------------------------------------------------------------------


def _graphs(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    """The graph and every subgraph (If/Loop/Scan bodies), depth first."""
    found = [graph]
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == A.GRAPH:
                found += _graphs(attr.g)
            elif attr.type == A.GRAPHS:
                for sub in attr.graphs:
                    found += _graphs(sub)
    return found


def _nodes(model: onnx.ModelProto) -> list[tuple[onnx.GraphProto, onnx.NodeProto]]:
    return [(g, n) for g in _graphs(model.graph) for n in g.node]


def _value_names(model: onnx.ModelProto) -> list[str]:
    names = []
    for graph in _graphs(model.graph):
        names += [v.name for v in graph.input] + [t.name for t in graph.initializer]
        names += [o for n in graph.node for o in n.output]
    return [n for n in names if n]


def _mut_attr_int(model, rng):
    choices = [(n, a) for _, n in _nodes(model) for a in n.attribute
               if a.type in (A.INT, A.INTS)]
    if not choices:
        return None
    node, attr = rng.choice(choices)
    if attr.type == A.INT:
        attr.i = _big_int(rng)
    elif attr.ints and rng.random() < 0.7:
        attr.ints[rng.randrange(len(attr.ints))] = _big_int(rng)
    elif attr.ints and rng.random() < 0.5:
        del attr.ints[rng.randrange(len(attr.ints))]
    else:
        attr.ints.append(_big_int(rng))
    return f"attribute {attr.name!r} of {node.op_type} {node.name!r} -> {_attr_text(attr)}"


def _mut_attr_float(model, rng):
    choices = [(n, a) for _, n in _nodes(model) for a in n.attribute
               if a.type in (A.FLOAT, A.FLOATS)]
    if not choices:
        return None
    node, attr = rng.choice(choices)
    if attr.type == A.FLOAT:
        attr.f = rng.choice(INTERESTING_FLOATS)
    elif attr.floats:
        attr.floats[rng.randrange(len(attr.floats))] = rng.choice(INTERESTING_FLOATS)
    else:
        attr.floats.append(rng.choice(INTERESTING_FLOATS))
    return f"attribute {attr.name!r} of {node.op_type} -> {_attr_text(attr)}"


def _mut_attr_drop(model, rng):
    choices = [n for _, n in _nodes(model) if n.attribute]
    if not choices:
        return None
    node = rng.choice(choices)
    index = rng.randrange(len(node.attribute))
    name = node.attribute[index].name
    del node.attribute[index]
    return f"attribute {name!r} of {node.op_type} removed"


def _mut_attr_add(model, rng):
    nodes = _nodes(model)
    if not nodes:
        return None
    _, node = rng.choice(nodes)
    name = rng.choice(ATTR_NAMES)
    for index, attr in enumerate(node.attribute):
        if attr.name == name:
            del node.attribute[index]
            break
    roll = rng.random()
    if roll < 0.4:
        attr = onnx.helper.make_attribute(name, _big_int(rng))
    elif roll < 0.8:
        attr = onnx.helper.make_attribute(name, [_big_int(rng) for _ in range(rng.randrange(5))]
                                          or [0])
    elif roll < 0.9:
        attr = onnx.helper.make_attribute(name, rng.choice(INTERESTING_FLOATS))
    else:
        attr = onnx.helper.make_attribute(name, rng.choice(["", "NOTSET", "SAME_UPPER",
                                                            "\u00e9", "x" * 300]))
    node.attribute.append(attr)
    return f"attribute {name!r} of {node.op_type} set to {_attr_text(attr)}"


def _mut_attr_retype(model, rng):
    choices = [(n, a) for _, n in _nodes(model) for a in n.attribute]
    if not choices:
        return None
    node, attr = rng.choice(choices)
    kinds = [A.INT, A.INTS, A.FLOAT, A.STRING, A.TENSOR, A.FLOATS, A.STRINGS]
    new_kind = rng.choice(kinds)
    value = {A.INT: 3, A.INTS: [1, 2], A.FLOAT: 1.5, A.STRING: "x", A.FLOATS: [0.5],
             A.STRINGS: ["a"], A.TENSOR: onnx.helper.make_tensor("t", T.INT64, [2], [1, 2])}
    replacement = onnx.helper.make_attribute(attr.name, value[new_kind])
    attr.CopyFrom(replacement)
    return f"attribute {attr.name!r} of {node.op_type} retyped to {A.AttributeType.Name(new_kind)}"


def _mut_input_remove(model, rng):
    choices = [n for _, n in _nodes(model) if n.input]
    if not choices:
        return None
    node = rng.choice(choices)
    index = rng.randrange(len(node.input))
    if rng.random() < 0.5:
        name = node.input[index]
        node.input[index] = ""  # omitted, in place
        return f"input {index} ({name!r}) of {node.op_type} omitted"
    if rng.random() < 0.5:
        del node.input[index:]
    else:
        del node.input[index]
    return f"inputs of {node.op_type} cut at {index}"


def _mut_input_rename(model, rng):
    choices = [n for _, n in _nodes(model) if n.input]
    names = _value_names(model)
    if not choices or not names:
        return None
    node = rng.choice(choices)
    index = rng.randrange(len(node.input))
    node.input[index] = rng.choice(names + ["no_such_value"])
    return f"input {index} of {node.op_type} -> {node.input[index]!r}"


def _mut_input_add(model, rng):
    nodes = _nodes(model)
    names = _value_names(model)
    if not nodes or not names:
        return None
    _, node = rng.choice(nodes)
    for _ in range(rng.randrange(1, 4)):
        node.input.append(rng.choice(names + [""]))
    return f"{node.op_type} now has inputs {list(node.input)}"


def _mut_output(model, rng):
    choices = [n for _, n in _nodes(model) if n.output]
    if not choices:
        return None
    node = rng.choice(choices)
    roll = rng.random()
    if roll < 0.4:
        del node.output[rng.randrange(len(node.output))]
        return f"an output of {node.op_type} removed"
    if roll < 0.7:
        node.output.append(f"extra{rng.randrange(9)}")
        return f"{node.op_type} given an extra output"
    node.output[rng.randrange(len(node.output))] = rng.choice(_value_names(model))
    return f"an output of {node.op_type} renamed to an existing value"


def _declared(model) -> list[onnx.ValueInfoProto]:
    return [v for g in _graphs(model.graph) for v in list(g.input) + list(g.output)]


def _mut_dims(model, rng):
    infos = [v for v in _declared(model) if v.type.HasField("tensor_type")]
    if not infos:
        return None
    info = rng.choice(infos)
    shape = info.type.tensor_type.shape
    roll = rng.random()
    if shape.dim and roll < 0.6:
        dim = shape.dim[rng.randrange(len(shape.dim))]
        if rng.random() < 0.8:
            dim.dim_value = _big_int(rng)
        else:
            dim.dim_param = rng.choice(["N", "", "x" * 100])
    elif roll < 0.75 and shape.dim:
        del shape.dim[rng.randrange(len(shape.dim))]
    elif roll < 0.9:
        shape.dim.add().dim_value = rng.choice([0, 1, 3, 2**40])
    else:
        info.type.tensor_type.ClearField("shape")
    return f"declared shape of {info.name!r} -> {_shape_text(info)}"


def _mut_dtype(model, rng):
    infos = [v for v in _declared(model) if v.type.HasField("tensor_type")]
    inits = [t for g in _graphs(model.graph) for t in g.initializer]
    code = rng.choice(list(range(0, 27)) + [99])
    if inits and (not infos or rng.random() < 0.4):
        tensor = rng.choice(inits)
        tensor.data_type = code
        return f"initializer {tensor.name!r} data_type -> {code}"
    if not infos:
        return None
    info = rng.choice(infos)
    info.type.tensor_type.elem_type = code
    return f"element type of {info.name!r} -> {code}"


def _tensors(model) -> list[onnx.TensorProto]:
    found = [t for g in _graphs(model.graph) for t in g.initializer]
    for _, node in _nodes(model):
        for attr in node.attribute:
            if attr.type == A.TENSOR:
                found.append(attr.t)
    return found


def _mut_tensor(model, rng):
    tensors = _tensors(model)
    if not tensors:
        return None
    tensor = rng.choice(tensors)
    roll = rng.random()
    if roll < 0.5 and tensor.data_type in (T.INT64, T.INT32):
        array = onnx.numpy_helper.to_array(tensor).copy()
        if array.size:
            flat = array.reshape(-1)
            limit = 2**63 - 1 if tensor.data_type == T.INT64 else 2**31 - 1
            value = max(min(_big_int(rng), limit), -limit - 1)
            flat[rng.randrange(flat.size)] = value
            tensor.CopyFrom(onnx.numpy_helper.from_array(array, tensor.name))
            return f"an element of tensor {tensor.name!r} -> {value}"
    if roll < 0.75 and tensor.dims:
        tensor.dims[rng.randrange(len(tensor.dims))] = rng.choice([0, 1, 2, 2**31, 2**40, -1])
        return f"dims of tensor {tensor.name!r} -> {list(tensor.dims)}"
    if tensor.raw_data:
        cut = rng.randrange(len(tensor.raw_data))
        tensor.raw_data = tensor.raw_data[:cut]
        return f"raw data of tensor {tensor.name!r} cut to {cut} bytes"
    tensor.dims.append(rng.choice([0, 2, 2**20]))
    return f"tensor {tensor.name!r} given another dim"


def _mut_op(model, rng):
    nodes = _nodes(model)
    if not nodes:
        return None
    _, node = rng.choice(nodes)
    old = node.op_type
    node.op_type = rng.choice(OPS + [n.op_type for _, n in nodes])
    return f"op {old} -> {node.op_type}"


def _mut_opset(model, rng):
    if not model.opset_import:
        return None
    entry = rng.choice(model.opset_import)
    entry.version = rng.choice([1, 5, 6, 7, 9, 10, 11, 12, 13, 17, 18, 21, 24, 99, -1, 2**40])
    return f"opset {entry.domain!r} -> {entry.version}"


def _mut_nodes(model, rng):
    graph = rng.choice(_graphs(model.graph))
    if not graph.node:
        return None
    roll = rng.random()
    i = rng.randrange(len(graph.node))
    if roll < 0.4:
        del graph.node[i]
        return f"node {i} removed"
    if roll < 0.7:
        graph.node.add().CopyFrom(graph.node[i])
        return f"node {i} duplicated at the end"
    j = rng.randrange(len(graph.node))
    a, b = copy.deepcopy(graph.node[i]), copy.deepcopy(graph.node[j])
    graph.node[i].CopyFrom(b)
    graph.node[j].CopyFrom(a)
    return f"nodes {i} and {j} swapped"


# Weighted towards changes most models survive to compile and run with (values of the
# attributes and tensors they have, declared dims); an unknown attribute or a broken
# input list is refused early, so those are rarer.
ONNX_MUTATORS = [_mut_attr_int] * 6 + [_mut_tensor] * 4 + [_mut_dims] * 3 + [
    _mut_attr_float, _mut_attr_float, _mut_attr_drop, _mut_attr_add, _mut_attr_retype,
    _mut_input_remove, _mut_input_remove, _mut_input_rename, _mut_input_add, _mut_output,
    _mut_dtype, _mut_op, _mut_opset, _mut_nodes]


def mutate_onnx(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    model = onnx.ModelProto()
    model.ParseFromString(data)
    done = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        what = rng.choice(ONNX_MUTATORS)(model, rng)
        if what:
            done.append(what)
    return model.SerializeToString(), "; ".join(done) or "unchanged"


def _attr_text(attr: onnx.AttributeProto) -> str:
    value = onnx.helper.get_attribute_value(attr)
    return repr(value)[:80]


def _shape_text(info: onnx.ValueInfoProto) -> str:
    tensor_type = info.type.tensor_type
    if not tensor_type.HasField("shape"):
        return "no shape"
    return str([d.dim_value if d.HasField("dim_value") else d.dim_param
                for d in tensor_type.shape.dim])


# -- .gehub ------------------------------------------------------------------------------

_HEADER = struct.Struct("<8sIIQQ")  # as ge_hub.ir.serialize writes it


def _split_gehub(data: bytes) -> tuple[bytes, dict, bytes]:
    magic, version, flags, text_size, data_size = _HEADER.unpack_from(data)
    text_end = _HEADER.size + text_size
    data_start = text_end + (-text_end % 64)
    return data[:8], json.loads(data[_HEADER.size:text_end]), data[data_start:]


def _join_gehub(document: dict, payload: bytes) -> bytes:
    text = json.dumps(document, separators=(",", ":")).encode()
    head = _HEADER.pack(b"GEHUBIR\0", 1, 0, len(text), len(payload)) + text
    return head + bytes(-len(head) % 64) + payload


def _slots(obj, found):
    """Every (container, key) under `obj`, for picking a place to mutate."""
    items = obj.items() if isinstance(obj, dict) else enumerate(obj)
    for key, value in items:
        found.append((obj, key))
        if isinstance(value, (dict, list)):
            _slots(value, found)
    return found


def mutate_gehub(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    _, document, payload = _split_gehub(data)
    strings = [c[k] for c, k in _slots(document, []) if isinstance(c[k], str)]
    done = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        slots = _slots(document, [])  # afresh: the last change may have removed some
        if not slots:
            break
        container, key = rng.choice(slots)
        value = container[key]
        roll = rng.random()
        if isinstance(value, bool) or value is None:
            container[key] = rng.choice([True, False, None, 0])
        elif isinstance(value, int):
            container[key] = _big_int(rng)
        elif isinstance(value, float):
            container[key] = rng.choice([1e308, -1e308, 0.0, 2.0**63])
        elif isinstance(value, str):
            container[key] = rng.choice(strings + ["", "float64", "bfloat16", "x" * 200])
        elif isinstance(value, list) and value and roll < 0.5:
            del value[rng.randrange(len(value))]
        elif isinstance(value, list) and value:
            value.append(copy.deepcopy(rng.choice(value)))
        elif isinstance(value, dict) and value and roll < 0.5:
            del value[rng.choice(list(value))]
        else:
            container[key] = rng.choice([None, [], {}, 0, "x"])
        done.append(f"{key!r} (was {str(value)[:40]!r}) changed")
    return _join_gehub(document, payload), "; ".join(done)


# -- bytes -------------------------------------------------------------------------------


def mutate_bytes(data: bytes, rng: random.Random, keep_header: int = 0) -> tuple[bytes, str]:
    """Flip bits, set interesting bytes, delete, duplicate or truncate; the first
    `keep_header` bytes are left alone (a `.gehub` header checks its own lengths)."""
    buf = bytearray(data)
    done = []
    for _ in range(rng.choice([1, 1, 2, 4, 8])):
        if len(buf) <= keep_header + 1:
            break
        at = rng.randrange(keep_header, len(buf))
        roll = rng.random()
        if roll < 0.4:
            buf[at] ^= 1 << rng.randrange(8)
            done.append(f"bit flip at {at}")
        elif roll < 0.7:
            buf[at] = rng.choice(INTERESTING_BYTES)
            done.append(f"byte {at} = {buf[at]:#x}")
        elif roll < 0.8 and not keep_header:
            size = rng.randrange(1, 16)
            del buf[at:at + size]
            done.append(f"{size} bytes deleted at {at}")
        elif roll < 0.9 and not keep_header:
            size = rng.randrange(1, 16)
            buf[at:at] = buf[at:at + size]
            done.append(f"{size} bytes duplicated at {at}")
        elif not keep_header:
            del buf[at:]
            done.append(f"truncated to {at}")
    return bytes(buf), "; ".join(done) or "unchanged"
