"""Recurrent layers: RNN, GRU and LSTM, one layer each, with ONNX semantics (opset 22).

The three ops share one frame, written once here:

- `X` is [seq_length, batch, input_size] (layout 0) or [batch, seq_length, input_size]
  (layout 1); `W`, `R` and `B` hold the weights of each direction stacked along dim 0,
  each direction's gates stacked along dim 1 (RNN: i; GRU: z, r, h; LSTM: i, o, f, c),
  `B` being the input biases followed by the recurrence biases;
- `direction` is forward, reverse or bidirectional (two directions, the second running
  from the end of each sequence to its start);
- `sequence_lens` gives each batch row its own length: steps at or past a row's length
  leave its state alone and write zeros to `Y`, so `Y_h` (and `Y_c`) hold the state after
  the row's last real step, and a reverse direction starts at the row's own last step.
  A row of length 0 gives zeros everywhere, its final states included (ONNX leaves the
  case open; this is what onnxruntime does);
- `activations` names the functions of each direction, in the order of the equations
  (RNN: f; GRU: f, g; LSTM: f, g, h). `activation_alpha` and `activation_beta` are
  queues: each activation that takes an alpha (a beta) consumes the next value, or
  uses the ONNX default of that function when the queue is empty;
- `clip` bounds the inputs of the gate activations to [-clip, clip].

The references compute in float64 for float64 data and in float32 otherwise (see
`nn_common.work_dtype`), looping over time steps as the ONNX equations read; every
output comes back in the input dtype. Every output is optional; a node that names none
of them gets all of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import Dim, TensorType, dim_mul
from ge_hub.ops.nn_common import Fail, check_choice, check_flag, reference_fail, work_dtype
from ge_hub.ops.schema import FLOATS, Attr, AttrKind, InferenceContext, Input, Output, op

SEQUENCE_LENS_TYPES = frozenset({DType.INT32})
DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}


# --- activation functions ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Activation:
    """An activation the recurrent ops accept; `alpha`/`beta` are the ONNX defaults, None
    for a function that takes no such parameter."""

    function: Callable[[np.ndarray, float, float], np.ndarray]
    alpha: float | None = None
    beta: float | None = None


def _sigmoid(x, alpha, beta):
    with np.errstate(over="ignore"):  # exp(-x) may overflow to inf: the sigmoid is then 0
        return 1 / (1 + np.exp(-x))


ACTIVATIONS: dict[str, Activation] = {
    "relu": Activation(lambda x, a, b: np.maximum(x, 0)),
    "tanh": Activation(lambda x, a, b: np.tanh(x)),
    "sigmoid": Activation(_sigmoid),
    "affine": Activation(lambda x, a, b: a * x + b, alpha=1.0, beta=0.0),
    "leakyrelu": Activation(lambda x, a, b: np.where(x >= 0, x, a * x), alpha=0.01),
    "thresholdedrelu": Activation(lambda x, a, b: np.where(x > a, x, 0), alpha=1.0),
    "scaledtanh": Activation(lambda x, a, b: a * np.tanh(b * x), alpha=1.0, beta=1.0),
    "hardsigmoid": Activation(lambda x, a, b: np.clip(a * x + b, 0, 1), alpha=0.2, beta=0.5),
    "elu": Activation(lambda x, a, b: np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0))),
                      alpha=1.0),
    "softsign": Activation(lambda x, a, b: x / (1 + np.abs(x))),
    "softplus": Activation(lambda x, a, b: np.logaddexp(0, x)),
}

Function = Callable[[np.ndarray], np.ndarray]


def resolve_activations(names: Sequence[str] | None, alphas: Sequence[float] | None,
                        betas: Sequence[float] | None, defaults: Sequence[str],
                        num_directions: int, fail: Fail) -> list[list[Function]]:
    """The activation functions of each direction, parameters bound, from the attributes.

    Names are case-insensitive. A list written for two directions on a one-direction layer
    uses its first half: ONNX's own RNN schema gives `activations` the default
    [Tanh, Tanh] whatever the direction."""
    per_direction = len(defaults)
    if names is None:
        names = list(defaults) * num_directions
    elif num_directions == 1 and len(names) == 2 * per_direction:
        names = names[:per_direction]
    if len(names) != per_direction * num_directions:
        fail(f"attribute 'activations' must name {per_direction * num_directions} functions "
             f"({per_direction} per direction, {num_directions} direction(s)), got {list(names)}")
    alpha_queue, beta_queue = list(alphas or []), list(betas or [])
    functions: list[Function] = []
    for name in names:
        activation = ACTIVATIONS.get(name.lower())
        if activation is None:
            fail(f"attribute 'activations' names an unknown function {name!r} (known: "
                 f"{', '.join(sorted(ACTIVATIONS))}, in any case)")
        alpha = beta = 0.0
        if activation.alpha is not None:
            alpha = alpha_queue.pop(0) if alpha_queue else activation.alpha
        if activation.beta is not None:
            beta = beta_queue.pop(0) if beta_queue else activation.beta
        functions.append(lambda x, fn=activation.function, a=alpha, b=beta: fn(x, a, b))
    return [functions[d * per_direction:(d + 1) * per_direction] for d in range(num_directions)]


# --- shape and dtype inference ----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Family:
    """What tells RNN, GRU and LSTM apart in the shared frame."""

    name: str
    gates: int  # gate blocks stacked in W and R: 1, 3, 4
    default_activations: tuple[str, ...]
    state_inputs: tuple[int, ...]  # input indices of the initial states (h, then c)
    flags: tuple[str, ...] = ()  # 0/1 attributes particular to the op


RNN_FAMILY = Family("RNN", 1, ("Tanh",), (5,))
GRU_FAMILY = Family("GRU", 3, ("Sigmoid", "Tanh"), (5,), ("linear_before_reset",))
LSTM_FAMILY = Family("LSTM", 4, ("Sigmoid", "Tanh", "Tanh"), (5, 6), ("input_forget",))
PEEPHOLE_INPUT = 7  # LSTM's P


def _check_dims(ctx: InferenceContext, index: int, expected: Sequence[Dim | None],
                meaning: str) -> None:
    """Input `index` must have rank len(expected) and those dims (None: any; symbols
    are only compared with equal symbols, since they may take any value)."""
    ctx.require_rank(index, len(expected))
    t = ctx.input(index)
    if t.shape is None:
        return
    for got, want in zip(t.shape, expected):
        if want is None or got == want:
            continue
        if isinstance(got, int) and isinstance(want, int):
            name = ctx.schema.input_name(index)
            shape = ", ".join(str(w) if w is not None else "?" for w in expected)
            ctx.fail(f"input {name!r} must have shape [{shape}] ({meaning}), got {t}")


def _dim(t: TensorType, axis: int) -> Dim | None:
    return None if t.shape is None else t.shape[axis]


def _infer_recurrent(family: Family) -> Callable[[InferenceContext], list[TensorType]]:
    def infer(ctx: InferenceContext) -> list[TensorType]:
        attrs = ctx.attrs
        check_choice(ctx, "direction", list(DIRECTIONS))
        for flag in family.flags:
            check_flag(ctx, flag)
        if attrs["layout"] not in (0, 1):
            ctx.fail(f"attribute 'layout' must be 0 or 1, got {attrs['layout']}")
        if attrs["clip"] is not None and not attrs["clip"] > 0:
            ctx.fail(f"attribute 'clip' must be > 0, got {attrs['clip']}")
        directions = DIRECTIONS[attrs["direction"]]
        resolve_activations(attrs["activations"], attrs["activation_alpha"],
                            attrs["activation_beta"], family.default_activations,
                            directions, ctx.fail)
        layout = attrs["layout"]

        x, w, r = ctx.input(0), ctx.input(1), ctx.input(2)
        ctx.require_rank(0, 3)
        ctx.require_rank(1, 3)
        ctx.require_rank(2, 3)
        hidden: Dim | None = attrs["hidden_size"]
        if hidden is not None and hidden < 1:
            ctx.fail(f"attribute 'hidden_size' must be >= 1, got {hidden}")
        if hidden is None:
            hidden = _dim(r, 2)
        if hidden is None and isinstance(_dim(w, 1), int):
            hidden = _dim(w, 1) // family.gates
        if hidden is None:
            hidden = ctx.new_sym("hidden")
        seq = _dim(x, layout) if x.shape is not None else ctx.new_sym("seq")
        batch = _dim(x, 1 - layout) if x.shape is not None else ctx.new_sym("batch")
        gate_rows = dim_mul(family.gates, hidden)
        weights = f"{directions} direction(s), {family.gates} gate(s) of hidden_size {hidden}"
        _check_dims(ctx, 1, (directions, gate_rows, _dim(x, 2)), f"{weights}, input_size")
        _check_dims(ctx, 2, (directions, gate_rows, hidden), weights)
        if ctx.has_input(3):
            _check_dims(ctx, 3, (directions, dim_mul(2, gate_rows)),
                        f"input and recurrence biases, {weights}")
        if ctx.has_input(4):
            _check_dims(ctx, 4, (batch,), "one length per batch row")
        state = (directions, batch, hidden) if layout == 0 else (batch, directions, hidden)
        for index in family.state_inputs:
            if ctx.has_input(index):
                _check_dims(ctx, index, state, f"layout {layout}: directions, batch, hidden")
        if family is LSTM_FAMILY and ctx.has_input(PEEPHOLE_INPUT):
            _check_dims(ctx, PEEPHOLE_INPUT, (directions, dim_mul(3, hidden)),
                        "peepholes i, o, f of each direction")

        y = (seq, directions, batch, hidden) if layout == 0 else (batch, seq, directions, hidden)
        types = [TensorType(x.dtype, y)] + [TensorType(x.dtype, state)] * len(family.state_inputs)
        count = len(types) if ctx.num_outputs is None else ctx.num_outputs
        if not 1 <= count <= len(types):
            names = ", ".join(o.name for o in ctx.schema.outputs)
            ctx.fail(f"expected 1 to {len(types)} outputs ({names}), got {count}")
        return types[:count]

    return infer


def _attrs(family: Family) -> list[Attr]:
    common = [
        Attr("activation_alpha", AttrKind.FLOATS, None),
        Attr("activation_beta", AttrKind.FLOATS, None),
        Attr("activations", AttrKind.STRINGS, None),
        Attr("clip", AttrKind.FLOAT, None),
        Attr("direction", AttrKind.STRING, "forward"),
        Attr("hidden_size", AttrKind.INT, None),
        Attr("layout", AttrKind.INT, 0),
    ]
    return common + [Attr(flag, AttrKind.INT, 0) for flag in family.flags]


def _inputs(family: Family) -> list[Input]:
    inputs = [
        Input("X", FLOATS), Input("W", FLOATS), Input("R", FLOATS),
        Input("B", FLOATS, optional=True),
        Input("sequence_lens", SEQUENCE_LENS_TYPES, "T1", optional=True),
        Input("initial_h", FLOATS, optional=True),
    ]
    if family is LSTM_FAMILY:
        inputs += [Input("initial_c", FLOATS, optional=True), Input("P", FLOATS, optional=True)]
    return inputs


def _outputs(family: Family) -> list[Output]:
    names = ["Y", "Y_h", "Y_c"][: 1 + len(family.state_inputs)]
    return [Output(name, optional=True) for name in names]


# --- the shared reference frame ---------------------------------------------------------

# A cell takes one time step's input [batch, input_size] and the states (h, or h and c),
# each [batch, hidden], and returns the new states.
Cell = Callable[..., tuple[np.ndarray, ...]]


def _clipper(clip: float | None) -> Function:
    if clip is None:
        return lambda x: x
    return lambda x: np.clip(x, -clip, clip)


def _scan(cell: Cell, x: np.ndarray, states: tuple[np.ndarray, ...], lengths: np.ndarray,
          reverse: bool) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Run `cell` over the steps of x [seq, batch, input]: Y [seq, batch, hidden] and the
    final states. Rows whose sequence ended keep their state and get zeros in Y; rows of
    length 0 end with zero states."""
    seq_length = x.shape[0]
    y = np.zeros((seq_length, *states[0].shape), dtype=states[0].dtype)
    for t in (reversed(range(seq_length)) if reverse else range(seq_length)):
        running = (t < lengths)[:, None]
        stepped = cell(x[t], *states)
        states = tuple(np.where(running, new, old) for new, old in zip(stepped, states))
        y[t] = np.where(running, states[0], 0)
    empty = (lengths == 0)[:, None]
    return y, tuple(np.where(empty, 0, s).astype(s.dtype) for s in states)


def _run_recurrent(family: Family, x, sequence_lens, initial_states, attrs,
                   make_cell: Callable[[int, list[Function]], Cell]):
    """The frame around the cells: layout, directions, lengths; returns (Y, Y_h[, Y_c])."""
    fail = reference_fail(family.name)
    directions = DIRECTIONS.get(attrs["direction"])
    if directions is None:
        fail(f"attribute 'direction' must be one of {', '.join(DIRECTIONS)}, "
             f"got {attrs['direction']!r}")
    functions = resolve_activations(attrs["activations"], attrs["activation_alpha"],
                                    attrs["activation_beta"], family.default_activations,
                                    directions, fail)
    out_dtype, work = x.dtype, work_dtype(x.dtype)
    layout = attrs["layout"]
    if layout == 1:
        x = x.swapaxes(0, 1)
        initial_states = [s if s is None else s.swapaxes(0, 1) for s in initial_states]
    x = x.astype(work)
    seq_length, batch = x.shape[:2]
    hidden = attrs["hidden_size"]
    if sequence_lens is None:
        lengths = np.full(batch, seq_length, dtype=np.int64)
    else:
        lengths = sequence_lens.astype(np.int64)
        if lengths.shape != (batch,) or np.any((lengths < 0) | (lengths > seq_length)):
            fail(f"input 'sequence_lens' must hold {batch} lengths in [0, {seq_length}], "
                 f"got {sequence_lens.tolist()}")
    ys, finals = [], []
    for d in range(directions):
        states = tuple(np.zeros((batch, hidden), work) if s is None else s[d].astype(work)
                       for s in initial_states)
        reverse = attrs["direction"] == "reverse" or d == 1
        y, final = _scan(make_cell(d, functions[d]), x, states, lengths, reverse)
        ys.append(y)
        finals.append(final)
    y = np.stack(ys, axis=1)  # [seq, directions, batch, hidden]
    states = [np.stack([f[k] for f in finals]) for k in range(len(initial_states))]
    if layout == 1:
        y = y.transpose(2, 0, 1, 3)
        states = [s.swapaxes(0, 1) for s in states]
    return tuple(a.astype(out_dtype) for a in (y, *states))


def _hidden_size(r: np.ndarray, attrs: dict) -> dict:
    """The attributes with `hidden_size` filled in from R when the node leaves it out."""
    return {**attrs, "hidden_size": attrs["hidden_size"] or r.shape[2]}


def _biases(b, d: int, gates: int, hidden: int, work) -> tuple[list, list]:
    """Direction d's input and recurrence biases, one [hidden] vector per gate."""
    if b is None:
        zeros = np.zeros(hidden, work)
        return [zeros] * gates, [zeros] * gates
    blocks = np.split(b[d].astype(work), 2 * gates)
    return blocks[:gates], blocks[gates:]


# --- the ops ----------------------------------------------------------------------------


@op("RNN", inputs=_inputs(RNN_FAMILY), outputs=_outputs(RNN_FAMILY),
    infer=_infer_recurrent(RNN_FAMILY), attrs=_attrs(RNN_FAMILY))
def rnn(x, w, r, b=None, sequence_lens=None, initial_h=None, **attrs):
    """Simple RNN: Ht = f(Xt Wi^T + Ht-1 Ri^T + Wbi + Rbi), f = Tanh by default."""
    attrs = _hidden_size(r, attrs)
    work, clip = work_dtype(x.dtype), _clipper(attrs["clip"])

    def make_cell(d: int, functions: list[Function]) -> Cell:
        (f,) = functions
        w_i, r_i = w[d].astype(work), r[d].astype(work)
        (wb_i,), (rb_i,) = _biases(b, d, 1, attrs["hidden_size"], work)

        def cell(x_t, h):
            return (f(clip(x_t @ w_i.T + h @ r_i.T + wb_i + rb_i)),)

        return cell

    return _run_recurrent(RNN_FAMILY, x, sequence_lens, [initial_h], attrs, make_cell)


@op("GRU", inputs=_inputs(GRU_FAMILY), outputs=_outputs(GRU_FAMILY),
    infer=_infer_recurrent(GRU_FAMILY), attrs=_attrs(GRU_FAMILY))
def gru(x, w, r, b=None, sequence_lens=None, initial_h=None, **attrs):
    """GRU with gates z (update), r (reset), h (hidden), f = Sigmoid and g = Tanh by default:

        zt = f(Xt Wz^T + Ht-1 Rz^T + Wbz + Rbz)
        rt = f(Xt Wr^T + Ht-1 Rr^T + Wbr + Rbr)
        ht = g(Xt Wh^T + (rt * Ht-1) Rh^T + Rbh + Wbh)      linear_before_reset = 0
        ht = g(Xt Wh^T + rt * (Ht-1 Rh^T + Rbh) + Wbh)      linear_before_reset = 1
        Ht = (1 - zt) * ht + zt * Ht-1
    """
    attrs = _hidden_size(r, attrs)
    work, clip = work_dtype(x.dtype), _clipper(attrs["clip"])
    linear_before_reset = bool(attrs["linear_before_reset"])

    def make_cell(d: int, functions: list[Function]) -> Cell:
        f, g = functions
        w_z, w_r, w_h = np.split(w[d].astype(work), 3)
        r_z, r_r, r_h = np.split(r[d].astype(work), 3)
        (wb_z, wb_r, wb_h), (rb_z, rb_r, rb_h) = _biases(b, d, 3, attrs["hidden_size"], work)

        def cell(x_t, h):
            z = f(clip(x_t @ w_z.T + h @ r_z.T + wb_z + rb_z))
            reset = f(clip(x_t @ w_r.T + h @ r_r.T + wb_r + rb_r))
            if linear_before_reset:
                candidate = g(clip(x_t @ w_h.T + reset * (h @ r_h.T + rb_h) + wb_h))
            else:
                candidate = g(clip(x_t @ w_h.T + (reset * h) @ r_h.T + rb_h + wb_h))
            return ((1 - z) * candidate + z * h,)

        return cell

    return _run_recurrent(GRU_FAMILY, x, sequence_lens, [initial_h], attrs, make_cell)


@op("LSTM", inputs=_inputs(LSTM_FAMILY), outputs=_outputs(LSTM_FAMILY),
    infer=_infer_recurrent(LSTM_FAMILY), attrs=_attrs(LSTM_FAMILY))
def lstm(x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None,
         **attrs):
    """LSTM with gates i, o, f, c and peepholes P[iof]; f = Sigmoid, g = h = Tanh by default:

        it = f(Xt Wi^T + Ht-1 Ri^T + Pi * Ct-1 + Wbi + Rbi)
        ft = f(Xt Wf^T + Ht-1 Rf^T + Pf * Ct-1 + Wbf + Rbf)     (1 - it with input_forget)
        ct = g(Xt Wc^T + Ht-1 Rc^T + Wbc + Rbc)
        Ct = ft * Ct-1 + it * ct
        ot = f(Xt Wo^T + Ht-1 Ro^T + Po * Ct + Wbo + Rbo)
        Ht = ot * h(Ct)
    """
    attrs = _hidden_size(r, attrs)
    hidden = attrs["hidden_size"]
    work, clip = work_dtype(x.dtype), _clipper(attrs["clip"])
    input_forget = bool(attrs["input_forget"])

    def make_cell(d: int, functions: list[Function]) -> Cell:
        f, g, h_fn = functions
        w_i, w_o, w_f, w_c = np.split(w[d].astype(work), 4)
        r_i, r_o, r_f, r_c = np.split(r[d].astype(work), 4)
        (wb_i, wb_o, wb_f, wb_c), (rb_i, rb_o, rb_f, rb_c) = _biases(b, d, 4, hidden, work)
        peepholes = np.zeros(3 * hidden, work) if p is None else p[d].astype(work)
        p_i, p_o, p_f = np.split(peepholes, 3)

        def cell(x_t, h, c):
            i = f(clip(x_t @ w_i.T + h @ r_i.T + p_i * c + wb_i + rb_i))
            if input_forget:  # the input and forget gates are coupled
                forget = 1 - i
            else:
                forget = f(clip(x_t @ w_f.T + h @ r_f.T + p_f * c + wb_f + rb_f))
            candidate = g(clip(x_t @ w_c.T + h @ r_c.T + wb_c + rb_c))
            c = forget * c + i * candidate
            o = f(clip(x_t @ w_o.T + h @ r_o.T + p_o * c + wb_o + rb_o))
            return o * h_fn(c), c

        return cell

    return _run_recurrent(LSTM_FAMILY, x, sequence_lens, [initial_h, initial_c], attrs,
                          make_cell)
