"""The built-in frontend for serialized ge-hub graphs (`ge_hub.frontends.gehub`): `ge_hub.load`
of .gehub files."""

from __future__ import annotations

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.errors import FrontendNotFoundError, GraphError, SerializationError
from ge_hub.frontends import gehub
from ge_hub.ir import serialize
from ge_hub.ir.graph import Graph
from ge_hub.ir.types import TensorType
from ge_hub.reference import evaluate


def scaled_relu() -> Graph:
    with es.GraphBuilder("scaled_relu") as gb:
        gb.output(es.relu(es.input("x", "float32", ["N", 3])) * 1.5, "y")
    return gb.graph


@pytest.mark.parametrize("file_name", ["model.gehub", "model.GEHUB", "model.bin", "model"])
def test_load_by_suffix_or_magic(tmp_path, file_name):
    path = tmp_path / file_name
    serialize.save(scaled_relu(), path)
    assert gehub.accepts(path) and gehub.accepts(str(path))
    graph = ge_hub.load(path)
    x = np.random.default_rng(3).standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(ge_hub.compile(graph).run({"x": x})[0],
                               evaluate(scaled_relu(), {"x": x})[0], rtol=1e-6)


def test_other_files_and_objects_are_not_accepted(tmp_path):
    other = tmp_path / "model.bin"
    other.write_bytes(b"plain text, not a model")
    assert not gehub.accepts(other)
    assert not gehub.accepts(tmp_path / "missing.bin")
    assert not gehub.accepts(tmp_path)
    assert not gehub.accepts(serialize.dumps(scaled_relu()))  # bytes, not a path
    with pytest.raises(FrontendNotFoundError, match="model.bin"):
        ge_hub.load(other)


def test_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.gehub"):
        ge_hub.load(tmp_path / "missing.gehub")
    truncated = tmp_path / "truncated.gehub"
    truncated.write_bytes(serialize.dumps(scaled_relu())[:40])
    with pytest.raises(SerializationError, match="truncated"):
        ge_hub.load(truncated)
    (tmp_path / "dir.gehub").mkdir()
    with pytest.raises(IsADirectoryError, match="dir.gehub"):
        ge_hub.load(tmp_path / "dir.gehub")


def test_loaded_graph_is_verified(tmp_path):
    graph = Graph("unknown_op")
    x = graph.add_input("x", TensorType("float32", [2]))
    node = graph.add_node("NoSuchOp", [x], [TensorType("float32", [2])], {})
    graph.set_outputs(node.outputs)
    serialize.save(graph, tmp_path / "bad.gehub")
    with pytest.raises(GraphError, match="NoSuchOp"):
        ge_hub.load(tmp_path / "bad.gehub")
