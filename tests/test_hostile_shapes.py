"""Hostile sizes in a model (issue 11): refused by name at compile time, or computed right.

A model file can declare a window stride of 2**63 - 1, a shape input of 2**40 elements or
a tensor of 2**62; none of it may crash the interpreter, eat memory without bound, or give
a silently wrong answer. The limits live in `ge_hub.ops.limits`. Each case here is the
reproduction of a fuzzing finding, built with ES (no ONNX needed); attributes a builder
would refuse are written into the IR node afterwards, as a model file would carry them.
"""

from __future__ import annotations

import dataclasses
import itertools
import struct

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.errors import GraphError, LimitError
from ge_hub.executor import Executor, KernelError
from ge_hub.ir.dtypes import DType
from ge_hub.ir.types import TensorType
from ge_hub.kernels import conv as conv_kernels
from ge_hub.kernels import pool as pool_kernels
from ge_hub.kernels.bounds import check_window, pack_checked
from ge_hub.ops import get_schema, limits
from ge_hub.ops.window import window as make_window


def one_op(op, x_shape, attrs=None, *, weights=None, dtype="float32"):
    """A graph of one node reading input `x` (and constant weights); returns the graph."""
    with es.GraphBuilder("g") as gb:
        args = [es.input("x", dtype, list(x_shape))]
        if weights is not None:
            args.append(es.const(weights))
        gb.output(es.op(op, *args, **dict(attrs or {})), "y")
    return gb.graph


def only_node(graph):
    (node,) = graph.nodes
    return node


def run_in_c(graph, x):
    model = ge_hub.compile(graph)
    assert model.summary()["fallback_steps"] == 0, model.summary()
    return model.run({"x": x})[0]


# -- window coordinates past int64 ------------------------------------------------------

HOSTILE_WINDOWS = [
    dict(pads=[2**63 - 1, 1], strides=[2**40]),  # the 154-byte file: segfaulted in run()
    dict(pads=[0, 2**62], strides=[2**61]),
    dict(pads=[0, 0], strides=[1], dilations=[2**62]),
]


@pytest.mark.parametrize("op", ["AveragePool", "MaxPool", "Conv"])
@pytest.mark.parametrize("hostile", HOSTILE_WINDOWS)
def test_window_coordinates_past_the_limit_are_refused_by_name(op, hostile):
    if op == "AveragePool" and "dilations" in hostile:  # no dilations: a kernel as wide
        hostile = dict(pads=[0, 2**61], kernel_shape=[2**61])
    weights = np.ones((1, 1, 1), np.float32) if op == "Conv" else None
    attrs = {} if op == "Conv" else {"kernel_shape": [1]}
    graph = one_op(op, (1, 1, 16), attrs, weights=weights)
    # as a model file carries them: no builder has checked these values
    node = only_node(graph)
    node.attrs.update({k: v for k, v in hostile.items() if v is not None})
    # the verifier re-raises inference's LimitError as a GraphError naming the graph
    with pytest.raises(GraphError, match=rf"{op} \(node {node.name!r}\): "
                       r"attributes? '(pads|strides|dilations|kernel_shape)'"
                       r".*ge_hub\.ops\.limits\.MAX_COORDINATE"):
        ge_hub.compile(graph)


def test_the_builder_refuses_the_segfaulting_pool_too():
    with pytest.raises(LimitError, match="attribute 'pads' along spatial axis 0"):
        one_op("AveragePool", (1, 1, 16), dict(kernel_shape=[1], pads=[2**63 - 1, 1],
                                                 strides=[2**40]))


@pytest.mark.parametrize("pack", [pool_kernels.pack_average_pool, pool_kernels.pack_max_pool])
def test_the_pool_packers_check_the_window_themselves(pack):
    """Even a node whose types were never inferred cannot hand C a wrapping window."""
    node = only_node(one_op("MaxPool", (1, 1, 16), dict(kernel_shape=[1])))
    node.attrs.update(pads=[2**63 - 1, 1], strides=[2**40])
    x = TensorType(DType.FLOAT32, (1, 1, 16))
    y = TensorType(DType.FLOAT32, (1, 1, 8388609))
    with pytest.raises(LimitError, match=f"MaxPool node {node.name!r}: attribute 'pads'"):
        pack(node, [x], [y])


def test_check_window_names_the_span_when_the_windows_cover_too_much():
    node = only_node(one_op("MaxPool", (1, 1, 16), dict(kernel_shape=[1])))
    window = make_window({"strides": [2**40]}, 1, [1], pytest.fail)
    check_window(node, window, [16], [2**20], [(0, 0)])  # spans 2**60 cells: allowed
    with pytest.raises(LimitError, match="span"):
        check_window(node, window, [16], [2**20 + 2], [(0, 0)])


def test_a_value_too_large_for_a_blob_is_a_limit_error_not_a_struct_error():
    node = only_node(one_op("Relu", (2,)))
    t = TensorType(DType.FLOAT32, (2,))

    def overflowing_packer(node, input_types, output_types):
        return conv_kernels.Packed(conv_kernels.pack_values([2**64]))

    with pytest.raises(LimitError, match="int64 attribute blob"):
        pack_checked(overflowing_packer, node, [t], [t])


# -- strides and dilations of 2**31 and more: right answers -----------------------------


def brute_force_1d(op, x, kernel, stride, dilation, pad_begin, out):
    """One output at a time, one tap at a time: an independent reference that needs no
    padded copy of X (the NumPy reference would allocate 2**31 padding cells and more)."""
    results = []
    for o in range(out):
        taps = [o * stride - pad_begin + t * dilation for t in range(kernel)]
        inside = [x[..., i] for i in taps if 0 <= i < x.shape[-1]]
        if op == "MaxPool":
            results.append(np.max(inside, axis=0) if inside else np.full(x.shape[:-1], -np.inf))
        elif op == "AveragePool":
            results.append(np.mean(inside, axis=0) if inside else np.full(x.shape[:-1], np.nan))
        else:  # Conv with all-ones weights: the sum of the taps inside
            results.append(np.sum(inside, axis=0) if inside else np.zeros(x.shape[:-1]))
    return np.stack(results, axis=-1).astype(np.float32)


BIG = [2**31 - 1, 2**31, 2**32 + 3, 2**40, 2**59]


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "Conv"])
def test_large_strides_dilations_and_pads_match_a_brute_force_reference(op):
    rng = np.random.default_rng(11)
    x = rng.uniform(-3, 3, (1, 1, 5)).astype(np.float32)
    compared = refused = 0
    for stride, dilation, pad_begin, pad_end, kernel in itertools.product(
            [1, 3, *BIG], [1, 2, *BIG], [0, 1, *BIG], [0, 1, *BIG], [1, 2]):
        if op == "AveragePool" and dilation != 1:
            continue
        out = (5 + pad_begin + pad_end - ((kernel - 1) * dilation + 1)) // stride + 1
        if not 1 <= out <= 8:
            continue
        attrs = dict(strides=[stride], pads=[pad_begin, pad_end], kernel_shape=[kernel])
        if op != "AveragePool":
            attrs["dilations"] = [dilation]
        weights = np.ones((1, 1, kernel), np.float32) if op == "Conv" else None
        span = max(out - 1, 4) * stride + (kernel - 1) * dilation + 1
        if max(span, pad_begin, pad_end) > limits.MAX_COORDINATE:
            with pytest.raises(LimitError, match="MAX_COORDINATE"):
                one_op(op, x.shape, attrs, weights=weights)
            refused += 1
            continue
        got = run_in_c(one_op(op, x.shape, attrs, weights=weights), x)
        want = brute_force_1d(op, x, kernel, stride, dilation, pad_begin, out)
        np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True,
                                   err_msg=f"{op} {attrs}")
        compared += 1
    assert compared > 100 and refused > 10


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "Conv"])
@pytest.mark.parametrize("big", [2**31, 2**33 + 1])
def test_2d_windows_with_large_strides_and_dilations_match_the_numpy_reference(op, big):
    """Small pads, so the op's own reference can run: big strides and dilations."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-3, 3, (1, 2, 6, 7)).astype(np.float32)
    attrs = dict(strides=[2, big], pads=[1, 0, 1, 1], kernel_shape=[3, 1])
    if op != "AveragePool":
        attrs["dilations"] = [2, big]
    weights = None
    if op == "Conv":
        weights = rng.uniform(-1, 1, (3, 2, 3, 1)).astype(np.float32)
    got = run_in_c(one_op(op, x.shape, attrs, weights=weights), x)
    inputs = [x] if weights is None else [x, weights]
    want = get_schema(op).run_reference(inputs, attrs)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)


# -- 3-D MaxPool whose depth window lies in the padding ---------------------------------


@pytest.mark.parametrize("pads", [[1, 0, 0, 1, 0, 0], [2, 1, 0, 2, 0, 1]])
def test_max_pool_3d_depth_window_wholly_in_the_padding_is_minus_inf(pads):
    rng = np.random.default_rng(5)
    x = rng.uniform(-3, 3, (2, 3, 1, 5, 6)).astype(np.float32)
    attrs = dict(kernel_shape=[1, 2, 2], pads=pads)
    got = run_in_c(one_op("MaxPool", x.shape, attrs), x)
    want = get_schema("MaxPool").run_reference([x], attrs)[0]
    np.testing.assert_array_equal(got, want)
    assert np.isneginf(got[:, :, 0]).all()  # the first depth window sees only padding


# -- empty tensors: empty outputs, as ONNX Runtime gives ---------------------------------


@pytest.mark.parametrize("op, x_shape, w_shape, y_shape", [
    ("Conv", (0, 2, 5, 5), (3, 2, 3, 3), (0, 3, 3, 3)),
    ("ConvTranspose", (0, 2, 5, 5), (2, 3, 3, 3), (0, 3, 7, 7)),
    ("Conv", (0, 4, 6), (4, 2, 3), (0, 4, 4)),  # grouped
])
def test_conv_with_batch_zero_gives_an_empty_output(op, x_shape, w_shape, y_shape):
    weights = np.ones(w_shape, np.float32)
    attrs = {"group": 2} if x_shape == (0, 4, 6) else {}
    model = ge_hub.compile(one_op(op, x_shape, attrs, weights=weights))
    (y,) = model.run({"x": np.zeros(x_shape, np.float32)})
    assert y.shape == y_shape and y.dtype == np.float32


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape, axis", [((2, 0, 3), 1), ((2, 0), -1), ((0, 3), -1)])
def test_softmax_over_an_empty_axis_gives_an_empty_output(op, shape, axis):
    model = ge_hub.compile(one_op(op, shape, {"axis": axis}))
    (y,) = model.run({"x": np.zeros(shape, np.float32)})
    assert y.shape == shape and y.dtype == np.float32


# -- declared shapes past the limits --------------------------------------------------


@pytest.mark.parametrize("op, shape_input", [
    ("ConstantOfShape", "input"), ("Reshape", "shape"), ("Expand", "shape"),
    ("Unsqueeze", "axes"),
])
def test_a_shape_input_declared_with_2_40_elements_is_refused_not_enumerated(op, shape_input):
    """71 bytes of ONNX made inference create one symbol per declared element."""
    with pytest.raises(LimitError, match=rf"{op}.*input '{shape_input}'.*limit of 64 dims"):
        with es.GraphBuilder("g") as gb:
            shape = es.input("s", "int64", [2**40])
            args = [shape] if op == "ConstantOfShape" else [es.input("d", "float32", [2, 3]),
                                                            shape]
            gb.output(es.op(op, *args), "y")


def test_a_declared_dim_past_the_element_limit_is_refused_by_input_name():
    """Fuzz finding: CastLike's 'like' declared float16[2**62] reached the executor."""
    with pytest.raises(LimitError, match=r"input 'target_type' float16\[4611686018427387904\]"):
        with es.GraphBuilder("g") as gb:
            x = es.input("x", "float32", [2])
            like = es.input("like", "float16", [2**62])
            gb.output(es.op("CastLike", x, like), "y")


def test_an_element_count_past_the_limit_is_refused_even_when_each_dim_fits():
    with pytest.raises(LimitError, match="elements, more than the limit of 2\\*\\*40"):
        one_op("Relu", (2**21, 2**20))


def test_an_unused_graph_input_past_the_limit_is_refused_at_compile():
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [2])
        es.input("unused", "float32", [2**21, 2**20])
        gb.output(es.op("Relu", x), "y")
    with pytest.raises(LimitError, match="graph input 'unused'"):
        ge_hub.compile(gb.graph)


def test_shape_problem_accepts_what_fits_and_symbolic_dims():
    assert limits.shape_problem(TensorType(DType.FLOAT32, (2**20, 2**20))) is None
    assert limits.shape_problem(TensorType(DType.FLOAT32, (0, 2**40))) is None
    assert limits.shape_problem(TensorType(DType.FLOAT32, None)) is None
    assert "rank 65" in limits.shape_problem(TensorType(DType.FLOAT32, (1,) * 65))


@pytest.mark.parametrize("op", ["AveragePool", "MaxPool"])
def test_the_c_pools_refuse_a_blob_whose_window_would_wrap(op):
    """Defence in depth: a blob that bypassed the packer (the segfault's window) is a
    KernelError from nn_blob_window, not a read before the input."""
    graph = one_op(op, (1, 1, 16), dict(kernel_shape=[1], strides=[2]))
    model = ge_hub.compile(graph)
    plan = model.plan
    (step,) = [s for s in plan.steps if s.op == op]
    ints = list(struct.unpack(f"={len(step.attrs) // 8}q", step.attrs))
    # planes, flag, then in[3], out[3], k[3], stride[3], dil[3], pad[3]: the last axis's
    ints[2 + 9 + 2] = 2**40
    ints[2 + 15 + 2] = 2**63 - 1
    bad = dataclasses.replace(step, attrs=struct.pack(f"={len(ints)}q", *ints))
    executor = Executor(dataclasses.replace(plan, steps=(bad,)))
    with pytest.raises(KernelError, match="attribute blob"):
        executor.run([np.ones((1, 1, 16), np.float32)])


def test_conv_transpose_scratch_past_the_limit_is_refused_by_name():
    """Scratch grows with kernel taps times input cells, which neither tensor bounds: a
    32 MiB input and a declared 2 GiB kernel asked for 64 TiB."""
    with es.GraphBuilder("g") as gb:
        x = es.input("x", "float32", [1, 16, 2**19])
        w = es.input("w", "float32", [16, 64, 2**19])
        gb.output(es.op("ConvTranspose", x, w), "y")
    node = only_node(gb.graph)
    in_types = [v.type for v in node.inputs]
    out_types = [v.type for v in node.outputs]
    with pytest.raises(LimitError, match=rf"ConvTranspose node {node.name!r}: .*scratch"):
        pack_checked(conv_kernels.pack_conv_transpose, node, in_types, out_types)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("auto_pad", ["SAME_LOWER", "SAME_UPPER"])
def test_a_kernel_of_2_32_columns_over_a_short_row_is_quick_and_right(op, auto_pad):
    """Fuzz finding (a hang): each row looped over all 2**32 kernel columns; only those
    that reach the input are visited now. Checked against the cells each window holds."""
    rng = np.random.default_rng(7)
    x = rng.uniform(-3, 3, (1, 2, 3, 6)).astype(np.float32)
    kernel = 2**32
    attrs = dict(kernel_shape=[2, kernel], auto_pad=auto_pad)
    got = run_in_c(one_op(op, x.shape, attrs), x)
    assert got.shape == x.shape
    want = np.empty_like(x)
    # SAME with stride 1: the padding of an axis totals the kernel's extent minus one
    rows_total, cols_total = 2 - 1, kernel - 1
    row_begin = rows_total // 2 if auto_pad == "SAME_UPPER" else rows_total - rows_total // 2
    col_begin = cols_total // 2 if auto_pad == "SAME_UPPER" else cols_total - cols_total // 2
    for oy in range(3):
        for ox in range(6):
            rows = [r for r in (oy - row_begin, oy - row_begin + 1) if 0 <= r < 3]
            first = ox - col_begin  # the window's columns are [first, first + kernel)
            cols = [c for c in range(6) if first <= c < first + kernel]
            cells = x[:, :, rows][:, :, :, cols].reshape(2, -1)
            want[0, :, oy, ox] = cells.max(axis=1) if op == "MaxPool" else cells.mean(axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-6)
