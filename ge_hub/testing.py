"""Checks for testing ops, kernels and rewrite rules, the ones ge-hub's own tests use.

    from ge_hub import testing

    testing.check_kernel(my_kernel_spec, [TensorType("float32", [4, 5])], {"scale": 2.0})
    rewritten, fired = testing.check_rule(my_rule, graph)   # outputs equal, rule fired

Inputs are random and non-zero (a zero would hide a missing term), seeded for
reproducibility. Every check raises `AssertionError` with what differed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Graph
from ge_hub.ir.types import TensorType
from ge_hub.registry import KernelSpec


def random_array(type: TensorType, rng: np.random.Generator) -> np.ndarray:
    """Random non-zero data of a static type: floats of magnitude 0.5 to 2 with random
    signs, integers 1 to 5, booleans at random."""
    if not type.is_static:
        raise ValueError(f"random_array needs a static type, got {type}")
    shape, dtype = type.shape, type.dtype
    if dtype is DType.BOOL:
        return rng.random(shape) < 0.5
    if dtype.is_float:
        magnitude = rng.uniform(0.5, 2.0, shape)
        sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
        return (magnitude * sign).astype(dtype.numpy)
    return rng.integers(1, 6, shape).astype(dtype.numpy)


def random_feeds(graph: Graph, seed: int = 0,
                 shapes: Mapping[str, Sequence[int]] | None = None) -> dict[str, np.ndarray]:
    """Random non-zero inputs for every graph input (`shapes` fixes symbolic ones)."""
    rng = np.random.default_rng(seed)
    shapes = shapes or {}
    return {v.name: random_array(v.type.with_shape(shapes.get(v.name, v.type.shape)), rng)
            for v in graph.inputs}


def assert_outputs_close(got: Sequence[np.ndarray], want: Sequence[np.ndarray],
                         names: Sequence[str], rtol: float, atol: float) -> None:
    assert len(got) == len(want), f"{len(got)} outputs, expected {len(want)}"
    for name, a, b in zip(names, got, want):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, f"output {name!r}: shape {a.shape}, expected {b.shape}"
        assert a.dtype == b.dtype, f"output {name!r}: dtype {a.dtype}, expected {b.dtype}"
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"output {name!r}")


def check_kernel(kernel: KernelSpec, input_types: Sequence[TensorType | None],
                 attrs: Mapping[str, Any] | None = None, *, seed: int = 0,
                 rtol: float = 1e-5, atol: float = 1e-6) -> list[np.ndarray]:
    """Compile one node of `kernel`'s op, check that kernel selection picks `kernel`, run
    it on random inputs and compare with the op's NumPy reference; return the outputs."""
    import ge_hub
    from ge_hub.ops import get_schema
    from ge_hub.reference import evaluate

    schema = get_schema(kernel.op, kernel.domain)
    graph = Graph(f"check_{kernel.name}")
    inputs = [None if t is None else graph.add_input(f"x{i}", t)
              for i, t in enumerate(input_types)]
    out_types = schema.infer_types(list(input_types), dict(attrs or {}))
    node = graph.add_node(kernel.op, inputs, out_types, dict(attrs or {}), domain=kernel.domain)
    graph.set_outputs(node.outputs)
    feeds = random_feeds(graph, seed)
    model = ge_hub.compile(graph)
    chosen = [s.kernel for s in model.plan.steps]
    assert kernel.name in chosen, (f"kernel selection chose {chosen} for "
                                   f"{schema.qualified_name}, not {kernel.name!r}")
    got = model.run(feeds)
    assert_outputs_close(got, evaluate(graph, feeds), graph.output_names, rtol, atol)
    return got


def check_rule(rule, graph: Graph, feeds: Mapping[str, np.ndarray] | None = None, *,
               min_fired: int = 1, compiled: bool = True, seed: int = 0,
               rtol: float = 1e-5, atol: float = 1e-6) -> tuple[Graph, int]:
    """Apply `rule` (a `rewrite.Rule`, or a list of them) to a copy of `graph`; check it
    fired at least `min_fired` times and that the rewritten graph computes what the
    original does, in the NumPy references and (`compiled`) compiled with every pass
    enabled. Return the rewritten graph and the number of firings."""
    import ge_hub
    from ge_hub import rewrite
    from ge_hub.reference import evaluate

    rules = list(rule) if isinstance(rule, (list, tuple)) else [rule]
    feeds = dict(feeds) if feeds is not None else random_feeds(graph, seed)
    want = evaluate(graph, feeds)
    rewritten, fired = rewrite.apply(graph.copy(), rules, verify=True)
    assert fired >= min_fired, (f"rules {[r.name for r in rules]} fired {fired} times, "
                                f"expected at least {min_fired}")
    names = graph.output_names
    assert rewritten.output_names == names, (f"outputs renamed: {rewritten.output_names} "
                                             f"!= {names}")
    assert_outputs_close(evaluate(rewritten, feeds), want, names, rtol, atol)
    if compiled:
        shapes = {k: v.shape for k, v in feeds.items()}
        got = ge_hub.compile(rewritten, input_shapes=shapes).run(feeds)
        assert_outputs_close(got, want, names, rtol, atol)
    return rewritten, fired


@contextlib.contextmanager
def wrong_kernel(op: str, fn: Callable[..., Any], *,
                 plugin: str = "test-wrong-kernel", name: str = "test_wrong_kernel"
                 ) -> Iterator[None]:
    """A plugin's Python kernel for `op` that wins kernel selection while the block runs:
    to check that a comparison or a test finds a kernel that is subtly wrong. `fn` takes
    the op's inputs as arrays, as a PyKernel does. The plugin registry is reset before
    and after, so the kernel is gone once the block ends."""
    from ge_hub import plugins
    from ge_hub.kernels.base import PyKernel

    plugins.reset()
    registry = plugins.get_registry()
    registry.current_plugin = plugin
    try:
        registry.add_kernel(KernelSpec(op, PyKernel(fn), priority=10_000, name=name))
    finally:
        registry.current_plugin = plugins.BUILTIN_PLUGIN
    try:
        yield
    finally:
        plugins.reset()
