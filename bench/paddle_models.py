"""The Paddle group of `python -m bench`: ge-hub beside Paddle Inference, and beside ONNX
Runtime on paddle2onnx's export, on the same saved Paddle models.

The networks come from the ge-paddle zoo (plugins/ge-paddle/tests/zoo.py: seeded random
init, eval), saved once with `paddle.jit.save` (a PIR `.json` with its `.pdiparams`);
then, with the same number of CPU threads for each:

- "ge-hub": `ge_hub.load(model.json)` (the ge-paddle frontend), compile, run, with
  GE_HUB_NUM_THREADS threads;
- "paddle-inference": `paddle.inference` on the same files (CPU, oneDNN as Paddle
  configures it by default, `set_cpu_math_library_num_threads`);
- "ort-paddle2onnx": ONNX Runtime on `paddle2onnx`'s export of the same files, when
  paddle2onnx is importable (it is not in the bench env: paddle2onnx 2.1.0 requires
  onnx 1.17, below the onnx constraints.txt pins), with intra_op_num_threads.

Timed interleaved (bench.timing); ge-hub's output is checked against Paddle Inference's.
The group runs in a child process (Paddle costs ~300 MB, and ge-hub's thread count is
read once per process) when ge-paddle is installed; otherwise `python -m bench` says it
was skipped. By hand:

    python -m bench.paddle_models [--quick] [--threads 2] [--json PATH]
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

from bench.group_cli import group_main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOO = os.path.join(ROOT, "plugins", "ge-paddle", "tests", "zoo.py")
MODELS = {  # bench name -> (zoo name, input shape)
    "pd-lenet": ("LeNet", (1, 1, 28, 28)),
    "pd-transformer-encoder": ("transformer_encoder", (1, 64, 32)),
    "pd-mobilenet-v2": ("mobilenet_v2", (1, 3, 224, 224)),
    "pd-resnet18": ("resnet18", (1, 3, 224, 224)),
}
QUICK = ("pd-lenet", "pd-transformer-encoder")
TOLERANCE = 1e-4  # max |ge-hub - Paddle| / max |Paddle|


# -- the parent side: python -m bench ----------------------------------------------------

def available() -> tuple[bool, str]:
    if importlib.util.find_spec("ge_paddle") is None:
        return False, "ge-paddle is not installed (pip install ge-hub[paddle])"
    return True, ""


def run_group(*, quick: bool, threads: int, models: list[str] | None, log) -> dict | None:
    """Run the group in a child process; None when it does not apply to this run."""
    wanted = [m for m in (models or (QUICK if quick else MODELS)) if m in MODELS]
    if not wanted:
        return None
    ok, why = available()
    if not ok:
        log(f"paddle group skipped: {why}")
        return None
    with tempfile.TemporaryDirectory(prefix="ge-hub-bench-pd-") as directory:
        output = os.path.join(directory, "paddle.json")
        command = [sys.executable, "-m", "bench.paddle_models", "--threads", str(threads),
                   "--json", output, "--models", ",".join(wanted)]
        if quick:
            command.append("--quick")
        log("paddle group: " + " ".join(command))
        result = subprocess.run(command, cwd=ROOT)
        if result.returncode != 0 or not os.path.exists(output):
            return {"status": "error", "error": f"exit status {result.returncode}",
                    "models": []}
        with open(output) as file:
            return json.load(file)


def markdown(group: dict) -> str:
    lines = ["", f"### Paddle models ({group.get('threads', '?')} threads, median ms)", ""]
    if group.get("status") == "error":
        return "\n".join(lines + [f"failed: {group.get('error')}"])
    engines = ["ge-hub", "paddle-inference", "ort-paddle2onnx"]
    lines.append("| model | " + " | ".join(engines) + " | ge-hub / Paddle | max rel err "
                 "| Python steps | status |")
    lines.append("|---" * (len(engines) + 5) + "|")
    for row in group.get("models", []):
        cells = [_ms(row.get(f"{e}_ms")) for e in engines]
        ratio = (f"{row['ge-hub_ms'] / row['paddle-inference_ms']:.2f}x"
                 if row.get("ge-hub_ms") and row.get("paddle-inference_ms") else "-")
        error = f"{row['max_rel_error']:.1e}" if "max_rel_error" in row else "-"
        lines.append(f"| {row['name']} | " + " | ".join(cells) + f" | {ratio} | {error} | "
                     f"{row.get('python_steps', '-')} | {row['status']} |")
    if group.get("notes"):
        lines += [""] + [f"- {note}" for note in group["notes"]]
    return "\n".join(lines)


def _ms(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def failed(group: dict | None) -> bool:
    """ge-hub failing or disagreeing with Paddle fails the run; a peer's error does not."""
    if group is None:
        return False
    return group.get("status") == "error" or any(
        row["status"] in ("ge-hub error", "mismatch") for row in group.get("models", []))


# -- the child side: python -m bench.paddle_models -------------------------------------------

def _zoo():
    sys.path.insert(0, os.path.dirname(ZOO))
    spec = importlib.util.spec_from_file_location("ge_paddle_zoo", ZOO)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def measure(models: list[str], threads: int, quick: bool) -> dict:
    os.environ["GE_HUB_NUM_THREADS"] = str(threads)  # read once, on the pool's first use
    import numpy as np
    import paddle
    import paddle.inference as inference

    import ge_hub
    from bench.timing import interleave

    zoo = _zoo()
    # Paddle Inference (oneDNN) settles after a few runs: the full mode warms up longer.
    rounds = dict(rounds=5, min_rounds=3, warmup=2, min_round_seconds=0.01,
                  budget_seconds=5.0) if quick else dict(rounds=20, budget_seconds=15.0, warmup=10)
    doc = {"threads": threads, "mode": "quick" if quick else "full",
           "versions": {"paddle": paddle.__version__, "ge-hub": ge_hub.__version__,
                        "numpy": np.__version__}, "models": [], "notes": []}
    has_p2o = importlib.util.find_spec("paddle2onnx") is not None
    if not has_p2o:
        doc["notes"].append("ort-paddle2onnx not measured: paddle2onnx is not installed "
                            "(2.1.0 requires onnx 1.17, below the pinned onnx)")
    with tempfile.TemporaryDirectory(prefix="ge-hub-bench-pd-") as directory:
        for name in models:
            zoo_name, shape = MODELS[name]
            row = {"name": name, "status": "ok", "shape": list(shape)}
            doc["models"].append(row)
            entry = zoo.BY_NAME[zoo_name]
            prefix = os.path.join(directory, name)
            # The zoo's symbolic dims stay symbolic; the others take the bench's size.
            dims = [-1 if d == -1 else size for d, size in zip(entry.shape, shape)]
            spec = [paddle.static.InputSpec(dims, "float32", "x")]
            paddle.jit.save(zoo.build(zoo_name), prefix, input_spec=spec)
            feed = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
            runners = {}
            try:
                start = time.perf_counter()
                model = ge_hub.compile(ge_hub.load(prefix + ".json"))
                (got,) = model.run([feed])  # the first run plans the symbolic shapes
                row["ge-hub_prepare_s"] = time.perf_counter() - start
                row["python_steps"] = model.summary()["python_steps"]
                runners["ge-hub"] = _runner(lambda: model.run([feed]))
            except Exception as exc:  # reported in the table, the run goes on
                row["status"], row["error"] = "ge-hub error", f"{type(exc).__name__}: {exc}"
                print(f"{name}: ge-hub failed: {row['error']}", file=sys.stderr)
                continue
            config = inference.Config(prefix + ".json", prefix + ".pdiparams")
            config.disable_gpu()
            config.set_cpu_math_library_num_threads(threads)
            config.disable_glog_info()
            predictor = inference.create_predictor(config)
            handle = predictor.get_input_handle(predictor.get_input_names()[0])
            out = predictor.get_output_handle(predictor.get_output_names()[0])

            def paddle_run():
                handle.copy_from_cpu(feed)
                predictor.run()
                return out.copy_to_cpu()

            want = paddle_run()
            runners["paddle-inference"] = _runner(paddle_run)
            scale = float(np.max(np.abs(want))) or 1.0
            row["max_rel_error"] = float(np.max(np.abs(got - want))) / scale
            if row["max_rel_error"] > TOLERANCE:
                row["status"] = "mismatch"
            if has_p2o:
                try:
                    runners["ort-paddle2onnx"] = _ort_runner(prefix, feed, threads)
                except Exception as exc:
                    doc["notes"].append(f"{name}: paddle2onnx/ORT failed: "
                                        f"{type(exc).__name__}: {exc}")
            timings = interleave(runners, **rounds)
            for engine, stats in timings.items():
                row[f"{engine}_ms"] = stats["median"] * 1e3
                row[f"{engine}_latency_s"] = stats
            print(f"{name}: " + ", ".join(f"{e} {row[f'{e}_ms']:.3f} ms" for e in timings),
                  file=sys.stderr, flush=True)
    return doc


def _ort_runner(prefix: str, feed, threads: int):
    import onnxruntime
    import paddle2onnx

    onnx_path = prefix + ".onnx"
    paddle2onnx.export(prefix + ".json", prefix + ".pdiparams", onnx_path)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    session = onnxruntime.InferenceSession(onnx_path, options,
                                           providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return _runner(lambda: session.run(None, {name: feed}))


def _runner(call):
    def run(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            call()
        return (time.perf_counter() - start) / n
    return run


def main(argv=None) -> int:
    return group_main(argv, prog="python -m bench.paddle_models",
                      description=__doc__.splitlines()[0],
                      models=MODELS, quick=QUICK, quick_help="LeNet and the encoder, few rounds",
                      measure=measure, markdown=markdown, failed=failed)

if __name__ == "__main__":
    sys.exit(main())
