"""Control flow: If, Loop and Scan (ONNX semantics, newest opset), bodies as subgraphs.

A body is a `Graph` attribute. It reads the node's per-iteration values through its own
inputs and any value of the enclosing graphs by scope (its captured outer values,
`ge_hub.ir.graph.outer_values`).

- If: `cond` (one bool) picks `then_branch` or `else_branch`; both take no inputs and
  give the same number of outputs of the same dtypes, which are the node's outputs.
- Loop: `M` (trip count, int64) and `cond` (bool), each optional, and N loop-carried
  values. The body takes (iteration number, condition, N carried values) and gives
  (condition, N carried values, K scan outputs); the node gives the N final carried
  values, then each scan output of every iteration stacked along a new axis 0. Without
  `cond` the body's condition output is ignored; without both, the loop would never
  end, which is refused.
- Scan: N state values, then `num_scan_inputs` tensors sliced along
  `scan_input_axes` (forwards, or backwards where `scan_input_directions` is 1). The
  body takes (N states, one slice of each) and gives (N states, K scan outputs); the
  node gives the final states, then the K scan outputs stacked along
  `scan_output_axes` (in reverse order where `scan_output_directions` is 1).

Shape inference types the outputs from the bodies: each body is inferred anew for the
node's actual input types (`infer_body`, which changes nothing in the body). A dim that
differs between the two branches of an If, or that a loop-carried value changes from
one iteration to the next, becomes a fresh symbol; so does a Loop's trip count unless
`M` is a known constant and there is no `cond`.

The references run bodies with `run_body`: the reference evaluator by default
(`ge_hub.ops.reference.run_subgraph`, with the current scope as the bodies' outer values);
a kernel may install a faster body runner with `body_runner` (the compiled Closure
kernel does, `ge_hub.kernels.control`).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from ge_hub.errors import OpError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Graph
from ge_hub.ir.types import Dim, TensorType
from ge_hub.ops.inference import normalize_axis
from ge_hub.ops.nn_common import reference_fail
from ge_hub.ops.schema import ANY, BOOL, INT64, Attr, AttrKind, InferenceContext, Input, Output, op

BodyRunner = Callable[[Graph, Sequence[np.ndarray]], list[np.ndarray]]
_runner: contextvars.ContextVar[BodyRunner | None] = contextvars.ContextVar(
    "ge_hub_body_runner", default=None)

SCALAR_INT64 = TensorType(DType.INT64, ())
SCALAR_BOOL = TensorType(DType.BOOL, ())


# --- running and typing bodies ------------------------------------------------------------


def run_body(body: Graph, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run a body on its inputs (its captured values come from the running scope)."""
    runner = _runner.get()
    if runner is None:
        from ge_hub.ops.reference import run_subgraph

        return run_subgraph(body, list(inputs))
    return runner(body, inputs)


@contextlib.contextmanager
def body_runner(runner: BodyRunner) -> Iterator[None]:
    """Make `run_body` use `runner` (in this context) while the block runs."""
    token = _runner.set(runner)
    try:
        yield
    finally:
        _runner.reset(token)


def infer_body(body: Graph, given: Sequence[TensorType], fail: Callable[[str], None],
               what: str = "body") -> list[TensorType]:
    """The types of `body`'s outputs when its inputs have the `given` types.

    Each body node is typed by its op's inference, in order; the body itself is left
    as it is. Outer values read by the body count with their recorded types (and data,
    for constants). `fail` reports a body that does not fit (`what` names it).
    """
    from ge_hub.ops import get_schema

    if len(body.inputs) != len(given):
        names = ", ".join(v.name for v in body.inputs) or "none"
        fail(f"{what} must take {len(given)} inputs, it takes {len(body.inputs)} ({names})")
    types: dict[int, TensorType] = {}
    for value, t in zip(body.inputs, given):
        declared = value.type
        if declared.dtype != t.dtype or (declared.rank is not None and t.rank is not None
                                         and declared.rank != t.rank):
            fail(f"{what} input {value.name!r} is declared {declared}, but is given {t}")
        types[id(value)] = t if t.shape is not None else declared
    for node in body.nodes:
        ins = [None if v is None else types.get(id(v), v.type) for v in node.inputs]
        consts = [None if v is None else v.const for v in node.inputs]
        try:
            outs = get_schema(node.op, node.domain).infer_types(
                ins, node.attrs, consts=consts, num_outputs=len(node.outputs),
                node_name=node.name)
        except OpError as exc:
            fail(f"in {what}: {exc}")
        for value, t in zip(node.outputs, outs):
            types[id(value)] = t
    return [types.get(id(v), v.type) for v in body.outputs]


def _merge(ctx: InferenceContext, a: TensorType, b: TensorType, what: str) -> TensorType:
    """One type for values that may be either `a` or `b`: dims that differ are fresh
    symbols, a rank that differs is unknown; the dtypes must agree."""
    if a.dtype != b.dtype:
        ctx.fail(f"{what}: {a} on one side, {b} on the other; the dtypes must match")
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return TensorType(a.dtype, None)
    return TensorType(a.dtype, [x if x == y else ctx.new_sym("dim") for x, y in
                                zip(a.shape, b.shape)])


def _infer_carried(ctx: InferenceContext, body: Graph, before: list[TensorType],
                   carried: list[TensorType], after: list[TensorType],
                   skip: int) -> tuple[list[TensorType], list[TensorType]]:
    """Type a loop body: its inputs are `before + carried + after`, its outputs `skip`
    leading ones, then the carried values, then the rest. Returns the carried values'
    types over every iteration and the types of the rest."""
    carried = list(carried)
    for _ in range(2):  # once with the initial types, once with their generalization
        outs = infer_body(body, [*before, *carried, *after], ctx.fail)
        if len(outs) < skip + len(carried):
            ctx.fail(f"body must give at least {skip + len(carried)} outputs ({skip} leading, "
                     f"{len(carried)} carried), it gives {len(outs)}")
        merged = [_merge(ctx, c, o, f"loop-carried value {k} (body output {skip + k})")
                  for k, (c, o) in enumerate(zip(carried, outs[skip:]))]
        if merged == carried:
            break
        carried = merged
    return carried, outs[skip + len(carried):]


def _one_element(ctx: InferenceContext, index: int) -> None:
    t = ctx.input(index)
    if t.is_static and t.numel != 1:
        ctx.fail(f"input {ctx.schema.input_name(index)!r} must hold one element, got {t}")


def _empty_like(t: TensorType, lead: int = 0, axis: int = 0) -> np.ndarray:
    """An empty stack of values of type `t` (unknown dims taken as 0)."""
    dims = [d if isinstance(d, int) else 0 for d in (t.shape or ())]
    dims.insert(axis, lead)
    return np.zeros(dims, t.dtype.numpy)


def _stack(fail, items: list[np.ndarray], axis: int, what: str) -> np.ndarray:
    shapes = {item.shape for item in items}
    if len(shapes) > 1:
        fail(f"{what} must have one shape in every iteration, got {sorted(shapes)}")
    return np.stack(items, axis=axis)


def _scalar(x: np.ndarray, fail, name: str):
    if x.size != 1:
        fail(f"input {name!r} must hold one element, got shape {list(x.shape)}")
    return x.reshape(-1)[0]


# --- If --------------------------------------------------------------------------------------


def _infer_if(ctx: InferenceContext) -> list[TensorType]:
    _one_element(ctx, 0)
    then_types = infer_body(ctx.attrs["then_branch"], [], ctx.fail, "then_branch")
    else_types = infer_body(ctx.attrs["else_branch"], [], ctx.fail, "else_branch")
    if len(then_types) != len(else_types):
        ctx.fail(f"then_branch gives {len(then_types)} outputs, else_branch "
                 f"{len(else_types)}; they must give the same number")
    if ctx.num_outputs is not None and ctx.num_outputs != len(then_types):
        ctx.fail(f"the node has {ctx.num_outputs} outputs, its branches give "
                 f"{len(then_types)}")
    cond = ctx.const(0)
    if cond is not None and cond.size == 1:
        chosen = then_types if bool(cond.reshape(-1)[0]) else else_types
        other = else_types if bool(cond.reshape(-1)[0]) else then_types
        for k, (a, b) in enumerate(zip(chosen, other)):
            _merge(ctx, a, b, f"output {k}")  # the dtypes must agree all the same
        return chosen
    return [_merge(ctx, a, b, f"output {k} (then_branch vs else_branch)")
            for k, (a, b) in enumerate(zip(then_types, else_types))]


@op("If",
    inputs=[Input("cond", BOOL, type_var=None, decides_shape=True)],
    outputs=[Output("outputs", variadic=True)],
    attrs=[Attr("then_branch", AttrKind.GRAPH), Attr("else_branch", AttrKind.GRAPH)],
    infer=_infer_if)
def if_(cond, *, then_branch, else_branch):
    """Run then_branch when cond is true, else_branch otherwise; their outputs."""
    taken = bool(_scalar(cond, reference_fail("If"), "cond"))
    return tuple(run_body(then_branch if taken else else_branch, []))


# --- Loop ------------------------------------------------------------------------------------


def _infer_loop(ctx: InferenceContext) -> list[TensorType]:
    has_m, has_cond = ctx.has_input(0), ctx.has_input(1)
    if not has_m and not has_cond:
        ctx.fail("has neither M nor cond, so it would never end; give a trip count M, a "
                 "condition cond, or both")
    for index in (0, 1):
        if ctx.has_input(index):
            _one_element(ctx, index)
    initial = [ctx.input(i) for i in range(2, len(ctx.input_types))]
    if any(t is None for t in initial):
        ctx.fail("loop-carried values (v_initial) cannot be omitted")
    body = ctx.attrs["body"]
    carried, scans = _infer_carried(ctx, body, [SCALAR_INT64, SCALAR_BOOL], initial, [], 1)
    cond_out = infer_body(body, [SCALAR_INT64, SCALAR_BOOL, *carried], ctx.fail)[0]
    if cond_out.dtype != DType.BOOL:
        ctx.fail(f"body output 0 is the condition and must be bool, got {cond_out}")
    m, cond = ctx.const(0), ctx.const(1)
    trips: Dim = ctx.new_sym("trips")
    if cond is not None and cond.size == 1 and not bool(cond.reshape(-1)[0]):
        trips = 0
    elif m is not None and m.size == 1 and not has_cond:
        trips = max(int(m.reshape(-1)[0]), 0)
    if trips == 0:
        carried = initial  # the body never runs
    scan_types = [t if t.shape is None else t.with_shape([trips, *t.shape]) for t in scans]
    return [*carried, *scan_types]


@op("Loop",
    inputs=[Input("M", INT64, type_var=None, optional=True, decides_shape=True),
            Input("cond", BOOL, type_var=None, optional=True, decides_shape=True),
            Input("v_initial", ANY, type_var=None, optional=True, variadic=True)],
    outputs=[Output("v_final_and_scan_outputs", variadic=True)],
    attrs=[Attr("body", AttrKind.GRAPH)],
    infer=_infer_loop)
def loop(m, cond, *v_initial, body):
    """Run the body while the iteration number is below M and cond holds."""
    fail = reference_fail("Loop")
    if m is None and cond is None:
        fail("has neither M nor cond, so it would never end")
    trips = None if m is None else int(_scalar(m, fail, "M"))
    going = True if cond is None else bool(_scalar(cond, fail, "cond"))
    carried = list(v_initial)
    steps: list[list[np.ndarray]] = []
    iteration = 0
    while going and (trips is None or iteration < trips):
        results = run_body(body, [np.array(iteration, np.int64), np.array(going), *carried])
        if cond is not None:
            going = bool(_scalar(results[0], fail, "body output 0 (condition)"))
        carried = results[1:1 + len(carried)]
        steps.append(results[1 + len(carried):])
        iteration += 1
    if steps:
        scans = [_stack(fail, [step[k] for step in steps], 0, f"scan output {k}")
                 for k in range(len(steps[0]))]
    else:
        given = [SCALAR_INT64, SCALAR_BOOL, *(TensorType.of(v) for v in v_initial)]
        types = infer_body(body, given, fail)[1 + len(carried):]
        scans = [_empty_like(t) for t in types]
    return (*carried, *scans)


# --- Scan ------------------------------------------------------------------------------------


def _per_input(ctx_or_fail, attrs: dict, key: str, count: int, default: int) -> list[int]:
    values = attrs.get(key)
    if values is None:
        return [default] * count
    if len(values) != count:
        ctx_or_fail(f"attribute {key!r} must have {count} values (one each), "
                    f"got {len(values)}")
    if key.endswith("directions") and any(v not in (0, 1) for v in values):
        ctx_or_fail(f"attribute {key!r} must hold 0 (forward) or 1 (reverse), got {values}")
    return list(values)


def _scan_counts(fail, count: int, num_scan_inputs: int, body: Graph) -> tuple[int, int]:
    """(N states, K scan outputs), checked against the node and its body."""
    if not 1 <= num_scan_inputs <= count:
        fail(f"num_scan_inputs is {num_scan_inputs}, but the node has {count} inputs")
    states = count - num_scan_inputs
    if len(body.outputs) < states:
        fail(f"body must give at least {states} outputs (the states), "
             f"it gives {len(body.outputs)}")
    return states, len(body.outputs) - states


def _infer_scan(ctx: InferenceContext) -> list[TensorType]:
    attrs, body = ctx.attrs, ctx.attrs["body"]
    if any(t is None for t in ctx.input_types):
        ctx.fail("inputs cannot be omitted")
    states, outputs = _scan_counts(ctx.fail, len(ctx.input_types), attrs["num_scan_inputs"],
                                   body)
    scanned = ctx.input_types[states:]
    in_axes = _per_input(ctx.fail, attrs, "scan_input_axes", len(scanned), 0)
    _per_input(ctx.fail, attrs, "scan_input_directions", len(scanned), 0)
    out_axes = _per_input(ctx.fail, attrs, "scan_output_axes", outputs, 0)
    _per_input(ctx.fail, attrs, "scan_output_directions", outputs, 0)
    length: Dim | None = None
    slices = []
    for j, (t, axis) in enumerate(zip(scanned, in_axes)):
        if t.shape is None:
            slices.append(t)
            continue
        axis = normalize_axis(ctx, axis, t.rank, f"scan_input_axes[{j}]")
        dim = t.shape[axis]
        if isinstance(dim, int) and isinstance(length, int) and dim != length:
            ctx.fail(f"scanned input {states + j} has {dim} items along axis {axis}, an "
                     f"earlier one {length}; every scanned input must have the same number")
        if length is None or not isinstance(length, int):
            length = dim
        slices.append(t.with_shape(t.shape[:axis] + t.shape[axis + 1:]))
    if length is None:
        length = ctx.new_sym("length")
    initial = list(ctx.input_types[:states])
    carried, scans = _infer_carried(ctx, body, [], initial, slices, 0)
    if length == 0:
        carried = initial
    result = list(carried)
    for k, (t, axis) in enumerate(zip(scans, out_axes)):
        if t.shape is None:
            result.append(t)
            continue
        axis = normalize_axis(ctx, axis, t.rank + 1, f"scan_output_axes[{k}]")
        dims = list(t.shape)
        dims.insert(axis, length)
        result.append(t.with_shape(dims))
    return result


@op("Scan",
    inputs=[Input("initial_state_and_scan_inputs", ANY, type_var=None, variadic=True)],
    outputs=[Output("final_state_and_scan_outputs", variadic=True)],
    attrs=[Attr("body", AttrKind.GRAPH), Attr("num_scan_inputs", AttrKind.INT),
           Attr("scan_input_axes", AttrKind.INTS, None),
           Attr("scan_input_directions", AttrKind.INTS, None),
           Attr("scan_output_axes", AttrKind.INTS, None),
           Attr("scan_output_directions", AttrKind.INTS, None)],
    infer=_infer_scan)
def scan(*inputs, body, num_scan_inputs, scan_input_axes, scan_input_directions,
         scan_output_axes, scan_output_directions):
    """Run the body on each slice of the scanned inputs, threading the states through."""
    fail = reference_fail("Scan")
    attrs = {"scan_input_axes": scan_input_axes, "scan_input_directions": scan_input_directions,
             "scan_output_axes": scan_output_axes,
             "scan_output_directions": scan_output_directions}
    states, outputs = _scan_counts(fail, len(inputs), num_scan_inputs, body)
    scanned = inputs[states:]
    in_axes = [a % max(x.ndim, 1) for a, x in
               zip(_per_input(fail, attrs, "scan_input_axes", len(scanned), 0), scanned)]
    in_dirs = _per_input(fail, attrs, "scan_input_directions", len(scanned), 0)
    out_axes = _per_input(fail, attrs, "scan_output_axes", outputs, 0)
    out_dirs = _per_input(fail, attrs, "scan_output_directions", outputs, 0)
    lengths = {x.shape[a] for x, a in zip(scanned, in_axes)}
    if len(lengths) != 1:
        fail(f"the scanned inputs have different lengths {sorted(lengths)}")
    (length,) = lengths
    carried = list(inputs[:states])
    steps: list[list[np.ndarray]] = []
    for t in range(length):
        slices = [np.take(x, length - 1 - t if d else t, axis=a)
                  for x, a, d in zip(scanned, in_axes, in_dirs)]
        results = run_body(body, [*carried, *slices])
        carried = results[:states]
        steps.append(results[states:])
    scans = []
    for k in range(outputs):
        items = [step[k] for step in steps][::-1 if out_dirs[k] else 1]
        if items:
            axis = out_axes[k] % (items[0].ndim + 1)
            scans.append(_stack(fail, items, axis, f"scan output {k}"))
            continue
        given = [TensorType.of(v) for v in inputs[:states]]
        given += [TensorType(DType.from_numpy(x.dtype), x.shape[:a] + x.shape[a + 1:])
                  for x, a in zip(scanned, in_axes)]
        t = infer_body(body, given, fail)[states + k]
        scans.append(_empty_like(t, 0, out_axes[k] % ((t.rank or 0) + 1)))
    return (*carried, *scans)
