"""Run one model through MindSpore and through ge-hub, and compare.

    from ge_mindspore import testing
    report = testing.compare("lenet.mindir", [x])       # mindspore.load + nn.GraphCell
    report = testing.compare(cell, [x])                 # the Cell itself, and its export
    assert report.max_rel_error < 1e-4 and report.python_steps == 0

The relative error is max |ge-hub - MindSpore| over max |MindSpore|, per output, the
largest over outputs: a scale-aware measure that stays meaningful where single elements
are near zero.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import numpy as np


@dataclasses.dataclass
class Report:
    max_rel_error: float
    max_abs_error: float
    python_steps: int
    outputs: int


def run_mindir(path: str, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run a MINDIR file in MindSpore: `mindspore.load` + `nn.GraphCell`."""
    import mindspore as ms
    from mindspore import nn

    cell = nn.GraphCell(ms.load(os.fspath(path)))
    return _numpy(cell(*[ms.Tensor(np.asarray(x)) for x in inputs]))


def run_cell(cell: Any, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run a Cell in MindSpore as it stands (its own mode)."""
    import mindspore as ms

    return _numpy(cell(*[ms.Tensor(np.asarray(x)) for x in inputs]))


def _numpy(result: Any) -> list[np.ndarray]:
    if isinstance(result, (tuple, list)):
        return [r for item in result for r in _numpy(item)]
    return [result.asnumpy() if hasattr(result, "asnumpy") else np.asarray(result)]


def compare(model: Any, inputs: Sequence[np.ndarray], **compile_options: Any) -> Report:
    """Load `model` (a .mindir path or a Cell) with ge-hub, compile, run on `inputs`,
    and compare with MindSpore's own result. Raises AssertionError on a shape or dtype
    mismatch; returns the errors for the caller to bound."""
    import ge_hub

    inputs = [np.asarray(x) for x in inputs]
    if isinstance(model, (str, os.PathLike)):
        graph = ge_hub.load(model)
        want = run_mindir(model, inputs)
    else:
        graph = ge_hub.load(model, example_inputs=tuple(inputs))
        want = run_cell(model, inputs)
    compiled = ge_hub.compile(graph, **compile_options)
    got = compiled.run(inputs)
    assert len(got) == len(want), f"ge-hub gives {len(got)} outputs, MindSpore {len(want)}"
    rel = abs_err = 0.0
    for index, (a, b) in enumerate(zip(got, want)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, f"output {index}: shape {a.shape}, MindSpore {b.shape}"
        assert a.dtype == b.dtype, f"output {index}: dtype {a.dtype}, MindSpore {b.dtype}"
        if a.size == 0:
            continue
        diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
        scale = float(np.max(np.abs(b.astype(np.float64))))
        abs_err = max(abs_err, diff)
        rel = max(rel, diff / scale if scale > 0 else diff)
    return Report(rel, abs_err, int(compiled.summary()["python_steps"]), len(got))
