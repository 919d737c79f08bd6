"""ge-hub's own `ge-hub` subcommands that work on models, one module per command.

Each module defines a `ge_hub.registry.Command`, registered by `ge_hub.builtin` through
the `register_commands` hook like any plugin's; the listing commands (`plugins`, `ops`)
live in `ge_hub.cli`.
"""
