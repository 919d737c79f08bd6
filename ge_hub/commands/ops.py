"""`ge-hub ops [--json]`: every registered op, sorted by domain and name, with the plugin
that registered it, its inputs, outputs and attributes, its kernels ("reference only"
when it has none) and the plugin kernels that override built-in ones.
"""

from __future__ import annotations

import argparse
import json

from ge_hub.commands.plugins import add_json_flag
from ge_hub.registry import Command, get_registry


def _ops_command(args: argparse.Namespace) -> int:
    registry = get_registry()
    overridden: dict[tuple[str, str], list[str]] = {}
    for kernel, plugin, builtin in registry.kernel_overrides():
        overridden.setdefault((kernel.domain, kernel.op), []).append(
            f"{kernel.name} (plugin {plugin}) over {builtin.name}")
    rows = []
    for schema in sorted(registry.ops(), key=lambda s: (s.domain, s.name)):
        kernels = registry.kernels(schema.name, schema.domain)
        rows.append({
            "overrides": overridden.get((schema.domain, schema.name), []),
            "name": schema.name,
            "domain": schema.domain,
            "plugin": registry.op_owner(schema),
            "inputs": [i.name for i in schema.inputs],
            "outputs": [o.name for o in schema.outputs],
            "attributes": sorted(schema.attrs),
            "kernels": sorted({f"{k.device}:{k.name or 'default'}" for k in kernels}),
        })
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max((len(r["name"]) for r in rows), default=4)
    print(f"{'op':<{width}}  {'domain':<10}  kernels")
    for r in rows:
        override = f"  [override: {'; '.join(r['overrides'])}]" if r["overrides"] else ""
        print(f"{r['name']:<{width}}  {r['domain'] or '(core)':<10}  "
              f"{', '.join(r['kernels']) or 'reference only'}{override}")
    print(f"{len(rows)} ops")
    return 0


OPS_COMMAND = Command("ops", "list every registered op with its domain and kernels",
                      _ops_command, add_json_flag, example="ge-hub ops --json")
