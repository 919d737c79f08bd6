"""Compiler passes, one per module: each is a function `Graph -> PassResult`.

A pass may edit the graph in place or return a new one; it says whether it changed
anything. Built-in passes register through the `register_passes` hook like anyone's
(`ge_hub.builtin`), and `ge_hub.compiler` runs them stage by stage.
"""

from __future__ import annotations

import dataclasses

from ge_hub.ir.graph import Graph


@dataclasses.dataclass(frozen=True)
class PassResult:
    graph: Graph
    changed: bool
