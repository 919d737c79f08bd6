"""Shared helpers for op tests: run an op's reference and check it against its inference."""

from __future__ import annotations

import numpy as np
import pytest

from ge_hub.ir.types import TensorType, dim_add, dim_floordiv, dim_sub
from ge_hub.ops import get_schema


def run_op(op: str, inputs, attrs=None, *, domain: str = "", num_outputs=None, const_inputs=True):
    """Infer the op's output types for these concrete inputs, run its reference, and
    check that every output's dtype and shape are what inference promised.

    Returns the reference outputs as a tuple.
    """
    schema = get_schema(op, domain)
    attrs = dict(attrs or {})
    types = [None if x is None else TensorType.of(np.asarray(x)) for x in inputs]
    consts = list(inputs) if const_inputs else None
    inferred = schema.infer_types(types, attrs, consts=consts, num_outputs=num_outputs)
    outputs = schema.run_reference(inputs, attrs)[: len(inferred)]
    assert len(outputs) == len(inferred), f"{op}: reference gave {len(outputs)} outputs"
    for i, (out, t) in enumerate(zip(outputs, inferred)):
        got = TensorType.of(out)
        assert got == t, f"{op} output {i}: reference gives {got}, inference said {t}"
    return outputs


def random_array(rng: np.random.Generator, shape, dtype="float32", low=-3.0, high=3.0):
    """Random non-zero data of any ge-hub dtype."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        lo = max(int(low), np.iinfo(dtype).min)
        data = rng.integers(lo, max(int(high), lo + 1) + 1, size=shape)
        data[data == 0] = 1
        return data.astype(dtype)
    data = rng.uniform(low, high, size=shape)
    data[data == 0] = 0.5
    return data.astype(dtype)


def infer(op_name, types, attrs=None, consts=None, num_outputs=None):
    """The output types `op_name` infers for these input types."""
    return get_schema(op_name).infer_types(types, attrs or {}, consts=consts,
                                           num_outputs=num_outputs)


def tt(dtype, shape):
    return TensorType(dtype, shape)


def close(actual, expected, dtype="float32"):
    """Compare with a tolerance that suits the dtype of the op's output."""
    tolerance = {"float64": 1e-10, "float32": 1e-5, "float16": 2e-3, "bfloat16": 2e-2}
    tol = tolerance.get(str(np.dtype(dtype)), 0)
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64),
                               np.asarray(expected, dtype=np.float64), rtol=tol, atol=tol)


def positions(size, minus, stride):
    """floor((size - minus) / stride) + 1 built with the IR's dim helpers, as symbolic
    shape inference is expected to build it."""
    return dim_add(dim_floordiv(dim_sub(size, minus), stride), 1)


@pytest.fixture
def rng():
    return np.random.default_rng(0)
