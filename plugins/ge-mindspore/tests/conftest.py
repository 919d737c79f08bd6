"""Shared fixtures: MINDIR files exported from small Cells into a temporary directory."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def export(tmp_path):
    """export(cell, *inputs, name="model") -> path of the .mindir file mindspore wrote."""
    import mindspore as ms

    def write(cell, *inputs, name: str = "model") -> str:
        cell.set_train(False)
        inputs = [x if isinstance(x, ms.Tensor) else ms.Tensor(np.asarray(x)) for x in inputs]
        ms.export(cell, *inputs, file_name=str(tmp_path / name), file_format="MINDIR")
        return str(tmp_path / f"{name}.mindir")

    return write


def random(shape, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
