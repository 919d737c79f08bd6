"""A greedy decode loop (an ONNX Loop over a GRU cell, bench/decode_models.py) runs as one
C control step: its body a compiled sub-plan, no Python step, no specialization on the
data, and the same tokens as ONNX Runtime, with a fixed trip count (tokens as a scan
output) and with an early exit on an EOS token (tokens in a carried buffer)."""

from __future__ import annotations

import pathlib
import sys

import ge_hub
import numpy as np
import onnx
import onnxruntime
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:  # bench/ is the repository's, not an installed package
    sys.path.insert(0, str(ROOT))

from bench.decode_models import eos_decoder, feeds, greedy_decoder  # noqa: E402

HIDDEN = 32


@pytest.mark.parametrize("variant", ["fixed", "eos"])
def test_greedy_decode_loop_runs_in_c_and_agrees_with_onnxruntime(variant, tmp_path):
    if variant == "fixed":
        data = greedy_decoder(steps=12, hidden=HIDDEN)
    else:
        data, _ = eos_decoder(12, HIDDEN, exit_at=6)
    session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    model = ge_hub.compile(ge_hub.load(onnx.load_from_string(data)))
    for seed in (1, 2, 3):
        feed = feeds(HIDDEN, seed)
        got, want = model.run(feed), session.run(None, feed)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[2], want[2])
    if variant == "eos":  # seed 1 ended early, on its EOS
        assert (model.run(feeds(HIDDEN, 1))[2] == -1).any()
    summary = model.summary()
    assert summary["python_steps"] == 0 and summary["steps"] == 1
    assert summary["specialized_on"] == [] and summary["cached_plans"] == 1
    (step,) = model.plan.steps
    assert step.kernel == "control"
    body = model.plan.subplans[step.subplans[0]]
    assert {"GRU", "ArgMax", "Gemm"} <= {s.op for s in body.steps}
    # Saved and loaded, it runs from the file with neither Python nor the compiler.
    path = tmp_path / "decoder.ghm"
    model.save(path)
    loaded = ge_hub.load_compiled(path, allow_compile=False)
    feed = feeds(HIDDEN, 2)
    for g, w in zip(loaded.run(feed), session.run(None, feed)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    assert loaded.summary()["python_steps"] == 0
