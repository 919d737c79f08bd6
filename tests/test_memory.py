"""The memory planner: views, in-place reuse, best-fit placement, and its three numbers."""

from __future__ import annotations

import numpy as np
import pytest

from ge_hub import es
from ge_hub.compiler import optimize
from ge_hub.emit import emit_plan
from ge_hub.memory import plan_memory
from ge_hub.plan import Storage

UNARY_INPLACE = ((0, 0),)


def planned(graph, shapes, inplace_ops=("Relu", "Sigmoid", "Add", "Mul", "Tanh"),
            disable_passes=()):
    graph = optimize(graph, shapes, {"verify": True, "disable_passes": list(disable_passes)})
    inplace = {id(n): UNARY_INPLACE for n in graph.nodes if n.op in inplace_ops}
    return graph, plan_memory(graph, {}, inplace)


def no_overlap_between_live_buffers(memory):
    buffers = memory.buffers
    for i, a in enumerate(buffers):
        assert a.offset % 64 == 0
        assert a.offset + a.nbytes <= memory.stats.arena_bytes
        for b in buffers[i + 1:]:
            if a.start <= b.end and b.start <= a.end:
                assert a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset, (
                    f"live buffers overlap: {a} and {b}")


def test_views_share_their_input_buffer():
    with es.GraphBuilder("views") as gb:
        x = es.input("x", "float32", [4, 6])
        a = es.relu(x)
        b = es.reshape(a, np.array([24], np.int64))
        c = es.unsqueeze(b, np.array([0], np.int64))
        gb.output(es.sigmoid(c), "y")
    # simplify would merge the Reshape and the Unsqueeze: this tests a chain of views.
    graph, memory = planned(gb.graph, {"x": [4, 6]}, inplace_ops=(),
                            disable_passes=["simplify"])
    relu, reshape, unsqueeze = graph.nodes[0], graph.nodes[1], graph.nodes[2]
    assert memory.location(reshape.outputs[0]) is memory.location(relu.outputs[0])
    assert memory.location(unsqueeze.outputs[0]) is memory.location(relu.outputs[0])
    assert len(memory.buffers) == 1
    assert memory.stats.naive_bytes == 3 * 128  # 96 bytes each, aligned to 128


def test_inplace_chain_uses_one_buffer():
    with es.GraphBuilder("chain") as gb:
        x = es.input("x", "float32", [3, 5])
        y = x
        for _ in range(6):
            y = es.tanh(es.relu(y))
        gb.output(es.sigmoid(y), "y")
    # (fuse_elementwise off: the in-place planning of the plain ops is under test)
    graph, memory = planned(gb.graph, {"x": [3, 5]}, disable_passes=["fuse_elementwise"])
    assert len(memory.buffers) == 1  # the first relu's; the rest write in place
    assert memory.stats.arena_bytes == memory.stats.lower_bound_bytes == 64
    assert memory.stats.naive_bytes == 12 * 64


def test_no_inplace_into_a_value_read_later():
    with es.GraphBuilder("diamond") as gb:
        x = es.input("x", "float32", [8])
        a = es.relu(x)
        b = es.sigmoid(a)  # must not overwrite a: Add reads it afterwards
        gb.output(a + b, "y")
    graph, memory = planned(gb.graph, {"x": [8]}, disable_passes=["fuse_elementwise"])
    relu, sigmoid = graph.nodes[0], graph.nodes[1]
    assert memory.location(sigmoid.outputs[0]).buffer is not memory.location(relu.outputs[0]).buffer


def test_no_inplace_into_graph_inputs_or_constants():
    with es.GraphBuilder("inputs") as gb:
        x = es.input("x", "float32", [8])
        c = es.const(np.arange(8, dtype=np.float32))
        gb.output(es.relu(x) * es.relu(c + x), "y")
    graph, memory = planned(gb.graph, {"x": [8]})
    for node in graph.nodes:
        for value in node.outputs:
            assert memory.location(value).storage in (Storage.ARENA, Storage.OUTPUT)


def test_outputs_written_directly_or_copied():
    with es.GraphBuilder("outs") as gb:
        x = es.input("x", "float32", [2, 3])
        a = es.relu(x)
        gb.output(a, "a")
        gb.output(es.reshape(a, np.array([6], np.int64)), "flat")
        gb.output(x, "x_again")
    plan = emit_plan(optimize(gb.graph, {"x": [2, 3]}))
    a_tensor = plan.tensors[plan.outputs[0]]
    assert a_tensor.storage is Storage.OUTPUT and a_tensor.index == 0
    copies = [s for s in plan.steps if s.node.startswith("output:")]
    assert len(copies) == 2  # the view of an output and the input itself
    for j in (1, 2):
        spec = plan.tensors[plan.outputs[j]]
        assert spec.storage is Storage.OUTPUT and spec.index == j


def mlp(batch=4):
    rng = np.random.default_rng(0)
    with es.GraphBuilder("mlp") as gb:
        x = es.input("x", "float32", ["N", 64])
        h = x
        for width in (128, 128, 32):
            w = rng.standard_normal((h.shape[1], width)).astype(np.float32)
            h = es.relu(h @ w + rng.standard_normal(width).astype(np.float32))
        gb.output(es.softmax(h), "y")
    return gb.graph


def cnn():
    rng = np.random.default_rng(1)

    def conv_bn_relu(x, cin, cout, stride):
        w = rng.standard_normal((cout, cin, 3, 3)).astype(np.float32)
        y = es.conv(x, w, pads=[1, 1, 1, 1], strides=[stride, stride])
        scale, bias, mean = (rng.standard_normal(cout).astype(np.float32) for _ in range(3))
        var = rng.uniform(0.5, 1.5, cout).astype(np.float32)
        return es.relu(es.batch_normalization(y, scale, bias, mean, var))

    with es.GraphBuilder("cnn") as gb:
        x = es.input("x", "float32", ["N", 3, 32, 32])
        y = conv_bn_relu(x, 3, 16, 1)
        y = conv_bn_relu(y, 16, 32, 2)
        y = conv_bn_relu(y, 32, 32, 1) + y
        y = es.global_average_pool(y)
        y = es.flatten(y)
        gb.output(y @ rng.standard_normal((32, 10)).astype(np.float32), "logits")
    return gb.graph


@pytest.mark.parametrize("build, shapes", [
    (mlp, {"x": [4, 64]}),
    (cnn, {"x": [2, 3, 32, 32]}),
])
def test_arena_close_to_lower_bound(build, shapes):
    graph, memory = planned(build(), shapes)
    stats = memory.stats
    assert stats.lower_bound_bytes <= stats.arena_bytes <= 1.05 * stats.lower_bound_bytes
    assert stats.arena_bytes < stats.naive_bytes
    no_overlap_between_live_buffers(memory)


@pytest.mark.parametrize("seed", range(20))
def test_random_graphs_never_overlap_live_buffers(seed):
    rng = np.random.default_rng(seed)
    with es.GraphBuilder("random") as gb:
        x = es.input("x", "float32", [int(rng.integers(1, 9)), 16])
        pool = [x]
        for _ in range(int(rng.integers(5, 30))):
            kind = rng.integers(0, 4)
            a = pool[int(rng.integers(0, len(pool)))]
            if kind == 0:
                pool.append(es.relu(a))
            elif kind == 1:
                same = [t for t in pool if t.shape == a.shape]
                pool.append(a + same[int(rng.integers(0, len(same)))])
            elif kind == 2:
                pool.append(es.reshape(a, np.array([-1, 4], np.int64)) if a.shape[-1] == 16
                            else es.sigmoid(a))
            else:
                pool.append(es.concat(a, a, axis=0) if a.shape[0] < 64 else es.tanh(a))
        gb.output(pool[-1], "y")
        gb.output(pool[len(pool) // 2], "mid")
    shape = list(gb.graph.inputs[0].type.shape)
    graph, memory = planned(gb.graph, {"x": shape})
    no_overlap_between_live_buffers(memory)
    assert memory.stats.arena_bytes >= memory.stats.lower_bound_bytes


def resnet_like():
    """ResNet-18's layers at 32x32: stem, four stages of two basic blocks (64-512 channels).

    At this size, size-ordered best fit alone lands 7% above the lower bound."""
    rng = np.random.default_rng(3)

    def conv(x, cin, cout, k, stride, pad):
        w = (rng.standard_normal((cout, cin, k, k)) * 0.05).astype(np.float32)
        return es.conv(x, w, strides=[stride, stride], pads=[pad] * 4)

    def block(x, cin, cout, stride):
        y = es.relu(conv(x, cin, cout, 3, stride, 1))
        y = conv(y, cout, cout, 3, 1, 1)
        shortcut = conv(x, cin, cout, 1, stride, 0) if stride != 1 or cin != cout else x
        return es.relu(y + shortcut)

    with es.GraphBuilder("resnet_like") as gb:
        x = es.input("x", "float32", ["N", 3, 32, 32])
        y = es.relu(conv(x, 3, 64, 7, 2, 3))
        y = es.max_pool(y, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
        cin = 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            y = block(block(y, cin, cout, stride), cout, cout, 1)
            cin = cout
        gb.output(es.flatten(es.global_average_pool(y)), "features")
    return gb.graph


def test_resnet_like_arena_reaches_the_lower_bound():
    import ge_hub

    graph = resnet_like()
    for batch in (1, 4):
        model = ge_hub.compile(graph, input_shapes={"x": [batch, 3, 32, 32]})
        stats = model.summary()
        assert stats["arena_bytes"] <= 1.05 * stats["lower_bound_bytes"]
        assert stats["arena_bytes"] >= stats["lower_bound_bytes"]
