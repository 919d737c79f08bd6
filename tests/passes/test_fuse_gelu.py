"""fuse_gelu (rules): GELU written out elementwise, in the erf and tanh forms and each
grouping of its factor 0.5, becomes one Gelu with the same results; wrong constants, a
shared intermediate and other dtypes are left alone."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ge_hub import es, rewrite
from ge_hub.passes.fuse_gelu import GROUPINGS, RULES
from ge_hub.testing import check_rule


def erf_bracket(x, mul=False, scale=None):
    if mul:
        inner = es.mul(x, np.float32(scale or 1 / math.sqrt(2)))
    else:
        inner = es.div(x, np.float32(scale or math.sqrt(2)))
    return es.add(es.erf(inner), np.float32(1.0))


def tanh_bracket(x, pow_cube=True):
    cube = es.pow(x, np.float32(3.0)) if pow_cube else es.mul(x, es.mul(x, x))
    inner = es.add(x, es.mul(cube, np.float32(0.044715)))
    return es.add(es.tanh(es.mul(inner, np.float32(math.sqrt(2 / math.pi)))),
                  np.float32(1.0))


def group(x, bracket, grouping):
    half = np.float32(0.5)
    if grouping == "xb_half":
        return es.mul(es.mul(x, bracket), half)
    if grouping == "xhalf_b":
        return es.mul(es.mul(x, half), bracket)
    return es.mul(x, es.mul(bracket, half))


def graph_of(make, dtype="float32", shape=(3, 37), also_output=False):
    with es.GraphBuilder("g") as gb:
        x = es.input("x", dtype, list(shape))
        bracket, y = make(x)
        gb.output(y, "y")
        if also_output:
            gb.output(bracket, "bracket")
    return gb.graph


FORMS = {
    "erf_div": (lambda x: erf_bracket(x), "none"),
    "erf_mul": (lambda x: erf_bracket(x, mul=True), "none"),
    "tanh_pow": (lambda x: tanh_bracket(x), "tanh"),
    "tanh_mul": (lambda x: tanh_bracket(x, pow_cube=False), "tanh"),
}


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("grouping", list(GROUPINGS))
def test_each_form_and_grouping_becomes_one_gelu(form, grouping):
    bracket_of, approximate = FORMS[form]

    def make(x):
        b = bracket_of(x)
        return b, group(x, b, grouping)

    rewritten, fired = check_rule(RULES, graph_of(make), rtol=1e-5, atol=1e-6)
    assert fired == 1
    (node,) = rewritten.nodes
    assert node.op == "Gelu" and node.attrs["approximate"] == approximate


def apply_all(graph):
    ctx = rewrite.PassContext()
    rewritten, fired = rewrite.apply(graph.copy(), RULES, ctx)
    return rewritten, fired, [e.reason for e in ctx.refusals()]


def test_a_different_constant_is_not_gelu():
    def make(x):
        b = erf_bracket(x, scale=1.5)
        return b, group(x, b, "xb_half")

    rewritten, fired, reasons = apply_all(graph_of(make))
    assert fired == 0 and "Erf" in [n.op for n in rewritten.nodes]
    assert any("c_scale" in r for r in reasons), reasons


def test_an_intermediate_read_elsewhere_stays():
    def make(x):
        b = erf_bracket(x)
        return b, group(x, b, "xb_half")

    rewritten, fired, reasons = apply_all(graph_of(make, also_output=True))
    assert fired == 0 and "Gelu" not in [n.op for n in rewritten.nodes]
    assert reasons


def test_float64_is_left_to_its_elementwise_kernels():
    def make(x):
        b = es.add(es.erf(es.div(x, np.float64(math.sqrt(2)))), np.float64(1.0))
        return b, es.mul(es.mul(x, b), np.float64(0.5))

    rewritten, fired, reasons = apply_all(graph_of(make, dtype="float64"))
    assert fired == 0 and any("float32" in r for r in reasons), reasons
