"""`ge-hub passes [--json]`: every compiler pass in pipeline order, with its stage, the
plugin that registered it, its rewrite rules and its one-line doc.

The structural steps (specialize_shapes, select_kernels, schedule) are listed with the
plugin `builtin` and cannot be disabled; every other pass can (`--disable-pass NAME`),
and so can every rule (`--pass-config FILE`).
"""

from __future__ import annotations

import argparse
import json

from ge_hub.registry import BUILTIN_PLUGIN, Command

STRUCTURAL_DOCS = {
    "specialize_shapes": "bind input shapes, re-infer every type, fold constant expressions",
    "select_kernels": "pick each node's best kernel, or a counted reference fallback",
    "schedule": "execution order and streams",
}


def pass_rows(registry=None) -> list[dict]:
    from ge_hub.compiler import STRUCTURAL_PASSES, all_steps
    from ge_hub.plugins import get_registry

    registry = registry if registry is not None else get_registry()
    specs = {p.name: p for p in registry.passes()}
    rows = []
    for step in all_steps(registry):
        spec = specs.get(step.name)
        doc = spec.doc if spec is not None else STRUCTURAL_DOCS.get(step.name, "")
        rows.append({"name": step.name, "stage": step.stage,
                     "plugin": registry.pass_owner(step.name) if spec else BUILTIN_PLUGIN,
                     "rules": list(step.rules), "doc": doc.split("\n")[0],
                     "can_disable": step.name not in STRUCTURAL_PASSES})
    return rows


def _passes_command(args: argparse.Namespace) -> int:
    rows = pass_rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(r["name"]) for r in rows)
    print(f"{'pass':<{width}}  {'stage':<12}  {'plugin':<10}  doc")
    for r in rows:
        print(f"{r['name']:<{width}}  {r['stage']:<12}  {r['plugin']:<10}  {r['doc']}")
        for rule in r["rules"]:
            print(f"{'':<{width}}    rule {rule}")
    print(f"{len(rows)} passes, {sum(len(r['rules']) for r in rows)} rules")
    return 0


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


PASSES_COMMAND = Command("passes", "list compiler passes: stage, plugin, rules, doc",
                         _passes_command, _add_arguments, example="ge-hub passes")
