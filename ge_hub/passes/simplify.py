"""Algebraic simplification, as rewrite rules (the `simplify` pass).

Each rule removes a node that computes nothing, or merges two that undo or compose each
other. The engine's type check is what makes most of them safe: `x + 0 -> x` fires only
where the zero does not broadcast `x` to a larger shape, a Reshape, Expand, Squeeze or
Cast only where its output type equals its input's; a graph output is never renamed
onto an existing value, so such a node stays where it is the graph's output.
"""

from __future__ import annotations

import numpy as np

from ge_hub.rewrite import Rule, rule_pass

# Ops that keep the row-major order of the elements and change only the shape.
SHAPE_OPS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")


def _same(op, x):
    return x


def _all_equal(value, number) -> bool:
    return value is None or (value.is_constant and bool(np.all(value.const == number)))


def _perm(attrs, rank):
    perm = attrs.get("perm")
    return list(range(rank))[::-1] if perm is None else [int(p) for p in perm]


def _transpose_is_identity(ctx, x, match):
    rank = x.type.rank
    if rank is None:
        return ctx.reject("the input's rank is unknown")
    return _perm(match.attrs("Transpose"), rank) == list(range(rank)) or ctx.reject(
        "the permutation moves axes")


def _dropout_check(ctx, x, ratio, training):
    return _all_equal(training, 0) or ctx.reject("training_mode may be true")


def _slice_check(ctx, x, steps):
    return _all_equal(steps, 1) or ctx.reject("steps other than 1 (or not constant)")


def _pad_check(ctx, x, pads):
    return (pads.is_constant and not pads.const.any()) or ctx.reject("pads are not all zero")


def _compose_transposes(op, x, match):
    inner, outer = match.nodes  # pattern order: the inner node was built first
    rank = x.type.rank
    p1, p2 = _perm(match.attrs(inner), rank), _perm(match.attrs(outer), rank)
    perm = [p1[i] for i in p2]
    return x if perm == list(range(rank)) else op.Transpose(x, perm=perm)


def _rank_known(ctx, x):
    return x.type.rank is not None or ctx.reject("the input's rank is unknown")


def _one_reshape(op, x, match):
    shape = match.outputs[0].type.shape
    if shape == x.type.shape:
        return x
    attrs = {"allowzero": 1} if 0 in shape else {}
    return op.Reshape(x, np.array(shape, dtype=np.int64), **attrs)


def _static_result(ctx, x, match):
    return match.outputs[0].type.is_static or ctx.reject("the result's shape is not static")


RULES = [
    Rule(lambda op, x: op.Identity(x), _same, name="simplify.identity",
         doc="Identity(x) -> x"),
    Rule(lambda op, x, ratio, training: op.Dropout(x, ratio.optional(), training.optional()),
         _same, check=_dropout_check, name="simplify.dropout",
         doc="inference Dropout(x) -> x (its mask must be unused)"),
    Rule(lambda op, x: op.OneOf([*SHAPE_OPS, "Expand"], x, _other_inputs=True), _same,
         name="simplify.noop_reshape",
         doc="Reshape/Flatten/Squeeze/Unsqueeze/Expand that keep the type -> x"),
    Rule(lambda op, x: op.OneOf(["Cast", "CastLike"], x, _other_inputs=True), _same,
         name="simplify.noop_cast", doc="Cast to the dtype x already has -> x"),
    Rule(lambda op, x: op.Transpose(x), _same, check=_transpose_is_identity,
         name="simplify.noop_transpose", doc="Transpose with the identity permutation -> x"),
    Rule(lambda op, x, starts, ends, axes, steps: op.Slice(x, starts, ends, axes.optional(),
                                                          steps.optional()),
         _same, check=_slice_check, name="simplify.noop_slice",
         doc="Slice with step 1 that keeps the shape -> x"),
    Rule(lambda op, x, pads: op.Pad(x, pads, _other_inputs=True), _same, check=_pad_check,
         name="simplify.noop_pad", doc="Pad by zero everywhere -> x"),
    Rule(lambda op, x: op.Transpose(op.Transpose(x)), _compose_transposes, check=_rank_known,
         name="simplify.transpose_pair", doc="Transpose(Transpose(x)) -> one Transpose, or x"),
    Rule(lambda op, x: op.OneOf(SHAPE_OPS, op.OneOf(SHAPE_OPS, x, _other_inputs=True),
                                _other_inputs=True),
         _one_reshape, check=_static_result, name="simplify.reshape_chain",
         doc="two Reshape/Flatten/Squeeze/Unsqueeze in a row -> one Reshape, or x"),
    Rule(lambda op, x: op.Mul(x, 1), _same, name="simplify.mul_one", doc="x * 1 -> x"),
    Rule(lambda op, x: op.Div(x, 1), _same, name="simplify.div_one", doc="x / 1 -> x"),
    Rule(lambda op, x: op.Add(x, 0), _same, name="simplify.add_zero", doc="x + 0 -> x"),
    Rule(lambda op, x: op.Sub(x, 0), _same, name="simplify.sub_zero", doc="x - 0 -> x"),
    Rule(lambda op, x: op.OneOf(["Concat", "Sum", "Max", "Min", "Mean"], x), _same,
         name="simplify.single_input", doc="Concat/Sum/Max/Min/Mean of one input -> x"),
]


def simplify_pass():
    return rule_pass("simplify", RULES, stage="optimize",
                     doc="algebraic simplification: no-op nodes, Transpose pairs, "
                         "Reshape chains, x*1, x+0, ...")
