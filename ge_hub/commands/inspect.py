"""`ge-hub inspect FILE`: what a model file holds, without running it.

    ge-hub inspect model.ghm [--json]     header, versions, profiles, steps by kernel,
                                          Python steps, arena and weights, plugins and
                                          CPU features required (ge_hub.offline.describe)
    ge-hub inspect model.onnx [--json]    any format a frontend accepts: inputs, outputs,
                                          nodes by op, constants

A failure is one line on stderr, `ge-hub inspect: error: ...`, and exit status 1.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import traceback
from typing import Any

from ge_hub.registry import Command

PROG = "ge-hub inspect"


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="a .ghm offline model, or any model a frontend accepts")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--no-verify", action="store_true",
                        help="for a .ghm: skip the checksum of the weights (faster)")
    parser.add_argument("--trust-pickle", action="store_true",
                        help="allow a model format that can run code while it loads")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="on error, print the traceback too")


def _run(args: argparse.Namespace) -> int:
    from ge_hub.commands.run import _one_line

    try:
        info, text = inspect_model(args)
    except Exception as exc:  # any failure is one line; the traceback only on request
        if args.verbose:
            traceback.print_exc()
        print(f"{PROG}: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    print(json.dumps(info, indent=2) if args.json else text)
    return 0


def inspect_model(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    import os

    from ge_hub.commands.feeds import CommandError
    from ge_hub.offline.frontend import is_offline_file

    if not os.path.exists(args.model):
        raise CommandError(f"model file {args.model!r} does not exist")
    if is_offline_file(args.model):
        from ge_hub.offline import describe, open_file

        info = describe.describe(open_file(args.model, verify=not args.no_verify))
        return info, describe.format_text(info)
    return _describe_graph(args)


def _describe_graph(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from ge_hub.frontend import load

    graph = load(args.model, trusted=args.trust_pickle)
    ops = collections.Counter(n.qualified_op for n in graph.nodes)
    constant_bytes = sum(v.const.nbytes for v in graph.constants)
    info = {
        "file": args.model,
        "graph": graph.name,
        "inputs": [{"name": v.name, "type": str(v.type)} for v in graph.inputs],
        "outputs": [{"name": v.name, "type": str(v.type)} for v in graph.outputs],
        "nodes": len(graph.nodes),
        "nodes_by_op": dict(ops.most_common()),
        "constants": len(graph.constants),
        "constant_bytes": int(constant_bytes),
    }
    lines = [f"{args.model}: graph {graph.name!r}, {len(graph.nodes)} nodes, "
             f"{len(graph.constants)} constants ({constant_bytes} bytes)",
             f"  inputs: {'; '.join(f'{v.name}: {v.type}' for v in graph.inputs)}",
             f"  outputs: {'; '.join(f'{v.name}: {v.type}' for v in graph.outputs)}",
             f"  nodes by op: {', '.join(f'{op} {n}' for op, n in ops.most_common())}"]
    return info, "\n".join(lines)


INSPECT_COMMAND = Command("inspect", "show what a model file holds (.ghm: profiles, kernels, "
                          "requirements)", _run, _add_arguments,
                          example="ge-hub inspect model.ghm --json")
