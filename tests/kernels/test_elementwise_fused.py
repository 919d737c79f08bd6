"""ge_hub.FusedElementwise's C kernel (ge_elementwise_fused_f32) against the NumPy
reference of the unfused subgraph it replaces: graphs of plain elementwise ops are
compiled with `fuse_elementwise` on (one step, this kernel) and compared with the plain
ops' references (ge_hub.reference.evaluate of the unfused graph). Every op the program
takes, on random non-zero inputs with odd sizes; each way an input is read (same shape,
a single value, per channel, per row, a middle axis, a mix); tensors split over the pool;
NaN and inf; a diamond whose shared intermediate is computed once; the op on its own
and a malformed program refused."""

from __future__ import annotations

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.errors import GeHubError
from ge_hub.ir.dtypes import DType
from ge_hub.ops.norm import FUSED_DOMAIN
from ge_hub.reference import evaluate
from ge_hub.testing import assert_outputs_close, check_kernel

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

KERNEL = "ge_elementwise_fused_f32"
TOL = dict(rtol=1e-5, atol=1e-6)

# op -> a function of one or two es values (a second op, Mul by x itself or y, makes the
# group at least two nodes long)
UNARY = {
    "Neg": es.neg, "Abs": es.abs, "Relu": es.relu, "Sigmoid": es.sigmoid, "Tanh": es.tanh,
    "Exp": es.exp, "Log": lambda v: es.log(es.abs(v)), "Sqrt": lambda v: es.sqrt(es.abs(v)),
    "Reciprocal": es.reciprocal, "Erf": es.erf,
    "Clip": lambda v: es.clip(v, np.float32(-0.4), np.float32(0.7)),
    "ClipLow": lambda v: es.clip(v, np.float32(-0.4)),
    "LeakyRelu": lambda v: es.leaky_relu(v, alpha=0.13),
    "HardSigmoid": lambda v: es.hard_sigmoid(v, alpha=0.3, beta=0.45),
    "Pow2": lambda v: es.pow(v, np.float32(2.0)),
    "Pow3": lambda v: es.pow(v, np.float32(3.0)),
    "PowHalf": lambda v: es.pow(es.abs(v), np.float32(0.5)),
    "PowMinus1": lambda v: es.pow(v, np.float32(-1.0)),
}
BINARY = {"Add": es.add, "Sub": es.sub, "Mul": es.mul, "Div": es.div, "Max": es.max,
          "Min": es.min}


def nonzero(rng, shape):
    x = rng.uniform(0.1, 2.0, shape).astype(np.float32)
    return np.where(rng.random(shape) < 0.5, -x, x).astype(np.float32)


def compile_and_check(build, shapes, rng, *, specials=False, tol=TOL):
    """Build out = build(*inputs) from inputs of `shapes`; it must compile to one fused
    step whose result matches the plain ops' references."""
    with es.GraphBuilder("g") as gb:
        xs = [es.input(f"x{i}", "float32", list(s)) for i, s in enumerate(shapes)]
        es.output(build(*xs), "out")
    graph = gb.graph
    feeds = {f"x{i}": nonzero(rng, s) for i, s in enumerate(shapes)}
    if specials:
        flat = feeds["x0"].reshape(-1)
        flat[rng.choice(flat.size, 4, replace=False)] = [np.nan, np.inf, -np.inf, 0.0]
    model = ge_hub.compile(graph.copy())
    assert [s.kernel for s in model.plan.steps] == [KERNEL]
    got = model.run(feeds)
    want = evaluate(graph, feeds)
    assert_outputs_close(got, want, ["out"], **tol)
    return got[0], want[0]


@pytest.fixture
def rng():
    return np.random.default_rng(41)


@pytest.mark.parametrize("name", list(UNARY))
def test_each_unary_op(name, rng):
    compile_and_check(lambda x, y: es.add(UNARY[name](es.mul(x, y)), y), [(3, 37), (3, 37)],
                      rng)


@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("order", ["xy", "yx", "x_scalar", "scalar_x"])
def test_each_binary_op_with_tensors_and_scalars(name, order, rng):
    op = BINARY[name]
    c = np.float32(0.37)
    forms = {"xy": lambda x, y: op(es.neg(x), y), "yx": lambda x, y: op(y, es.neg(x)),
             "x_scalar": lambda x, y: es.add(op(es.neg(x), c), y),
             "scalar_x": lambda x, y: es.add(op(c, es.neg(x)), y)}
    compile_and_check(forms[order], [(5, 211), (5, 211)], rng)


# output shape, then the shapes of the other inputs
BROADCASTS = {
    "same": [(2, 3, 5, 7), (2, 3, 5, 7)],
    "scalar_input": [(2, 3, 5, 7), ()],
    "one_element": [(2, 3, 5, 7), (1, 1, 1, 1)],
    "per_channel_nchw": [(2, 3, 5, 7), (3, 1, 1)],
    "per_channel_rank4": [(2, 3, 5, 7), (1, 3, 1, 1)],
    "per_trailing_axis": [(2, 3, 5, 7), (7,)],
    "per_row": [(2, 3, 5, 7), (5, 1)],
    "middle_axes": [(2, 3, 5, 7), (3, 5, 1)],
    "batch_shared": [(2, 3, 5, 7), (3, 5, 7)],
    "mix": [(2, 3, 5, 7), (3, 1, 1), (7,), (), (2, 1, 5, 1)],
    "long_rows": [(3, 4133), (4133,)],
    "many_tiles_per_channel": [(2, 16, 40, 41), (16, 1, 1)],
    # tiles cut along per-channel blocks (FE_MIN_BLOCK = 64 elements or more): one value
    # per tile; one block split into three tiles; blocks too small, or another broadcast
    # in the mix, keep the gather
    "blocks_of_64": [(1, 9, 8, 8), (9, 1, 1), (1, 9, 1, 1)],
    "blocks_in_three_tiles": [(1, 3, 45, 47), (3, 1, 1), (1, 3, 1, 1)],
    "blocks_over_two_axes": [(2, 3, 10, 10), (2, 3, 1, 1), (3, 1, 1)],
    "blocks_below_minimum": [(2, 5, 7, 9), (5, 1, 1)],
    "blocks_and_per_row": [(1, 4, 9, 11), (4, 1, 1), (9, 1)],
}


@pytest.mark.parametrize("case", list(BROADCASTS))
def test_broadcast_patterns(case, rng):
    shapes = BROADCASTS[case]

    def build(x, *others):
        y = es.sigmoid(x)
        for i, o in enumerate(others):
            y = es.mul(y, o) if i % 2 else es.add(y, o)
        return es.tanh(y)

    compile_and_check(build, shapes, rng)


def test_split_over_the_pool_and_a_ragged_last_tile(rng):
    # 3 * 67 * 129 = 25929 elements: 26 tiles, the last one partial
    compile_and_check(lambda x, b: es.relu(es.add(es.mul(x, np.float32(1.5)), b)),
                      [(3, 67, 129), (129,)], rng)


def test_nan_and_inf_go_through_every_op(rng):
    for unary in UNARY.values():
        compile_and_check(lambda x, y, f=unary: es.add(f(es.add(x, y)), y),
                          [(4, 33), (4, 33)], rng, specials=True)
    for binary in BINARY.values():
        compile_and_check(lambda x, y, f=binary: es.neg(f(es.abs(x), y)), [(4, 33), (33,)],
                          rng, specials=True)


def test_nan_and_inf_with_per_channel_blocks(rng):
    """BatchNormalization lowered to Mul + Add, then Relu: per-channel operands read as one
    value per tile."""
    compile_and_check(lambda x, a, b: es.relu(es.add(es.mul(x, a), b)),
                      [(1, 6, 12, 13), (6, 1, 1), (6, 1, 1)], rng, specials=True)


def test_diamond_and_deep_tree(rng):
    def diamond(x, y):
        a = es.mul(x, y)
        return es.add(es.sigmoid(a), es.mul(es.tanh(a), a))

    compile_and_check(diamond, [(7, 131), (131,)], rng)

    def tree(x, y, z):
        terms = [es.exp(es.neg(es.abs(x))), es.relu(es.sub(y, x)), es.erf(es.mul(z, x)),
                 es.sqrt(es.abs(es.add(x, z)))]
        while len(terms) > 1:
            terms = [es.add(terms[i], terms[i + 1]) for i in range(0, len(terms), 2)]
        return es.div(terms[0], es.add(es.abs(x), np.float32(1.0)))

    compile_and_check(tree, [(3, 5, 97), (5, 1), (97,)], rng)


def test_gelu_like_chain_with_constants(rng):
    # x * 0.5 * (1 + erf(x * 0.7)): 0.7 keeps fuse_gelu away, so fuse_elementwise takes it
    compile_and_check(
        lambda x: es.mul(es.mul(x, np.float32(0.5)),
                         es.add(es.erf(es.mul(x, np.float32(0.7))), np.float32(1.0))),
        [(2, 9, 301)], rng)


def test_the_op_on_its_own_against_its_reference():
    # a hand-written program: r2 = x * y (y per channel), r3 = Clip(r2), out = r3 - r2
    from ge_hub.ir.types import TensorType
    from ge_hub.kernels.elementwise_fused import KERNELS

    types = [TensorType(DType.FLOAT32, (2, 3, 17)), TensorType(DType.FLOAT32, (3, 1))]
    check_kernel(KERNELS[0], types,
                 {"ops": ["Mul", "Clip", "Sub"], "program": [0, 1, 2, -1, 3, 2],
                  "params": [0.0, 0.0, -0.2, 0.3, 0.0, 0.0]})


@pytest.mark.parametrize("program, message", [
    ([0, 2], "reads register 2"),                 # a register not yet defined
    ([0, 1, 0, 0], "unary"),                       # Neg with a second register
])
def test_a_malformed_program_is_refused_naming_it(program, message):
    ops = ["Add"] if len(program) == 2 else ["Add", "Neg"]
    with pytest.raises(GeHubError, match=message), es.GraphBuilder("g"):
        x = es.input("x", "float32", [4])
        y = es.input("y", "float32", [4])
        es.op("FusedElementwise", x, y, domain=FUSED_DOMAIN, ops=ops, program=program,
              params=[0.0] * len(program))
