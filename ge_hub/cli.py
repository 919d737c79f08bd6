"""The `ge-hub` command: built-in subcommands plus those plugins register.

Every subcommand, ge-hub's own included (`ge_hub.commands`), is a
`ge_hub.registry.Command` registered through the `register_commands` hook; this module
only builds the parser from them and runs the one asked for.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ge_hub._version import __version__
from ge_hub.errors import GeHubError
from ge_hub.registry import get_registry


def build_parser() -> argparse.ArgumentParser:
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
