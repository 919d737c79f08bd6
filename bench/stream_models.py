"""The streams group of the bench: each model compiled with `streams="auto"` and with one
stream, timed interleaved in one process (bench.timing), with the same thread count.

Models: the branchy ones of bench/branchy_models.py (Inception-v1 blocks at batch 1, an
8-tower MLP of small GEMMs), which streams are for; a few of bench/models.py (an MLP, a
chain of small elementwise ops, ResNet-18 at batch 1), which have no branches worth a
stream and must not get slower; and the onnx package's light Inception-v1 and -v2 (with
ge-onnx installed). Each row gives the median per-call time of both, the
speedup, the p10-p90 spread of each (the machine's noise, in % of the median), the
streams and events `auto` chose and the arena with and without concurrency; outputs of
the two are checked equal bit for bit.

The thread count is read once per process, so the group runs itself in a child process
with GE_HUB_NUM_THREADS set:

    python -m bench.stream_models [--quick] [--threads 2] [--models ...] [--json PATH]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from bench.group_cli import group_main

MODELS = {
    "inception-v1-blocks": "branchy",
    "towers8-mlp": "branchy",
    "mlp-b1": "plain",
    "chain64": "plain",
    "resnet18-b1": "plain",
    "light-inception-v1": "onnx",
    "light-inception-v2": "onnx",
}
QUICK = ("towers8-mlp", "chain64")


def build(name: str):
    from bench import branchy_models, models

    if name == "inception-v1-blocks":
        return branchy_models.inception_stack()
    if name == "towers8-mlp":
        return branchy_models.towers()
    rng = np.random.default_rng(0)
    if name == "mlp-b1":
        return models.mlp(1), {"x": rng.standard_normal((1, 784)).astype(np.float32)}
    if name == "chain64":
        return models.elementwise_chain(64), {"x": rng.standard_normal((1, 64)).astype(np.float32)}
    if name == "resnet18-b1":
        x = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
        return models.resnet18(1), {"x": x}
    if name.startswith("light-"):  # the onnx package's light models (needs ge-onnx)
        import onnx

        import ge_hub

        stem = name.replace("-", "_")
        path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data",
                            "light", f"{stem}.onnx")
        graph = ge_hub.load(path)
        (value,) = graph.inputs
        shape = [int(d) for d in value.type.shape]
        return graph, {value.name: rng.standard_normal(shape).astype(np.float32)}
    raise KeyError(name)


def measure_here(names: list[str], quick: bool) -> dict:
    import ge_hub
    from bench.timing import time_interleaved

    rows = []
    for name in names:
        graph, feeds = build(name)
        shapes = {k: v.shape for k, v in feeds.items()}
        compiled = {label: ge_hub.compile(graph, shapes, options={"streams": streams})
                    for label, streams in (("one", 1), ("auto", "auto"))}
        outputs = {label: m.run(feeds) for label, m in compiled.items()}
        same = all(np.array_equal(a, b) for a, b in zip(outputs["one"], outputs["auto"]))
        timings = time_interleaved({label: (lambda m=m: m.run(feeds))
                                    for label, m in compiled.items()},
                                   rounds=7 if quick else 31,
                                   min_round_seconds=0.01 if quick else 0.05)
        summary = compiled["auto"].summary()
        rows.append({
            "model": name, "kind": MODELS[name], "identical": same,
            "one_ms": timings["one"]["median"] * 1e3,
            "auto_ms": timings["auto"]["median"] * 1e3,
            "speedup": timings["one"]["median"] / timings["auto"]["median"],
            "one_spread_pct": _spread(timings["one"]), "auto_spread_pct": _spread(timings["auto"]),
            "rounds": timings["one"]["samples"],
            "streams": summary["streams"], "events": summary["events"],
            "arena_bytes": summary["arena_bytes"],
            "serial_arena_bytes": summary["serial_arena_bytes"],
        })
    return {"threads": int(os.environ.get("GE_HUB_NUM_THREADS", "0")), "rows": rows}


def _spread(t: dict) -> float:
    return 100.0 * (t["p90"] - t["p10"]) / t["median"]


def measure(names: list[str], threads: int, quick: bool) -> dict:
    """Runs measure_here in a child with GE_HUB_NUM_THREADS=threads."""
    env = dict(os.environ, GE_HUB_NUM_THREADS=str(threads))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    code = ("import json, sys; from bench.stream_models import measure_here; "
            "print(json.dumps(measure_here(sys.argv[1].split(','), sys.argv[2] == '1')))")
    out = subprocess.run([sys.executable, "-c", code, ",".join(names), "1" if quick else "0"],
                         env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"the streams group failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def markdown(doc: dict) -> str:
    lines = [f"Streams: `auto` against one stream, {doc['threads']} threads, interleaved "
             "medians (spread: p10-p90 over rounds, in % of the median)", "",
             "| model | 1 stream ms | auto ms | speedup | spread 1 / auto | streams | events "
             "| arena auto / 1 stream | identical |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in doc["rows"]:
        lines.append(
            f"| {r['model']} | {r['one_ms']:.3f} | {r['auto_ms']:.3f} | {r['speedup']:.2f}x | "
            f"{r['one_spread_pct']:.0f}% / {r['auto_spread_pct']:.0f}% | {r['streams']} | "
            f"{r['events']} | {r['arena_bytes'] / 1024:.0f} / "
            f"{r['serial_arena_bytes'] / 1024:.0f} KiB | {'yes' if r['identical'] else 'NO'} |")
    return "\n".join(lines)


def failed(doc: dict) -> bool:
    return not all(r["identical"] for r in doc["rows"])


def main(argv=None) -> int:
    return group_main(argv, prog="python -m bench.stream_models",
                      description=__doc__.splitlines()[0], models=MODELS, quick=QUICK,
                      quick_help="the towers and the chain, few rounds",
                      measure=measure, markdown=markdown, failed=failed)


if __name__ == "__main__":
    sys.exit(main())
