"""`ge-hub run` on saved Paddle models: both formats, outputs named as Paddle Inference
names them, no Python steps."""

from __future__ import annotations

import os
import subprocess
import sys

import paddle
import pytest
from conftest import save_legacy, save_pir


@pytest.fixture(scope="module")
def lenet(tmp_path_factory):
    directory = tmp_path_factory.mktemp("cli")
    paddle.seed(0)
    layer = paddle.vision.models.LeNet()
    layer.eval()
    return {"pir": save_pir(layer, str(directory / "pir" / "model"), (-1, 1, 28, 28)) + ".json",
            "legacy": save_legacy("LeNet", str(directory / "legacy" / "model")) + ".pdmodel"}


@pytest.mark.parametrize("fmt", ["pir", "legacy"])
def test_ge_hub_run(lenet, fmt):
    cli = os.path.join(os.path.dirname(sys.executable), "ge-hub")
    done = subprocess.run([cli, "run", "--input-shape", "x:2,1,28,28", lenet[fmt]],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "0 run Python" in done.stdout
    output_name = "fetch_name_0" if fmt == "pir" else "linear_2.tmp_1"
    assert f"{output_name}  float32[2,10]" in done.stdout
