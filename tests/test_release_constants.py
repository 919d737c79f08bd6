"""Constants a compiled model no longer reads are released (issue 15, memory).

A kernel that prepacks a constant (Conv's packed GEMM panels and Winograd transforms)
makes the original unread: the plan holds only what its tensors read, emission lets
go of the optimized graph's original once every reader has its prepacked form, and a
model compiled from a file does not keep its graph (the file gives it again). What needs
the originals later still works: planning another shape, saving a portable `.ghm`.
"""

from __future__ import annotations

import gc
import os
import weakref

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub import frontend as frontend_module
from ge_hub.errors import GeHubError
from ge_hub.ir import serialize
from ge_hub.kernels import conv as conv_kernels
from ge_hub.plan import Storage
from ge_hub.reference import evaluate


def conv_net(batch="N", seed=0):
    """A Winograd conv (16 -> 16 channels, 3x3 on 12x12), a packed 1x1 conv, and a MatMul
    with a constant weight (packed too)."""
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32)
    b1 = rng.standard_normal(16).astype(np.float32)
    w2 = (rng.standard_normal((8, 16, 1, 1)) * 0.2).astype(np.float32)
    m = rng.standard_normal((12, 5)).astype(np.float32)
    with es.GraphBuilder("convnet") as gb:
        x = es.input("x", "float32", [batch, 16, 12, 12])
        y = es.relu(es.conv(x, es.const(w1), es.const(b1), pads=[1, 1, 1, 1]))
        y = es.conv(y, es.const(w2))
        gb.output(y @ es.const(m), "y")
    return gb.graph


def inputs(batch, seed=1):
    return {"x": np.random.default_rng(seed).standard_normal((batch, 16, 12, 12))
            .astype(np.float32)}


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "convnet.gehub"
    serialize.save(conv_net(), path)
    return path


@pytest.fixture
def watched(monkeypatch):
    """Weak references to every constant array of each graph `ge_hub.load` reads."""
    refs: list[weakref.ref] = []
    load = frontend_module.load

    def watching(*args, **kwargs):
        graph = load(*args, **kwargs)
        refs.extend(weakref.ref(v.const) for v in graph.constants)
        return graph

    monkeypatch.setattr(frontend_module, "load", watching)
    return refs


def only_plan_constants_alive(refs, model) -> bool:
    """Every watched array is freed, or is one the model's plans read as it is; and the
    ones that were prepacked (the conv and MatMul weights: all but the bias) are freed."""
    gc.collect()
    held = [c for _, plan, _ in model.plans() for c in plan.constants]
    alive = [ref() for ref in refs if ref() is not None]
    return (all(any(a is c for c in held) for a in alive)
            and all(a.ndim == 1 for a in alive))


def constant_readers(plan):
    return {t.index: t for t in plan.tensors if t.storage is Storage.CONSTANT}


def test_the_plan_holds_only_the_constants_its_tensors_read():
    model = ge_hub.compile(conv_net(1))
    plan = model.plan
    read = constant_readers(plan)
    assert sorted(read) == list(range(len(plan.constants)))
    packed = {i: t for i, t in read.items() if ":packed:" in t.name}
    as_is = [plan.constants[i] for i in read if i not in packed]
    # both conv weights and the MatMul's only in their packed forms; the bias as it is
    assert len(packed) == 3 and [a.shape for a in as_is] == [(16,)]
    sizes = sorted(t.nbytes for t in packed.values())
    # Winograd: U (16 positions of a 16x16 matrix in panels of 12 rows), then one sign
    # byte per weight (for data holding inf or NaN), not a second copy of the weights;
    # the 1x1 conv: 8 rows in one panel of 12, by 16; the MatMul: 5 columns in one panel
    # of 32, by 12
    assert sizes == sorted([16 * 24 * 16 * 4 + 16 * 16 * 9, 12 * 16 * 4, 32 * 12 * 4])
    assert sum(c.nbytes for c in plan.constants) == sum(sizes) + 16 * 4
    np.testing.assert_allclose(model.run(inputs(1))[0],
                               evaluate(conv_net(1), inputs(1))[0], rtol=1e-4, atol=1e-4)


def test_emission_lets_go_of_an_original_only_prepacked_forms_read():
    from ge_hub.compiler import optimize
    from ge_hub.emit import emit_plan

    graph = conv_net(1)
    original = next(v for v in graph.constants if tuple(v.type.shape) == (16, 16, 3, 3)).const
    optimized = optimize(graph, {"x": [1, 16, 12, 12]})
    weight = next(v for v in optimized.constants if tuple(v.type.shape) == (16, 16, 3, 3))
    assert weight.const is original
    emit_plan(optimized)
    # the optimized graph keeps its type and a zero-byte stand-in; the caller's graph
    # and its array are untouched
    assert weight.const.shape == (16, 16, 3, 3) and weight.const.strides == (0, 0, 0, 0)
    assert next(v for v in graph.constants if tuple(v.type.shape) == (16, 16, 3, 3)).const \
        is original
    assert original.flags.owndata or original.base is not None


def test_compiled_from_a_file_the_original_weights_are_freed(saved, watched):
    model = ge_hub.compile(saved, input_shapes={"x": [2, 16, 12, 12]})
    assert len(watched) == 4 and only_plan_constants_alive(watched, model)
    expected = evaluate(conv_net(), inputs(2))[0]
    np.testing.assert_allclose(model.run(inputs(2))[0], expected, rtol=1e-4, atol=1e-4)


def test_a_loaded_graph_is_freed_once_its_holder_lets_go(saved, watched):
    graph = ge_hub.load(saved)
    model = ge_hub.compile(graph, input_shapes={"x": [1, 16, 12, 12]})
    first = model.run(inputs(1))[0]
    assert model.graph is graph  # held by the caller: used as it is, not read again
    del graph
    assert only_plan_constants_alive(watched, model)
    np.testing.assert_array_equal(model.run(inputs(1))[0], first)


def test_outputs_are_the_same_bit_for_bit_however_compiled(saved):
    in_memory = ge_hub.compile(conv_net(), input_shapes={"x": [3, 16, 12, 12]})
    from_file = ge_hub.compile(saved, input_shapes={"x": [3, 16, 12, 12]})
    np.testing.assert_array_equal(in_memory.run(inputs(3))[0], from_file.run(inputs(3))[0])


def test_another_shape_is_planned_from_the_file_and_released_again(saved, watched):
    model = ge_hub.compile(saved, input_shapes={"x": [1, 16, 12, 12]})
    model.run(inputs(1))
    got = model.run(inputs(4))[0]  # a new batch size: the graph is read from the file
    np.testing.assert_allclose(got, evaluate(conv_net(), inputs(4))[0], rtol=1e-4, atol=1e-4)
    assert model.summary()["cached_plans"] == 2
    assert len(watched) == 8 and only_plan_constants_alive(watched, model)


def test_a_portable_save_after_release_keeps_the_original_weights(saved, tmp_path, watched):
    model = ge_hub.compile(saved, input_shapes={"x": [2, 16, 12, 12]})
    expected = model.run(inputs(2))[0]
    ghm = tmp_path / "convnet.ghm"
    model.save(ghm)
    loaded = ge_hub.load_compiled(ghm)
    np.testing.assert_array_equal(loaded.run(inputs(2))[0], expected)
    # the stored graph holds the original weights: it plans a new shape, bit for bit as
    # a model compiled in memory
    fresh = ge_hub.compile(conv_net(), input_shapes={"x": [5, 16, 12, 12]})
    np.testing.assert_array_equal(loaded.run(inputs(5))[0], fresh.run(inputs(5))[0])
    original = {v.name: v.const for v in conv_net().constants}
    stored = {v.name: v.const for v in loaded.graph.constants}
    assert original.keys() == stored.keys()
    for name, array in original.items():
        np.testing.assert_array_equal(stored[name], array)
    assert only_plan_constants_alive(watched, model)


def test_a_changed_model_file_is_refused_rather_than_read(saved):
    model = ge_hub.compile(saved, input_shapes={"x": [1, 16, 12, 12]})
    serialize.save(conv_net(seed=7), saved)  # other weights at the same path
    stat = os.stat(saved)
    os.utime(saved, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    with pytest.raises(GeHubError, match="changed since it was compiled"):
        model.run(inputs(2))
    os.remove(saved)
    with pytest.raises(GeHubError, match="cannot read the model file"):
        model.run(inputs(3))
    model.run(inputs(1))  # the stored plan needs no file


def test_the_winograd_packing_matches_its_definition():
    """U = G g G^T per 4x4 position, in the packed GEMM's panels, then the packed
    weights (the fallback), written in place slice by slice."""
    rng = np.random.default_rng(5)
    groups, mg, cg = 2, 13, 17
    w = rng.standard_normal((groups, mg, cg, 3, 3)).astype(np.float32)
    u = conv_kernels._winograd_kernels(w)
    g = conv_kernels._WINOGRAD_G
    exact = np.einsum("ik,gmckl,jl->gijmc", g, w.astype(np.float64), g).astype(np.float32)
    panels = -(-mg // conv_kernels.PACK_MR)
    for xi in range(16):
        padded = np.zeros((groups, panels * conv_kernels.PACK_MR, cg), np.float32)
        padded[:, :mg] = exact.reshape(groups, 16, mg, cg)[:, xi]
        # one k slice (cg < PACK_KC): panel after panel, each (k, 12 rows)
        want = padded.reshape(groups, panels, conv_kernels.PACK_MR, cg) \
            .transpose(0, 1, 3, 2).reshape(groups, -1)
        np.testing.assert_array_equal(u[:, xi], want)


def test_a_file_holding_winograd_signs_says_so(saved, tmp_path, monkeypatch):
    """A ge-hub from before the sign layout (no winograd_signs among its layouts) plans
    such a file again from its graph, or refuses it, instead of reading the signs as the
    packed weights that used to follow U."""
    from tests.offline_layouts import check_older_ge_hub_plans_again

    model = ge_hub.compile(saved, input_shapes={"x": [1, 16, 12, 12]})
    check_older_ge_hub_plans_again(model, inputs(1), "winograd_signs", tmp_path, monkeypatch)
