"""The command line every optional framework group shares (`python -m bench.paddle_models`,
`python -m bench.mindspore_models`): pick models, measure them, print Markdown, write JSON.

A group module passes its own model table and its `measure`, `markdown` and `failed`
functions; the exit status is 1 when any model failed or disagreed.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence


def group_main(argv: Sequence[str] | None, *, prog: str, description: str,
               models: Mapping[str, object], quick: Sequence[str], quick_help: str,
               measure: Callable[[list[str], int, bool], dict],
               markdown: Callable[[dict], str], failed: Callable[[dict], bool]) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", help=f"comma-separated, from {', '.join(models)}")
    parser.add_argument("--json", metavar="PATH", help="write the results document here")
    args = parser.parse_args(argv)
    chosen = args.models.split(",") if args.models else list(quick if args.quick else models)
    unknown = [m for m in chosen if m not in models]
    if unknown:
        raise SystemExit(f"unknown models {unknown}; known: {', '.join(models)}")
    doc = measure(chosen, args.threads, args.quick)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(doc, file, indent=1)
    print(markdown(doc))
    return 1 if failed(doc) else 0
