"""The light real models shipped in the onnx package give the same outputs with the
fuse_elementwise pass on and off; where a model has chains of elementwise ops after the
other fusions (densenet121 and inception_v2: batch norms written as Mul and Add, or
BatchNormalization nodes that fuse_elementwise lowers to a per-channel multiply-add
itself, then Relu), they become FusedElementwise steps and the plan has fewer steps."""

from __future__ import annotations

import pathlib

import ge_hub
import numpy as np
import onnx
import pytest

LIGHT = pathlib.Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = sorted(p.stem for p in LIGHT.glob("light_*.onnx"))
FUSED = "ge_hub.FusedElementwise"
# models with elementwise chains left after the epilogue fusions
CHAINS = {"light_densenet121", "light_inception_v2"}


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_elementwise_fusion_on_and_off_agree(name):
    graph = ge_hub.load(str(LIGHT / f"{name}.onnx"))
    (value,) = graph.inputs
    shape = tuple(int(d) for d in value.type.shape)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    on = ge_hub.compile(graph.copy(), input_shapes={value.name: shape})
    off = ge_hub.compile(graph.copy(), input_shapes={value.name: shape},
                         options={"disable_passes": ["fuse_elementwise"]})
    fused = sum(s.op == FUSED for s in on.plan.steps)
    assert FUSED not in [s.op for s in off.plan.steps]
    if name in CHAINS:
        assert fused > 0 and len(on.plan.steps) < len(off.plan.steps)
    assert on.summary()["python_steps"] == 0
    for a, b in zip(on.run({value.name: x}), off.run({value.name: x})):
        scale = max(1.0, float(np.abs(b).max()))
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * scale)
