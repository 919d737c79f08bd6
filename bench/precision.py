"""`python -m bench.precision`: the precision row group (issue 16). Per model, interleaved in
one process at one thread count: ge-hub in fp32, bf16 and mixed, ONNX Runtime, OpenVINO
with its default precision (bf16 on CPUs with AMX or AVX512-BF16) and OpenVINO pinned to
f32; each with its median latency and its output's error against ge-hub fp32
(max |y - y_fp32| / max |y_fp32|), and which products `mixed` kept in fp32. A second
process (the bf16 micro-kernel is chosen once per process) measures ge-hub fp32 against
bf16 with the AVX512-BF16 variant forced, the speed a CPU without AMX would see.

    python -m bench.precision [--quick] [--threads 1] [--models resnet18-b1,...] [--json F]

Timings on a shared machine are noisy: rounds are interleaved so that every engine sees
the same background load, and only medians are reported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

MODELS = ("resnet18-b1", "light-resnet50", "mobilenetv2", "transformer", "bert-base")
QUICK = ("resnet18-b1",)
ROWS = ("ge-hub fp32", "ge-hub bf16", "ge-hub mixed", "ort", "ov default", "ov f32")


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


class _GeHub:
    def __init__(self, precision: str):
        self.precision = precision

    def prepare(self, files, inputs):
        import ge_hub

        graph = ge_hub.load(files.onnx_path)
        self.model = ge_hub.compile(graph, options={"precision": self.precision})
        self.feed = [inputs[name] for name in self.model.input_names]

    def run(self):
        return self.model.run(self.feed)


def _engines(threads: int, names) -> dict:
    from bench.engines import OnnxRuntime, OpenVino

    made = {}
    for name in names:
        if name.startswith("ge-hub"):
            made[name] = _GeHub(name.split()[1])
        elif name == "ort":
            made[name] = OnnxRuntime(threads)
        elif name == "ov default":
            made[name] = OpenVino(threads, None)
        elif name == "ov f32":
            made[name] = OpenVino(threads, "f32")
    for engine in made.values():
        if hasattr(engine, "load_libraries"):
            engine.load_libraries()
    return made


def _as_arrays(outputs) -> list[np.ndarray]:
    return [np.asarray(o, dtype=np.float32) for o in outputs]


def _error(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    return max(float(np.abs(g - w).max() / max(float(np.abs(w).max()), 1e-30))
               for g, w in zip(got, want))


def measure_model(name: str, threads: int, rows, rounds: int, budget: float,
                  directory: str) -> dict:
    """One model: every row prepared, then `rounds` interleaved rounds (or `budget` s)."""
    files = _files(name, directory)
    inputs = files.load_inputs()
    engines = _engines(threads, rows)
    result: dict = {"model": name, "threads": threads, "rows": {}}
    outputs = {}
    for row, engine in engines.items():
        try:
            engine.prepare(files, inputs)
            outputs[row] = _as_arrays(engine.run())
        except Exception as exc:  # an engine that cannot run the model is reported, not fatal
            result["rows"][row] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    live = [row for row in engines if row in outputs]
    times: dict[str, list[float]] = {row: [] for row in live}
    started = time.perf_counter()
    for _ in range(rounds):
        for row in live:
            t0 = time.perf_counter()
            engines[row].run()
            times[row].append(time.perf_counter() - t0)
        if time.perf_counter() - started > budget:
            break
    reference = outputs.get(live[0]) if live else None
    for row in live:
        entry = {"ms": 1e3 * float(np.median(times[row])), "rounds": len(times[row]),
                 "error_vs_fp32": _error(outputs[row], reference)}
        if row.startswith("ge-hub"):
            summary = engines[row].model.summary()["precision"]
            ops = {s.node: s.op.rpartition(".")[2] for s in engines[row].model.plan.steps}
            kept: dict[str, int] = {}
            for node in summary["fp32_products"]:
                kept[ops[node]] = kept.get(ops[node], 0) + 1
            entry.update(bf16_steps=summary["bf16_steps"], fp32_products=kept,
                         bf16_kernel=summary["bf16_kernel"])
        if row.startswith("ov"):
            entry["ov_precision"] = engines[row].details()["precision"]
        result["rows"][row] = entry
    return result


def _forced_avx512(name: str, threads: int, rounds: int, budget: float, directory: str) -> dict:
    """ge-hub fp32 and bf16 with GE_HUB_BF16_KERNEL=avx512bf16, in a process of its own."""
    env = dict(os.environ, GE_HUB_BF16_KERNEL="avx512bf16", GE_HUB_NUM_THREADS=str(threads))
    code = ("import json, sys; from bench import precision as p; "
            f"r = p.measure_model({name!r}, {threads}, ('ge-hub fp32', 'ge-hub bf16'), "
            f"{rounds}, {budget}, {directory!r}); print(json.dumps(r))")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=1800, cwd=root)
    if done.returncode != 0:
        return {"error": done.stderr[-500:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(models: list[str], threads: int, quick: bool) -> dict:
    os.environ["GE_HUB_NUM_THREADS"] = str(threads)  # read once, on the pool's first use
    from ge_hub.precision_report import kernel_name

    rounds, budget = (5, 10.0) if quick else (30, 60.0)
    directory = os.environ.get("BENCH_PRECISION_DIR") or tempfile.mkdtemp(prefix="ge-prec-")
    doc = {"threads": threads, "bf16_kernel": kernel_name(), "models": []}
    for name in models:
        print(f"[precision] {name}", file=sys.stderr, flush=True)
        entry = measure_model(name, threads, ROWS, rounds, budget, directory)
        entry["avx512bf16_forced"] = _forced_avx512(name, threads, rounds, budget, directory)
        doc["models"].append(entry)
    return doc


def markdown(doc: dict) -> str:
    lines = [f"Precision rows, {doc['threads']} thread(s); ge-hub bf16 micro-kernel "
             f"{doc['bf16_kernel']}. ms = median latency; err = max |y - y_fp32| / max "
             "|y_fp32| against ge-hub fp32.", "",
             "| model | " + " | ".join(ROWS) + " | avx512bf16 forced: fp32 / bf16 |",
             "|---" * (len(ROWS) + 2) + "|"]
    for m in doc["models"]:
        cells = []
        for row in ROWS:
            r = m["rows"].get(row, {})
            cells.append(f"{r['ms']:.2f} ms, err {r['error_vs_fp32']:.1e}" if "ms" in r
                         else "failed")
        forced = m.get("avx512bf16_forced", {}).get("rows", {})
        if "ge-hub fp32" in forced and "ms" in forced.get("ge-hub bf16", {}):
            f32, b16 = forced["ge-hub fp32"]["ms"], forced["ge-hub bf16"]["ms"]
            cells.append(f"{f32:.2f} / {b16:.2f} ms ({f32 / b16:.2f}x)")
        else:
            cells.append("failed")
        lines.append(f"| {m['model']} | " + " | ".join(cells) + " |")
    lines.append("")
    for m in doc["models"]:
        mixed = m["rows"].get("ge-hub mixed", {})
        if "fp32_products" in mixed:
            kept = ", ".join(f"{op} {n}" for op, n in mixed["fp32_products"].items()) or "none"
            lines.append(f"- {m['model']}: mixed kept in fp32: {kept}; "
                         f"{mixed['bf16_steps']} product steps in bf16")
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
