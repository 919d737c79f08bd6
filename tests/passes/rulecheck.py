"""Shared check for the built-in rule tests: a graph built to trigger a rule computes
the same with and without it, in the NumPy references and compiled."""

from __future__ import annotations

import numpy as np

import ge_hub
from ge_hub import rewrite
from ge_hub.testing import assert_outputs_close, check_rule, random_feeds


def rules_of(pass_name: str):
    from ge_hub.passes import fold_batch_norm, simplify

    return {"simplify": simplify.RULES, "fold_batch_norm": fold_batch_norm.RULES}[pass_name]


def rule(name: str) -> rewrite.Rule:
    pass_name = name.split(".")[0]
    return next(r for r in rules_of(pass_name) if r.name == name)


def fires_and_agrees(graph, name: str, *, rtol=1e-5, atol=1e-6, times: int = 1):
    """The rule fires (alone, via rewrite.apply), the rewritten graph agrees with the
    original; compiled with the rule on and off, the outputs agree too and summary()
    counts the firings. Returns the rewritten graph."""
    rewritten, fired = check_rule(rule(name), graph, rtol=rtol, atol=atol)
    assert fired == times, fired
    feeds = random_feeds(graph, seed=1)
    on = ge_hub.compile(graph.copy())
    off = ge_hub.compile(graph.copy(), options={"disable_rules": [name]})
    assert on.summary()["rules"].get(name, 0) >= 1, on.summary()["rules"]
    assert name not in off.summary()["rules"]
    assert_outputs_close(on.run(feeds), off.run(feeds), graph.output_names, rtol, atol)
    for out in on.run(feeds):
        assert np.all(np.isfinite(out)) if out.dtype.kind == "f" else True
    return rewritten


def does_not_fire(graph, name: str) -> list[str]:
    """The rule does not fire; returns the reasons it gave (may be empty when nothing
    matched at all)."""
    ctx = rewrite.PassContext()
    _, fired = rewrite.apply(graph.copy(), [rule(name)], ctx)
    assert fired == 0, f"{name} fired"
    return [e.reason for e in ctx.refusals()]
