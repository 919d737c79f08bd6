"""Rewrite rules: a pattern, an optional check and a replacement; the engine does the rest.

    from ge_hub import rewrite

    def pattern(op, x, w, b):                  # op.<OnnxName>(...) builds pattern nodes
        return op.Relu(op.Gemm(x, w, b))

    def check(ctx, x, w, b):                   # optional; matched Values in, bool out
        return w.is_constant or ctx.reject("weights are not constant")

    def replacement(op, x, w, b):
        return op.GemmRelu(x, w, b, _domain="acme")

    rule = rewrite.Rule(pattern, replacement, check=check, name="acme.gemm_relu")
    graph, count = rewrite.apply(graph, [rule])     # also usable outside the compiler

    @ge_hub.hookimpl
    def register_passes(registry):
        registry.add_pass(rewrite.rule_pass("acme-fusions", [rule], stage="fuse"))

Patterns (`ge_hub.rewrite.pattern`): variables match any value (`w.constant()` only a
constant, `b.optional()` also an absent input); keyword arguments constrain attributes;
numbers match constants of that value; Add, Mul, Max, Min, ... match either operand
order; a pattern may return several outputs. The engine (`ge_hub.rewrite.engine`)
refuses unsafe matches and logs each refusal with its reason in the pass context
(`ge_hub.passes.context.PassContext`); `check` and `replacement` may take `match` to read
the matched nodes' attributes (`match.attrs("Conv")["strides"]`).
"""

from ge_hub.passes.context import PassContext
from ge_hub.rewrite.engine import RewriteError, Rule, apply, rule_pass
from ge_hub.rewrite.match import Match
from ge_hub.rewrite.pattern import COMMUTATIVE, Var

__all__ = ["COMMUTATIVE", "Match", "PassContext", "RewriteError", "Rule", "Var", "apply",
           "rule_pass"]
