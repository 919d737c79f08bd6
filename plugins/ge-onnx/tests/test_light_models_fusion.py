"""The light real models shipped in the onnx package give the same outputs with the
fuse_conv_epilogue and fuse_matmul_epilogue passes on and off, and fusing leaves fewer
steps where there is a Conv followed by its activation or residual Add."""

from __future__ import annotations

import pathlib

import ge_hub
import numpy as np
import onnx
import pytest

LIGHT = pathlib.Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = sorted(p.stem for p in LIGHT.glob("light_*.onnx"))
FUSED = "ge_hub.FusedConv"


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_fusion_on_and_off_agree(name):
    graph = ge_hub.load(str(LIGHT / f"{name}.onnx"))
    (value,) = graph.inputs
    shape = [int(d) for d in value.type.shape]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    shapes = {value.name: tuple(shape)}
    on = ge_hub.compile(graph.copy(), input_shapes=shapes)
    off = ge_hub.compile(graph.copy(), input_shapes=shapes,
                         options={"disable_passes": ["fuse_conv_epilogue",
                                                     "fuse_matmul_epilogue"]})
    steps_on = [s.op for s in on.plan.steps]
    steps_off = [s.op for s in off.plan.steps]
    assert FUSED not in steps_off and "ge_hub.FusedMatMul" not in steps_off
    # every light model has a Conv followed by its Relu (densenet121 and inception_v2
    # through a batch norm written as Mul and Add, which fuse_conv_epilogue folds first)
    assert FUSED in steps_on and len(steps_on) < len(steps_off), (steps_on, steps_off)
    assert on.summary()["python_steps"] == 0
    for a, b in zip(on.run({value.name: x}), off.run({value.name: x})):
        scale = max(1.0, float(np.abs(b).max()))
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * scale)
