"""`ge-hub compile MODEL -o OUT.ghm`: compile a model once, for a set of shape profiles, into
one offline model file that `ge-hub run` and `ge_hub.load_compiled` run without compiling.

    ge-hub compile model.onnx -o model.ghm                    the model's static shapes
    ge-hub compile model.onnx -o model.ghm --input-shape x:1,3,224,224
    ge-hub compile model.onnx -o model.ghm --dynamic-batch 1,4,8
    ge-hub compile bert.onnx -o bert.ghm --shape-profile short:1,128;1,128 \\
        --shape-profile long:ids=1,512;mask=1,512

Profiles (ATC's gears): `--dynamic-batch B1,B2,...` makes one profile per batch size (dim
0 of every input; the other dims from `--input-shape` or the model), `--shape-profile
NAME:SHAPES` one named profile, SHAPES being `;`-separated shapes either in input order
or as `INPUT=D1,D2`. Inputs a profile does not shape take `--input-shape`, then the
model's static dims, then any symbol another input fixes. Without profiles there is one,
"default". `--disable-pass` and `--pass-config` work as in `ge-hub run`. The summary
lists the profiles, steps (and Python steps) per profile, arena, and the file's size.
Every failure is one line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from typing import Any

from ge_hub.commands.feeds import CommandError, parse_input_shapes
from ge_hub.ir.graph import Graph
from ge_hub.ir.types import Sym
from ge_hub.registry import Command

PROG = "ge-hub compile"


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="the model: any format an installed frontend accepts")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.ghm",
                        help="the offline model file to write")
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME:D1,D2,...",
                        help="an input's shape in every profile (repeatable)")
    parser.add_argument("--dynamic-batch", metavar="B1,B2,...",
                        help="one profile per batch size (dim 0 of every input)")
    parser.add_argument("--precision", choices=("fp32", "bf16", "mixed"), default="fp32",
                        help="what the products compute in (as ge-hub run --precision); "
                        "recorded in the file")
    parser.add_argument("--shape-profile", action="append", default=[],
                        metavar="NAME:D1,D2;...",
                        help="a named profile: shapes in input order, or INPUT=D1,D2, "
                        "separated by ';' (repeatable)")
    parser.add_argument("--disable-pass", action="append", default=[], metavar="NAME",
                        help="skip a compiler pass (repeatable; `ge-hub passes` lists them)")
    parser.add_argument("--pass-config", metavar="FILE",
                        help="a JSON or TOML file switching passes and rules on and off")
    portable = parser.add_mutually_exclusive_group()
    portable.add_argument("--portable", dest="portable", action="store_true", default=True,
                          help="keep the graph and its original weights (the default): "
                          "other shapes can be planned and weights re-packed for another CPU")
    portable.add_argument("--no-portable", dest="portable", action="store_false",
                          help="store only the plans and the constants they read (smaller; "
                          "runs only the compiled profiles, on CPUs that read their layouts)")
    parser.add_argument("--trust-pickle", action="store_true",
                        help="allow a model format that can run code while it loads")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="on error, print the traceback too")


def _run(args: argparse.Namespace) -> int:
    from ge_hub.commands.run import _one_line

    try:
        summary = compile_model(args)
    except Exception as exc:  # any failure is one line; the traceback only on request
        if args.verbose:
            traceback.print_exc()
        print(f"{PROG}: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
    return 0


# -- profiles ------------------------------------------------------------------------


def _dims(text: str, where: str) -> tuple[int, ...]:
    text = text.strip()
    if not text:
        return ()
    dims = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise CommandError(f"{where}: dim {part!r} is not a non-negative integer")
        dims.append(int(part))
    return tuple(dims)


def parse_profiles(args: argparse.Namespace, graph: Graph) -> list[tuple[str, dict]]:
    """[(profile name, {input name: shape given})], before filling in the other dims."""
    names = graph.input_names
    profiles: list[tuple[str, dict]] = []
    if args.dynamic_batch:
        where = f"--dynamic-batch {args.dynamic_batch!r}"
        batches = _dims(args.dynamic_batch, where)
        if not batches:
            raise CommandError(f"{where}: expected batch sizes B1,B2,...")
        for batch in dict.fromkeys(batches):
            profiles.append((f"batch{batch}", {"__batch__": batch}))
    for spec in args.shape_profile:
        where = f"--shape-profile {spec!r}"
        name, colon, body = spec.partition(":")
        if not colon or not name.strip():
            raise CommandError(f"{where}: expected NAME:D1,D2;... (shapes in input order or "
                               "INPUT=D1,D2, separated by ';')")
        parts = [p for p in body.split(";")]
        given: dict[str, tuple[int, ...]] = {}
        for position, part in enumerate(parts):
            if "=" in part:
                input_name, _, dims = part.partition("=")
                input_name = input_name.strip()
                if input_name not in names:
                    raise CommandError(f"{where}: the model has no input {input_name!r}; its "
                                       f"inputs: {', '.join(names)}")
            else:
                if position >= len(names):
                    raise CommandError(f"{where}: {len(parts)} shapes for {len(names)} inputs")
                input_name, dims = names[position], part
            given[input_name] = _dims(dims, where)
        if any(name.strip() == p[0] for p in profiles):
            raise CommandError(f"{where}: profile {name.strip()!r} is given twice")
        profiles.append((name.strip(), given))
    return profiles or [("default", {})]


def resolve_shapes(graph: Graph, base: dict[str, tuple[int, ...]], given: dict,
                   where: str) -> dict[str, tuple[int, ...]]:
    """Every input's concrete shape for one profile."""
    batch = given.get("__batch__")
    declared = {v.name: v.type.shape for v in graph.inputs}
    symbols: dict[Sym, int] = {}
    chosen: dict[str, list] = {}
    for value in graph.inputs:
        shape = given.get(value.name) or base.get(value.name)
        dims = list(shape) if shape is not None else (
            None if declared[value.name] is None else list(declared[value.name]))
        if dims is None:
            raise CommandError(f"{where}: input {value.name!r} has an unknown rank; give "
                               f"--input-shape {value.name}:D1,D2,...")
        if batch is not None and dims:
            if isinstance(dims[0], int) and shape is None and dims[0] != batch:
                raise CommandError(f"{where}: input {value.name!r} has a fixed batch dim "
                                   f"{dims[0]} ({value.type})")
            dims[0] = batch
        decl = declared[value.name]
        if decl is not None:
            if len(decl) != len(dims):
                raise CommandError(f"{where}: input {value.name!r} has rank {len(decl)} "
                                   f"({value.type}), got {len(dims)} dims")
            for axis, (d, size) in enumerate(zip(decl, dims)):
                if isinstance(size, int) and isinstance(d, int) and d != size:
                    raise CommandError(f"{where}: input {value.name!r} dim {axis} is fixed at "
                                       f"{d} ({value.type}), got {size}")
                if isinstance(size, int) and isinstance(d, Sym):
                    if symbols.setdefault(d, size) != size:
                        raise CommandError(f"{where}: symbol {d.name!r} is given both "
                                           f"{symbols[d]} and {size}")
        chosen[value.name] = dims
    shapes = {}
    for name, dims in chosen.items():
        resolved = []
        for d in dims:
            if isinstance(d, Sym):
                if d not in symbols:
                    raise CommandError(f"{where}: input {name!r} dim {d} is symbolic; give "
                                       f"--input-shape {name}:D1,D2,... or a profile")
                d = symbols[d]
            elif not isinstance(d, int):
                raise CommandError(f"{where}: input {name!r} dim {d} cannot be resolved; give "
                                   f"--input-shape {name}:D1,D2,...")
            resolved.append(d)
        shapes[name] = tuple(resolved)
    return shapes


# -- compiling -----------------------------------------------------------------------


def compile_model(args: argparse.Namespace) -> dict[str, Any]:
    from ge_hub.frontend import load
    from ge_hub.offline import writer
    from ge_hub.runtime import CompiledModel

    if not os.path.exists(args.model):
        raise CommandError(f"model file {args.model!r} does not exist")
    if not args.output.lower().endswith(".ghm"):
        raise CommandError(f"--output {args.output!r}: an offline model file ends in .ghm")
    graph = load(args.model, trusted=args.trust_pickle)
    base = parse_input_shapes(args.input_shape, graph)
    options: dict[str, Any] = {"disable_passes": list(args.disable_pass),
                               "precision": args.precision}
    if args.pass_config is not None:
        if not os.path.isfile(args.pass_config):
            raise CommandError(f"--pass-config file {args.pass_config!r} does not exist")
        options["pass_config"] = args.pass_config
    plans, names, skipped = [], {}, []
    for name, given in parse_profiles(args, graph):
        shapes = resolve_shapes(graph, base, given, f"profile {name!r}")
        model = CompiledModel(graph, input_shapes=shapes, options=options)
        held = model.plans()
        if not held:  # a shape depends on input values: planned at run time instead
            skipped.append(name)
            continue
        for key, plan, rules in held:
            if key in names:
                raise CommandError(f"profiles {names[key]!r} and {name!r} have the same "
                                   "shapes")
            names[key] = name
            plans.append((key, plan, rules))
    if not plans:
        raise CommandError("no profile could be compiled ahead of time: the model's shapes "
                           f"depend on input values (profiles {', '.join(skipped)})")
    merged = CompiledModel.from_plans(graph, plans, options=model.options)
    meta = writer.save(merged, args.output, portable=args.portable, profile_names=names,
                       source=args.model)
    return {"model": args.model, "output": args.output, "file_bytes": meta["file_bytes"],
            "portable": args.portable, "profiles": meta["profiles"],
            "not_compiled": skipped, "kernels": len(meta["kernels"]),
            "plugins": sorted({e["plugin"] for e in meta["kernels"].values()}),
            "gemm_kernel": meta["portability"]["gemm_kernel"]["name"],
            "precision": args.precision,
            "bf16_kernel": meta["portability"]["bf16_kernel"]["name"]}


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.1f} KiB"


def format_summary(summary: dict[str, Any]) -> str:
    lines = [f"compiled {summary['model']} -> {summary['output']} "
             f"({_mib(summary['file_bytes'])}, "
             f"{'portable' if summary['portable'] else 'not portable'})"]
    for p in summary["profiles"]:
        shapes = " ".join("x".join(map(str, s)) or "scalar" for s in p["shapes"])
        python = (f", {p['python_steps']} in Python ({', '.join(p['python_ops'])})"
                  if p["python_steps"] else ", 0 in Python")
        lines.append(f"  profile {p['name']}: {shapes}: {p['steps']} steps{python}, arena "
                     f"{_mib(p['arena_bytes'])}, constants {_mib(p['constant_bytes'])}")
    for name in summary["not_compiled"]:
        lines.append(f"  profile {name}: not compiled (shapes depend on input values; "
                     "planned at run time)")
    lines.append(f"  {summary['kernels']} kernels from {', '.join(summary['plugins'])}; "
                 f"GEMM micro-kernel {summary['gemm_kernel']}")
    if summary.get("precision", "fp32") != "fp32":
        lines.append(f"  precision {summary['precision']}: bf16 products on the "
                     f"{summary['bf16_kernel']} micro-kernel")
    return "\n".join(lines)


COMPILE_COMMAND = Command("compile", "compile a model for shape profiles into one offline "
                          ".ghm file", _run, _add_arguments,
                          example="ge-hub compile model.onnx -o model.ghm "
                                  "--dynamic-batch 1,8")
