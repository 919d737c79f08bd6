"""ge-hub's own plugin: the core op set and CLI commands, registered like anyone's."""

from __future__ import annotations

from ge_hub.plugins import hookimpl


@hookimpl
def register_ops(registry):
    from ge_hub.ops import core_schemas

    for schema in core_schemas():
        registry.add_op(schema)


@hookimpl
def register_commands(registry):
    from ge_hub.cli import builtin_commands

    for command in builtin_commands():
        registry.add_command(command)
