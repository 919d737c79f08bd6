"""ge-hub's own `ge-hub` subcommands, one module per command: `plugins`, `ops`, `run`,
`passes`, `compile`, `inspect` (with `feeds` and `report`, the input and report helpers
that `run`, `compile` and `inspect` share).

Each command module defines a `ge_hub.registry.Command`, registered by `ge_hub.builtin`
through the `register_commands` hook like any plugin's; `ge_hub.cli` builds the parser
from whatever is registered.
"""
