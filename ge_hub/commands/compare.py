"""`ge-hub compare MODEL`: ge-hub's values against a reference's, value by value.

    ge-hub compare model.onnx                            against the NumPy reference
    ge-hub compare model.onnx --against onnxruntime      against ONNX Runtime (ge-onnx)
    ge-hub compare model.pt2 --against torch --trust-pickle
    ge-hub compare model.json --against paddle           outputs only (ge-paddle)
    ge-hub compare model.mindir --against mindspore      outputs only (ge-mindspore)
    ge-hub compare model.onnx --rtol 1e-2 --atol 1e-3 --all --json
    ge-hub compare model.onnx --precision bf16 --rtol 3e-2   ge-hub's bf16 products

Matches values by name and prints, in ge-hub's execution order, each value's largest
absolute error, relative error and cosine similarity, marking the first value out of
tolerance (`>>`) and every other one (`!!`); with `--precision bf16` or `mixed`, which
product steps ran in bf16 (the reference computes in fp32 or wider). Exit status 1 when
an output is out of tolerance (or a failure, one line on stderr), 0 otherwise.
"""

from __future__ import annotations

import argparse
import json

from ge_hub.commands.model_args import Progress, add_model_arguments, guarded, load_model
from ge_hub.compare import BUILTIN_REFERENCE, DEFAULT_ATOL, DEFAULT_RTOL, compare_model
from ge_hub.registry import Command

PROG = "ge-hub compare"


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--against", default=BUILTIN_REFERENCE, metavar="NAME",
                        help="reference (the NumPy reference evaluator, the default), or a "
                        "runner a plugin provides: onnxruntime (ge-onnx), torch (ge-torch), "
                        "paddle, mindspore")
    parser.add_argument("--rtol", type=float, default=DEFAULT_RTOL,
                        help=f"relative tolerance per element (default {DEFAULT_RTOL:g})")
    parser.add_argument("--atol", type=float, default=DEFAULT_ATOL,
                        help=f"absolute tolerance per element (default {DEFAULT_ATOL:g})")
    parser.add_argument("--all", action="store_true",
                        help="list every matched value, not only the first 40 and the "
                        "out-of-tolerance ones")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def _compare(args: argparse.Namespace) -> int:
    loaded = load_model(args)
    progress = Progress("running ge-hub")
    # (a .ghm model's full graph, which the reference evaluates, is read on demand)
    result = compare_model(loaded.model, loaded.model.graph, loaded.feeds,
                           against=args.against,
                           model=args.model, trusted=args.trust_pickle, rtol=args.rtol,
                           atol=args.atol, progress=progress)
    progress.done()
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(result.format(everything=args.all))
    return 0 if result.outputs_ok else 1


COMPARE_COMMAND = Command(
    "compare", "compare every intermediate value with a reference (NumPy, onnxruntime, "
    "torch; paddle, mindspore: outputs only); exit 1 when an output is out of tolerance",
    guarded(PROG, _compare),
    _add_arguments, example="ge-hub compare model.onnx --against onnxruntime")
