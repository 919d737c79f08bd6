"""`ge-hub run MODEL`: load, compile and run a model of any format a frontend accepts.

    ge-hub run model.onnx                                random inputs (seed 0)
    ge-hub run model.onnx --input x=x.npy --input-shape y:1,3,224,224
    ge-hub run model.gehub --input feeds.npz --output-dir out --loop 100 --json
    ge-hub run model.onnx --profile trace.json --dump dump/ --dump-filter 'conv*'

Inputs come from `ge_hub.commands.feeds`; the report (each output's shape, dtype and
statistics, the compile summary, timings, latency) from `ge_hub.commands.report`. Every
failure is one line on stderr, `ge-hub run: error: ...`, and exit status 1; `--verbose`
prints the traceback as well.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Any

import numpy as np

from ge_hub.commands.feeds import (
    CommandError,
    make_feeds,
    parse_input_shapes,
    read_input_files,
)
from ge_hub.commands.model_args import offline_options
from ge_hub.commands.report import array_stats, format_text, latency_stats
from ge_hub.errors import GeHubError
from ge_hub.ir.dtypes import DType
from ge_hub.registry import Command

PROG = "ge-hub run"


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="the model: a path in any format an installed "
                        "frontend accepts (.onnx with ge-onnx, .gehub built in, ...)")
    parser.add_argument("--input", action="append", default=[],
                        metavar="NAME=FILE.npy | FILE.npz",
                        help="an input's data from a .npy file, or every input named by the "
                        "keys of one .npz file (repeatable); other inputs get random data")
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME:D1,D2,...",
                        help="the shape of an input's random data, fixing its symbolic dims "
                        "(repeatable)")
    parser.add_argument("--output-dir", metavar="DIR",
                        help="save each output as DIR/<name>.npy (name made file-safe)")
    parser.add_argument("--loop", type=_count, default=0, metavar="N",
                        help="after a warm-up run, run N more times and report latency "
                        "(median, p90, min)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the random inputs (default 0)")
    parser.add_argument("--disable-pass", action="append", default=[], metavar="NAME",
                        help="skip a compiler pass (repeatable; `ge-hub passes` lists them)")
    parser.add_argument("--pass-config", metavar="FILE",
                        help="a JSON or TOML file switching passes and rules on and off: "
                        '{"passes": {"simplify": "off"}, "rules": {"RULE": false}}')
    parser.add_argument("--streams", type=_streams, default=None, metavar="auto|N",
                        help="streams independent branches may run on: auto (the default: "
                        "as many as the cost model finds worth it), or a count (1: none)")
    parser.add_argument("--precision", choices=("fp32", "bf16", "mixed"), default=None,
                        help="what the products (Conv, Gemm, MatMul) compute in: fp32 (the "
                        "default, exact), bf16 (bf16 inputs, fp32 sums) or mixed (bf16 but "
                        "the sensitive layers in fp32); the report says which steps ran bf16")
    parser.add_argument("--no-compile", action="store_true",
                        help="for a .ghm offline model: refuse input shapes outside its "
                        "compiled profiles instead of planning them from its graph")
    parser.add_argument("--profile", metavar="TRACE.json",
                        help="time every step of one more run and write a Chrome trace "
                        "(Perfetto opens it; `ge-hub profile` summarizes)")
    parser.add_argument("--dump", metavar="DIR",
                        help="save every intermediate value of one more run as DIR/<value>.npy "
                        "(as its step produced it) with DIR/manifest.json")
    parser.add_argument("--dump-filter", action="append", default=None, metavar="GLOB",
                        help="with --dump: only values whose name matches (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="print only the outputs (and latency): no inputs, compile "
                        "summary or timings; --json always prints everything")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="on error, print the traceback too")
    parser.add_argument("--trust-pickle", action="store_true",
                        help="allow a model format that can run code while it loads (torch's "
                        ".pt2 pickles); only for files from a source you trust. .onnx and "
                        ".gehub files never run code")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value}")
    return value


def _streams(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected auto or a count >= 1, got {text!r}")
    return value


def _run_command(args: argparse.Namespace) -> int:
    try:
        report = run_model(args)
    except Exception as exc:  # any failure is one line; the traceback only on request
        if args.verbose:
            traceback.print_exc()
        print(f"{PROG}: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2) if args.json else format_text(report, quiet=args.quiet))
    return 0


def _one_line(exc: BaseException) -> str:
    message = " ".join(str(exc).split())
    # Our own errors and the usual suspects (a bad file, a bad value) speak for themselves;
    # anything else is unexpected, and its type is part of what went wrong.
    if isinstance(exc, (GeHubError, ValueError, OSError)) and message:
        return message
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def run_model(args: argparse.Namespace) -> dict[str, Any]:
    """Load, compile and run the model as `args` say; return the report."""
    from ge_hub.frontend import load
    from ge_hub.runtime import compile as compile_graph

    path = args.model
    if not os.path.exists(path):
        raise CommandError(f"model file {path!r} does not exist")
    options: dict[str, Any] = {"disable_passes": list(args.disable_pass)}
    if args.streams is not None:
        options["streams"] = args.streams
    if args.precision is not None:
        options["precision"] = args.precision
    if args.pass_config is not None:
        if not os.path.isfile(args.pass_config):
            raise CommandError(f"--pass-config file {args.pass_config!r} does not exist")
        options["pass_config"] = args.pass_config
    started = time.perf_counter()
    offline = _load_offline(args, options)  # a .ghm file: its stored plans, no compiling
    graph = offline.interface if offline is not None else load(
        path, trusted=args.trust_pickle)
    loaded = time.perf_counter()

    shapes = parse_input_shapes(args.input_shape, graph)
    given = read_input_files(args.input, graph)
    if offline is not None and not shapes:  # random inputs take the first profile's shapes
        shapes = {n: s for n, s in zip(offline.input_names, _first_profile(offline))
                  if n not in given}
    feeds = make_feeds(graph, given, shapes, args.seed)
    arrays = {feed.name: feed.array for feed in feeds}

    before_compile = time.perf_counter()
    model = offline or compile_graph(graph,
                                     input_shapes={n: a.shape for n, a in arrays.items()},
                                     options=options)
    compiled = time.perf_counter()
    outputs = model.run(arrays)
    first_run = time.perf_counter()
    latency = None
    if args.loop:
        seconds = []
        for _ in range(args.loop):
            start = time.perf_counter()
            model.run(arrays)
            seconds.append(time.perf_counter() - start)
        latency = latency_stats(seconds)

    seen = _see_inside(args, model, arrays)
    output_stats = [array_stats(name, array) for name, array in zip(model.output_names, outputs)]
    if args.output_dir is not None:
        files = save_outputs(args.output_dir, model.output_names, outputs)
        for stats, file in zip(output_stats, files):
            stats["file"] = file
    return {
        "model": path,
        "inputs": [{"name": f.name, "shape": list(f.array.shape),
                    "dtype": DType.from_numpy(f.array.dtype).value, "source": f.source}
                   for f in feeds],
        "outputs": output_stats,
        "compile": {k: v for k, v in model.summary().items() if k != "cached_plans"},
        "timings_ms": {"load": (loaded - started) * 1e3,
                       "compile": (compiled - before_compile) * 1e3,
                       "first_run": (first_run - compiled) * 1e3},
        "latency": latency,
        "seed": args.seed,
        **seen,
    }


def _see_inside(args: argparse.Namespace, model, arrays) -> dict[str, Any]:
    """--profile and --dump (ge_hub.profiling, ge_hub.dump): each one more run."""
    from ge_hub.commands.model_args import Progress

    seen: dict[str, Any] = {}
    if args.dump_filter and not args.dump:
        raise CommandError("--dump-filter needs --dump DIR")
    if args.profile:
        profile = model.profile(arrays, runs=1, warmup=0, name=os.path.basename(args.model))
        profile.save(args.profile)
        seen["profile"] = {"trace": args.profile,
                           "events": len(profile.trace()["traceEvents"]),
                           "lanes": profile.lanes(), "run_ms": profile.run_seconds() * 1e3,
                           "coverage": profile.coverage()}
    if args.dump:
        progress = Progress("dumping steps")
        dump = model.dump(arrays, args.dump, args.dump_filter, progress=progress)
        progress.done()
        seen["dump"] = {"directory": args.dump, "values": len(dump.entries),
                        "manifest": os.path.join(args.dump, "manifest.json")}
    return seen


def _first_profile(model) -> tuple:
    """The input shapes of a loaded model's first stored plan (of a model that runs in
    segments: of its first stored plan for the first segment)."""
    segmented = model.segmented
    if segmented is not None:
        for segment, shapes, _, _ in segmented.entries():
            if segment is segmented.root:
                return shapes
    return model.plan.signature


def _load_offline(args: argparse.Namespace, options: dict[str, Any]):
    """The CompiledModel of a .ghm offline model file (ge_hub.offline), else None."""
    from ge_hub.offline import load_compiled
    from ge_hub.offline.frontend import is_offline_file

    if not is_offline_file(args.model):
        if args.no_compile:
            raise CommandError("--no-compile is for .ghm offline models only")
        return None
    return load_compiled(args.model, allow_compile=not args.no_compile,
                         options=offline_options(options))


# -- --output-dir --------------------------------------------------------------------

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def file_name(name: str, index: int) -> str:
    """An output name made safe as a file name (no separators, no leading dot)."""
    safe = _UNSAFE.sub("_", name).lstrip(".")
    return safe or f"output_{index}"


def save_outputs(directory: str, names: Sequence[str],
                 outputs: Sequence[np.ndarray]) -> list[str]:
    """Save each output as `directory/<file-safe name>.npy`; return the paths.

    Two names that become the same file name get `_<output index>` appended. A bfloat16
    output is saved as NumPy stores it, 2-byte void; `--input` reads such a file back as
    bfloat16.
    """
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise CommandError(f"--output-dir {directory!r} exists and is not a directory")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise CommandError(f"--output-dir {directory!r} cannot be created: {exc}") from None
    used: set[str] = set()
    paths = []
    for index, (name, array) in enumerate(zip(names, outputs)):
        stem = file_name(name, index)
        if stem.lower() in used:
            stem = f"{stem}_{index}"
        used.add(stem.lower())
        path = os.path.join(directory, stem + ".npy")
        try:
            np.save(path, array, allow_pickle=False)
        except OSError as exc:
            raise CommandError(f"--output-dir: cannot write output {name!r} to {path!r}: "
                               f"{exc}") from None
        paths.append(path)
    return paths


RUN_COMMAND = Command(
    "run", "load, compile and run a model; print its outputs' statistics",
    _run_command, _add_arguments,
    example="ge-hub run model.onnx --loop 100 --profile trace.json")
