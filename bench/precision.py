"""`python -m bench.precision`: the precision row group (issue 16). Per model, at one thread
count, each row in a worker process of its own (bench.worker), their rounds interleaved:
ge-hub in fp32, bf16 and mixed, ONNX Runtime, OpenVINO with its default precision (bf16 on
CPUs with AMX or AVX512-BF16) and OpenVINO pinned to f32; each with its median latency and
its output's error against ge-hub fp32 (max |y - y_fp32| / max |y_fp32|, the median over
the model's own input and EXTRA_INPUTS random ones), and which products `mixed` kept in
fp32. Two more rows, workers started with the AVX512-BF16 variant forced (the bf16
micro-kernel is chosen once per process) and interleaved with the others, measure ge-hub
fp32 against bf16 as a CPU without AMX would run them.

    python -m bench.precision [--quick] [--threads 1] [--models resnet18-b1,...] [--json F]

Timings on a shared machine are noisy: rounds are interleaved so that every engine sees
the same background load, and only medians are reported. On this project's machines a
worker process now and then runs 20-25% slow for its whole life (a different row each
time), which no number of rounds inside it averages out: a full run starts PROCESSES
workers per row, interleaves their rounds too, and reports each row's fastest process's
median beside how much slower its slowest one was (the spread a reader should allow).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import numpy as np

MODELS = ("resnet18-b1", "light-resnet50", "mobilenetv2", "transformer", "bert-base")
QUICK = ("resnet18-b1",)
ROWS = ("ge-hub fp32", "ge-hub bf16", "ge-hub mixed", "ort", "ov default", "ov f32")
# The forced rows: (row, the ge-hub row it runs), in workers with FORCED_ENV.
FORCED = (("forced fp32", "ge-hub fp32"), ("forced bf16", "ge-hub bf16"))
FORCED_ENV = {"GE_HUB_BF16_KERNEL": "avx512bf16"}
# Each interleaved round times about this long per row (whole calls, at least one).
ROUND_SECONDS = 0.05
# Worker processes per row in a full run (--quick: one), their rounds interleaved.
PROCESSES = 2
# Random inputs besides the bench's own that each row's error is measured on (the median
# is reported): one input's max error is too noisy to rank two bf16 engines by.
EXTRA_INPUTS = 4


def _case(name: str):
    from bench import cases

    return {c.name: c for c in cases.all_cases()}[name]


def _files(name: str, directory: str):
    from bench.engines import ModelFiles

    onnx_path = os.path.join(directory, f"{name}.onnx")
    inputs_path = os.path.join(directory, f"{name}.inputs.npz")
    if not os.path.exists(onnx_path):
        return _case(name).prepare(directory)
    return ModelFiles(onnx_path, inputs_path)


def engine_name(row: str, threads: int) -> str:
    """The bench.engines name of a row at a thread count."""
    if row.startswith("ge-hub"):
        return f"ge-hub-{threads}t-{row.split()[1]}"
    return {"ort": f"ort-{threads}t", "ov default": f"ov-{threads}t-default",
            "ov f32": f"ov-{threads}t"}[row]


def _as_arrays(outputs) -> list[np.ndarray]:
    return [np.asarray(o, dtype=np.float32) for o in outputs]


def _error(got: list[np.ndarray], want: list[np.ndarray]) -> float | None:
    """max |y - y_fp32| / max |y_fp32| over the outputs whose fp32 values are not all
    equal; None where every one is constant. Light ResNet-50's is, with the onnx
    package's constant weights: all its logits are equal, so its Softmax gives 0.001 a
    thousand times in every precision, and an error of 0 would claim an accuracy that
    nothing measured."""
    errors = []
    for g, w in zip(got, want):
        if w.size and float(w.max()) == float(w.min()):
            continue
        scale, diff = float(np.abs(w).max(initial=0.0)), float(np.abs(g - w).max(initial=0.0))
        errors.append(diff / scale if scale > 0 else (float("inf") if diff > 0 else 0.0))
    return max(errors) if errors else None


def _median(errors: list[float | None]) -> float | None:
    known = [e for e in errors if e is not None]
    return float(np.median(known)) if known else None


def _errors_over_inputs(workers: dict, outputs: dict, extra_inputs: int) -> dict:
    """Each row's error against the first row's (ge-hub fp32) outputs on the bench's
    input and on `extra_inputs` more (bench.worker.varied_inputs, seeds 1, 2, ...): on one
    input, bf16's max error moves by about 10% with any change upstream that flips a
    rounding, which decides a comparison between engines by chance."""
    from bench.engine_process import EngineError

    per_input = [outputs]
    for seed in range(1, extra_inputs + 1):
        got = {}
        for row, worker in workers.items():
            try:
                got[row] = _as_arrays(worker.request("outputs", seed))
            except EngineError:  # an engine that cannot: its error on this input is unknown
                got[row] = None
        per_input.append(got)
    errors: dict[str, list[float | None]] = {row: [] for row in workers}
    for got in per_input:
        reference = next(iter(got.values()), None)
        for row in workers:
            ok = got.get(row) is not None and reference is not None
            errors[row].append(_error(got[row], reference) if ok else None)
    return errors


def process_figures(per_process: list[list[float]]) -> dict:
    """A row's latency from its worker processes' round times (seconds): `ms` the fastest
    process's median (one process running slow for its whole life says nothing about the
    engine; every row gets its fastest, so the ratios stay fair), `process_ms` each
    process's median, `spread` how much slower the slowest median was (0 with one)."""
    medians = [1e3 * float(np.median(times)) for times in per_process if times]
    fastest = min(medians)
    return {"ms": fastest, "process_ms": medians, "spread": max(medians) / fastest - 1.0,
            "rounds": sum(len(times) for times in per_process)}


def measure_model(name: str, threads: int, rows, rounds: int, budget: float,
                  directory: str, env: dict[str, str] | None = None,
                  extra_inputs: int = 0, files=None,
                  engines: dict[str, str] | None = None, processes: int = 1,
                  envs: dict[str, dict[str, str]] | None = None) -> dict:
    """One model: `processes` worker processes per row (bench.worker, as the main suite runs
    engines: no engine's threads share a process with another's, or spin on its cores),
    then `rounds` interleaved rounds of about ROUND_SECONDS each (or `budget` s in all),
    every process of every row timed in each (process_figures). Each row's error is the
    median over the bench's input and `extra_inputs` random ones, from its first process.
    `files`: the model's files where they are not a bench case's; `engines`: the engine
    of a row where it is not engine_name's; `envs`: a row's environment besides `env`."""
    from bench.engine_process import EngineError, EngineProcess

    files = files or _files(name, directory)
    result: dict = {"model": name, "threads": threads, "rows": {}}
    workers: dict[str, list] = {}
    outputs, calls = {}, {}
    try:
        for row in rows:
            for _ in range(processes):
                worker = EngineProcess((engines or {}).get(row) or engine_name(row, threads),
                                       name, {**(env or {}), **(envs or {}).get(row, {})})
                try:
                    setup = worker.start(files, timeout=1200.0)
                except EngineError as exc:  # an engine that cannot run the model is reported
                    result["rows"][row] = {"error": str(exc)[:300]}
                    worker.close()
                    break
                workers.setdefault(row, []).append(worker)
                if row not in calls:
                    outputs[row] = _as_arrays(setup["outputs"])
                    once = worker.time(1)
                    calls[row] = max(1, round(ROUND_SECONDS / max(once, 1e-6)))
            if "error" in result["rows"].get(row, {}):  # none of its processes is timed
                outputs.pop(row, None)
                for worker in workers.pop(row, []):
                    worker.close()
        times = {row: [[] for _ in procs] for row, procs in workers.items()}
        started = time.perf_counter()
        for _ in range(rounds):
            for index in range(processes):
                for row, procs in workers.items():
                    times[row][index].append(procs[index].time(calls[row]))
            if time.perf_counter() - started > budget:
                break
        firsts = {row: procs[0] for row, procs in workers.items()}
        errors = _errors_over_inputs(firsts, outputs, extra_inputs)
        for row, worker in firsts.items():
            entry = {**process_figures(times[row]), "error_vs_fp32": _median(errors[row]),
                     "errors_vs_fp32": errors[row]}
            details = worker.request("stats")["details"]
            if row.startswith("ge-hub"):
                entry.update(bf16_steps=details["precision"]["bf16_steps"],
                             fp32_products=details["fp32_product_ops"],
                             bf16x3_products=details.get("bf16x3_product_ops", {}),
                             bf16_kernel=details["precision"]["bf16_kernel"])
            if row.startswith("ov"):
                entry["ov_precision"] = details["precision"]
            for figure in ("nodes_ms", "reorder_ms"):  # the engines of bench.layers
                if figure in details:
                    entry[figure] = details[figure]
            result["rows"][row] = entry
    finally:
        for procs in workers.values():
            for worker in procs:
                worker.close()
    return result


def measure(models: list[str], threads: int, quick: bool) -> dict:
    os.environ["GE_HUB_NUM_THREADS"] = str(threads)  # read once, on the pool's first use
    from ge_hub.precision_report import kernel_name

    rounds, budget = (5, 10.0) if quick else (20, 60.0)
    processes = 1 if quick else PROCESSES
    directory = os.environ.get("BENCH_PRECISION_DIR") or tempfile.mkdtemp(prefix="ge-prec-")
    doc = {"threads": threads, "bf16_kernel": kernel_name(), "processes": processes,
           "models": []}
    forced_engines = {row: engine_name(runs, threads) for row, runs in FORCED}
    for name in models:
        print(f"[precision] {name}", file=sys.stderr, flush=True)
        entry = measure_model(name, threads, ROWS + tuple(forced_engines), rounds, budget,
                              directory, extra_inputs=EXTRA_INPUTS, processes=processes,
                              engines=forced_engines,
                              envs=dict.fromkeys(forced_engines, FORCED_ENV))
        entry["avx512bf16_forced"] = {"rows": {runs: entry["rows"].pop(row)
                                               for row, runs in FORCED}}
        doc["models"].append(entry)
    return doc


def _ms(entry: dict) -> str:
    """A row's latency, with its processes' spread where it had several."""
    if len(entry.get("process_ms", ())) > 1:
        return f"{entry['ms']:.2f} ms (+{100 * entry['spread']:.0f}%)"
    return f"{entry['ms']:.2f} ms"


def markdown(doc: dict) -> str:
    processes = doc.get("processes", 1)
    latency = "ms = median latency" if processes == 1 else (
        f"ms = median latency, the fastest of {processes} worker processes (+n%: how much "
        "slower the slowest one's median was)")
    lines = [f"Precision rows, {doc['threads']} thread(s); ge-hub bf16 micro-kernel "
             f"{doc['bf16_kernel']}. {latency}; err = max |y - y_fp32| / max "
             f"|y_fp32| against ge-hub fp32, the median over {1 + EXTRA_INPUTS} inputs (the "
             "model's own and random ones).", "",
             "| model | " + " | ".join(ROWS) + " | avx512bf16 forced: fp32 / bf16 |",
             "|---" * (len(ROWS) + 2) + "|"]
    for m in doc["models"]:
        cells = []
        for row in ROWS:
            r = m["rows"].get(row, {})
            if "ms" not in r:
                cells.append("failed")
                continue
            error = r["error_vs_fp32"]
            cells.append(f"{_ms(r)}, err "
                         + (f"{error:.1e}" if error is not None else "n/a (fp32 output constant)"))
        forced = m.get("avx512bf16_forced", {}).get("rows", {})
        if "ge-hub fp32" in forced and "ms" in forced.get("ge-hub bf16", {}):
            f32, b16 = forced["ge-hub fp32"], forced["ge-hub bf16"]
            cells.append(f"{_ms(f32)} / {_ms(b16)} ({f32['ms'] / b16['ms']:.2f}x)")
        else:
            cells.append("failed")
        lines.append(f"| {m['model']} | " + " | ".join(cells) + " |")
    lines.append("")
    for m in doc["models"]:
        mixed = m["rows"].get("ge-hub mixed", {})
        if "fp32_products" in mixed:
            kept = ", ".join(f"{op} {n}" for op, n in mixed["fp32_products"].items()) or "none"
            split = ", ".join(f"{op} {n}" for op, n in mixed.get("bf16x3_products", {}).items())
            lines.append(f"- {m['model']}: mixed kept in fp32: {kept}; "
                         + (f"in bf16x3: {split}; " if split else "")
                         + f"{mixed['bf16_steps']} product steps in bf16")
    return "\n".join(lines)


def failed(doc: dict) -> bool:
    return any("error" in r for m in doc["models"] for r in m["rows"].values())


def main(argv=None) -> int:
    from bench.group_cli import group_main

    return group_main(argv, prog="python -m bench.precision", description=__doc__.split("\n")[0],
                      models=dict.fromkeys(MODELS), quick=QUICK,
                      quick_help="ResNet-18 only, few rounds", measure=measure,
                      markdown=markdown, failed=failed)


if __name__ == "__main__":
    sys.exit(main())
