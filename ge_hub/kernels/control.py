"""The Closure kernel: runs a control-flow node (If, Loop, Scan) with compiled bodies.

A Closure step (`ge_hub.ops.closure`) holds its node and bodies as a serialized frame.
The kernel decodes the frame once per step (cached by the attribute text, which is the
step's own) and evaluates it, with the op's reference driving the control flow. Each
body run goes through a `CompiledBody`: a body whose input shapes repeat (the second
run with the same shapes, as in every loop with stable loop-carried shapes) is
compiled once for those shapes (the body with its captured values made inputs,
`ge_hub.ir.closure.close_subgraph`) and run by the C executor from then on; a body run
once per shape (an If branch, a loop whose carried values grow) stays with the reference
evaluator, as does a body whose shapes depend on its input values (it could not be
planned once for every iteration).

Compiling and executing are layers above the kernels, so this module does not import
them: the runtime installs the body compiler (`install_body_compiler`: compile_plan, then
an Executor) when it is imported, as `import ge_hub` does. Until one is installed,
bodies stay with the reference evaluator.
"""

from __future__ import annotations

import functools
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ge_hub.errors import ValueDependentShapeError
from ge_hub.ir.closure import close_subgraph
from ge_hub.ir.graph import Graph
from ge_hub.kernels.base import PyKernel
from ge_hub.ops.closure import decode_frame
from ge_hub.ops.control import body_runner
from ge_hub.ops.reference import current_scope, evaluate, run_subgraph
from ge_hub.registry import KernelSpec

# A body is compiled for a signature of input shapes once it has run with it this many
# times; bodies with fewer nodes than MIN_COMPILED_NODES are cheaper to interpret.
COMPILE_AFTER_RUNS = 2
MIN_COMPILED_NODES = 2
_REFERENCE = object()  # a signature that stays with the reference evaluator


class BodyRunner:
    """What a body compiler returns: runs the closed body on its inputs."""

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]: ...


# compile(closed body, {input name: shape}) -> BodyRunner; may raise
# ValueDependentShapeError (the body's shapes depend on its values).
BodyCompiler = Callable[[Graph, Mapping[str, tuple]], BodyRunner]
_body_compiler: BodyCompiler | None = None


def install_body_compiler(compiler: BodyCompiler) -> None:
    """Make `compiler` what compiles a body once its input shapes repeat."""
    global _body_compiler
    _body_compiler = compiler


class CompiledBody:
    """One body, run by the reference or by executors compiled per input signature."""

    def __init__(self, body: Graph):
        self.body = body
        self.closed, self.captured = close_subgraph(body)
        self.runs: dict[tuple, int] = {}
        self.executors: dict[tuple, object] = {}
        self.worth_compiling = len(body.nodes) >= MIN_COMPILED_NODES

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        scope = current_scope()
        arrays = [np.asarray(x) for x in inputs] + [scope[v] for v in self.captured]
        signature = tuple(x.shape for x in arrays)
        executor = self.executors.get(signature)
        if executor is None and self.worth_compiling:
            runs = self.runs[signature] = self.runs.get(signature, 0) + 1
            if runs >= COMPILE_AFTER_RUNS:
                executor = self.executors[signature] = self._compile(signature)
        if executor is None or executor is _REFERENCE:
            return run_subgraph(self.body, list(inputs))
        return executor.run(arrays)

    def _compile(self, signature: tuple):
        if _body_compiler is None:
            return _REFERENCE
        shapes = dict(zip(self.closed.input_names, signature))
        try:
            return _body_compiler(self.closed, shapes)
        except ValueDependentShapeError as error:
            # The compiler's frames in the traceback form a cycle with the error, and the
            # frames above them hold this step's buffers: break it now, not at the next
            # garbage collection (the executor refuses a step whose buffers outlive it).
            traceback.clear_frames(error.__traceback__)
            return _REFERENCE


class ClosureRunner:
    """A decoded frame and the compiled forms of the bodies within it."""

    def __init__(self, text: str):
        self.frame = decode_frame(text)
        self._bodies: dict[int, CompiledBody] = {}
        self._lock = threading.Lock()

    def run(self, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
        with body_runner(self.run_body):
            return tuple(evaluate(self.frame, list(inputs)))

    def run_body(self, body: Graph, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        compiled = self._bodies.get(id(body))
        if compiled is None:
            with self._lock:
                compiled = self._bodies.setdefault(id(body), CompiledBody(body))
        return compiled.run(inputs)


@functools.lru_cache(maxsize=256)
def _runner(text: str) -> ClosureRunner:
    return ClosureRunner(text)


def run_closure(*reads: np.ndarray, graph: str) -> tuple[np.ndarray, ...]:
    """The Python kernel of a Closure step."""
    return _runner(graph).run(reads)


# Below the C control kernel (`ge_hub.kernels.closure`, priority 1), which takes every
# Closure whose bodies compile to C; the rest run here, counted as Python steps.
KERNELS = [KernelSpec(op="Closure", name="closure", impl=PyKernel(run_closure))]
