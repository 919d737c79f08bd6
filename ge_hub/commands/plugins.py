"""`ge-hub plugins [--json]`: the loaded plugins, built-ins first, with their versions, the
hooks they implement, how many ops, kernels, frontends, passes and commands each added,
and the built-in kernels their kernels now replace.
"""

from __future__ import annotations

import argparse
import json

from ge_hub.plugins import loaded_plugins
from ge_hub.registry import Command, get_registry


def _plugins_command(args: argparse.Namespace) -> int:
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
    found: dict[str, list[str]] = {}
    for kernel, plugin, builtin in get_registry().kernel_overrides():
        op = f"{kernel.domain}.{kernel.op}" if kernel.domain else kernel.op
        found.setdefault(plugin, []).append(
            f"kernel {kernel.name} replaces built-in {builtin.name} for {op} "
            f"(priority {kernel.priority} > {builtin.priority})")
    return found


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


PLUGINS_COMMAND = Command("plugins", "list loaded plugins, their versions and hooks",
                          _plugins_command, add_json_flag, example="ge-hub plugins")
