"""The quant family's C kernels (core/kernels/quant.c, quant_gemm.c) against their ops'
NumPy references (ge_hub/ops/quant.py), bit for bit.

Each case builds a one-node graph, compiles it, checks that no step runs Python and
compares the output with the reference on the same random non-zero inputs: odd sizes,
per-tensor and per-axis parameters (every axis), every 8-bit dtype mix of the products
(and 16-, 4- and 2-bit, int32, blocked for quantize/dequantize), zero points given and
omitted, values
exactly halfway between integers (round half to even), NaN and infinities (saturation),
matrix batches that broadcast, 1-D operands, conv strides, dilations, padding, groups,
1-D and 3-D windows. Both GEMM micro-kernels (VNNI where the CPU has it, and the plain
one, forced by GE_HUB_QGEMM_KERNEL=generic in a subprocess, as the choice is made once
per process) give the same bytes. What the C does not take (a float16 scale) falls back,
counted; a malformed blob is an error, not a crash.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ge_hub
from ge_hub import es
from ge_hub.executor import Executor, KernelError
from ge_hub.ops import get_schema

INT_RANGES = {np.uint8: (0, 255), np.int8: (-128, 127), np.uint16: (0, 65535),
              np.int16: (-32768, 32767), np.int32: (-(2 ** 31), 2 ** 31 - 1)}
EIGHT = (np.uint8, np.int8)


def compile_node(op, inputs, attrs, *, consts=(), outputs=1):
    """A compiled one-node graph; inputs in `consts` are constants, None omitted."""
    feeds = {}
    with es.GraphBuilder(op.lower()) as gb:
        args = []
        for i, array in enumerate(inputs):
            if array is None:
                args.append(None)
            elif i in consts:
                args.append(es.const(array))
            else:
                feeds[f"x{i}"] = array
                args.append(es.input(f"x{i}", array.dtype.name, list(array.shape)))
        result = es.op(op, *args, outputs=outputs, **attrs)
        result = result if isinstance(result, tuple) else (result,)
        for j, value in enumerate(result):
            gb.output(value, f"y{j}")
    return ge_hub.compile(gb.graph), feeds


def check(op, inputs, attrs=None, *, consts=(), outputs=1):
    """Runs in C with no Python step and equals the reference exactly."""
    attrs = attrs or {}
    model, feeds = compile_node(op, inputs, attrs, consts=consts, outputs=outputs)
    summary = model.summary()
    assert summary["python_steps"] == 0, summary
    got = model.run(feeds)
    want = get_schema(op).run_reference(inputs, attrs)
    want = want if isinstance(want, (tuple, list)) else (want,)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_array_equal(g, w)
    return got


def ints(rng, shape, dtype):
    lo, hi = INT_RANGES[dtype]
    data = rng.integers(lo, hi, size=shape, endpoint=True).astype(dtype)
    data[data == 0] = 1
    return data


def floats(rng, shape, scale=1.0):
    data = rng.uniform(-scale, scale, size=shape).astype(np.float32)
    data[data == 0] = 0.5
    return data


def scales(rng, shape):
    return rng.uniform(0.01, 0.2, size=shape).astype(np.float32)


# -- QuantizeLinear and DequantizeLinear -------------------------------------------------

AXES = [None, 0, 1, -1]


def _param_shape(shape, axis):
    return () if axis is None else (shape[axis],)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16])
@pytest.mark.parametrize("axis", AXES)
def test_quantize_linear(rng, dtype, axis):
    shape = (3, 5, 7)
    x = floats(rng, shape, 40.0)
    scale = scales(rng, _param_shape(shape, axis))
    zero = ints(rng, scale.shape, dtype) // 4
    # exact halves (half to even), saturation both ways, NaN and infinities
    x.reshape(-1)[:8] = (scale.reshape(-1)[0] * np.array(
        [0.5, 1.5, 2.5, -0.5, -2.5, 1e6, -1e6, 3.5])).astype(np.float32)
    x.reshape(-1)[8:11] = [np.nan, np.inf, -np.inf]
    attrs = {} if axis is None else {"axis": axis}
    check("QuantizeLinear", [x, scale, zero], attrs)
    check("QuantizeLinear", [x, scale, zero], attrs, consts=(1, 2))


@pytest.mark.parametrize("output_dtype", [None, "int8", "uint16"])
def test_quantize_linear_without_zero_point(rng, output_dtype):
    x = floats(rng, (33, 17), 30.0)
    attrs = {} if output_dtype is None else {"output_dtype": output_dtype}
    check("QuantizeLinear", [x, np.float32(0.13).reshape(())], attrs)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16, np.int32])
@pytest.mark.parametrize("axis", AXES)
def test_dequantize_linear(rng, dtype, axis):
    shape = (4, 3, 9)
    x = ints(rng, shape, dtype)
    scale = scales(rng, _param_shape(shape, axis))
    zero = ints(rng, scale.shape, dtype) // 3
    attrs = {} if axis is None else {"axis": axis}
    check("DequantizeLinear", [x, scale, zero], attrs)
    check("DequantizeLinear", [x, scale], attrs)


@pytest.mark.parametrize("case", ["mixed", "positive", "negative", "zeros", "one"])
def test_dynamic_quantize_linear(rng, case):
    x = {"mixed": floats(rng, (7, 13), 3.0), "positive": np.abs(floats(rng, (5, 3))),
         "negative": -np.abs(floats(rng, (2, 9))), "zeros": np.zeros((4, 4), np.float32),
         "one": np.array([2.5], np.float32)}[case]
    check("DynamicQuantizeLinear", [x], outputs=3)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("block", [2, 3])
def test_blocked_quantize_and_dequantize(rng, axis, block):
    """block_size consecutive elements along `axis` share a scale; the last block of 7 is
    short when block is 2 or 3."""
    shape = (7, 5) if axis == 0 else (5, 7)
    blocked = tuple(-(-d // block) if a == axis else d for a, d in enumerate(shape))
    x = floats(rng, shape, 20.0)
    scale = scales(rng, blocked)
    attrs = {"axis": axis, "block_size": block}
    check("QuantizeLinear", [x, scale, ints(rng, blocked, np.int8) // 4], attrs)
    check("DequantizeLinear", [ints(rng, shape, np.uint8), scale,
                               ints(rng, blocked, np.uint8)], attrs)
    check("DequantizeLinear", [ints(rng, shape, np.int16), scale], attrs)


@pytest.mark.parametrize("dtype", ["int4", "uint4", "int2", "uint2"])
@pytest.mark.parametrize("axis", [None, 1])
def test_four_and_two_bit_integers(rng, dtype, axis):
    """One element per byte (ml_dtypes' layout); saturation at the narrow range."""
    import ml_dtypes

    np_dtype = getattr(ml_dtypes, dtype)
    info = ml_dtypes.iinfo(np_dtype)
    shape = (3, 5, 2)
    x = floats(rng, shape, 3.0)
    scale = scales(rng, _param_shape(shape, axis)) * 5
    zero = rng.integers(info.min, info.max, size=scale.shape, endpoint=True).astype(np_dtype)
    attrs = {} if axis is None else {"axis": axis}
    check("QuantizeLinear", [x, scale, zero], attrs)
    data = rng.integers(info.min, info.max, size=shape, endpoint=True).astype(np_dtype)
    check("DequantizeLinear", [data, scale, zero], attrs)
    check("DequantizeLinear", [data, scale], attrs)
    if axis is None:  # a [1] zero point beside a scalar scale (ONNX's own 4-bit tests)
        check("DequantizeLinear", [data, scale, zero.reshape(1)], attrs)


def test_float16_quantize_scales_fall_back_counted(rng):
    model, _ = compile_node("DequantizeLinear", [ints(rng, (4, 6), np.int8),
                                                 np.float16(0.5).reshape(())], {})
    assert model.summary()["fallback_ops"] == {"DequantizeLinear": 1}
    model, _ = compile_node("QuantizeLinear", [floats(rng, (4, 6)),
                                               np.float16(0.5).reshape(())], {})
    assert model.summary()["fallback_ops"] == {"QuantizeLinear": 1}


# -- MatMulInteger and QLinearMatMul -------------------------------------------------------

MATMUL_SHAPES = [
    ((5, 7), (7, 9)),
    ((1, 1), (1, 1)),
    ((3, 5, 67), (67, 35)),        # A's batches fold into rows; two panel pairs
    ((2, 1, 5, 7), (3, 7, 9)),     # batch broadcast both ways
    ((4, 6), (3, 6, 33)),          # A broadcast over B's batch
    ((7,), (7, 9)),                # 1-D A
    ((5, 7), (7,)),                # 1-D B
]


def _zero(rng, dtype, count, per_axis):
    return ints(rng, (count,) if per_axis else (), dtype) // 2


@pytest.mark.parametrize("a_dtype", EIGHT)
@pytest.mark.parametrize("b_dtype", EIGHT)
@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul_integer(rng, a_dtype, b_dtype, shapes):
    a_shape, b_shape = shapes
    a, b = ints(rng, a_shape, a_dtype), ints(rng, b_shape, b_dtype)
    check("MatMulInteger", [a, b])
    check("MatMulInteger", [a, b, _zero(rng, a_dtype, 1, False),
                            _zero(rng, b_dtype, 1, False)], consts=(1,))
    if len(a_shape) > 1 and len(b_shape) > 1:
        check("MatMulInteger", [a, b, _zero(rng, a_dtype, a_shape[-2], True),
                                _zero(rng, b_dtype, b_shape[-1], True)], consts=(1, 3))
        check("MatMulInteger", [a, b, None, _zero(rng, b_dtype, b_shape[-1], True)])


@pytest.mark.parametrize("a_dtype", EIGHT)
@pytest.mark.parametrize("b_dtype", EIGHT)
@pytest.mark.parametrize("y_dtype", EIGHT)
@pytest.mark.parametrize("per_axis", [False, True])
@pytest.mark.parametrize("shapes", [MATMUL_SHAPES[0], MATMUL_SHAPES[2], MATMUL_SHAPES[3]],
                         ids=str)
def test_qlinear_matmul(rng, a_dtype, b_dtype, y_dtype, per_axis, shapes):
    a_shape, b_shape = shapes
    m, n = a_shape[-2], b_shape[-1]
    a, b = ints(rng, a_shape, a_dtype), ints(rng, b_shape, b_dtype)
    a_scale = scales(rng, (m,) if per_axis else ())
    b_scale = scales(rng, (n,) if per_axis else ())
    inputs = [a, a_scale, _zero(rng, a_dtype, m, per_axis), b, b_scale,
              _zero(rng, b_dtype, n, per_axis), np.float32(0.37).reshape(()),
              _zero(rng, y_dtype, 1, False)]
    check("QLinearMatMul", inputs)
    check("QLinearMatMul", inputs, consts=(1, 2, 3, 4, 5, 6, 7))


@pytest.mark.parametrize("per_axis", [False, True])
def test_qlinear_matmul_with_float16_scales(rng, per_axis):
    """The multiplier is formed in float16, each operation rounded as NumPy rounds it."""
    a, b = ints(rng, (3, 5, 67), np.uint8), ints(rng, (67, 35), np.int8)
    a_scale = scales(rng, (5,) if per_axis else ()).astype(np.float16)
    b_scale = scales(rng, (35,) if per_axis else ()).astype(np.float16)
    for y_scale in (0.37, 3e-5, 6e4):  # normal, a float16 subnormal and near the top
        inputs = [a, a_scale, _zero(rng, np.uint8, 5, per_axis), b, b_scale,
                  _zero(rng, np.int8, 35, per_axis), np.float16(y_scale).reshape(()),
                  _zero(rng, np.uint8, 1, False)]
        check("QLinearMatMul", inputs)


# -- ConvInteger and QLinearConv -----------------------------------------------------------

CONV_CASES = {
    "3x3": ((1, 3, 7, 9), (5, 3, 3, 3), {}),
    "pads_strides": ((2, 4, 9, 8), (6, 4, 3, 2), dict(pads=[1, 0, 2, 1], strides=[2, 3])),
    "dilations": ((1, 2, 11, 10), (3, 2, 3, 3), dict(dilations=[2, 3], pads=[2, 2, 2, 2])),
    "groups": ((1, 6, 5, 5), (9, 2, 3, 3), dict(group=3, pads=[1, 1, 1, 1])),
    "depthwise": ((1, 4, 6, 6), (4, 1, 3, 3), dict(group=4, auto_pad="SAME_UPPER")),
    "pointwise_wide": ((1, 37, 9, 11), (70, 37, 1, 1), {}),
    "1d": ((2, 3, 13), (4, 3, 5), dict(pads=[2, 1])),
    "3d": ((1, 2, 4, 5, 6), (3, 2, 2, 3, 2), dict(strides=[1, 2, 1])),
}


@pytest.mark.parametrize("x_dtype", EIGHT)
@pytest.mark.parametrize("w_dtype", EIGHT)
@pytest.mark.parametrize("case", list(CONV_CASES))
def test_conv_integer(rng, x_dtype, w_dtype, case):
    x_shape, w_shape, attrs = CONV_CASES[case]
    x, w = ints(rng, x_shape, x_dtype), ints(rng, w_shape, w_dtype)
    check("ConvInteger", [x, w], attrs, consts=(1,))
    check("ConvInteger", [x, w, _zero(rng, x_dtype, 1, False),
                          _zero(rng, w_dtype, w_shape[0], True)], attrs, consts=(1, 3))
    check("ConvInteger", [x, w, _zero(rng, x_dtype, 1, False),
                          _zero(rng, w_dtype, 1, False)], attrs)


@pytest.mark.parametrize("x_dtype", EIGHT)
@pytest.mark.parametrize("w_dtype", EIGHT)
@pytest.mark.parametrize("y_dtype", EIGHT)
@pytest.mark.parametrize("case", ["3x3", "groups", "1d", "pointwise_wide"])
def test_qlinear_conv(rng, x_dtype, w_dtype, y_dtype, case):
    x_shape, w_shape, attrs = CONV_CASES[case]
    m = w_shape[0]
    x, w = ints(rng, x_shape, x_dtype), ints(rng, w_shape, w_dtype)
    bias = rng.integers(-5000, 5000, size=(m,)).astype(np.int32)
    for per_channel in (False, True):
        inputs = [x, np.float32(0.05).reshape(()), _zero(rng, x_dtype, 1, False), w,
                  scales(rng, (m,) if per_channel else ()),
                  _zero(rng, w_dtype, m, per_channel), np.float32(1.7).reshape(()),
                  _zero(rng, y_dtype, 1, False)]
        check("QLinearConv", inputs, attrs, consts=(1, 2, 3, 4, 5, 6, 7))
        check("QLinearConv", [*inputs, bias], attrs, consts=(3, 8))


def test_conv_integer_in_patch_blocks(rng, monkeypatch):
    """More output positions than one block of gathered patches holds."""
    from ge_hub.kernels import quant

    monkeypatch.setattr(quant, "QCONV_MAX_PATCH_BYTES", 64 * 32)
    x, w = ints(rng, (1, 3, 17, 19), np.uint8), ints(rng, (5, 3, 3, 3), np.int8)
    check("ConvInteger", [x, w, np.uint8(3).reshape(()), None], dict(pads=[1, 1, 1, 1]))


# -- micro-kernels, errors ------------------------------------------------------------------


def test_plain_and_vnni_micro_kernels_give_the_same_bytes():
    """MatMulInteger in both operand mixes and a QLinearConv, with each micro-kernel."""
    script = textwrap.dedent("""
        import sys
        import numpy as np, ge_hub
        from ge_hub import es
        rng = np.random.default_rng(3)
        for a_dtype, b_dtype in [(np.uint8, np.int8), (np.int8, np.uint8)]:
            for m, k, n in [(1, 1, 1), (5, 67, 35), (33, 130, 70)]:
                a = rng.integers(-100, 100, (m, k)).astype(a_dtype)
                b = rng.integers(-100, 100, (k, n)).astype(b_dtype)
                with es.GraphBuilder("g") as gb:
                    y = es.op("MatMulInteger", es.input("a", a.dtype.name, [m, k]), es.const(b),
                              es.const(np.array(3, a_dtype)), es.const(np.array(1, b_dtype)))
                    es.output(y, "y")
                out = ge_hub.compile(gb.graph).run([a])[0]
                sys.stdout.write(out.tobytes().hex())
        x = rng.integers(0, 255, (1, 5, 9, 11)).astype(np.uint8)
        w = rng.integers(-127, 127, (7, 5, 3, 3)).astype(np.int8)
        with es.GraphBuilder("c") as gb:
            y = es.op("QLinearConv", es.input("x", "uint8", list(x.shape)),
                      es.const(np.array(0.05, np.float32)), es.const(np.array(9, np.uint8)),
                      es.const(w), es.const(np.linspace(0.01, 0.02, 7).astype(np.float32)),
                      es.const(np.zeros(7, np.int8)), es.const(np.array(0.3, np.float32)),
                      es.const(np.array(4, np.uint8)), pads=[1, 1, 1, 1])
            es.output(y, "y")
        sys.stdout.write(ge_hub.compile(gb.graph).run([x])[0].tobytes().hex())
    """)
    outputs = []
    for micro_kernel in ("", "generic"):
        env = dict(os.environ, GE_HUB_QGEMM_KERNEL=micro_kernel)
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert outputs[0] and outputs[0] == outputs[1]


@pytest.mark.parametrize("op", ["QuantizeLinear", "MatMulInteger", "ConvInteger"])
def test_a_truncated_or_padded_blob_is_an_error_not_a_crash(rng, op):
    if op == "QuantizeLinear":
        inputs, attrs = [floats(rng, (3, 4)), scales(rng, ())], {}
    elif op == "MatMulInteger":
        inputs, attrs = [ints(rng, (3, 4), np.uint8), ints(rng, (4, 5), np.int8)], {}
    else:
        inputs, attrs = [ints(rng, (1, 2, 4, 4), np.uint8), ints(rng, (3, 2, 3, 3), np.int8)], {}
    model, feeds = compile_node(op, inputs, attrs)
    plan = model.plan
    (step,) = plan.steps
    for blob in (step.attrs[:-8], step.attrs + bytes(8), b""):
        bad = dataclasses.replace(plan, steps=(dataclasses.replace(step, attrs=blob),))
        with pytest.raises(KernelError, match="attribute blob"):
            Executor(bad).run(list(feeds.values()))


def test_a_scale_of_the_wrong_size_names_the_node(rng):
    with pytest.raises(Exception, match="y_scale"):
        compile_node("QuantizeLinear", [floats(rng, (3, 4)), scales(rng, (5,))], {"axis": 1})
