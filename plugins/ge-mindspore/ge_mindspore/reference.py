"""MindSpore as the reference of `ge-hub compare --against mindspore`.

A `.mindir` file runs in MindSpore (`mindspore.load` + `nn.GraphCell`); a
`mindspore.nn.Cell` runs as it stands (`ge_mindspore.testing`'s runners). MindSpore
compiles the graph whole and exposes none of its intermediate values, so only the
model's outputs come back, matched to ge-hub's outputs by position.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np


def run_mindspore(model: Any, feeds: Mapping[str, np.ndarray], graph,
                  trusted: bool = False) -> dict[str, np.ndarray]:
    try:
        import mindspore  # noqa: F401 (the runners below import it too)
    except ImportError as exc:
        raise RuntimeError("--against mindspore needs the mindspore package "
                           "(pip install mindspore)") from exc
    from ge_mindspore.testing import run_cell, run_mindir

    inputs = [np.asarray(feeds[name]) for name in graph.input_names]
    if isinstance(model, (str, os.PathLike)):
        outputs = run_mindir(os.fspath(model), inputs)
    else:
        outputs = run_cell(model, inputs)
    if len(outputs) != len(graph.output_names):
        raise RuntimeError(f"--against mindspore: MindSpore gives {len(outputs)} outputs, "
                           f"the ge-hub graph has {len(graph.output_names)}")
    return dict(zip(graph.output_names, (np.asarray(o) for o in outputs)))
