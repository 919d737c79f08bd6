"""Softmax over contiguous rows (core/kernels/nn_softmax.c): its AVX-512 variant and the
generic one against the op's NumPy reference, on odd row lengths (masked tails, one
vector, two, many), attention-shaped batches of rows, -inf entries, and rows whose maximum
is NaN or inf (which take the generic path). The variant is picked once per process from
the CPU (GE_HUB_SOFTMAX_KERNEL=generic forces the plain one), so each runs in a process of
its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from .nn_cases import check, random_array

# Row lengths around the 16- and 32-lane steps, and attention shapes ([heads, seq, seq]).
SHAPES = [(3, 1), (5, 15), (4, 16), (3, 17), (2, 31), (2, 32), (3, 33), (2, 100),
          (1, 2049), (12, 128, 128), (2, 3, 7, 45)]


def check_rows(rng):
    for shape in SHAPES:
        # a wide range: the stable form and the polynomial's whole interval matter
        check("Softmax", [random_array(rng, shape, -90.0, 90.0)], {"axis": -1})
        check("Softmax", [random_array(rng, shape, -3.0, 3.0)], {"axis": -1})
    x = random_array(rng, (6, 37))
    x[0, 3] = np.nan            # NaN row: all NaN
    x[1, 5] = np.inf            # +inf row: inf - inf, NaN
    x[2, :] = -np.inf           # all -inf: NaN
    x[3, 7] = -np.inf           # one -inf: probability 0
    x[4, 30:] = -np.inf         # -inf in the masked tail
    x[5, 0] = -200.0            # far below the maximum: underflows to 0
    check("Softmax", [x], {"axis": -1})


def test_rows_default_variant(rng):
    check_rows(rng)


@pytest.mark.parametrize("variant, threads", [("default", "2"), ("generic", "1"),
                                              ("generic", "2")])
def test_each_variant_in_its_own_process(variant, threads):
    script = textwrap.dedent("""
        import numpy as np
        from tests.kernels import test_softmax_rows as t
        t.check_rows(np.random.default_rng(5))
        print("ok")
    """)
    env = dict(os.environ, GE_HUB_NUM_THREADS=threads)
    if variant != "default":
        env["GE_HUB_SOFTMAX_KERNEL"] = variant
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"
