"""The zoo: every paddle.vision.models architecture (random init, eval) and
TransformerEncoders, from the Layer object, from PIR files and from legacy files, each
compared with Paddle itself (the Layer in dynamic-graph mode; the files in Paddle
Inference) to 1e-4 relative error, with no Python step in the compiled plan.

GE_PADDLE_ZOO_REPORT=path appends one line per case (model, source, error, Python
steps) to that file: the zoo table of the README.
"""

from __future__ import annotations

import os

import ge_hub
import numpy as np
import paddle
import pytest
import zoo
from conftest import (
    max_relative_error,
    paddle_eager,
    paddle_inference,
    run_ge,
    save_legacy,
    save_pir,
)

TOLERANCE = 1e-4


def _params(entries):
    return [pytest.param(e.name, marks=pytest.mark.slow if e.slow else ()) for e in entries]


def _input(entry):
    return np.random.default_rng(1).standard_normal(entry.example).astype(np.float32)


def _record(name, source, error, steps):
    path = os.environ.get("GE_PADDLE_ZOO_REPORT")
    if path:
        with open(path, "a") as report:
            report.write(f"{name}\t{source}\t{error:.2e}\t{steps}\n")


def _check(name, source, got, want, steps):
    error = max_relative_error(got, want)
    _record(name, source, error, steps)
    assert error <= TOLERANCE, f"{name} from {source}: max relative error {error:.3g}"
    assert steps == 0, f"{name} from {source}: {steps} Python steps"


@pytest.mark.parametrize("name", _params(zoo.ZOO))
def test_layer(name):
    entry = zoo.BY_NAME[name]
    layer = zoo.build(name)
    x = _input(entry)
    want = paddle_eager(layer, [x])
    graph = ge_hub.load(layer, input_spec=[paddle.static.InputSpec(list(entry.shape),
                                                                   "float32", "x")])
    got, steps = run_ge(graph, [x])
    _check(name, "Layer", got, want, steps)


@pytest.mark.parametrize("name", _params(zoo.ZOO))
def test_pir_files(name, tmp_path):
    entry = zoo.BY_NAME[name]
    prefix = save_pir(zoo.build(name), str(tmp_path / "model"), entry.shape)
    x = _input(entry)
    want = paddle_inference(prefix + ".json", prefix + ".pdiparams", [x])
    got, steps = run_ge(ge_hub.load(prefix + ".json"), [x])
    _check(name, "PIR .json", got, want, steps)


@pytest.mark.parametrize("name", _params([e for e in zoo.ZOO if e.legacy]))
def test_legacy_files(name, tmp_path):
    entry = zoo.BY_NAME[name]
    prefix = save_legacy(name, str(tmp_path / "model"))
    x = _input(entry)
    want = paddle_inference(prefix + ".pdmodel", prefix + ".pdiparams", [x])
    got, steps = run_ge(ge_hub.load(prefix + ".pdmodel"), [x])
    _check(name, "legacy .pdmodel", got, want, steps)
