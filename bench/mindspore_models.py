"""The MindSpore group of `python -m bench`: ge-hub beside MindSpore's own CPU inference.

The networks are the ge-mindspore zoo's (LeNet-5, ResNet-18, MobileNetV2, a transformer
encoder block, written with mindspore.nn at seeded random init; loaded from
plugins/ge-mindspore/tests/zoo.py so that bench and tests time and check the same
models). Each is exported to MINDIR once; then

- "ge-hub": `ge_hub.load(file)` (the ge-mindspore frontend), compile, run, with
  GE_HUB_NUM_THREADS threads;
- "mindspore": `mindspore.load(file)` + `nn.GraphCell`, MindSpore's own CPU inference of
  the same file, with as many CPU kernel threads
  (`mindspore.device_context.cpu.op_tuning.threads_num`);

timed interleaved (bench.timing), with ge-hub's output checked against MindSpore's.

Where it runs: MindSpore 2.10 needs NumPy 1.x, and the bench's own env (tox -e bench,
the dev venv) has NumPy 2, so this group runs in a child process under an interpreter
where mindspore and ge-mindspore import: $GE_HUB_BENCH_MINDSPORE_PYTHON (a venv with
ge-hub[mindspore]), else the bench's own interpreter when ge-mindspore is installed
there, else the `mindspore` tox env's (.tox/mindspore, after `tox -e mindspore`). With
none, `python -m bench` says the group was skipped and why. By hand, in such a venv:

    python -m bench.mindspore_models [--quick] [--threads 2] [--json PATH]
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
ZOO = os.path.join(ROOT, "plugins", "ge-mindspore", "tests", "zoo.py")
PYTHON_VARIABLE = "GE_HUB_BENCH_MINDSPORE_PYTHON"
MODELS = {  # bench name -> zoo name
    "ms-lenet5": "lenet5",
    "ms-encoder-block": "encoder_block",
    "ms-mobilenet-v2": "mobilenet_v2",
    "ms-resnet18": "resnet18",
}
QUICK = ("ms-lenet5", "ms-encoder-block")
TOLERANCE = 1e-4  # max |ge-hub - MindSpore| / max |MindSpore|


# -- the parent side: python -m bench ----------------------------------------------------

def interpreter() -> tuple[str | None, str]:
    """(the Python to run the group with, or None; why)."""
    given = os.environ.get(PYTHON_VARIABLE)
    if given:
        return given, f"${PYTHON_VARIABLE}"
    if importlib.util.find_spec("ge_mindspore") is not None:
        return sys.executable, "the bench's interpreter"
    # The `mindspore` tox env installs ge-hub (editable, this checkout) and ge-mindspore.
    tox_python = os.path.join(ROOT, ".tox", "mindspore", "bin", "python")
    if os.path.exists(tox_python):
        return tox_python, "the mindspore tox env (.tox/mindspore)"
    return None, (f"ge-mindspore is not installed here and ${PYTHON_VARIABLE} is not set "
                  "(MindSpore needs NumPy 1.x: point it at a venv with ge-hub[mindspore])")


def run_group(*, quick: bool, threads: int, models: list[str] | None, log) -> dict | None:
    """Run the group in a child process; its results document, or None when skipped."""
    wanted = [m for m in (models or (QUICK if quick else MODELS)) if m in MODELS]
    if not wanted:
        return None
    python, source = interpreter()
    if python is None:
        log(f"mindspore group skipped: {source}")
        return None
    log(f"mindspore group: {', '.join(wanted)} under {python} ({source})")
    with tempfile.TemporaryDirectory(prefix="ge-hub-bench-ms-") as directory:
        output = os.path.join(directory, "mindspore.json")
        command = [python, "-m", "bench.mindspore_models", "--threads", str(threads),
                   "--json", output, "--models", ",".join(wanted)]
        if quick:
            command.append("--quick")
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        result = subprocess.run(command, cwd=ROOT, env=env)
        if result.returncode != 0 or not os.path.exists(output):
            return {"status": "error", "error": f"exit status {result.returncode}",
                    "python": python, "models": []}
        with open(output) as file:
            return json.load(file)


def markdown(group: dict) -> str:
    lines = ["", "### MindSpore models (ge-mindspore): ge-hub vs MindSpore CPU, "
             f"{group.get('threads', '?')} threads", ""]
    if group.get("status") == "error":
        return "\n".join(lines + [f"failed: {group.get('error')}"])
    lines += ["| model | ge-hub ms | MindSpore ms | speedup | max rel error | "
              "python steps | status |", "|---|---|---|---|---|---|---|"]
    for row in group["models"]:
        ge, ms = row.get("ge-hub_ms"), row.get("mindspore_ms")
        speedup = f"{ms / ge:.2f}x" if ge and ms else "-"
        lines.append(f"| {row['name']} | {_ms(ge)} | {_ms(ms)} | {speedup} | "
                     f"{row.get('max_rel_error', float('nan')):.1e} | "
                     f"{row.get('python_steps', '-')} | {row['status']} |")
    return "\n".join(lines)


def _ms(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def failed(group: dict | None) -> bool:
    """Whether ge-hub failed or disagreed (a MindSpore failure is a finding, not ours)."""
    if group is None:
        return False
    return group.get("status") == "error" or any(
        row["status"] in ("ge-hub error", "mismatch") for row in group["models"])


# -- the child side: where mindspore imports ---------------------------------------------

def _zoo():
    spec = importlib.util.spec_from_file_location("ge_mindspore_bench_zoo", ZOO)
    module = importlib.util.module_from_spec(spec)
    # MindSpore's graph compiler re-imports a Cell's module by name to read its globals.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def measure(models: list[str], threads: int, quick: bool) -> dict:
    os.environ["GE_HUB_NUM_THREADS"] = str(threads)  # read once, on the pool's first use
    import mindspore as ms
    import numpy as np
    from mindspore import nn

    import ge_hub
    from bench.timing import interleave

    ms.device_context.cpu.op_tuning.threads_num(threads)
    zoo = _zoo()
    rounds = dict(rounds=5, min_rounds=3, warmup=2, min_round_seconds=0.01,
                  budget_seconds=5.0) if quick else dict(rounds=20, budget_seconds=15.0)
    doc = {"threads": threads, "mode": "quick" if quick else "full",
           "versions": {"mindspore": ms.__version__, "ge-hub": ge_hub.__version__,
                        "numpy": np.__version__}, "models": []}
    with tempfile.TemporaryDirectory(prefix="ge-hub-bench-ms-") as directory:
        for name in models:
            row = {"name": name, "status": "ok"}
            doc["models"].append(row)
            cell, x = zoo.build(MODELS[name])
            path = os.path.join(directory, f"{name}.mindir")
            ms.export(cell, x, file_name=path[:-len(".mindir")], file_format="MINDIR")
            feed = x.asnumpy()
            runners = {}
            try:
                start = time.perf_counter()
                model = ge_hub.compile(ge_hub.load(path))
                row["ge-hub_prepare_s"] = time.perf_counter() - start
                row["python_steps"] = model.summary()["python_steps"]
                (got,) = model.run([feed])
                runners["ge-hub"] = _runner(lambda: model.run([feed]))
            except Exception as exc:  # reported in the table, the run goes on
                row["status"], row["error"] = "ge-hub error", f"{type(exc).__name__}: {exc}"
                print(f"{name}: ge-hub failed: {row['error']}", file=sys.stderr)
                continue
            try:
                start = time.perf_counter()
                graph_cell = nn.GraphCell(ms.load(path))
                tensor = ms.Tensor(feed)
                want = graph_cell(tensor).asnumpy()
                row["mindspore_prepare_s"] = time.perf_counter() - start
                runners["mindspore"] = _runner(lambda: graph_cell(tensor).asnumpy())
            except Exception as exc:
                row["status"], row["error"] = "mindspore error", f"{type(exc).__name__}: {exc}"
                want = None
            if want is not None:
                scale = float(np.max(np.abs(want))) or 1.0
                row["max_rel_error"] = float(np.max(np.abs(got - want))) / scale
                if row["max_rel_error"] > TOLERANCE:
                    row["status"] = "mismatch"
            timings = interleave(runners, **rounds)
            for engine, stats in timings.items():
                row[f"{engine}_ms"] = stats["median"] * 1e3
                row[f"{engine}_latency_s"] = stats
            print(f"{name}: " + ", ".join(f"{e} {row[f'{e}_ms']:.3f} ms" for e in timings),
                  file=sys.stderr, flush=True)
    return doc


def _runner(call):
    def run(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            call()
        return (time.perf_counter() - start) / n
    return run


def main(argv=None) -> int:
    return group_main(argv, prog="python -m bench.mindspore_models",
                      description=__doc__.splitlines()[0],
                      models=MODELS, quick=QUICK,
                      quick_help="LeNet-5 and the encoder block, few rounds",
                      measure=measure, markdown=markdown, failed=failed)

if __name__ == "__main__":
    raise SystemExit(main())
