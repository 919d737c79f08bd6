"""Executor overhead and small-model latency: ge-hub beside ONNX Runtime and PyTorch.

    python -m bench.overhead [--quick]

1. Per-op marginal overhead and fixed per-call cost, from chains of 1 and 200 small
   elementwise ops on a [1, 64] tensor: ge-hub, ONNX Runtime (1 thread), PyTorch eager;
   once with cheap ops only (Add, Mul, Relu, Neg: the engine's own overhead), once with
   Tanh in the cycle (a transcendental's cost on top).
2. Latency of an MLP (784-256-256-10, batch 1) and a batch-1 ResNet-18 (224x224): ge-hub
   beside ONNX Runtime (2 threads) running the same graph with the same weights (exported
   by ge-onnx), and ge-hub's three memory numbers for each. The engines take turns in
   rounds of at least 0.3 s, so that each is timed with its own weights in cache.

Outputs are checked to agree before anything is timed. Ratios are engine / ge-hub.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import ge_hub
from bench import models
from bench.timing import time_interleaved


def ort_session(graph, threads: int):
    import onnxruntime as ort
    from ge_onnx import export

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(export(graph).SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def torch_chain(length: int, cheap: bool = False):
    import torch

    def run(x):
        y = x
        for i in range(length):
            kind = i % 4
            if kind == 0:
                y = y + 0.01
            elif kind == 1:
                y = y * 0.99
            elif kind == 2:
                y = torch.relu(y)
            else:
                y = torch.neg(y) if cheap else torch.tanh(y)
        return y

    return run


def check_close(name: str, got, expected, rtol=1e-4, atol=1e-5):
    if not np.allclose(got, expected, rtol=rtol, atol=atol):
        worst = float(np.max(np.abs(np.asarray(got) - expected)))
        raise SystemExit(f"{name}: outputs disagree with ge-hub (max abs diff {worst})")


def measure_chains(rounds: int, cheap: bool) -> dict:
    import torch

    torch.set_num_threads(2)
    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    xt = torch.from_numpy(x)
    results = {}
    for length in (1, 200):
        graph = models.elementwise_chain(length, cheap=cheap)
        model = ge_hub.compile(graph)
        session = ort_session(graph, threads=1)
        chain = torch_chain(length, cheap=cheap)
        (expected,) = model.run([x])
        check_close("onnxruntime", session.run(None, {"x": x})[0], expected)
        with torch.inference_mode():
            check_close("torch", chain(xt).numpy(), expected)

        def torch_run():
            with torch.inference_mode():
                return chain(xt)

        results[length] = time_interleaved({
            "ge-hub": lambda: model.run([x]),
            "onnxruntime": lambda: session.run(None, {"x": x}),
            "torch-eager": torch_run,
        }, rounds=rounds)
    return results


MODEL_ROUND_SECONDS = 0.3


def measure_models(rounds: int, quick: bool) -> dict:
    rng = np.random.default_rng(1)
    cases = {"mlp": (models.mlp(1), rng.standard_normal((1, 784)).astype(np.float32))}
    if not quick:
        cases["resnet18"] = (models.resnet18(1),
                             rng.standard_normal((1, 3, 224, 224)).astype(np.float32))
    results = {}
    for name, (graph, x) in cases.items():
        model = ge_hub.compile(graph)
        session = ort_session(graph, threads=2)
        (expected,) = model.run([x])
        check_close(f"{name}/onnxruntime", session.run(None, {"x": x})[0], expected,
                    rtol=1e-3, atol=1e-3)
        # Rounds of at least MODEL_ROUND_SECONDS: each engine's round is then mostly calls
        # with its weights already in cache (steady state), not the first call after the
        # other engine has evicted them.
        timings = time_interleaved({
            "ge-hub": lambda: model.run([x]),
            "onnxruntime": lambda: session.run(None, {"x": x}),
        }, rounds=rounds, min_round_seconds=MODEL_ROUND_SECONDS)
        results[name] = {"timings": timings, "summary": model.summary()}
    return results


def us(seconds: float) -> str:
    return f"{seconds * 1e6:9.2f} us"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, no ResNet-18")
    args = parser.parse_args(argv)
    rounds = 5 if args.quick else 30
    print(f"# threads: ge-hub pool {os.environ.get('GE_HUB_NUM_THREADS', 'default')}, "
          "onnxruntime 1 (chains) / 2 (models), torch 2")

    for cheap, ops in ((True, "Add, Mul, Relu, Neg"), (False, "Add, Mul, Relu, Tanh")):
        chains = measure_chains(rounds, cheap)
        print(f"\n## Elementwise chains on [1, 64]: {ops} in turn (median per call)\n")
        print("| engine | 1 op | 200 ops | per op (marginal) | per call (fixed) |")
        print("|---|---|---|---|---|")
        for engine in chains[1]:
            one, many = chains[1][engine]["median"], chains[200][engine]["median"]
            per_op = (many - one) / 199
            print(f"| {engine} | {us(one)} | {us(many)} | {us(per_op)} | "
                  f"{us(one - per_op)} |")

    print("\n## Models, batch 1 (median latency; ratio = engine / ge-hub)\n")
    print("| model | ge-hub | onnxruntime (2 thr) | ratio | arena | lower bound | naive |")
    print("|---|---|---|---|---|---|---|")
    for name, result in measure_models(rounds, args.quick).items():
        t, s = result["timings"], result["summary"]
        ge, ort = t["ge-hub"]["median"], t["onnxruntime"]["median"]
        print(f"| {name} | {us(ge)} | {us(ort)} | {ort / ge:.2f} | {s['arena_bytes']:,} | "
              f"{s['lower_bound_bytes']:,} | {s['naive_bytes']:,} |")
        if s["fallback_steps"]:
            print(f"|  (fallback steps: {s['fallback_ops']}) |||||||")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
