"""`ge-hub profile MODEL`: where a run's time goes, step by step.

    ge-hub profile model.onnx                      top 10 steps and ops, 10 profiled runs
    ge-hub profile model.onnx --runs 50 --top 20 --trace trace.json
    ge-hub profile model.onnx --json

Compiles the model (timing each compile phase), runs it `--warmup` times, then `--runs`
times through the executor's per-step hook, and prints the top steps and ops by mean
time with their share of the run and the GFLOP/s they achieved (Conv, MatMul, Gemm and
their fused forms), plus how much of the measured run the steps account for.
`--trace FILE` also writes the Chrome trace (open it in Perfetto).
"""

from __future__ import annotations

import argparse
import json

from ge_hub.commands.model_args import add_model_arguments, guarded, load_model
from ge_hub.registry import Command

PROG = "ge-hub profile"


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--runs", type=int, default=10, metavar="N",
                        help="profiled runs, averaged (default 10)")
    parser.add_argument("--warmup", type=int, default=2, metavar="N",
                        help="plain runs first (default 2)")
    parser.add_argument("--top", type=int, default=10, metavar="K",
                        help="how many steps and ops to list (default 10)")
    parser.add_argument("--trace", metavar="FILE.json",
                        help="also write the Chrome trace-event JSON (Perfetto opens it)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def _profile(args: argparse.Namespace) -> int:
    import os

    loaded = load_model(args, {"profile": True})
    name = os.path.basename(args.model)
    profile = loaded.model.profile(loaded.feeds, runs=args.runs, warmup=args.warmup,
                                   name=name)
    if args.trace:
        profile.save(args.trace)
    if args.json:
        summary = profile.summary(args.top)
        summary["trace"] = args.trace
        print(json.dumps(summary, indent=2))
    else:
        print(profile.format_summary(args.top))
        if args.trace:
            events = len(profile.trace()["traceEvents"])
            print(f"\ntrace: {args.trace} ({events} events; open it in Perfetto)")
    return 0


PROFILE_COMMAND = Command(
    "profile", "time every step of a model's run: top steps and ops, GFLOP/s, a Chrome "
    "trace", guarded(PROG, _profile), _add_arguments,
    example="ge-hub profile model.onnx --runs 20 --trace trace.json")
