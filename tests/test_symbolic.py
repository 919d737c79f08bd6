"""Symbolic dims (`ge_hub.ir.symbolic`): one canonical form whatever the order of the
arithmetic, simplification of what is exact, evaluation and substitution, printing, the
stored form and the text form files had before it."""

from __future__ import annotations

import copy
import json
import pickle

import numpy as np
import pytest
from test_ir_serialize import edited, split

import ge_hub
from ge_hub import es
from ge_hub.errors import SerializationError
from ge_hub.ir import Graph, Sym, TensorType
from ge_hub.ir import symbolic as sy
from ge_hub.ir.serialize import dumps, loads
from ge_hub.ir.types import dim_add, dim_floordiv, dim_mul, dim_prod, dim_sub
from ge_hub.offline import open_file

N, C, H, W = Sym("N"), Sym("C"), Sym("H"), Sym("W")


# -- canonical form ------------------------------------------------------------------------


def test_products_and_sums_are_equal_in_any_order():
    assert N * C == C * N == dim_mul(C, N)
    assert hash(N * C) == hash(C * N) and str(N * C) == str(C * N) == "C*N"
    assert dim_prod([N, 3, C, H]) == dim_prod([H, C, N, 3]) == 3 * N * C * H
    assert N + C + 1 == 1 + C + N == dim_add(dim_add(1, C), N)
    assert (N + 1) * 2 == 2 + 2 * N == N + N + 2
    assert (N + C) * H == N * H + C * H  # products of sums are multiplied out
    assert N * (C * H) == (N * C) * H
    assert len({N * C, C * N, dim_mul(N, C)}) == 1


def test_results_that_are_constant_are_ints():
    for dim in (N - N, (N + 1) - N, (N * C) // (C * N), (2 * N) // N, (3 * N) % N, N % 1):
        assert type(dim) is int
    assert (N + 1) - N == 1 and (2 * N) // N == 2 and (3 * N) % N == 0
    assert dim_mul(N, 0) == 0 and dim_sub(N + 3, N) == 3
    assert dim_floordiv(0, N) == 0 and dim_floordiv(N, 1) == N
    assert dim_mul(3, 4) == 12 and dim_floordiv(7, 2) == 3  # ints stay plain arithmetic


def test_ints_and_syms_never_compare_equal():
    assert N != 1 and 1 != N and N != "N"
    assert N == Sym("N") and N != Sym.named("n")


# -- simplification -----------------------------------------------------------------------


def test_floor_division_and_modulo_simplify_what_is_exact():
    assert (4 * N + 2) // 2 == 2 * N + 1
    assert (2 * N + 1) // 2 == N  # floor((2N + 1) / 2) is N for every integer N
    assert (6 * N + 1) % 3 == 1
    assert (6 * N * C) // (3 * C) == 2 * N
    assert (N * C * H) // C == N * H
    assert (N + C) // (N + C) == 1
    # What is not exact stays one atom, simplified inside.
    half = (H - 1) // 2
    assert str(half) == "(H-1)//2" and half.symbols == {"H"}
    assert (H + 3 - 4) // 2 == half
    assert str(half + 1) == "(H-1)//2+1"
    assert str(2 * half) == "2*((H-1)//2)"
    assert str((3 * C * N) // 2) == "(3*C*N)//2"
    assert str(N % C) == "N%C" and str((N + 1) % 4) == "(N+1)%4"


def test_division_by_zero_is_refused():
    with pytest.raises(ZeroDivisionError):
        sy.floordiv(N, 0)
    with pytest.raises(ZeroDivisionError):
        sy.mod(N, 0)


# -- text ------------------------------------------------------------------------------


def test_text_parses_to_the_same_expression():
    assert Sym("3*N") == 3 * N
    assert Sym("N*C") == Sym("C * N") == N * C
    assert Sym("(3*C*N)/2") == Sym("(3*C*N)//2") == (3 * C * N) // 2
    assert Sym("C/4") == C // 4 and Sym("H%2") == H % 2
    assert Sym("(N*C)+1") == N * C + 1 and Sym("-N+2*N") == N
    assert Sym("s0") == Sym.named("s0") and Sym("input.0") == Sym.named("input.0")


def test_text_that_is_not_an_expression_is_one_name():
    for text in ("batch size", "/model/Add.dim3", "a((b", "x+"):
        dim = Sym(text)
        assert dim.is_symbol and dim.name == text and str(dim) == text


def test_named_never_parses():
    seq = Sym.named("seq + 1")  # an ONNX dim_param as HuggingFace exports write them
    assert seq.is_symbol and seq.name == "seq + 1" and seq.symbols == {"seq + 1"}
    assert seq != Sym("seq") + 1
    assert str(seq) == "seq + 1" and str(2 * seq) == "2*(seq + 1)"
    assert repr(seq) == "Sym.named('seq + 1')" and repr(N * C) == "Sym('C*N')"


@pytest.mark.parametrize("bad", ["", "  ", "3", "N-N", None, 3])
def test_a_sym_is_not_a_constant_or_empty(bad):
    with pytest.raises(ValueError):
        Sym(bad)


def test_names_and_terms():
    assert N.is_symbol and N.name == "N"
    assert not (2 * N).is_symbol and (N * C).name == "C*N"  # an expression's name: its text
    assert (3 * C * N).term == (3, (C, N)) and (N + 1).term is None
    assert (N * C + H // 2).symbols == {"N", "C", "H"}
    assert TensorType("float32", [N * C, 3, H + 1]).symbols == {"N", "C", "H"}


# -- values ------------------------------------------------------------------------------


def test_evaluate_and_substitute():
    out = (H - 1) // 2 + 1
    assert out.evaluate({"H": 7}) == 4 and sy.evaluate(out, {"H": 8}) == 4
    assert sy.evaluate(5, {}) == 5
    assert (N * C + N % 3).evaluate({"N": 5, "C": 2}) == 12
    assert (N * C).subs({"N": 2}) == 2 * C
    assert (N * C).subs({"N": H + 1}) == H * C + C
    assert (N * C).subs({"N": 2, "C": 3}) == 6
    assert Sym.named("seq + 1").evaluate({"seq + 1": 9}) == 9
    with pytest.raises(KeyError, match="needs a value for C"):
        (N * C).evaluate({"N": 2})


def test_numpy_ints_and_bools():
    # NumPy ints are ints to the arithmetic and to TensorType; a bool is not a dim.
    assert TensorType("float32", [np.int64(3), "N*2"]).shape == (3, 2 * N)
    assert N * np.int64(3) == 3 * N and sy.floordiv(2 * N, np.int32(2)) == N
    assert type(sy.add(np.int64(2), 3)) is int
    with pytest.raises(TypeError):
        sy.add(N, True)


def test_copies_and_pickles_keep_the_value():
    dim = (H - 1) // 2 + N * C
    assert copy.deepcopy(dim) == dim and copy.copy(dim) is dim
    assert pickle.loads(pickle.dumps(dim)) == dim


def test_size_and_nesting_limits():
    sums = [Sym(f"a{i}") + Sym(f"b{i}") for i in range(9)]
    with pytest.raises(ValueError, match="past the limit"):
        sy.prod(sums)  # 2**9 terms
    with pytest.raises(ValueError, match="deeper"):
        Sym("(" * 200 + "N" + ")" * 200)
    with pytest.raises(ValueError, match="deeper"):
        Sym("-" * 200 + "N")


# -- stored form ---------------------------------------------------------------------------

DIMS = [3, N, Sym.named("seq + 1"), Sym.named("7"), N * C, 3 * N, N + 1, -N + 2 * C,
        (H - 1) // 2 + 1, (N + 1) % 4, N * ((H - 1) // 2), C // N, 2 * Sym.named("a/b")]


@pytest.mark.parametrize("dim", DIMS, ids=str)
def test_json_round_trip(dim):
    data = sy.to_json(dim)
    assert json.loads(json.dumps(data)) == data
    back = sy.from_json(data)
    assert back == dim and type(back) is type(dim)


def test_json_form():
    assert sy.to_json(N) == "N" and sy.to_json(4) == 4
    assert sy.to_json(Sym.named("seq + 1")) == {"sym": "seq + 1"}
    assert sy.to_json(3 * N) == {"mul": [3, "N"]}
    assert sy.to_json(N + 1) == {"add": ["N", 1]}
    assert sy.to_json((H - 1) // 2) == {"floordiv": [{"add": ["H", -1]}, 2]}


def test_json_reads_the_text_form_of_older_files():
    # Before dims were structured, files held the expression text ge-hub printed.
    assert sy.from_json("N*C") == N * C
    assert sy.from_json("(N*C)+1") == N * C + 1
    assert sy.from_json("(H-3)/2") == (H - 3) // 2
    assert sy.from_json("3+C") == C + 3
    # That text never held spaces: such a string is one symbol's name.
    assert sy.from_json("seq + 1") == Sym.named("seq + 1")
    assert sy.from_json("/model/Add.dim3") == Sym.named("/model/Add.dim3")


@pytest.mark.parametrize("bad", [-1, True, 1.5, None, "", [], {}, {"mul": []}, {"sym": ""},
                                 {"floordiv": [1]}, {"floordiv": ["N", 0]}, {"pow": ["N", 2]},
                                 {"add": ["N"], "mul": ["C"]}, {"add": [None]}])
def test_json_malformed_is_a_value_error(bad):
    with pytest.raises(ValueError):
        sy.from_json(bad)


def test_json_nesting_is_bounded():
    data: object = "N"
    for _ in range(sy.MAX_DEPTH + 2):
        data = {"add": [data, 1]}
    with pytest.raises(ValueError, match="deeper"):
        sy.from_json(data)


# -- files --------------------------------------------------------------------------------


def _graph_with_expressions() -> Graph:
    g = Graph("dims")
    x = g.add_input("x", TensorType("float32", [N, C, Sym.named("seq + 1")]))
    y = g.add_input("y", TensorType("float32", [N * C, (H - 1) // 2 + 1, 2 * N]))
    g.set_outputs([x, y])
    return g


def test_gehub_round_trip_keeps_expressions():
    g = _graph_with_expressions()
    data = dumps(g)
    _, document, _ = split(data)
    shapes = [v["type"]["shape"] for v in document["graph"]["inputs"]]
    assert shapes[0] == ["N", "C", {"sym": "seq + 1"}]  # plain names as before
    assert shapes[1][0] == {"mul": ["C", "N"]}
    loaded = loads(data)
    assert [v.type for v in loaded.inputs] == [v.type for v in g.inputs]


def test_gehub_reads_the_dim_text_older_files_hold():
    g = Graph("old")
    g.add_input("x", TensorType("float32", [N, C]))
    g.set_outputs(g.inputs)

    def old_text(document):  # what the writer wrote before: the printed expression
        document["graph"]["inputs"][0]["type"]["shape"] = ["N*C", "(H-3)/2", "3+C", "b c"]

    loaded = loads(edited(dumps(g), old_text))
    assert loaded.inputs[0].type.shape == (N * C, (H - 3) // 2, C + 3, Sym.named("b c"))


def test_gehub_malformed_dim_is_a_serialization_error():
    g = Graph("bad")
    g.add_input("x", TensorType("float32", [N]))
    g.set_outputs(g.inputs)

    def bad(document):
        document["graph"]["inputs"][0]["type"]["shape"] = [{"floordiv": ["N", 0]}]

    with pytest.raises(SerializationError, match="shape"):
        loads(edited(dumps(g), bad))


@pytest.fixture(scope="module")
def ghm(tmp_path_factory):
    """A .ghm whose output has an expression dim (2*N) in its interface."""
    with es.GraphBuilder("flat") as gb:
        x = es.input("x", "float32", ["N", 2, 3])
        gb.output(es.relu(es.flatten(x, axis=2)), "y")
    model = ge_hub.compile(gb.graph, input_shapes={"x": (4, 2, 3)})
    path = tmp_path_factory.mktemp("ghm") / "flat.ghm"
    model.save(path)
    return path


def test_ghm_stores_and_reads_expression_dims(ghm):
    file = open_file(ghm)
    assert file.meta["outputs"][0]["shape"] == [{"mul": [2, "N"]}, 3]
    assert file.interface_graph().outputs[0].type.shape == (2 * N, 3)
    x = np.arange(24, dtype=np.float32).reshape(4, 2, 3) - 10
    (y,) = ge_hub.load_compiled(ghm).run([x])
    np.testing.assert_array_equal(y, np.maximum(x.reshape(8, 3), 0))


def test_ghm_reads_the_dim_text_older_files_hold(ghm, tmp_path):
    from test_offline_bad_files import edit_json

    def old_text(meta):
        meta["outputs"][0]["shape"] = ["2*N", 3]

    path = tmp_path / "old.ghm"
    path.write_bytes(edit_json(ghm.read_bytes(), "meta", old_text))
    assert open_file(path).interface_graph().outputs[0].type.shape == (2 * N, 3)
    x = np.ones((4, 2, 3), np.float32)
    (y,) = ge_hub.load_compiled(path).run([x])
    assert y.shape == (8, 3)
