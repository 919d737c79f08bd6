"""ge_hub.testing: the checks plugin authors get (a kernel against its op's reference,
a rule against the unrewritten graph) pass on good code and fail on bad code."""

from __future__ import annotations

import numpy as np
import pytest

from ge_hub import es, rewrite, testing
from ge_hub.ir import TensorType
from ge_hub.kernels.base import PyKernel
from ge_hub.plugins import get_registry
from ge_hub.registry import KernelSpec


def test_check_kernel_passes_for_a_builtin_kernel():
    kernel = get_registry().kernels("Relu")[0]
    out = testing.check_kernel(kernel, [TensorType("float32", [3, 4])])
    assert out[0].shape == (3, 4) and (out[0] > 0).any()


def test_check_kernel_fails_when_another_kernel_is_chosen():
    impostor = KernelSpec(op="Relu", name="not.registered", impl=PyKernel(np.abs))
    with pytest.raises(AssertionError, match="not.registered"):
        testing.check_kernel(impostor, [TensorType("float32", [3])])


def test_random_feeds_are_non_zero():
    with es.GraphBuilder("g") as gb:
        a, n = es.input("a", "float32", [50]), es.input("n", "int32", [50])
        gb.output(es.add(es.cast(a, to="int32"), n), "y")
    feeds = testing.random_feeds(gb.graph)
    assert all(np.all(v != 0) for v in feeds.values())


def test_check_rule_catches_a_wrong_rule():
    wrong = rewrite.Rule(lambda op, x: op.Neg(x), lambda op, x: op.Abs(x), name="t.wrong")
    with es.GraphBuilder("g") as gb:
        gb.output(es.relu(es.neg(es.input("x", "float32", [8]))), "y")
    with pytest.raises(AssertionError):
        testing.check_rule(wrong, gb.graph)


def test_check_rule_requires_the_rule_to_fire():
    rule = rewrite.Rule(lambda op, x: op.Neg(op.Neg(x)), lambda op, x: x, name="t.nn")
    with es.GraphBuilder("g") as gb:
        gb.output(es.relu(es.input("x", "float32", [8])), "y")
    with pytest.raises(AssertionError, match="fired 0 times"):
        testing.check_rule(rule, gb.graph)
