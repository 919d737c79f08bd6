"""Test helpers: run the same input through Paddle and through ge-hub, and compare.

`paddle_inference` runs a saved model with Paddle Inference (CPU), `paddle_eager` a
Layer in dynamic-graph mode; `run_ge` compiles a ge-hub graph and runs it;
`max_relative_error` is the zoo's measure (max |a - b| over max |b|, per output).
`save_legacy` writes the legacy `.pdmodel` form in a child interpreter, because Paddle
picks the program format (FLAGS_enable_pir_api) once, at import.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import ge_hub
import numpy as np
import paddle
import pytest

sys.path.insert(0, os.path.dirname(__file__))

TESTS = os.path.dirname(os.path.abspath(__file__))


def paddle_eager(layer, inputs) -> list[np.ndarray]:
    with paddle.no_grad():
        outputs = layer(*[paddle.to_tensor(x) for x in inputs])
    if not isinstance(outputs, (list, tuple)):
        outputs = [outputs]
    return [o.numpy() for o in outputs]


def paddle_inference(program: str, params: str, inputs, threads: int = 1):
    import paddle.inference as inference

    config = inference.Config(program, params)
    config.disable_gpu()
    config.set_cpu_math_library_num_threads(threads)
    config.disable_glog_info()
    predictor = inference.create_predictor(config)
    for name, x in zip(predictor.get_input_names(), inputs):
        predictor.get_input_handle(name).copy_from_cpu(np.ascontiguousarray(x))
    predictor.run()
    return [predictor.get_output_handle(n).copy_to_cpu() for n in predictor.get_output_names()]


def run_ge(graph, inputs):
    compiled = ge_hub.compile(graph)
    return compiled.run(list(inputs)), compiled.summary()["python_steps"]


def max_relative_error(got, want) -> float:
    assert len(got) == len(want), f"{len(got)} outputs, Paddle gives {len(want)}"
    worst = 0.0
    for a, b in zip(got, want):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, f"shape {a.shape}, Paddle gives {b.shape}"
        scale = max(float(np.abs(b).max()), 1e-12) if b.size else 1.0
        if a.size:
            worst = max(worst, float(np.abs(a.astype(np.float64) - b).max()) / scale)
    return worst


def save_pir(layer, prefix: str, shape, dtype="float32"):
    spec = [paddle.static.InputSpec(list(shape), dtype, "x")]
    paddle.jit.save(layer, prefix, input_spec=spec)
    return prefix


def save_legacy(entry_name: str, prefix: str) -> str:
    """The zoo entry saved by `paddle.jit.save` in old-IR mode: prefix.pdmodel."""
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {TESTS!r})
        import paddle, zoo
        entry = zoo.BY_NAME[{entry_name!r}]
        spec = [paddle.static.InputSpec(list(entry.shape), "float32", "x")]
        paddle.jit.save(zoo.build({entry_name!r}), {prefix!r}, input_spec=spec)
    """)
    env = dict(os.environ, FLAGS_enable_pir_api="0", GLOG_minloglevel="2")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert os.path.exists(prefix + ".pdmodel"), "no .pdmodel written"
    return prefix


@pytest.fixture
def rng():
    return np.random.default_rng(0)
