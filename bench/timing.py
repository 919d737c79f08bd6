"""Interleaved timing: engines take turns (A B C A B C ...) so machine noise hits all alike.

`interleave` drives engines that time themselves (`runner(n)` makes n back-to-back calls
and returns the seconds per call), wherever they run: in this process, or in a worker
process across a pipe, where the pipe's own latency must stay out of the figure.
`time_interleaved` is the in-process case, for plain callables.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def interleave(runners: dict[str, Callable[[int], float]], *, rounds: int = 30,
               min_round_seconds: float = 0.02, warmup: int = 3,
               budget_seconds: float | None = None, min_rounds: int = 5,
               warmup_seconds: float | None = None) -> dict[str, dict]:
    """Per-call latency of each runner in seconds: median, p10, p90, min over rounds.

    After `warmup` single calls (fewer, but at least one, once a runner has spent
    `warmup_seconds` warming up), one more call fixes how many back-to-back calls make a
    round of at least `min_round_seconds` for that runner; a sample is the mean call of
    one round. The starting runner rotates from round to round, so that none always
    follows the same neighbour. With `budget_seconds`, rounds are cut (to no fewer than
    `min_rounds`) so that the timed rounds take about that long.
    """
    calls: dict[str, int] = {}
    once: dict[str, float] = {}
    for name, runner in runners.items():
        spent = 0.0
        for index in range(warmup):
            if index and warmup_seconds is not None and spent >= warmup_seconds:
                break
            spent += runner(1)
        once[name] = max(runner(1), 1e-7)
        calls[name] = max(1, int(min_round_seconds / once[name]))
    if budget_seconds is not None:
        per_round = sum(calls[name] * once[name] for name in runners)
        rounds = max(min(rounds, min_rounds), min(rounds, int(budget_seconds / per_round)))
    names = list(runners)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        shift = index % len(names) if names else 0
        for name in names[shift:] + names[:shift]:
            samples[name].append(runners[name](calls[name]))
    return {name: {**summarize(samples[name]), "calls_per_round": calls[name]}
            for name in names}


def time_interleaved(engines: dict[str, Callable[[], object]], *, rounds: int = 30,
                     min_round_seconds: float = 0.02, warmup: int = 3) -> dict[str, dict]:
    """`interleave` over plain callables run in this process."""

    def runner(fn: Callable[[], object]) -> Callable[[int], float]:
        def run(n: int) -> float:
            start = time.perf_counter()
            for _ in range(n):
                fn()
            return (time.perf_counter() - start) / n

        return run

    return interleave({name: runner(fn) for name, fn in engines.items()}, rounds=rounds,
                      min_round_seconds=min_round_seconds, warmup=warmup)


def percentile(ordered: list[float], q: float) -> float:
    """The nearest-rank `q` quantile (0..1) of an already sorted, non-empty list."""
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def summarize(values: list[float]) -> dict:
    if not values:
        raise ValueError("cannot summarize an empty list of timings")
    ordered = sorted(values)
    return {"median": statistics.median(ordered), "p10": percentile(ordered, 0.1),
            "p90": percentile(ordered, 0.9), "min": ordered[0], "samples": len(ordered)}
