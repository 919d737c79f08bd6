"""The `ge-hub` command: built-in subcommands plus those plugins register.

Every subcommand, ge-hub's own included (`ge_hub.commands`), is a
`ge_hub.registry.Command` registered through the `register_commands` hook; this module
only builds the parser from them and runs the one asked for.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence

from ge_hub._version import __version__
from ge_hub.errors import GeHubError
from ge_hub.registry import get_registry


def build_parser() -> argparse.ArgumentParser:
    commands = get_registry().commands()
    parser = argparse.ArgumentParser(
        prog="ge-hub", description="ge-hub graph engine",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_examples(commands))
    parser.add_argument("--version", action="version", version=f"ge-hub {__version__}")
    parser.add_argument("-v", "--verbose", dest="verbose_all", action="store_true",
                        help="on error, print the traceback too (any command)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in commands:
        epilog = f"example:\n  {command.example}" if command.example else None
        command_parser = sub.add_parser(command.name, help=command.help,
                                        description=command.help, epilog=epilog,
                                        formatter_class=argparse.RawDescriptionHelpFormatter)
        command.add_arguments(command_parser)
        command_parser.set_defaults(_run=command.run)
    return parser


def _examples(commands) -> str:
    """One example line per command, for `ge-hub --help`."""
    lines = ["examples (`ge-hub COMMAND --help` for a command's options):"]
    for command in commands:
        example = command.example or f"ge-hub {command.name} --help"
        lines.append(f"  {example}")
    return "\n".join(lines)


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
    except BrokenPipeError:
        # The reader went away (`ge-hub ops | head`): not an error of ours. Point stdout
        # at devnull so the interpreter's final flush does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(f"ge-hub {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 (every command's failure is one line)
        if args.verbose_all or getattr(args, "verbose", False):
            traceback.print_exc()
        print(f"ge-hub {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 1


def _one_line(exc: BaseException) -> str:
    message = " ".join(str(exc).split())
    # Our own errors and the usual suspects (a bad file, a bad value) speak for themselves;
    # anything else is unexpected, and its type is part of what went wrong.
    if isinstance(exc, (GeHubError, ValueError, OSError)) and message:
        return message
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
