"""The light real models of the onnx package give the same outputs, bit for bit, on one
stream, on forced streams and with `streams="auto"` (ge_hub.passes.schedule)."""

from __future__ import annotations

import pathlib

import ge_hub
import numpy as np
import onnx
import pytest

LIGHT = pathlib.Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = sorted(p.stem for p in LIGHT.glob("light_*.onnx"))


def test_inception_v1_gets_streams_when_forced():
    graph = ge_hub.load(str(LIGHT / "light_inception_v1.onnx"))
    (value,) = graph.inputs
    shape = [int(d) for d in value.type.shape]
    model = ge_hub.compile(graph, {value.name: shape}, options={"streams": 4})
    summary = model.summary()
    # nine Inception blocks of four branches each
    assert summary["streams"] == 4 and summary["events"] >= 9 * 2
    assert summary["serial_arena_bytes"] <= summary["arena_bytes"]


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_outputs_identical_whatever_the_streams(name):
    graph = ge_hub.load(str(LIGHT / f"{name}.onnx"))
    (value,) = graph.inputs
    shape = [int(d) for d in value.type.shape]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    want = ge_hub.compile(graph, {value.name: shape}, options={"streams": 1}).run({value.name: x})
    for streams in (3, "auto"):
        model = ge_hub.compile(graph, {value.name: shape}, options={"streams": streams})
        for got, expected in zip(model.run({value.name: x}), want):
            np.testing.assert_array_equal(got, expected)
