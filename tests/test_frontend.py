"""`ge_hub.load` dispatch and its error when no frontend accepts a model."""

from __future__ import annotations

import pytest

import ge_hub
from ge_hub import plugins
from ge_hub.errors import FrontendNotFoundError


@pytest.fixture(autouse=True)
def builtins_only(monkeypatch):
    monkeypatch.setenv(plugins.ALLOW_ENV, "")
    plugins.reset()
    yield
    plugins.reset()


def test_onnx_path_suggests_extra(tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"\x08\x07")
    with pytest.raises(FrontendNotFoundError) as info:
        ge_hub.load(path)
    message = str(info.value)
    assert "model.onnx" in message
    assert "installed frontends: ge-hub-ir" in message  # only the built-in one
    assert "pip install ge-hub[onnx]" in message


def test_missing_file_is_said(tmp_path):
    with pytest.raises(FrontendNotFoundError, match="does not exist"):
        ge_hub.load(tmp_path / "nope.mindir")


def test_object_of_unknown_framework():
    class Model:
        pass

    with pytest.raises(FrontendNotFoundError, match=r"model of type .*Model"):
        ge_hub.load(Model())


def test_graph_passes_through():
    graph = ge_hub.Graph("g")
    assert ge_hub.load(graph) is graph


def test_first_accepting_frontend_wins(monkeypatch):
    from ge_hub.registry import Frontend

    registry = plugins.get_registry()
    registry.current_plugin = "test"
    registry.add_frontend(Frontend("never", accepts=lambda m: False, load=lambda m: 1 / 0))
    registry.add_frontend(Frontend("ints", accepts=lambda m: isinstance(m, int),
                                   load=lambda m, **o: ("int", m, o)))
    assert ge_hub.load(7, scale=2) == ("int", 7, {"scale": 2})
