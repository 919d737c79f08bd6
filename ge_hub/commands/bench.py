"""`ge-hub bench MODEL`: latency and throughput of one model, like benchmark_app.

    ge-hub bench model.onnx                              10 warm-up runs, then 10 seconds
    ge-hub bench model.onnx --iterations 200 --threads 4
    ge-hub bench model.onnx --batch 8 --time 30 --json result.json
    ge-hub bench model.onnx --shape x:1,3,320,320 --streams 2

Compiles the model for its inputs (random, seeded, or `--input` files), runs it
`--warmup` times untimed, then back to back for `--time` seconds or `--iterations` runs,
timing each `run` call, and prints the latency (min, median, mean, p90, p99, max) and
the throughput (samples per second: batch over mean latency). `--json` prints (or, given
a file, writes) the same figures with the environment: CPU, cores, threads, versions.
The thread pool size (`--threads`, else GE_HUB_NUM_THREADS, else the CPUs this process
may use) is fixed before anything runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from typing import Any

import numpy as np

from ge_hub.commands.feeds import CommandError
from ge_hub.commands.model_args import Progress, add_model_arguments, guarded, load_model
from ge_hub.registry import Command

PROG = "ge-hub bench"
THREADS_ENV = "GE_HUB_NUM_THREADS"
PACKAGES = ("ge-hub", "ge-onnx", "ge-torch", "numpy", "onnx", "onnxruntime", "torch")


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--time", type=float, default=None, metavar="SECONDS",
                       help="time runs for this long (default 10 s)")
    group.add_argument("--iterations", "-n", type=int, default=None, metavar="N",
                       help="time exactly N runs")
    parser.add_argument("--warmup", type=int, default=10, metavar="N",
                        help="untimed runs first (default 10)")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help=f"thread pool size (default: {THREADS_ENV}, else the CPUs "
                        "available)")
    parser.add_argument("--batch", type=int, default=None, metavar="B",
                        help="the size of every input's symbolic leading (batch) dim")
    parser.add_argument("--streams", default=None, metavar="auto|N",
                        help="streams independent branches may run on (compile option)")
    parser.add_argument("--json", nargs="?", const="-", default=None, metavar="FILE",
                        help="print the result as JSON, or write it to FILE")


def _streams(text: str | None):
    if text is None or text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise CommandError(f"--streams: expected auto or a count >= 1, got {text!r}")
    return value


def _set_threads(threads: int | None) -> int:
    from ge_hub import _core

    if threads is not None:
        if threads < 1:
            raise CommandError(f"--threads must be at least 1, got {threads}")
        os.environ[THREADS_ENV] = str(threads)
    size = _core.num_threads()
    if threads is not None and size != threads:
        raise CommandError(f"--threads {threads}: the thread pool already runs {size} "
                           f"threads in this process; set {THREADS_ENV}={threads} instead")
    return size


def latency_figures(seconds: list[float], batch: int) -> dict[str, Any]:
    ordered = np.sort(np.asarray(seconds)) * 1e3
    mean = float(ordered.mean())
    return {"iterations": len(ordered), "min_ms": float(ordered[0]),
            "median_ms": float(np.median(ordered)), "mean_ms": mean,
            "p90_ms": float(np.percentile(ordered, 90)),
            "p99_ms": float(np.percentile(ordered, 99)), "max_ms": float(ordered[-1]),
            "std_ms": float(ordered.std()),
            "throughput_per_s": batch * 1e3 / mean if mean > 0 else None}


def environment(threads: int) -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    cpu, flags = platform.processor() or platform.machine(), []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and cpu == (platform.processor()
                                                              or platform.machine()):
                    cpu = line.split(":", 1)[1].strip()
                elif line.startswith(("flags", "Features")) and not flags:
                    present = set(line.split(":", 1)[1].split())
                    flags = [f for f in ("avx2", "fma", "avx512f", "avx512_vnni",
                                         "avx512_bf16", "amx_tile", "neon") if f in present]
    except OSError:
        pass
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            pass
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": cpu, "cpu_flags": flags, "cpus_available": cpus, "threads": threads,
            "python": platform.python_version(), "platform": platform.platform(),
            "versions": versions}


def _bench(args: argparse.Namespace) -> int:
    if args.iterations is not None and args.iterations < 1:
        raise CommandError(f"--iterations must be at least 1, got {args.iterations}")
    if args.time is not None and args.time <= 0:
        raise CommandError(f"--time must be positive, got {args.time}")
    if args.warmup < 0:
        raise CommandError(f"--warmup must be non-negative, got {args.warmup}")
    threads = _set_threads(args.threads)
    options: dict[str, Any] = {}
    streams = _streams(args.streams)
    if streams is not None:
        options["streams"] = streams
    loaded = load_model(args, options, batch=args.batch)
    model, feeds = loaded.model, loaded.feeds
    first = next(iter(feeds.values()), None)
    batch = args.batch or (int(first.shape[0]) if first is not None and first.ndim else 1)

    progress = Progress("warm-up")
    start = time.perf_counter()
    model.run(feeds)
    first_run = time.perf_counter() - start
    for i in range(max(args.warmup - 1, 0)):
        model.run(feeds)
        progress(i + 2, args.warmup)
    progress.done()

    budget = args.time if args.time is not None else (None if args.iterations else 10.0)
    progress = Progress("benchmark")
    seconds: list[float] = []
    began = time.perf_counter()
    perf_counter = time.perf_counter
    while True:
        t0 = perf_counter()
        model.run(feeds)
        seconds.append(perf_counter() - t0)
        if args.iterations is not None:
            if len(seconds) >= args.iterations:
                break
            progress(len(seconds), args.iterations)
        else:
            if perf_counter() - began >= budget:
                break
            progress(len(seconds))
    wall = time.perf_counter() - began
    progress.done()

    summary = model.summary()
    result = {
        "model": args.model,
        "inputs": {name: {"shape": list(a.shape), "dtype": str(a.dtype)}
                   for name, a in feeds.items()},
        "batch": batch,
        "streams": summary.get("streams", 1),
        "precision": _precision(summary),
        "compile_ms": loaded.compile_s * 1e3,
        "first_run_ms": first_run * 1e3,
        "warmup": args.warmup,
        "wall_s": wall,
        "latency": latency_figures(seconds, batch),
        "environment": environment(threads),
    }
    if args.json is not None:
        text = json.dumps(result, indent=2)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
            print(f"wrote {args.json}", file=sys.stderr)
    if args.json is None or args.json != "-":
        print(format_result(result))
    return 0


def _precision(summary: dict[str, Any]) -> dict[str, Any]:
    """The precision mode and the product steps that ran in bf16 and in bf16x3 (summary()'s
    figures)."""
    precision = summary.get("precision") or {}
    return {"mode": precision.get("mode", "fp32"),
            "bf16_steps": int(precision.get("bf16_steps", 0)),
            "bf16x3_steps": int(precision.get("bf16x3_steps", 0)),
            "bf16_kernel": precision.get("bf16_kernel")}


def format_result(result: dict[str, Any]) -> str:
    lat, env = result["latency"], result["environment"]
    precision = result.get("precision") or {"mode": "fp32"}
    kernel = f", {precision['bf16_kernel']} kernel" if precision.get("bf16_kernel") else ""
    split = (f", {precision['bf16x3_steps']} in bf16x3" if precision.get("bf16x3_steps")
             else "")
    in_bf16 = (f", precision {precision['mode']} ({precision['bf16_steps']} product steps "
               f"in bf16{split}{kernel})" if precision["mode"] != "fp32" else "")
    shapes = ", ".join(f"{n} {v['dtype']}{v['shape']}" for n, v in result["inputs"].items())
    return "\n".join([
        f"model: {result['model']}  ({shapes})",
        f"environment: {env['cpu']}, {env['threads']} threads, ge-hub "
        f"{env['versions'].get('ge-hub', '?')}, streams {result['streams']}{in_bf16}",
        f"compile {result['compile_ms']:.1f} ms, first run {result['first_run_ms']:.2f} ms, "
        f"{result['warmup']} warm-up runs",
        f"{lat['iterations']} runs in {result['wall_s']:.2f} s",
        f"latency ms: min {lat['min_ms']:.3f}  median {lat['median_ms']:.3f}  mean "
        f"{lat['mean_ms']:.3f}  p90 {lat['p90_ms']:.3f}  p99 {lat['p99_ms']:.3f}  max "
        f"{lat['max_ms']:.3f}",
        f"throughput: {lat['throughput_per_s']:.2f} samples/s (batch {result['batch']})",
    ])


BENCH_COMMAND = Command(
    "bench", "measure latency (min/median/p90/p99/max) and throughput",
    guarded(PROG, _bench), _add_arguments,
    example="ge-hub bench model.onnx --time 10 --threads 4 --json")
