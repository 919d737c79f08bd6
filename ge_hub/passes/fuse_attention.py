"""Fuse scaled dot-product attention into one `ge_hub.Attention` step, as rewrite rules
(the `fuse_attention` pass):

    MatMul(Softmax(MatMul(Q, Transpose(K)) (* or /) c [+ Mask], axis=-1), V)
        -> Attention(Q, K, V, Mask, scale=c, scale_divides=..., k_transposed=1)

as torch.onnx and transformers exports write it (BERT: Div by sqrt(d) and an attention
mask Add; a hand-written encoder: Mul by 1/sqrt(d)). The Transpose must swap only the
last two axes; it is folded into the kernel, which reads K row by row. Where K^T is an
operand of its own (no Transpose, or one read elsewhere too), a second set of rules takes
it as is (k_transposed=0). The scale is optional (absent: 1) and must be one constant
value; the mask any float32 tensor that broadcasts to the scores.

Then the Transposes around the fused op fold into it: one feeding Q, K or V (the heads'
split, [B, S, H, D] -> [B, H, S, D]) becomes its q_perm, k_perm or v_perm, one of its
output (the heads' merge) its out_perm, and the kernel reads and writes those layouts
through strides instead of a step moving the data (V and the output must keep their last
axis last: the kernel walks their rows whole).

The rules are opt-in in the compiler (`options={"enable_rules": RULE_NAMES}`, or a pass
config): on this project's bench machine (AVX-512) the fused kernel is still 1.1 to 1.5
times slower than the MatMul, Softmax and MatMul steps it replaces, whose products run in
the BLAS, at sequence lengths 128 to 512; it saves their memory traffic and the score
matrix, not yet time. The other transformer fusions are on by default.

The kernel (ge_nn_attention_f32, core/kernels/nn_attention.c) never forms the full score
matrix. It takes Q, K and V of rank 3 or 4 with the same leading dims and static shapes,
float32; anything else is left to the separate steps, which the engine also does when an
intermediate (the scores, the probabilities) is read outside the match.
"""

from __future__ import annotations

import numpy as np

from ge_hub.ir.dtypes import DType
from ge_hub.ops.nn import FUSED_DOMAIN
from ge_hub.rewrite import Rule, rule_pass

NAME = "fuse_attention"


def _last_two_swapped(perm) -> bool:
    perm = list(perm)
    n = len(perm)
    return n >= 2 and perm == [*range(n - 2), n - 1, n - 2]


def _keys(op, q, k, transposed):
    return op.MatMul(q, op.Transpose(k, perm=_last_two_swapped) if transposed else k)


def _softmax_last(op, x):
    return op.Softmax(x)  # the axis is checked against the rank in _check


SCALES = ("mul", "div", "none")


def _make_rule(transposed: bool, scale_kind: str, masked: bool, enabled: bool) -> Rule:
    def chain(op, q, k, v, c, mask):
        scores = _keys(op, q, k, transposed)
        if scale_kind == "mul":
            scores = op.Mul(scores, c.constant())
        elif scale_kind == "div":
            scores = op.Div(scores, c.constant())
        if masked:
            scores = op.Add(scores, mask)
        return op.MatMul(_softmax_last(op, scores), v)

    # One signature per form: the engine binds pattern variables by parameter name.
    if scale_kind != "none" and masked:
        def pattern(op, q, k, v, c, mask):
            return chain(op, q, k, v, c, mask)
    elif scale_kind != "none":
        def pattern(op, q, k, v, c):
            return chain(op, q, k, v, c, None)
    elif masked:
        def pattern(op, q, k, v, mask):
            return chain(op, q, k, v, None, mask)
    else:
        def pattern(op, q, k, v):
            return chain(op, q, k, v, None, None)

    def check(ctx, match, q, k, v):
        axis = int(match.attrs("Softmax")["axis"])
        if axis not in (-1, (q.type.rank or 0) - 1):
            return ctx.reject(f"Softmax over axis {axis}, not the last one")
        return _check(ctx, q, k, v, match.values.get("c"), match.values.get("mask"),
                      transposed)

    def replacement(op, match, q, k, v):
        c = match.values.get("c")
        scale = 1.0 if c is None else float(np.asarray(c.const).reshape(-1)[0])
        return op.Attention(q, k, v, match.values.get("mask"), scale=scale,
                            scale_divides=int(scale_kind == "div"),
                            k_transposed=int(transposed), _domain=FUSED_DOMAIN)

    parts = ["transposed_k" if transposed else "k_t", scale_kind, "mask" if masked else ""]
    return Rule(pattern, replacement, check=check, enabled=enabled,
                name=f"{NAME}." + "_".join(p for p in parts if p),
                doc=f"MatMul(Q, {'Transpose(K)' if transposed else 'K^T'}), "
                    f"{scale_kind} scale, {'mask Add, ' if masked else ''}Softmax, "
                    "MatMul(., V) -> ge_hub.Attention")


def _check(ctx, q, k, v, c, mask, transposed) -> bool:
    for name, value in (("Q", q), ("K", k), ("V", v)):
        if value.type.dtype is not DType.FLOAT32:
            return ctx.reject(f"{name} is {value.type.dtype}: the fused kernel is float32 only")
        if value.type.shape is None or not value.type.is_static:
            return ctx.reject(f"{name} has no static shape")
    qs, ks, vs = (tuple(t.type.shape) for t in (q, k, v))
    if not len(qs) == len(ks) == len(vs) or len(qs) not in (3, 4):
        return ctx.reject(f"Q {list(qs)}, K {list(ks)}, V {list(vs)}: the kernel takes "
                          "rank 3 or 4, one rank for all three")
    keys = ks if transposed else (*ks[:-2], ks[-1], ks[-2])
    if not (qs[:-2] == keys[:-2] == vs[:-2]) or qs[-1] != keys[-1] or keys[-2] != vs[-2]:
        return ctx.reject(f"Q {list(qs)}, K {list(ks)}, V {list(vs)} are not [..., S, D], "
                          "[..., Sk, D] and [..., Sk, Dv] with the same leading dims")
    if c is not None and np.asarray(c.const).size != 1:
        return ctx.reject(f"the scale has {np.asarray(c.const).size} values, not one")
    if mask is not None:
        if mask.type.dtype is not DType.FLOAT32 or mask.type.shape is None:
            return ctx.reject(f"the mask {mask.type} is not a float32 tensor of known shape")
        if len(mask.type.shape) > len(qs):
            return ctx.reject(f"the mask {mask.type} has more dims than the scores")
    return True


# -- Transposes folded into an Attention ------------------------------------------------


def _compose(inner, outer) -> list[int]:
    """The perm of transpose(transpose(x, inner), outer) (an empty perm is none)."""
    inner, outer = list(inner), list(outer)
    if not outer:
        return inner
    if not inner:
        return outer
    return [inner[p] for p in outer]


def _attention_attrs(match) -> dict:
    return dict(match.node("Attention").attrs)


def _fold_input_rule(index: int, perm_name: str, enabled: bool) -> Rule:
    def pattern(op, q, k, v, mask, x):
        operands = [q, k, v]
        operands[index] = op.Transpose(x)
        return op.Attention(*operands, mask.optional(), _domain=FUSED_DOMAIN)

    def perm_of(match):
        transpose = match.attrs("Transpose")["perm"]
        return _compose(transpose, _attention_attrs(match).get(perm_name, []))

    def check(ctx, match, x):
        perm = perm_of(match)
        if not perm:
            return ctx.reject("the Transpose has no explicit perm")
        if perm_name == "v_perm" and perm[-1] != len(perm) - 1:
            return ctx.reject(f"V's perm {perm} moves its last axis: the kernel reads V's "
                              "rows whole")
        return True

    def replacement(op, match, q, k, v, mask, x):
        operands = [q, k, v]
        operands[index] = x
        attrs = _attention_attrs(match)
        attrs[perm_name] = perm_of(match)
        return op.Attention(*operands, mask, _domain=FUSED_DOMAIN, **attrs)

    return Rule(pattern, replacement, check=check, enabled=enabled,
                name=f"{NAME}.fold_{perm_name}",
                doc=f"a Transpose feeding ge_hub.Attention's {perm_name[0].upper()} -> "
                    f"its {perm_name}")


def _fold_output_pattern(op, q, k, v, mask):
    return op.Transpose(op.Attention(q, k, v, mask.optional(), _domain=FUSED_DOMAIN))


def _output_perm(match) -> list[int]:
    return _compose(_attention_attrs(match).get("out_perm", []),
                    match.attrs("Transpose")["perm"])


def _fold_output_check(ctx, match):
    perm = _output_perm(match)
    if not perm or perm[-1] != len(perm) - 1:
        return ctx.reject(f"the output perm {perm} moves the last axis: the kernel writes "
                          "whole rows")
    return True


def _fold_output(op, match, q, k, v, mask):
    attrs = _attention_attrs(match)
    attrs["out_perm"] = _output_perm(match)
    return op.Attention(q, k, v, mask, _domain=FUSED_DOMAIN, **attrs)


def _rules(enabled: bool) -> list[Rule]:
    return [
        *[_make_rule(transposed, scale_kind, masked, enabled)
          for transposed in (True, False)
          for scale_kind in SCALES
          for masked in (True, False)],
        _fold_input_rule(0, "q_perm", enabled),
        _fold_input_rule(1, "k_perm", enabled),
        _fold_input_rule(2, "v_perm", enabled),
        Rule(_fold_output_pattern, _fold_output, check=_fold_output_check, enabled=enabled,
             name=f"{NAME}.fold_out_perm",
             doc="a Transpose of ge_hub.Attention's output (keeping the last axis) -> its "
                 "out_perm"),
    ]


# Every rule, on: for rewrite.apply and the tests.
RULES = _rules(enabled=True)
# The names to pass as `enable_rules` (or set true in a pass config) to fuse attention
# when compiling: the compiler's pass holds them off by default (see the module doc).
RULE_NAMES = [rule.name for rule in RULES]


def fuse_attention_pass():
    return rule_pass(NAME, _rules(enabled=False), stage="fuse",
                     doc="MatMul(Q, K^T), scale, mask Add, Softmax, MatMul(., V) -> one "
                         "ge_hub.Attention step")
