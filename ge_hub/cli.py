"""The `ge-hub` command: built-in subcommands plus those plugins register.

Every subcommand, ge-hub's own included, is a `ge_hub.registry.Command` registered
through the `register_commands` hook; this module only builds the parser from them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from ge_hub.registry import Command


def _plugins_command(args: argparse.Namespace) -> int:
    from ge_hub.plugins import loaded_plugins

    infos = loaded_plugins()
    overrides = _overrides_by_plugin()
    if args.json:
        print(json.dumps([{"name": i.name, "version": i.version, "hooks": list(i.hooks),
                           "registered": {k: len(v) for k, v in i.registered.items()},
                           "overrides": overrides.get(i.name, [])}
                          for i in infos], indent=2))
        return 0
    for info in infos:
        print(f"{info.name} {info.version}")
        print(f"  hooks: {', '.join(info.hooks) or 'none'}")
        for kind, names in info.registered.items():
            print(f"  {kind}: {len(names)}")
        for line in overrides.get(info.name, []):
            print(f"  overrides: {line}")
    return 0


def _overrides_by_plugin() -> dict[str, list[str]]:
    """plugin -> "its kernel replaces built-in kernel (op)" lines, for every plugin kernel
    that kernel selection now picks over a built-in one."""
    from ge_hub.plugins import get_registry

    found: dict[str, list[str]] = {}
    for kernel, plugin, builtin in get_registry().kernel_overrides():
        op = f"{kernel.domain}.{kernel.op}" if kernel.domain else kernel.op
        found.setdefault(plugin, []).append(
            f"kernel {kernel.name} replaces built-in {builtin.name} for {op} "
            f"(priority {kernel.priority} > {builtin.priority})")
    return found


def _ops_command(args: argparse.Namespace) -> int:
    from ge_hub.plugins import get_registry

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


def _add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def builtin_commands() -> list[Command]:
    return [
        Command("plugins", "list loaded plugins, their versions and hooks",
                _plugins_command, _add_json_flag),
        Command("ops", "list every registered op with its domain and kernels",
                _ops_command, _add_json_flag),
    ]


def build_parser() -> argparse.ArgumentParser:
    from ge_hub import __version__
    from ge_hub.plugins import get_registry

    parser = argparse.ArgumentParser(prog="ge-hub", description="ge-hub graph engine")
    parser.add_argument("--version", action="version", version=f"ge-hub {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in get_registry().commands():
        command_parser = sub.add_parser(command.name, help=command.help,
                                        description=command.help)
        command.add_arguments(command_parser)
        command_parser.set_defaults(_run=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from ge_hub.errors import GeHubError

    try:
        parser = build_parser()
    except GeHubError as exc:
        print(f"ge-hub: error: {exc}", file=sys.stderr)
        return 1
    args = parser.parse_args(argv)
    if not hasattr(args, "_run"):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except GeHubError as exc:
        print(f"ge-hub {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (`ge-hub ops | head`): not an error of ours. Point stdout
        # at devnull so the interpreter's final flush does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
