"""The light real models shipped in the onnx package compile with every step in C."""

from __future__ import annotations

import pathlib

import ge_hub
import numpy as np
import onnx
import pytest

LIGHT = pathlib.Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = sorted(p.stem for p in LIGHT.glob("light_*.onnx"))


def test_the_suite_ships_the_models_we_expect():
    assert {"light_resnet50", "light_densenet121", "light_inception_v1", "light_inception_v2",
            "light_bvlc_alexnet", "light_vgg19", "light_zfnet512", "light_squeezenet",
            "light_shufflenet"} <= set(MODELS)


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_no_step_falls_back_to_python(name):
    model = ge_hub.compile(str(LIGHT / f"{name}.onnx"))
    (value,) = model.graph.inputs
    x = np.random.default_rng(0).standard_normal([int(d) for d in value.type.shape])
    outputs = model.run({value.name: x.astype(np.float32)})
    assert all(np.isfinite(o).all() for o in outputs)
    summary = model.summary()
    assert summary["python_steps"] == 0, summary["python_ops"]
    assert summary["folded_steps"] == 0, summary["folded_ops"]
