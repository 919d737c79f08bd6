"""A weight that only a prepacker reads is freed while it is packed (issue 15, memory):
ge_hub.kernels.consumed and the packed linear kernel's packer.

Packing a constant into a kernel's panels writes a second array as large as the first;
emission names the constants a node reads for the last time that nothing else holds, and
the packer drops the pages of the rows it has copied, so that the peak is about one copy
of the largest weight, not two. A graph the caller holds is never touched."""

from __future__ import annotations

import ctypes
import mmap

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.emit import _prepack
from ge_hub.ir import serialize
from ge_hub.kernels import consumed, nn_linear
from ge_hub.kernels.base import CKernel, Packed
from ge_hub.reference import evaluate
from ge_hub.registry import KernelSpec

PAGE = mmap.PAGESIZE


def test_only_an_array_nothing_else_holds_may_be_consumed():
    # 1 holder known: the local name
    owned = np.ones((64, 1024), np.float32)
    assert consumed.may_consume(owned, 1)
    other = owned  # noqa: F841 - a second holder
    assert not consumed.may_consume(owned, 1)
    del other
    base = np.ones((64, 1024), np.float32)
    view = base.reshape(1024, 64)
    assert not consumed.may_consume(view, 1)  # `base` still reads the same memory
    del base
    assert consumed.may_consume(view, 1)
    assert not consumed.may_consume(np.ones(16, np.float32), 1)  # under four pages
    mapped = np.frombuffer(mmap.mmap(-1, 1 << 20), np.float32).reshape(512, 512)
    assert consumed.may_consume(mapped, 1)
    sibling = np.frombuffer(mapped.base, np.float32)  # noqa: F841 - another view of the map
    assert not consumed.may_consume(mapped, 1)
    # memory another library owns (here ctypes'; a torch tensor's storage alike)
    foreign = np.ctypeslib.as_array((ctypes.c_float * (1 << 18))())
    assert not consumed.may_consume(foreign, 1)


def test_release_rows_drops_whole_pages_of_named_arrays_only():
    rows, row_floats = 64, 3 * PAGE // 4 + 5  # rows that straddle page edges
    array = np.arange(rows * row_floats, dtype=np.float32).reshape(rows, row_floats) + 1
    assert consumed.release_rows(array, 0, rows) == 0  # not named: nothing happens
    assert (array != 0).all()
    with consumed.consumable([array]), consumed.released_rows() as released:
        freed = consumed.release_rows(array, 10, 30)
    assert freed > 0 and freed % PAGE == 0 and id(array) in released
    flat = array.reshape(-1)
    start, stop = 10 * row_floats, 30 * row_floats
    zeros = np.flatnonzero(flat == 0)
    # only whole pages inside the rows read as zeros; the rows around them are intact
    assert zeros.size * 4 == freed and zeros.min() >= start and zeros.max() < stop
    assert (flat[:start] != 0).all() and (flat[stop:] != 0).all()


@pytest.mark.parametrize("k, n", [(37, 5), (300, 70), (513, 64), (257, 33), (600, 1000)])
@pytest.mark.parametrize("orientation", ["rows", "transposed"])
def test_packing_while_consuming_lays_out_the_same_panels(k, n, orientation):
    rng = np.random.default_rng(k * n)
    w = rng.standard_normal((k, n)).astype(np.float32)
    want = nn_linear.pack_weight(w)
    source = w.copy() if orientation == "rows" else np.ascontiguousarray(w.T)
    view = source if orientation == "rows" else source.T
    with consumed.consumable([source]), consumed.released_rows() as released:
        got = nn_linear.pack_weight(view, source=source)
    np.testing.assert_array_equal(got, want)
    if source.nbytes >= 8 * PAGE:
        assert id(source) in released


def linear_model(tmp_path, n=640, k=1100):
    """Gemm(x, W, c, transB=1) + Relu, as torch.onnx writes a Linear: W is [N, K], 2.7 MiB."""
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((n, k)) / k ** 0.5).astype(np.float32)
    c = rng.standard_normal(n).astype(np.float32)
    with es.GraphBuilder("linear") as gb:
        x = es.input("x", "float32", [2, k])
        gb.output(es.relu(es.gemm(x, es.const(w), es.const(c), transB=1)), "y")
    path = tmp_path / "linear.gehub"
    serialize.save(gb.graph, path)
    feeds = {"x": rng.standard_normal((2, k)).astype(np.float32)}
    return path, gb.graph, feeds


@pytest.fixture
def releases(monkeypatch):
    """Bytes released per call of release_rows during the test."""
    freed: list[int] = []
    release = consumed.release_rows

    def counting(array, begin, end):
        freed.append(release(array, begin, end))
        return freed[-1]

    monkeypatch.setattr(consumed, "release_rows", counting)
    return freed


def test_compiled_from_a_file_the_weight_is_released_as_it_is_packed(tmp_path, releases):
    path, graph, feeds = linear_model(tmp_path)
    model = ge_hub.compile(path)
    (step,) = model.plan.steps
    assert step.kernel == "ge_nn_gemm_packed_f32" or "packed" in step.kernel
    weight_bytes = 640 * 1100 * 4
    # all of it but the partial pages at its two ends
    assert weight_bytes - 2 * PAGE <= sum(releases) <= weight_bytes
    np.testing.assert_allclose(model.run(feeds)[0], evaluate(graph, feeds)[0],
                               rtol=1e-4, atol=1e-4)


def test_a_graph_the_caller_holds_is_never_released(tmp_path, releases):
    _, graph, feeds = linear_model(tmp_path)
    weights = {v.name: v.const.copy() for v in graph.constants}
    model = ge_hub.compile(graph)
    assert sum(releases) == 0
    for v in graph.constants:
        np.testing.assert_array_equal(v.const, weights[v.name])
    np.testing.assert_allclose(model.run(feeds)[0], evaluate(graph, feeds)[0],
                               rtol=1e-4, atol=1e-4)


def test_a_prepacker_that_frees_an_input_it_keeps_is_refused():
    w = np.ones((64, 1024), np.float32)
    with es.GraphBuilder("g") as gb:
        gb.output(es.matmul(es.input("x", "float32", [1, 64]), es.const(w)), "y")
    (node,) = gb.graph.nodes

    def frees_but_keeps(node, input_types, output_types):
        consumed.release_rows(node.inputs[1].const, 0, 64)
        return {}

    kernel = KernelSpec(op="MatMul", name="frees_but_keeps",
                        impl=CKernel("ge_nn_matmul_f32", pack=lambda *a: Packed(b""),
                                     prepack=frees_but_keeps))
    with consumed.consumable([node.inputs[1].const]), \
            pytest.raises(RuntimeError, match="freed input 1 .* did not replace it"):
        _prepack(kernel, node)
