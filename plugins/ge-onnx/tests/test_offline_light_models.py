"""The ONNX light real models (resnet50, densenet121, inception, vgg19, ...) compiled once
into .ghm offline files: a fresh process with the ONNX frontend blocked
(GE_HUB_DISABLE_PLUGINS=onnx) loads each file and gives outputs bit-identical to the
in-memory compiled model's, with every stored plan used as stored and its constants
mapped from the file. SqueezeNet runs in the default suite; the others are `slow`."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import ge_hub
import numpy as np
import onnx
import pytest

LIGHT = pathlib.Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = sorted(p.stem for p in LIGHT.glob("light_*.onnx"))
FAST = {"light_squeezenet"}

CHILD = r"""
import mmap, sys
import numpy as np
import ge_hub
from ge_hub import runtime
from ge_hub.plugins import loaded_plugins

assert "onnx" not in {p.name for p in loaded_plugins()}, "the ONNX frontend must be blocked"

def refuse(*args, **kwargs):
    raise AssertionError("the stored plan was not used")

runtime.compile_plan = refuse
model = ge_hub.load_compiled(sys.argv[1], allow_compile=False)
x = np.load(sys.argv[2])
outputs = model.run([x])
for constant in model.plan.constants:
    if constant.size:
        base = constant
        while isinstance(base, np.ndarray) and base.base is not None:
            base = base.base
        assert isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)
np.savez(sys.argv[3], *outputs)
"""


@pytest.mark.parametrize("name", [pytest.param(m, marks=() if m in FAST else pytest.mark.slow)
                                  for m in MODELS])
def test_ghm_without_the_frontend_is_bit_identical(name, tmp_path):
    model = ge_hub.compile(str(LIGHT / f"{name}.onnx"))
    (value,) = model.graph.inputs
    x = np.random.default_rng(0).standard_normal([int(d) for d in value.type.shape])
    x = x.astype(np.float32)
    want = model.run({value.name: x})
    assert model.summary()["python_steps"] == 0
    path = tmp_path / f"{name}.ghm"
    model.save(path, source=LIGHT / f"{name}.onnx")
    np.save(tmp_path / "x.npy", x)
    env = dict(os.environ, GE_HUB_DISABLE_PLUGINS="onnx")
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), str(tmp_path / "x.npy"),
                           str(tmp_path / "out.npz")], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    with np.load(tmp_path / "out.npz") as got:
        outputs = [got[f"arr_{i}"] for i in range(len(got.files))]
    assert len(outputs) == len(want)
    for a, b in zip(outputs, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(a, b, equal_nan=True)
