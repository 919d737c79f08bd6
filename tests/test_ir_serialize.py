"""Serialization and copies: lossless round trips, the file layout, and malformed input.

A round trip must give back the same text form and the same structure (names, types,
symbolic dims, constants' bytes, attribute kinds, wiring, subgraphs reading enclosing
values). Malformed data must raise `SerializationError` and nothing else.
"""

from __future__ import annotations

import json
import math
import struct

import ml_dtypes
import numpy as np
import pytest
import test_ir
from test_ir import (
    add_typed_node,
    all_attr_kinds,
    assert_graphs_equal,
    build_graph,
    build_nested,
)

from ge_hub.errors import SerializationError
from ge_hub.ir import DType, Graph, TensorType
from ge_hub.ir.serialize import (
    ALIGNMENT,
    FORMAT_VERSION,
    MAGIC,
    clone,
    dumps,
    load,
    loads,
    save,
)

# The fixtures shared with the other IR tests.
rng = test_ir.rng
ir_test_ops = test_ir.ir_test_ops

HEADER = struct.Struct("<8sIIQQ")


def round_trip(graph: Graph) -> Graph:
    loaded = loads(dumps(graph))
    assert str(loaded) == str(graph)
    assert_graphs_equal(graph, loaded)
    return loaded


def split(data: bytes) -> tuple[tuple, dict, bytes]:
    """Header fields, the JSON document and the data section of a payload."""
    fields = HEADER.unpack_from(data)
    text_end = HEADER.size + fields[3]
    data_start = text_end + (-text_end % ALIGNMENT)
    return fields, json.loads(data[HEADER.size:text_end]), data[data_start:]


def join(document: dict, payload: bytes, version: int = FORMAT_VERSION) -> bytes:
    """A payload with an edited JSON document, its header and padding recomputed."""
    text = json.dumps(document).encode()
    head = HEADER.pack(MAGIC, version, 0, len(text), len(payload)) + text
    return head + bytes(-len(head) % ALIGNMENT) + payload


def edited(data: bytes, edit) -> bytes:
    _, document, payload = split(data)
    edit(document)
    return join(document, payload)


# -- round trips --------------------------------------------------------------------


def test_round_trip_small_graph(rng):
    g = build_graph(rng)
    loaded = round_trip(g)
    loaded.verify()
    assert loaded.find_value("x").type.shape[0].name == "N"
    # The loaded graph keeps naming new things uniquely.
    assert loaded.unique_name("r") != "r"


def test_save_and_load_a_file(rng, tmp_path):
    g = build_graph(rng)
    path = tmp_path / "small.gehub"
    save(g, path)
    assert path.read_bytes() == dumps(g)
    loaded = load(path)
    assert_graphs_equal(g, loaded)


@pytest.mark.parametrize("dtype", [d.value for d in DType])
def test_constants_of_every_dtype_keep_their_bytes(rng, dtype):
    g = Graph("consts")
    arrays = [random_constant(rng, (3, 5), dtype), random_constant(rng, (), dtype),
              random_constant(rng, (0, 4), dtype), random_constant(rng, (2, 1, 3), dtype)]
    for i, array in enumerate(arrays):
        g.add_constant(array, f"c{i}")
    g.set_outputs(g.constants)
    loaded = round_trip(g)
    for original, value in zip(arrays, loaded.constants):
        assert value.const.dtype == DType(dtype).numpy
        assert value.const.shape == original.shape
        assert value.const.tobytes() == original.tobytes()
        assert not value.const.flags.writeable  # constants stay immutable


def random_constant(rng, shape, dtype):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype == "bfloat16":
        return rng.uniform(-3, 3, shape).astype(ml_dtypes.bfloat16)
    if np.issubdtype(np.dtype(dtype), np.integer):
        return rng.integers(1, 100, shape).astype(dtype)
    return rng.uniform(-3, 3, shape).astype(dtype)




def test_bfloat16_keeps_the_values_it_had(rng):
    g = Graph("bf")
    data = rng.uniform(-3, 3, 7).astype(ml_dtypes.bfloat16)
    g.set_outputs([g.add_constant(data, "w")])
    loaded = loads(dumps(g)).constants[0].const
    assert loaded.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(loaded.astype(np.float32), data.astype(np.float32))


def test_types_with_symbols_and_unknown_rank():
    g = Graph("types")
    g.add_input("a", TensorType("float16", ["batch", 3, "seq"]))
    g.add_input("b", TensorType("int64", None))
    g.add_input("c", TensorType("bool", []))
    g.add_input("d", TensorType("float32", ["N*C", "(N*C)+1"]))
    g.set_outputs(g.inputs)
    loaded = round_trip(g)
    assert [v.type for v in loaded.inputs] == [v.type for v in g.inputs]


def test_every_attribute_kind_round_trips(rng, ir_test_ops):
    g = Graph("attrs")
    x = g.add_input("x", TensorType("float32", [2, 3]))
    attrs = all_attr_kinds(rng)
    node = add_typed_node(g, "Kinds", [x, None], attrs, domain="test", output_names=["y", "z"])
    node.attrs.update({
        "count": 1, "scale": 1.0,  # an int and a float that compare equal stay apart
        "sizes": [], "weights": [math.nan, math.inf, -math.inf, -0.0, 1e-300],
    })
    g.set_outputs(node.outputs)
    loaded = round_trip(g)
    got = loaded.nodes[0].attrs
    assert type(got["count"]) is int and type(got["scale"]) is float
    assert got["sizes"] == [] and got["labels"] == ["a", "β"]
    assert math.isnan(got["weights"][0]) and got["weights"][1:3] == [math.inf, -math.inf]
    assert math.copysign(1, got["weights"][3]) == -1
    assert got["to"] is DType.FLOAT16
    assert got["table"].dtype == np.float16 and got["table"].flags.writeable
    loaded.verify()


def test_free_form_attributes_round_trip(rng):
    g = Graph("free")
    x = g.add_input("x", TensorType("float32", [4]))
    g.add_node("Custom", [x], [x.type], {
        "flag": True, "nothing": None, "mixed": [1, 2.5, "three", DType.INT8],
        "pair": (4, 5), "ints_tuple": (), "nested": [[1, 2], []],
        "table": {"a": 1, "b": [0.5]}, "scalar": np.float32(0.25), "npint": np.int64(7),
        "empty_tensor": np.zeros((0,), np.int32), "bools": np.array([True, False]),
    }, domain="acme", output_names=["y"])
    g.attrs = {"producer": "unit test", "opset": 17, "ratio": 0.5}
    g.set_outputs([g.nodes[0].outputs[0]])
    loaded = loads(dumps(g))
    assert str(loaded) == str(g)
    got = loaded.nodes[0].attrs
    assert got["flag"] is True and got["nothing"] is None
    assert got["mixed"] == [1, 2.5, "three", DType.INT8] and type(got["mixed"][3]) is DType
    assert got["pair"] == (4, 5) and got["ints_tuple"] == ()
    assert got["nested"] == [[1, 2], []] and got["table"] == {"a": 1, "b": [0.5]}
    assert got["scalar"] == 0.25 and type(got["npint"]) is int and got["npint"] == 7
    assert got["empty_tensor"].shape == (0,) and got["empty_tensor"].dtype == np.int32
    np.testing.assert_array_equal(got["bools"], [True, False])
    assert loaded.attrs == g.attrs


def test_subgraphs_keep_their_outer_references(rng, ir_test_ops):
    g = build_nested(rng)
    loaded = round_trip(g)
    loaded.verify()
    h = loaded.find_value("h")
    then = loaded.find_node("if").attrs["then_branch"]
    assert then.nodes[0].inputs[0] is h
    assert (then.nodes[0], 0) in h.uses
    orelse = loaded.find_node("if").attrs["else_branch"]
    inner = orelse.find_node("if").attrs["then_branch"]
    assert inner.nodes[0].inputs[0] is loaded.inputs[0]  # two levels up
    assert orelse.find_node("if").attrs["else_branch"].outputs == [h]


def test_lists_of_graphs_round_trip(rng, ir_test_ops):
    g = build_nested(rng)
    node = g.find_node("if")
    node.attrs["cases"] = [node.attrs.pop("then_branch"), node.attrs.pop("else_branch")]
    loaded = round_trip(g)
    cases = loaded.find_node("if").attrs["cases"]
    assert [c.name for c in cases] == ["then", "else"]
    assert cases[0].nodes[0].inputs[0] is loaded.find_value("h")


def test_an_unverified_graph_round_trips_as_it_is(rng):
    g = build_graph(rng)
    g.nodes.reverse()  # out of order: references point forwards
    loaded = round_trip(g)
    assert [n.name for n in loaded.nodes] == [n.name for n in g.nodes]


def test_data_is_aligned_and_shared_arrays_stored_once(rng):
    g = Graph("aligned")
    shared = rng.uniform(-1, 1, 5).astype(np.float32)
    for name in ("a", "b"):
        g.add_constant(shared, name)
    g.add_constant(rng.integers(1, 9, 3).astype(np.int8), "c")
    g.set_outputs(g.constants)
    data = dumps(g)
    fields, document, payload = split(data)
    assert fields[:3] == (MAGIC, FORMAT_VERSION, 0)
    assert (len(data) - len(payload)) % ALIGNMENT == 0
    blobs = [c["data"] for c in document["graph"]["constants"]]
    assert blobs[0] == blobs[1]
    assert all(b["offset"] % ALIGNMENT == 0 for b in blobs)
    assert payload[blobs[2]["offset"]:][:3] == g.constants[2].const.tobytes()
    loaded = loads(data)
    assert loaded.constants[0].const.ctypes.data % 8 == 0
    assert loaded.constants[0].const is loaded.constants[1].const


def test_dumps_rejects_what_it_cannot_write(rng, ir_test_ops):
    then = build_nested(rng).find_node("if").attrs["then_branch"]
    with pytest.raises(SerializationError, match="graph 'then': node 'relu' input 0 is value "
                       "'h', which neither this graph nor an enclosing one owns"):
        dumps(then)
    g = build_graph(rng)
    g.nodes[0].attrs["handle"] = object()
    with pytest.raises(SerializationError, match="node 'add': attribute 'handle': cannot "
                       "serialize a object"):
        dumps(g)
    g.nodes[0].attrs["handle"] = np.zeros(2, np.complex64)
    with pytest.raises(SerializationError, match="NumPy dtype complex64 has no ge-hub dtype"):
        dumps(g)
    with pytest.raises(SerializationError, match="dumps expects a Graph"):
        dumps("graph")


# -- clone --------------------------------------------------------------------------


def test_clone_is_deep_but_shares_constant_data(rng, ir_test_ops):
    g = build_nested(rng)
    g.nodes[0].meta["kernel"] = "cpu.add"
    copy = g.copy()
    assert str(copy) == str(g)
    assert_graphs_equal(g, copy)
    copy.verify()
    assert copy.find_value("w").const is g.find_value("w").const
    assert copy.find_value("w") is not g.find_value("w")
    then = copy.find_node("if").attrs["then_branch"]
    assert then is not g.find_node("if").attrs["then_branch"]
    assert then.nodes[0].inputs[0] is copy.find_value("h")  # the copy's own outer value
    assert copy.nodes[0].meta == {"kernel": "cpu.add"}
    # Editing the copy leaves the original alone.
    copy.nodes[0].meta["kernel"] = "other"
    copy.find_value("h").name = "renamed"
    copy.find_node("if").attrs["then_branch"].nodes[0].set_input(0, copy.inputs[0])
    assert g.nodes[0].meta["kernel"] == "cpu.add" and g.find_value("h").name == "h"
    g.verify()
    copy.verify()


def test_clone_copies_tensor_attributes_and_nested_lists(rng, ir_test_ops):
    g = Graph("k")
    x = g.add_input("x", TensorType("float32", [2]))
    attrs = all_attr_kinds(rng)
    node = add_typed_node(g, "Kinds", [x], attrs, domain="test")
    node.attrs["labels"] = ["a"]
    g.set_outputs(node.outputs[:1])
    copy = clone(g)
    assert_graphs_equal(g, copy)
    copy.nodes[0].attrs["table"][0, 0] = 42
    copy.nodes[0].attrs["labels"].append("b")
    assert g.nodes[0].attrs["table"][0, 0] != 42 and g.nodes[0].attrs["labels"] == ["a"]
    assert copy.unique_name("x") != "x"


def test_clone_of_a_subgraph_alone_reads_the_original_outer_values(rng, ir_test_ops):
    g = build_nested(rng)
    then = g.find_node("if").attrs["then_branch"]
    copy = clone(then)
    h = g.find_value("h")
    assert copy.nodes[0].inputs[0] is h
    assert (copy.nodes[0], 0) in h.uses


# -- malformed input ----------------------------------------------------------------


@pytest.fixture
def payload(rng, ir_test_ops) -> bytes:
    g = build_nested(rng)
    node = g.find_node("if")
    node.attrs["table"] = rng.integers(1, 5, 3)
    return dumps(g)


def _first_constant(document) -> dict:
    return document["graph"]["constants"][0]


MALFORMED = {
    "bad magic": (lambda d: b"NOTAGEHB" + d[8:], "not a ge-hub IR file: magic"),
    "empty": (lambda d: b"", "shorter than the 32-byte header"),
    "truncated header": (lambda d: d[:20], "shorter than the 32-byte header"),
    "truncated data": (lambda d: d[:-1], "truncated: the header announces"),
    "truncated JSON": (lambda d: d[:HEADER.size + 10], "truncated: the header announces"),
    "trailing bytes": (lambda d: d + b"\0", "has trailing bytes"),
    "newer version": (lambda d: d[:8] + struct.pack("<I", FORMAT_VERSION + 1) + d[12:],
                      f"unsupported ge-hub IR format version {FORMAT_VERSION + 1}"),
    "unknown flags": (lambda d: d[:12] + struct.pack("<I", 4) + d[16:], "unknown flags 0x4"),
    "JSON garbage": (lambda d: d[:HEADER.size] + b"{" * HEADER.unpack_from(d)[3]
                     + d[HEADER.size + HEADER.unpack_from(d)[3]:], "JSON section is malformed"),
    "not UTF-8": (lambda d: d[:HEADER.size] + b"\xff" + d[HEADER.size + 1:],
                  "JSON section is malformed"),
    "not a document": (lambda d: join([1, 2], split(d)[2]), "is not a 'ge-hub-ir' document"),
    "no graph": (lambda d: join({"format": "ge-hub-ir"}, split(d)[2]), "has no graph"),
    "missing field": (lambda d: edited(d, lambda doc: doc["graph"].pop("nodes")),
                      "graph 'outer': missing field 'nodes'"),
    "wrong field type": (lambda d: edited(d, lambda doc: doc["graph"].update(inputs={})),
                         "graph 'outer': field 'inputs' must be list"),
    "unknown dtype": (lambda d: edited(d, lambda doc: _first_constant(doc)["type"].update(
        dtype="float8")), "unknown dtype 'float8'"),
    "unknown data dtype": (lambda d: edited(d, lambda doc: _first_constant(doc)["data"].update(
        dtype="complex64")), "unknown dtype 'complex64'"),
    "offset out of range": (lambda d: edited(d, lambda doc: _first_constant(doc)["data"].update(
        offset=1 << 20)), "is outside the"),
    "negative offset": (lambda d: edited(d, lambda doc: _first_constant(doc)["data"].update(
        offset=-64)), "data at offset -64"),
    "misaligned offset": (lambda d: edited(d, lambda doc: _first_constant(doc)["data"].update(
        offset=4)), "not 64-byte aligned"),
    "size mismatch": (lambda d: edited(d, lambda doc: _first_constant(doc)["data"].update(
        shape=[5])), "float32[5] needs 20 bytes, the file says 16"),
    "bad shape": (lambda d: edited(d, lambda doc: _first_constant(doc)["type"].update(
        shape=[-1])), "shape must be a list of dims"),
    "unknown value id": (lambda d: edited(d, lambda doc: doc["graph"].update(outputs=[999])),
                         "refers to value id 999"),
    "duplicate value id": (lambda d: edited(d, lambda doc: _first_constant(doc).update(
        id=doc["graph"]["inputs"][0]["id"])), "is defined twice"),
    "bad reference": (lambda d: edited(d, lambda doc: doc["graph"].update(outputs=["y"])),
                      "a value reference must be an id"),
    "unknown attribute tag": (lambda d: edited(d, lambda doc: doc["graph"]["nodes"][-1][
        "attrs"].update(table={"complex": [1]})), "unknown attribute tag 'complex'"),
    "untagged attribute": (lambda d: edited(d, lambda doc: doc["graph"]["nodes"][-1][
        "attrs"].update(table=3)), "expected one tagged value"),
    "bad float": (lambda d: edited(d, lambda doc: doc["graph"]["attrs"].update(
        x={"float": "huge"})), "expected a float, got 'huge'"),
    "bad subgraph": (lambda d: edited(d, lambda doc: doc["graph"]["nodes"][-1]["attrs"].update(
        then_branch={"graph": []})), "expected a JSON object, got list"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_input_raises_serialization_error(payload, case):
    corrupt, message = MALFORMED[case]
    with pytest.raises(SerializationError, match=message.replace("(", r"\(").replace(
            "[", r"\[")):
        loads(corrupt(payload))


def test_bool_data_must_be_zero_or_one():
    g = Graph("b")
    g.set_outputs([g.add_constant(np.array([True, False, True]), "m")])
    fields, document, data = split(dumps(g))
    offset = document["graph"]["constants"][0]["data"]["offset"]
    corrupt = data[:offset] + b"\x02" + data[offset + 1:]
    with pytest.raises(SerializationError, match="bool data holds bytes other than 0 and 1"):
        loads(join(document, corrupt))


def test_loads_wants_bytes(payload):
    with pytest.raises(SerializationError, match="loads expects bytes, got str"):
        loads("GEHUBIR")
    assert_graphs_equal(loads(payload), loads(bytearray(payload)))


def test_random_corruption_loads_or_raises_serialization_error(payload):
    """Flipped bytes and truncations never crash `loads` or raise anything else."""
    fuzz = np.random.default_rng(1234)
    outcomes = {"loaded": 0, "rejected": 0}
    for trial in range(300):
        data = bytearray(payload)
        if trial % 3 == 0:
            data = data[:fuzz.integers(0, len(data))]
        else:
            for position in fuzz.integers(0, len(data), size=fuzz.integers(1, 4)):
                data[position] ^= 1 << int(fuzz.integers(0, 8))
        try:
            graph = loads(bytes(data))
        except SerializationError:
            outcomes["rejected"] += 1
        else:
            assert isinstance(graph, Graph)
            str(graph)  # a graph that loads can at least be printed
            outcomes["loaded"] += 1
    assert outcomes["rejected"] > 0 and outcomes["loaded"] > 0
