"""Compile-phase timing for profiles: each pass, memory planning and emission.

The compiler wraps its phases in `phase(name, category)`. Nothing is recorded unless a
caller collects (`collect()`, used by `ge_hub.profiling`); then every phase becomes a
`Phase` on CLOCK_MONOTONIC (`time.monotonic_ns`, the clock of the executor's step
records), so compile and run events share one timeline. It sits in the bottom layer so
that the compiler can use it without depending on the profiler.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Phase:
    name: str
    category: str   # "pass", "planning", "emission", "compile"
    start_ns: int
    end_ns: int


@dataclass
class CompileRecord:
    """What one collection saw: its phases, and the optimized graphs handed to emission
    (the profiler reads FLOPs off their nodes: a plan's weights may be prepacked)."""

    phases: list[Phase] = field(default_factory=list)
    graphs: list[Any] = field(default_factory=list)


_active: contextvars.ContextVar[CompileRecord | None] = contextvars.ContextVar(
    "ge_hub_compile_record", default=None)


@contextlib.contextmanager
def collect() -> Iterator[CompileRecord]:
    """Record every phase run in this context (nested collections each get their own)."""
    record = CompileRecord()
    token = _active.set(record)
    try:
        yield record
    finally:
        _active.reset(token)


@contextlib.contextmanager
def phase(name: str, category: str = "pass") -> Iterator[None]:
    record = _active.get()
    if record is None:
        yield
        return
    start = time.monotonic_ns()
    try:
        yield
    finally:
        record.phases.append(Phase(name, category, start, time.monotonic_ns()))


def note_graph(graph: Any) -> None:
    """Keep the optimized graph of the plan being emitted, when collecting."""
    record = _active.get()
    if record is not None:
        record.graphs.append(graph)
