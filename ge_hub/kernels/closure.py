"""The C control kernel: If, Loop and Scan steps whose bodies run as compiled sub-plans.

A Closure step (`ge_hub.ops.closure`, made by `lower_control_flow`) gets this kernel,
`ge_control` (core/kernels/closure.c), instead of the Python closure kernel
(`ge_hub.kernels.control`) when each body compiles, for the shapes the node is planned
for, into a plan whose steps are all C:

- each body is closed (`close_subgraph`: its captured outer values become inputs) and
  compiled with the installed plan compiler (the runtime installs `compile_plan`, a layer
  above); a captured value that is a constant of the outer plan is compiled into the body
  as a constant (folded, prepacked), the others are read in place from the step's inputs;
- the sub-plans travel in the plan (`Packed.subplans` -> `Plan.subplans`), plain data, so
  an offline file stores them and a loaded plan runs them without Python or the compiler;
- the blob (layout in closure.c) maps the step's inputs to each body's inputs, and the
  scratch holds one ping-pong buffer per carried value.

What stays with the Python closure (counted in `summary()["python_steps"]`): a body whose
shapes change between iterations or depend on its values (it cannot be planned once), a
body with a Python step of its own, a Scan over an axis other than 0, a carried value whose
shape changes. `refusal(node)` says why, for a node `supports` refused. A Loop with a
condition and scan outputs has a data-dependent output shape: the runtime specializes the
plan on what decides it (see `lower_control_flow`), as before. An If whose branches give
different shapes is planned for the branch its (then constant) condition takes, one plan
per branch in the plan cache.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ge_hub.errors import GeHubError
from ge_hub.ir.closure import close_subgraph
from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Graph, Node
from ge_hub.kernels.base import CKernel, Packed, pack_values
from ge_hub.ops.closure import decode_frame
from ge_hub.plan import KernelKind, Plan
from ge_hub.registry import KernelSpec

IF, LOOP, SCAN = 0, 1, 2
SCRATCH_ALIGNMENT = 64
CACHE_SIZE = 64

# compile(closed body, {input name: shape}, {input name: constant value}) -> Plan
PlanCompiler = Callable[[Graph, Mapping[str, tuple], Mapping[str, np.ndarray]], Plan]
_plan_compiler: PlanCompiler | None = None


def install_plan_compiler(compiler: PlanCompiler) -> None:
    """Make `compiler` what turns a closed body into a sub-plan (the runtime does)."""
    global _plan_compiler
    _plan_compiler = compiler


class Refused(Exception):
    """A node the C control kernel cannot run; the message says why."""


class Lowered:
    """A control node made ready for `ge_control`: its blob values, scratch, sub-plans."""

    def __init__(self, values: list[int], scratch: int, plans: tuple[Plan, ...]):
        self.values, self.scratch, self.plans = values, scratch, plans


_cache: collections.OrderedDict[tuple, Lowered | str] = collections.OrderedDict()
_lock = threading.Lock()


def _key(node: Node, in_types) -> tuple:
    consts = tuple(None if v is None or v.const is None or v.const.size > 1
                   else v.const.tobytes() for v in node.inputs)
    shapes = tuple(None if t is None else (t.dtype, tuple(t.shape)) for t in in_types)
    return node.attrs["graph"], shapes, consts


def lower(node: Node, in_types, out_types) -> Lowered | str:
    """The lowering of a Closure node, or the reason it stays Python (cached)."""
    key = _key(node, in_types)
    with _lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
            return found
    try:
        result: Lowered | str = _Lowering(node, in_types, out_types).run()
    except Refused as exc:
        result = str(exc)
    with _lock:
        _cache[key] = result
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return result


def refusal(node: Node) -> str | None:
    """Why the C control kernel refused `node` (None when it did not, or was not asked)."""
    types = [None if v is None else v.type for v in node.inputs]
    with _lock:
        found = _cache.get(_key(node, types))
    return found if isinstance(found, str) else None


class _Lowering:
    def __init__(self, node: Node, in_types, out_types):
        if _plan_compiler is None:
            raise Refused("no plan compiler is installed (import ge_hub.runtime)")
        self.node = node
        self.in_types = list(in_types)
        self.out_types = list(out_types)
        self.frame = decode_frame(node.attrs["graph"])
        (self.inner,) = self.frame.nodes
        self.position = {id(v): i for i, v in enumerate(self.frame.inputs)}
        for t in [*self.in_types, *self.out_types]:
            if t is not None and not t.is_static:
                raise Refused(f"its shapes are not static ({t})")

    def index(self, value) -> int:
        return -1 if value is None else self.position[id(value)]

    def shape(self, value) -> tuple[int, ...]:
        return tuple(self.in_types[self.index(value)].shape)

    def compile(self, body: Graph, shapes: Sequence[tuple], what: str) -> tuple[Plan, list]:
        closed, captured = close_subgraph(body)
        captures = [self.position[id(v)] for v in captured]
        names = closed.input_names
        given = [*shapes, *(tuple(self.in_types[i].shape) for i in captures)]
        values = {}
        for name, i in zip(names[len(shapes):], captures):
            const = self.node.inputs[i].const if self.node.inputs[i] is not None else None
            if const is not None:
                values[name] = const
        try:
            plan = _plan_compiler(closed, dict(zip(names, given)), values)
        except (GeHubError, ValueError, TypeError, LookupError, NotImplementedError) as exc:
            raise Refused(f"{what} does not compile for these shapes: {exc}") from exc
        python = sorted({s.op for s in plan.steps if s.kind is not KernelKind.C})
        if python:
            raise Refused(f"{what} has Python steps ({', '.join(python)})")
        return plan, captures

    @staticmethod
    def outputs(plan: Plan) -> list:
        return [plan.tensors[t] for t in plan.outputs]

    def check_same(self, got, want_shape, want_dtype, what: str) -> None:
        if tuple(got.shape) != tuple(want_shape) or got.dtype != want_dtype:
            raise Refused(f"{what} is {got.dtype} {list(got.shape)}, the step needs "
                          f"{want_dtype} {list(want_shape)}")

    def scratch(self, sizes: Sequence[int]) -> tuple[list[int], int]:
        offsets, total = [], 0
        for size in sizes:
            offsets.append(total)
            total += -(-size // SCRATCH_ALIGNMENT) * SCRATCH_ALIGNMENT
        return offsets, total

    def run(self) -> Lowered:
        op = self.inner.op
        if self.inner.domain or op not in ("If", "Loop", "Scan"):
            raise Refused(f"op {op} has no C control kernel")
        return getattr(self, f"lower_{op.lower()}")()

    def lower_if(self) -> Lowered:
        cond = self.inner.inputs[0]
        outer = self.node.inputs[self.index(cond)]
        const = outer.const if outer is not None else None
        branches = [("then_branch", self.inner.attrs["then_branch"]),
                    ("else_branch", self.inner.attrs["else_branch"])]
        if const is not None and const.size == 1:
            # The plan was specialized on the condition: only the taken branch can run
            # (the other may not even have these output shapes).
            branches = [branches[0 if bool(const.reshape(-1)[0]) else 1]] * 2
        plans, captures = [], []
        for what, body in branches:
            plan, caps = self.compile(body, [], what)
            outs = self.outputs(plan)
            if len(outs) != len(self.out_types):
                raise Refused(f"{what} gives {len(outs)} outputs, the If {len(self.out_types)}")
            for k, (got, want) in enumerate(zip(outs, self.out_types)):
                self.check_same(got, want.shape, want.dtype, f"{what} output {k}")
            plans.append(plan)
            captures.append(caps)
        values = [IF, self.index(cond), len(self.out_types), len(captures[0]),
                  len(captures[1]), *captures[0], *captures[1]]
        return Lowered(values, 0, tuple(plans))

    def lower_loop(self) -> Lowered:
        m, cond, *initial = self.inner.inputs
        body = self.inner.attrs["body"]
        n = len(initial)
        k_scans = len(body.outputs) - 1 - n
        if k_scans > 0 and cond is not None:
            raise Refused("a Loop with a condition and scan outputs has data-dependent "
                          "output shapes")
        shapes = [self.shape(v) for v in initial]
        plan, captures = self.compile(body, [(), (), *shapes], "Loop body")
        outs = self.outputs(plan)
        self.check_same(outs[0], (), DType.BOOL, "Loop body output 0 (condition)")
        ins = [plan.tensors[t] for t in plan.inputs]
        self.check_same(ins[0], (), DType.INT64, "Loop body input 0 (iteration number)")
        self.check_same(ins[1], (), DType.BOOL, "Loop body input 1 (condition)")
        for k, v in enumerate(initial):
            t = self.in_types[self.index(v)]
            self.check_same(outs[1 + k], t.shape, t.dtype, f"Loop body carried output {k}")
            self.check_same(self.out_types[k], t.shape, t.dtype, f"Loop output {k}")
        for j in range(k_scans):
            got, want = outs[1 + n + j], self.out_types[n + j]
            self.check_same(want, (want.shape[0], *got.shape) if want.shape else (), got.dtype,
                            f"Loop scan output {j}")
        offsets, total = self.scratch([t.nbytes for t in outs[1:1 + n]])
        values = [LOOP, self.index(m), self.index(cond), n, k_scans, len(captures),
                  *(self.index(v) for v in initial), *captures, *offsets]
        return Lowered(values, total, (plan,))

    def lower_scan(self) -> Lowered:
        attrs = self.inner.attrs
        body = attrs["body"]
        m = attrs["num_scan_inputs"]
        inputs = self.inner.inputs
        n = len(inputs) - m
        k_scans = len(body.outputs) - n
        for key in ("scan_input_axes", "scan_output_axes"):
            axes = attrs.get(key)
            if axes is not None and any(a != 0 for a in axes):
                raise Refused(f"{key} {list(axes)}: the C Scan slices axis 0 only")
        in_dirs = list(attrs.get("scan_input_directions") or [0] * m)
        out_dirs = list(attrs.get("scan_output_directions") or [0] * k_scans)
        states, scanned = inputs[:n], inputs[n:]
        length = self.shape(scanned[0])[0] if self.shape(scanned[0]) else 0
        slices = []
        for v in scanned:
            shape = self.shape(v)
            if not shape or shape[0] != length:
                raise Refused("the scanned inputs do not share their first dim")
            slices.append(shape[1:])
        plan, captures = self.compile(body, [*(self.shape(v) for v in states), *slices],
                                      "Scan body")
        outs = self.outputs(plan)
        for k, v in enumerate(states):
            t = self.in_types[self.index(v)]
            self.check_same(outs[k], t.shape, t.dtype, f"Scan body state output {k}")
            self.check_same(self.out_types[k], t.shape, t.dtype, f"Scan output {k}")
        for j in range(k_scans):
            got = outs[n + j]
            self.check_same(self.out_types[n + j], (length, *got.shape), got.dtype,
                            f"Scan output {n + j}")
        offsets, total = self.scratch([t.nbytes for t in outs[:n]])
        values = [SCAN, n, m, k_scans, len(captures), length,
                  *(self.index(v) for v in states), *(self.index(v) for v in scanned),
                  *in_dirs, *out_dirs, *captures, *offsets]
        return Lowered(values, total, (plan,))


def _supports(node: Node, in_types, out_types) -> bool:
    return isinstance(lower(node, in_types, out_types), Lowered)


def _pack(node: Node, in_types, out_types) -> Packed:
    lowered = lower(node, in_types, out_types)
    if not isinstance(lowered, Lowered):
        raise ValueError(f"node {node.name!r}: the C control kernel cannot run it: {lowered}")
    return Packed(pack_values(lowered.values), lowered.scratch, lowered.plans)


KERNELS = [KernelSpec(op="Closure", name="control", priority=1,
                            impl=CKernel("ge_control", pack=_pack, supports=_supports))]
