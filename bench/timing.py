"""Interleaved timing: engines take turns (A B C A B C ...) so machine noise hits all alike."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def time_interleaved(engines: dict[str, Callable[[], object]], *, rounds: int = 30,
                     min_round_seconds: float = 0.02, warmup: int = 3) -> dict[str, dict]:
    """Per-call latency of each engine in seconds: median, p10, p90, min over rounds.

    Each round calls an engine back to back for at least `min_round_seconds` (the count
    is fixed per engine after warm-up) and records the mean of that round.
    """
    inner: dict[str, int] = {}
    for name, fn in engines.items():
        for _ in range(warmup):
            fn()
        start = time.perf_counter()
        fn()
        once = max(time.perf_counter() - start, 1e-7)
        inner[name] = max(1, int(min_round_seconds / once))
    samples: dict[str, list[float]] = {name: [] for name in engines}
    for _ in range(rounds):
        for name, fn in engines.items():
            n = inner[name]
            start = time.perf_counter()
            for _ in range(n):
                fn()
            samples[name].append((time.perf_counter() - start) / n)
    return {name: summarize(values) for name, values in samples.items()}


def summarize(values: list[float]) -> dict:
    ordered = sorted(values)

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]

    return {"median": statistics.median(ordered), "p10": pct(0.1), "p90": pct(0.9),
            "min": ordered[0], "samples": len(ordered)}
