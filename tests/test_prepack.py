"""Kernels that lay out constant inputs their own way at compile time (CKernel.prepack).

emit_plan runs a kernel's prepacker once and hands its step the returned array in place
of the constant; the plan carries it as one more constant, and the graph's own constant
is left as it was for everything else that reads it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ge_hub import es
from ge_hub.compiler import optimize
from ge_hub.emit import emit_plan
from ge_hub.executor import Executor, registry_resolver
from ge_hub.plugins import get_registry
from ge_hub.registry import Registry


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def _graph(rng):
    """y = x + c and z = x * c: two readers of the same constant c."""
    c = rng.uniform(1.0, 2.0, size=(3, 4)).astype(np.float32)
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [3, 4])
        const = es.const(c)
        es.output(es.add(x, const), "y")
        es.output(es.mul(x, const), "z")
    return optimize(gb.graph, {"x": [3, 4]}), c


def _with_prepack(graph, op, prepack):
    """Give the node of `op` its selected C kernel with `prepack` added; returns a
    resolver that finds it."""
    node = next(n for n in graph.nodes if n.op == op)
    kernel = node.meta["kernel"]
    spec = dataclasses.replace(kernel, name=f"test.prepacked.{op}",
                               impl=dataclasses.replace(kernel.impl, prepack=prepack))
    node.meta["kernel"] = spec
    registry = Registry()
    registry.add_kernel(spec)
    builtin = registry_resolver(get_registry())
    mine = registry_resolver(registry)

    def resolve(name):
        return mine(name) if name == spec.name else builtin(name)

    return node, resolve


def test_the_step_reads_the_prepacked_constant_and_other_readers_the_original(rng):
    graph, c = _graph(rng)
    node, resolve = _with_prepack(graph, "Add", lambda n, i, o: {1: n.inputs[1].const * 10})
    plan = emit_plan(graph)
    add = next(s for s in plan.steps if s.node == node.name)
    spec = plan.tensors[add.inputs[1]]
    assert spec.name == f"{node.inputs[1].name}:packed:{node.name}"
    np.testing.assert_array_equal(plan.constants[spec.index], c * 10)
    x = rng.uniform(-1.0, 1.0, size=(3, 4)).astype(np.float32)
    y, z = Executor(plan, resolve).run([x])
    np.testing.assert_allclose(y, x + 10 * c, rtol=1e-6)
    np.testing.assert_allclose(z, x * c, rtol=1e-6)  # Mul still reads the original
    np.testing.assert_array_equal(node.inputs[1].const, c)  # the graph is untouched


def test_an_empty_prepack_changes_nothing(rng):
    graph, c = _graph(rng)
    _, resolve = _with_prepack(graph, "Add", lambda n, i, o: {})
    plan = emit_plan(graph)
    assert len(plan.constants) == 1
    x = rng.uniform(-1.0, 1.0, size=(3, 4)).astype(np.float32)
    np.testing.assert_allclose(Executor(plan, resolve).run([x])[0], x + c, rtol=1e-6)


def test_prepacking_a_graph_input_is_refused(rng):
    graph, _ = _graph(rng)
    node, _ = _with_prepack(graph, "Add", lambda n, i, o: {0: np.zeros((3, 4), np.float32)})
    with pytest.raises(ValueError, match=f"input 0 of node '{node.name}', which is not a "
                                         "constant"):
        emit_plan(graph)


def test_a_prepacker_must_return_arrays(rng):
    graph, _ = _graph(rng)
    _with_prepack(graph, "Add", lambda n, i, o: {1: [1.0, 2.0]})
    with pytest.raises(TypeError, match="prepack returned list for input 1"):
        emit_plan(graph)
