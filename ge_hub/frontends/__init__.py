"""Frontends that ship with ge-hub itself, registered by the built-in plugin
(`ge_hub.builtin`) like any plugin's: `gehub` reads ge-hub's own serialized IR (`.gehub`).

The offline-model frontend (`.ghm`) lives with its file format, in `ge_hub.offline.frontend`;
the machinery that picks a frontend for a model is `ge_hub.frontend`.
"""
