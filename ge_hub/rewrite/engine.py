"""The rewrite engine: rules, `apply`, and `rule_pass` (a compiler pass made of rules).

The engine, not the rule, owns safety. A match is refused, and the refusal logged in
the pass context with its reason, when

- an intermediate value of the match (a matched node's output that is not one of the
  pattern's outputs) is read outside the match or is a graph output, unless the rule
  says intermediates may be recomputed (`Rule(..., recompute=True)`: the producing
  nodes then stay for their other readers);
- the rule's `check` returns False (`ctx.reject(reason)` says why);
- the replacement cannot be built (unknown op, inputs its schema refuses);
- a replacement output's inferred type differs from the matched output's type (this
  is also what keeps `x + 0 -> x` from firing where the zero broadcasts `x` larger);
- the replacement would make a cycle (it reads a value computed from what it replaces);
- a graph output would have to be renamed onto an existing value.

Rules are applied until none fires (at most `MAX_ROUNDS` sweeps); the graph is then
re-sorted and, when the context's `verify` option is on, verified. A node a rule created
is never the root of that rule's own matches, so a replacement that matches its own
pattern fires once, not forever.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ge_hub.errors import GeHubError
from ge_hub.ir.graph import Graph, Node, Value
from ge_hub.passes import PassResult
from ge_hub.passes.context import PassContext
from ge_hub.rewrite.match import Match, Matcher
from ge_hub.rewrite.pattern import Pattern
from ge_hub.rewrite.replace import ReplacementBuilder, StagedNode, StagedValue

MAX_ROUNDS = 8
# node.meta key: the rule that created a node, which never takes it as a match's root.
CREATED_BY = "rewrite.created_by"


class RewriteError(GeHubError):
    """A rule is malformed or its code failed (not a refused match: those are logged)."""


def _binder(function: Callable[..., Any], skip: int, rule: str, names: set[str]):
    """How to call `function` with the variables it names (and `match` if it asks)."""
    params = list(inspect.signature(function).parameters.values())[skip:]
    wanted = []
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name not in names and p.name != "match" and p.default is p.empty:
            raise RewriteError(f"rule {rule!r}: {function.__name__}() takes {p.name!r}, "
                               f"which is not a pattern variable ({sorted(names)})")
        wanted.append(p.name)

    def call(head, match: Match):
        kwargs = {n: (match if n == "match" and n not in names else match.values[n])
                  for n in wanted if n in names or n == "match"}
        return function(*head, **kwargs)

    return call


class Rule:
    """pattern + optional check + replacement, applied by the engine.

    `pattern(op, *vars)` and `replacement(op, *vars)` are plain functions over an op
    builder; `check(ctx, *vars)` returns a bool (`ctx.reject(reason)` explains a no).
    Any of them may also take `match` (a `Match`: matched nodes and their attributes).
    `recompute=True` lets intermediates that are read elsewhere stay for those readers;
    `enabled=False` makes the rule opt-in (`enable_rules` or a pass config turn it on).
    """

    def __init__(self, pattern: Callable[..., Any], replacement: Callable[..., Any],
                 check: Callable[..., Any] | None = None, name: str | None = None, *,
                 recompute: bool = False, enabled: bool = True, doc: str = ""):
        self.name = name or getattr(replacement, "__name__", "rule")
        self.pattern = Pattern.trace(pattern, self.name)
        names = {v.name for v in self.pattern.vars}
        self._replace = _binder(replacement, 1, self.name, names)
        self._check = None if check is None else _binder(check, 1, self.name, names)
        self.recompute = recompute
        self.enabled = enabled
        self.doc = doc or (inspect.getdoc(replacement) or "").split("\n")[0]

    def __repr__(self) -> str:
        return f"Rule({self.name!r})"


def apply(graph: Graph, rules: Sequence[Rule], ctx: PassContext | None = None, *,
          verify: bool | None = None) -> tuple[Graph, int]:
    """Apply `rules` to `graph` (in place) until none fires; return (graph, times fired).

    Usable outside the compiler: without `ctx` a fresh context (global registry) is
    made. `verify` defaults to the context's option, or True when there is no context.
    """
    if ctx is None:
        ctx = PassContext()
        verify = True if verify is None else verify
    elif verify is None:
        verify = ctx.verify
    for rule in rules:
        if not isinstance(rule, Rule):
            raise TypeError(f"rewrite.apply expects Rules, got {type(rule).__name__}")
    active = [r for r in rules if ctx.rule_enabled(r.name, r.enabled)]
    engine = _Engine(graph, ctx)
    total = 0
    for _ in range(MAX_ROUNDS):
        fired = sum(engine.run_rule(rule) for rule in active)
        total += fired
        if not fired:
            break
    if total:
        graph.topological_sort()
        graph.remove_unused_constants()
        if verify:
            graph.verify()
    return graph, total


def rule_pass(name: str, rules: Iterable[Rule], stage: str = "optimize", doc: str = ""):
    """A `PassSpec` that applies `rules`; its rules show in `ge-hub passes` and can be
    switched one by one (`disable_rules`, `--pass-config`)."""
    from ge_hub.registry import PassSpec

    rules = tuple(rules)
    names = [r.name for r in rules]
    if len(set(names)) != len(names):
        raise RewriteError(f"pass {name!r} has two rules with the same name: {names}")
    run = functools.partial(_run_rules, rules=rules)
    run.__name__ = name  # type: ignore[attr-defined]
    return PassSpec(name, run, stage=stage, doc=doc or f"rules: {', '.join(names)}",
                    rules=tuple(names))


def _run_rules(graph: Graph, ctx: PassContext | None = None, *, rules) -> PassResult:
    graph, count = apply(graph, rules, ctx)
    return PassResult(graph, count > 0)


class _Refused(Exception):
    pass


class _Engine:
    def __init__(self, graph: Graph, ctx: PassContext):
        self.graph = graph
        self.ctx = ctx
        self.seen_refusals: set[tuple[str, tuple[str, ...], str]] = set()
        self.current_rule = ""

    def attrs_of(self, node: Node) -> dict[str, Any]:
        schema = self.ctx.registry.get_op(node.op, node.domain)
        try:
            return schema.fill_attrs(dict(node.attrs), node.name)
        except GeHubError:
            return dict(node.attrs)

    def run_rule(self, rule: Rule) -> int:
        matcher = Matcher(rule.pattern, self.attrs_of)
        fired = 0
        for node in list(self.graph.nodes):
            if node.graph is not self.graph or not matcher.candidates(node):
                continue
            if node.meta.get(CREATED_BY) == rule.name:
                continue  # a rule whose replacement matches its own pattern never loops
            for match in matcher.matches_at(self.graph, node):
                try:
                    self.try_apply(rule, match)
                except _Refused as refusal:
                    self.refuse(rule, match, str(refusal))
                    continue
                self.ctx.record(rule.name, "fired", match.node_names)
                fired += 1
                break
        return fired

    def refuse(self, rule: Rule, match: Match, reason: str) -> None:
        key = (rule.name, match.node_names, reason)
        if key not in self.seen_refusals:
            self.seen_refusals.add(key)
            self.ctx.record(rule.name, "refused", match.node_names, reason)

    # -- one match -----------------------------------------------------------------

    def try_apply(self, rule: Rule, match: Match) -> None:
        graph, ctx = self.graph, self.ctx
        matched = {id(n) for n in match.nodes}
        outputs = {id(v) for v in match.outputs}
        graph_outputs = {id(v) for v in graph.outputs}
        if len(outputs) != len(match.outputs):
            raise _Refused("two pattern outputs matched the same value")
        for node in match.nodes:
            for value in node.outputs:
                if id(value) in outputs or rule.recompute:
                    continue
                if id(value) in graph_outputs:
                    raise _Refused(f"intermediate {value.name!r} is a graph output")
                outside = [u.name for u, _ in value.uses if id(u) not in matched]
                if outside:
                    raise _Refused(f"intermediate {value.name!r} is also read by "
                                   f"{', '.join(outside)} outside the match")

        if rule._check is not None:
            ctx.match, ctx.current_rule, ctx.current_nodes = match, rule.name, match.node_names
            ctx.take_rejection()
            try:
                ok = rule._check((ctx,), match)
            finally:
                ctx.match = None
            reason = ctx.take_rejection()
            if not ok:
                raise _Refused(reason or "the rule's check returned False")

        builder = ReplacementBuilder(graph, ctx.registry, match)
        try:
            result = rule._replace((builder,), match)
        except (GeHubError, ValueError) as exc:
            raise _Refused(f"the replacement cannot be built: {exc}") from None
        except Exception as exc:
            raise RewriteError(f"rule {rule.name!r}: the replacement failed at nodes "
                               f"{list(match.node_names)}: {type(exc).__name__}: {exc}") from exc
        results = list(result) if isinstance(result, (tuple, list)) else [result]
        if len(results) != len(match.outputs):
            raise RewriteError(f"rule {rule.name!r}: the replacement returned {len(results)} "
                               f"values for {len(match.outputs)} pattern outputs")
        for old, new in zip(match.outputs, results):
            if not isinstance(new, (Value, StagedValue)):
                raise RewriteError(f"rule {rule.name!r}: the replacement returned "
                                   f"{type(new).__name__}, expected values")
            if new is old:
                raise _Refused(f"the replacement of {old.name!r} is the value itself")
            if new.type != old.type:
                raise _Refused(f"the replacement of {old.name!r} has type {new.type}, the "
                               f"matched value has {old.type}")
            if id(old) in graph_outputs and not isinstance(new, StagedValue):
                raise _Refused(f"graph output {old.name!r} would be replaced by the existing "
                               f"value {new.name!r}")
        self.check_cycles(match, results, builder.staged, matched)
        self.current_rule = rule.name
        self.commit(match, results, builder.staged)

    def check_cycles(self, match: Match, results: list, staged: list[StagedNode],
                     matched: set[int]) -> None:
        """Refuse if a staged node would (through the rest of the graph) read a value
        computed from its own output."""
        ancestors: dict[int, set[int]] = {}
        for node in staged:
            mine = {id(node)}
            for v in node.inputs:
                if isinstance(v, StagedValue):
                    mine |= ancestors[id(v.node)]
            ancestors[id(node)] = mine
        external = {id(v): v for node in staged for v in node.inputs
                    if isinstance(v, Value) and not v.is_constant and v.producer is not None}
        for old, new in zip(match.outputs, results):
            reached = self.downstream(old, matched)
            if isinstance(new, Value):
                if id(new) in reached:
                    raise _Refused(f"replacing {old.name!r} by {new.name!r} would make a "
                                   "cycle: it is computed from the value it replaces")
                continue
            producer = id(new.node)
            for node in staged:
                if producer not in ancestors[id(node)]:
                    continue
                for v in node.inputs:
                    if isinstance(v, Value) and id(v) in external and id(v) in reached:
                        raise _Refused(f"the replacement would make a cycle: it reads "
                                       f"{v.name!r}, which is computed from {old.name!r}")

    def downstream(self, value: Value, matched: set[int]) -> set[int]:
        """Ids of the values computed from `value` outside the match."""
        reached: set[int] = {id(value)}
        stack = [value]
        while stack:
            current = stack.pop()
            for user, _ in current.uses:
                if id(user) in matched:
                    continue
                for out in user.outputs:
                    if id(out) not in reached:
                        reached.add(id(out))
                        stack.append(out)
        return reached

    def commit(self, match: Match, results: list, staged: list[StagedNode]) -> None:
        graph = self.graph
        last = max(graph.nodes.index(n) for n in match.nodes)
        anchor = graph.nodes[last + 1] if last + 1 < len(graph.nodes) else None
        made: dict[int, Value] = {}

        def real(v):
            return made[id(v)] if isinstance(v, StagedValue) else v

        for node in staged:
            created = graph.add_node(node.op, [real(v) for v in node.inputs],
                                     [o.type for o in node.outputs], node.attrs,
                                     domain=node.domain, before=anchor)
            created.meta[CREATED_BY] = self.current_rule
            for staged_out, out in zip(node.outputs, created.outputs):
                made[id(staged_out)] = out
        graph_outputs = {id(v) for v in graph.outputs}
        for old, new in zip(match.outputs, results):
            new = real(new)
            was_output = id(old) in graph_outputs
            graph.replace_all_uses(old, new)
            if was_output:
                # Graph outputs keep their names; the old value gives its name up.
                name = old.name
                old.name = graph.unique_name(f"{name}_replaced")
                new.name = name
        pending = list(reversed(match.nodes))
        progress = True
        while progress:
            progress = False
            for node in list(pending):
                live = {id(v) for v in graph.outputs}
                if any(v.uses or id(v) in live for v in node.outputs):
                    continue
                graph.remove_node(node)
                pending.remove(node)
                progress = True

