"""Latency of ResNet-18 and a Transformer encoder: eager PyTorch, `backend="ge"` and
`backend="inductor"`, measured side by side in one run.

    python plugins/ge-torch/benchmarks/latency.py [--quick] [--models resnet18,transformer]

Every engine runs the same module on the same inputs under `torch.no_grad()`. Compiling
(and the first calls) happen before timing; then the engines take turns, round after
round (A B C, B C A, ...), so that machine noise hits all of them alike. A sample is the
mean of a round's back-to-back calls; the table shows the median sample in milliseconds,
and ge's time relative to each peer (below 1.00x: ge is faster). Outputs are checked
against eager first (max relative error), so a fast wrong answer cannot pass unnoticed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import zoo  # noqa: E402

MODELS = {
    # ResNet-18 on one 224x224 image, as it is usually served.
    "resnet18": (lambda: zoo.ResNet18(classes=1000),
                 lambda gen, quick: (torch.randn(1, 3, 112 if quick else 224,
                                                 112 if quick else 224, generator=gen),)),
    # A 4-layer Transformer encoder (d_model 256, 8 heads) over 4 padded sequences of 64.
    "transformer": (lambda: zoo.TransformerClassifier(vocab=1000, d_model=256, heads=8,
                                                      layers=4, ffn=1024),
                    lambda gen, quick: zoo._tokens_and_mask(gen, 4, seq=32 if quick else 64,
                                                            vocab=1000)),
}
ENGINES = ("eager", "ge", "inductor")


def build_engine(engine: str, model: torch.nn.Module):
    if engine == "eager":
        return model
    return torch.compile(model, backend=engine)


def time_interleaved(calls: dict, rounds: int, min_round_seconds: float) -> dict[str, float]:
    """Median seconds per call of each callable, timed in rotating turns."""
    repeats = {}
    for name, fn in calls.items():
        start = time.perf_counter()
        fn()
        repeats[name] = max(1, int(min_round_seconds / max(time.perf_counter() - start, 1e-6)))
    samples: dict[str, list[float]] = {name: [] for name in calls}
    names = list(calls)
    for index in range(rounds):
        for name in names[index % len(names):] + names[:index % len(names)]:
            start = time.perf_counter()
            for _ in range(repeats[name]):
                calls[name]()
            samples[name].append((time.perf_counter() - start) / repeats[name])
    return {name: statistics.median(values) for name, values in samples.items()}


def measure(name: str, quick: bool) -> dict:
    build, make_inputs = MODELS[name]
    torch.manual_seed(0)
    model = build().eval()
    inputs = make_inputs(torch.Generator().manual_seed(1), quick)
    torch._dynamo.reset()
    engines, compile_seconds, errors = {}, {}, {}
    with torch.no_grad():
        expected = model(*inputs)
        for engine in ENGINES:
            start = time.perf_counter()
            fn = build_engine(engine, model)
            out = fn(*inputs)  # compiles
            compile_seconds[engine] = time.perf_counter() - start
            scale = expected.abs().max().item() or 1.0
            errors[engine] = (out - expected).abs().max().item() / scale
            engines[engine] = (lambda f=fn: f(*inputs))
            for _ in range(2):
                engines[engine]()
        medians = time_interleaved(engines, rounds=5 if quick else 20,
                                   min_round_seconds=0.05 if quick else 0.2)
    return {"medians": medians, "compile": compile_seconds, "errors": errors}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller inputs, few rounds")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--threads", type=int,
                        help="threads for every engine (PyTorch's intra-op pool and ge-hub's "
                             "executor pool); default: each engine's own default")
    args = parser.parse_args(argv)
    if args.threads:
        # Read by ge-hub's executor when its pool starts, which is after this point.
        os.environ["GE_HUB_NUM_THREADS"] = str(args.threads)
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} PyTorch threads, "
          f"GE_HUB_NUM_THREADS={os.environ.get('GE_HUB_NUM_THREADS', 'default')}, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n")
    print("| model | eager ms | ge ms | inductor ms | ge / eager | ge / inductor "
          "| ge compile s | ge max rel. error |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        result = measure(name, args.quick)
        m = result["medians"]
        print(f"| {name} | {m['eager'] * 1e3:.2f} | {m['ge'] * 1e3:.2f} | "
              f"{m['inductor'] * 1e3:.2f} | {m['ge'] / m['eager']:.2f}x | "
              f"{m['ge'] / m['inductor']:.2f}x | {result['compile']['ge']:.1f} | "
              f"{result['errors']['ge']:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
