"""`python -m bench`: ge-hub beside ONNX Runtime, OpenVINO and PyTorch, side by side in one run.

    python -m bench                  every model, every engine (takes a while)
    python -m bench --quick          a few small models, few rounds (what CI runs)
    python -m bench --models mlp,resnet18-b1 --engines ge-hub,ort-2t
    python -m bench --list           the models and engines there are
    python -m bench --from-json FILE the Markdown of a saved run, measuring nothing

Prints a Markdown table on stdout (progress goes to stderr) and writes every figure,
with the environment, to a JSON file (--output). The exit status is 1 when an engine
failed or disagreed with the reference outputs; it says nothing about speed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import sys
import tempfile
import time

from bench import cases, environment, mindspore_models, paddle_models, report
from bench.engines import ENGINES, SUITE_ENGINES
from bench.suite import Settings, log, run_case

DEFAULT_OUTPUT = os.path.join(tempfile.gettempdir(), "bench-results.json")
QUICK_ENGINES = ["ge-hub", "ge-hub-1t", "ort-1t", "ort-2t", "ov-2t", "torch-eager"]


def settings_for(args) -> Settings:
    if args.engines:
        engines = args.engines.split(",")
        unknown = [e for e in engines if e not in ENGINES]
        if unknown:
            raise SystemExit(f"unknown engines {unknown}; known: {sorted(ENGINES)}")
    else:
        # torch.compile alone takes longer than the whole quick run: quick leaves it out.
        engines = QUICK_ENGINES if args.quick else list(SUITE_ENGINES)
    if args.quick:
        settings = Settings(engines, rounds=5, min_rounds=3, warmup=2, min_round_seconds=0.01,
                            budget_seconds=5.0, profile_rounds=3)
    else:
        settings = Settings(engines, rounds=20, budget_seconds=15.0, profile_rounds=3)
    if args.rounds:
        settings.rounds = args.rounds
    if args.budget:
        settings.budget_seconds = args.budget
    settings.profile = not args.no_profile
    settings.cold_inductor = args.cold_inductor
    return settings


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="a few small models, few rounds, no torch.compile")
    parser.add_argument("--models", help="comma-separated model names (see --list)")
    parser.add_argument("--engines", help=f"comma-separated, from {', '.join(ENGINES)}")
    parser.add_argument("--output", default=DEFAULT_OUTPUT,
                        help=f"where to write the JSON results (default {DEFAULT_OUTPUT})")
    parser.add_argument("--rounds", type=int, help="most interleaved rounds per model")
    parser.add_argument("--budget", type=float,
                        help="seconds of timed rounds per model, all engines together")
    parser.add_argument("--no-profile", action="store_true",
                        help="skip the per-op profile where ge-hub is slower than ORT")
    parser.add_argument("--cold-inductor", action="store_true",
                        help="disable inductor's caches, so torch.compile time is a cold "
                             "compile")
    parser.add_argument("--list", action="store_true", help="list models and engines, then exit")
    parser.add_argument("--from-json", metavar="PATH",
                        help="measure nothing: print the Markdown of a saved results file")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.list:
        for case in cases.all_cases():
            print(f"{case.name:24} {'quick ' if case.quick else '      '}{case.description}")
        for name, zoo_name in mindspore_models.MODELS.items():
            quick = "quick " if name in mindspore_models.QUICK else "      "
            print(f"{name:24} {quick}the ge-mindspore zoo's {zoo_name}, ge-hub vs MindSpore "
                  "(when ge-mindspore is installed)")
        for name, (zoo_name, _) in paddle_models.MODELS.items():
            quick = "quick " if name in paddle_models.QUICK else "      "
            print(f"{name:24} {quick}the ge-paddle zoo's {zoo_name}, ge-hub vs Paddle "
                  "Inference (when ge-paddle is installed)")
        print("engines:", ", ".join(ENGINES))
        return 0
    if args.from_json:
        with open(args.from_json) as f:
            doc = json.load(f)
        problems = report.validate(doc)
        print(report.markdown(doc))
        for problem in problems:
            log(f"schema: {problem}")
        return 1 if problems else 0
    settings = settings_for(args)
    names = args.models.split(",") if args.models else None
    # ms-* models belong to the MindSpore group (bench/mindspore_models.py).
    # pd-* models belong to the Paddle group (bench/paddle_models.py).
    own = [n for n in names or () if n not in mindspore_models.MODELS
           and n not in paddle_models.MODELS]
    try:
        selected = (cases.select(own or None, args.quick) if own or not names else [])
    except ValueError as error:
        raise SystemExit(str(error)) from None

    command = shlex.join(["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)])
    doc = {
        "schema": report.SCHEMA,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "mode": "quick" if args.quick else "full",
        "environment": environment.collect(),
        "settings": vars(settings).copy(),
        "models": [],
    }
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ge-hub-bench-") as directory:
        for case in selected:
            doc["models"].append(run_case(case, settings, directory))
        # MindSpore's models, when ge-mindspore is installed somewhere (a child process:
        # MindSpore needs NumPy 1.x); see bench/mindspore_models.py.
        mindspore_group = mindspore_models.run_group(
            quick=args.quick, threads=2, log=log,
            models=names)
        if mindspore_group is not None:
            doc["mindspore"] = mindspore_group
        # Paddle's models, when ge-paddle is installed (bench/paddle_models.py).
        paddle_group = paddle_models.run_group(quick=args.quick, threads=2, log=log,
                                               models=names)
        if paddle_group is not None:
            doc["paddle"] = paddle_group
    doc["elapsed_s"] = time.perf_counter() - start
    doc["environment"]["load_average_at_end"] = environment.load_average()
    # Workers import ge-hub afresh from the checkout: say so if it moved during the run.
    doc["environment"]["source_at_end"] = environment.source_revision()

    problems = report.validate(doc)
    with open(args.output, "w") as f:
        f.write(report.to_json(doc))
    print(report.markdown(doc))
    if mindspore_group is not None:
        print(mindspore_models.markdown(mindspore_group))
    if paddle_group is not None:
        print(paddle_models.markdown(paddle_group))
    log(f"wrote {args.output} ({doc['elapsed_s']:.0f} s)")
    if problems:
        log("the results document breaks its schema:\n  " + "\n  ".join(problems))
        return 1
    failed = [(e, f"{m['name']}/{e}: {entry['status']}") for m in doc["models"]
              for e, entry in m["engines"].items() if entry["status"] != "ok"]
    if failed:
        log("engines that failed or disagreed: " + ", ".join(text for _, text in failed))
    # A peer that fails or disagrees on some model is a finding to read in the table, not
    # a broken bench; ge-hub failing or disagreeing is.
    return 1 if (any(engine.startswith("ge-hub") for engine, _ in failed)
                 or mindspore_models.failed(mindspore_group)
                 or paddle_models.failed(paddle_group)) else 0


if __name__ == "__main__":
    raise SystemExit(main())
