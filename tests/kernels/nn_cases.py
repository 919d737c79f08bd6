"""Shared by the float32 C-kernel tests of the nn, conv, pool, norm and resize families
(test_nn.py, test_conv.py, test_pool.py, test_norm.py, test_resize.py): one-op graphs
compiled with ES, run in C (no fallback), and compared with the op's NumPy reference.
"""

from __future__ import annotations

import numpy as np

import ge_hub
from ge_hub import es
from ge_hub.ops import get_schema

# float32 against a float32 (or float64) reference: elementwise-exact ops stay close; the
# GEMM-based ones sum in another order.
EXACT = dict(rtol=1e-5, atol=1e-6)
SUMMED = dict(rtol=1e-4, atol=1e-4)



def random_array(rng, shape, low=-3.0, high=3.0):
    """Random non-zero float32 data."""
    data = rng.uniform(low, high, size=shape)
    data[data == 0] = 0.5
    return data.astype(np.float32)


def compile_op(op, inputs, attrs=None, *, consts=(), outputs=None):
    """A compiled one-node graph: input i is a graph input, a constant (i in `consts`)
    or omitted (None). Returns (model, feeds)."""
    feeds = {}
    with es.GraphBuilder("g") as gb:
        args = []
        for i, array in enumerate(inputs):
            if array is None:
                args.append(None)
            elif i in consts:
                args.append(es.const(array))
            else:
                feeds[f"x{i}"] = array
                args.append(es.input(f"x{i}", array.dtype.name, list(array.shape)))
        kwargs = dict(attrs or {})
        if outputs is not None:
            kwargs["outputs"] = outputs
        result = es.op(op, *args, **kwargs)
        for j, tensor in enumerate(result if isinstance(result, tuple) else (result,)):
            gb.output(tensor, f"y{j}")
    return ge_hub.compile(gb.graph), feeds


def check(op, inputs, attrs=None, *, consts=(), outputs=None, tol=EXACT):
    """Run `op` in C and compare every output with the reference; returns the outputs."""
    model, feeds = compile_op(op, inputs, attrs, consts=consts, outputs=outputs)
    summary = model.summary()
    assert summary["fallback_steps"] == 0, summary
    got = model.run(feeds)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN and inf cases
        want = get_schema(op).run_reference(inputs, dict(attrs or {}))
    for j, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (j, g.dtype, g.shape, w.shape)
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, w, equal_nan=True, err_msg=f"output {j}", **tol)
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"output {j}")
    return got


def with_specials(x, rng, count=3):
    """`x` with a NaN, +inf and -inf at random places."""
    x = x.copy()
    flat = x.reshape(-1)
    for value in (np.nan, np.inf, -np.inf)[:count]:
        flat[rng.integers(flat.size)] = value
    return x


