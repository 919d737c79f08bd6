"""The kernel ABI (core/include/ge_hub/kernel.h) as an outside plugin sees it.

A small kernel library is compiled here with gcc against the installed header, registered
as CKernels with `library=path`, and run by the executor: attributes, scratch memory,
parallel_for on the thread pool, error reporting and the ABI version check.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ge_hub import _core
from ge_hub.executor import Executor, KernelError, include_dir, registry_resolver
from ge_hub.ir.dtypes import DType
from ge_hub.kernels.base import CKernel, pack_values
from ge_hub.plan import DTYPE_CODES, KernelKind, MemoryStats, Plan, Step, Storage, TensorSpec
from ge_hub.registry import KernelSpec, Registry

F32 = DType.FLOAT32
HEADER = os.path.join(include_dir(), "ge_hub", "kernel.h")

PLUGIN_SOURCE = r"""
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "ge_hub/blob.h"
#include "ge_hub/kernel.h"

const int32_t ge_kernel_abi_version = GE_KERNEL_ABI_VERSION;

/* plugin_affine's blob, a fixed record read through the public blob reader. */
#define AFFINE_BLOB(INT, FLOAT) FLOAT(alpha) FLOAT(beta)
GE_BLOB_RECORD(affine_blob, AFFINE_BLOB)

size_t plugin_itemsize(int32_t dtype) { return ge_dtype_itemsize(dtype); }

/* out = alpha * x + beta; attrs: two float64 values (pack_values(floats=[alpha, beta])). */
int plugin_affine(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                  const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                  size_t attrs_size) {
    affine_blob r;
    if (!affine_blob_read(attrs, attrs_size, &r)) {
        return ctx->set_error(ctx, "plugin_affine: expected 16 attribute bytes, got %zu",
                              attrs_size);
    }
    const float *x = inputs[0].data;
    float *out = outputs[0].data;
    for (int64_t i = 0; i < outputs[0].numel; i++) {
        out[i] = (float)(r.alpha * x[i] + r.beta);
    }
    return 0;
}

/* out = reversed x, staged through the step's scratch, which must be 64-byte aligned. */
int plugin_reverse(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                   const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                   size_t attrs_size) {
    size_t bytes = (size_t)inputs[0].numel * sizeof(float);
    if (ctx->scratch == NULL || ctx->scratch_bytes < bytes) {
        return ctx->set_error(ctx, "plugin_reverse: needs %zu scratch bytes, has %zu", bytes,
                              ctx->scratch_bytes);
    }
    if ((uintptr_t)ctx->scratch % 64 != 0) {
        return ctx->set_error(ctx, "plugin_reverse: scratch is not 64-byte aligned");
    }
    float *stage = ctx->scratch;
    const float *x = inputs[0].data;
    int64_t n = inputs[0].numel;
    for (int64_t i = 0; i < n; i++) {
        stage[n - 1 - i] = x[i];
    }
    memcpy(outputs[0].data, stage, bytes);
    return 0;
}

/* out[i] = which thread ran item i (0, 1, ... in order of first appearance). */
typedef struct {
    pthread_mutex_t mutex;
    pthread_t seen[256];
    int n_seen;
    float *out;
    int64_t sleep_ns, slow_items;
} who;

static float thread_number(who *w) {
    pthread_mutex_lock(&w->mutex);
    int found = -1;
    for (int i = 0; i < w->n_seen; i++) {
        if (pthread_equal(w->seen[i], pthread_self())) {
            found = i;
        }
    }
    if (found < 0 && w->n_seen < 256) {
        found = w->n_seen++;
        w->seen[found] = pthread_self();
    }
    pthread_mutex_unlock(&w->mutex);
    return (float)found;
}

static void who_range(void *arg, int64_t begin, int64_t end) {
    who *w = arg;
    /* long enough for every worker to wake and take a chunk; items from slow_items on
     * take a fiftieth of it */
    struct timespec pause = {0, (long)(begin < w->slow_items ? w->sleep_ns : w->sleep_ns / 50)};
    nanosleep(&pause, NULL);
    float number = thread_number(w);
    for (int64_t i = begin; i < end; i++) {
        w->out[i] = number;
    }
}

int plugin_threads(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                   const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                   size_t attrs_size) {
    /* attrs: int64 sleep_ns[, int64 slow_items (default: all)] */
    const int64_t *ints = attrs;
    who w = {.n_seen = 0, .out = outputs[0].data, .sleep_ns = ints[0],
             .slow_items = attrs_size >= 16 ? ints[1] : outputs[0].numel};
    pthread_mutex_init(&w.mutex, NULL);
    ctx->parallel_for(ctx, outputs[0].numel, 1, who_range, &w);
    pthread_mutex_destroy(&w.mutex);
    return 0;
}

/* A parallel loop inside a chunk of a parallel loop: out[i] = 1 when item i's inner loop
 * ran entirely on the thread that ran item i. */
typedef struct {
    ge_context *ctx;
    float *out;
} nest;

typedef struct {
    pthread_t owner;
    int same;
} inner_state;

static void inner_range(void *arg, int64_t begin, int64_t end) {
    inner_state *state = arg;
    if (!pthread_equal(state->owner, pthread_self())) {
        state->same = 0;
    }
}

static void outer_range(void *arg, int64_t begin, int64_t end) {
    nest *n = arg;
    for (int64_t i = begin; i < end; i++) {
        inner_state state = {pthread_self(), 1};
        n->ctx->parallel_for(n->ctx, 64, 1, inner_range, &state);
        n->out[i] = (float)state.same;
    }
}

int plugin_nested(ge_context *ctx, const ge_tensor *inputs, int32_t n_inputs,
                  const ge_tensor *outputs, int32_t n_outputs, const void *attrs,
                  size_t attrs_size) {
    nest n = {ctx, outputs[0].data};
    ctx->parallel_for(ctx, outputs[0].numel, 1, outer_range, &n);
    return 0;
}
"""


def _gcc() -> str:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.fail("gcc is required for the kernel ABI tests (outside kernel libraries are "
                    "compiled at test time); install gcc")
    return gcc


def compile_library(directory, name: str, source: str) -> str:
    source_path = directory / f"{name}.c"
    source_path.write_text(source)
    library = directory / f"lib{name}.so"
    done = subprocess.run(
        [_gcc(), "-std=gnu11", "-O1", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror",
         "-shared", "-fPIC", "-I", include_dir(), str(source_path), "-o", str(library),
         "-pthread"],
        capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return str(library)


@pytest.fixture(scope="module")
def plugin(tmp_path_factory) -> str:
    return compile_library(tmp_path_factory.mktemp("plugin"), "plugin", PLUGIN_SOURCE)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def plugin_resolver(plugin: str):
    """Registers the plugin's kernels the way a plugin's register_kernels hook would."""
    registry = Registry()
    registry.current_plugin = "test-plugin"
    for symbol in ("plugin_affine", "plugin_reverse", "plugin_threads", "plugin_nested"):
        registry.add_kernel(KernelSpec(symbol, CKernel(symbol, library=plugin), domain="test",
                                       name=f"test.{symbol}"))
    return registry_resolver(registry)


def unary_plan(kernel: str, n: int, attrs: bytes = b"", scratch=(0, 0)) -> Plan:
    tensors = (TensorSpec("x", F32, (n,), Storage.INPUT),
               TensorSpec("out", F32, (n,), Storage.OUTPUT))
    steps = (Step("node0", "test.Op", kernel, KernelKind.C, (0,), (1,), attrs, *scratch),)
    arena = scratch[0] + scratch[1]
    return Plan(tensors, steps, (0,), (1,), ("x",), ("out",), (),
                MemoryStats(arena, arena, arena))


# -- the header ---------------------------------------------------------------------------


@pytest.mark.parametrize("header", ["kernel.h", "blob.h"])
@pytest.mark.parametrize("standard", ["c99", "c11"])
def test_the_header_compiles_on_its_own_as_strict_c(tmp_path, standard, header):
    source = tmp_path / "only_header.c"
    source.write_text(f'#include "ge_hub/{header}"\nint main(void) {{ return 0; }}\n')
    done = subprocess.run([_gcc(), f"-std={standard}", "-pedantic", "-Wall", "-Wextra",
                           "-Werror", "-I", include_dir(), "-c", str(source), "-o",
                           str(tmp_path / "only_header.o")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_header_agrees_with_the_python_side(plugin):
    text = open(HEADER).read()
    assert int(re.search(r"#define GE_KERNEL_ABI_VERSION (\d+)", text).group(1)) == \
        _core.ABI_VERSION
    assert int(re.search(r"#define GE_MAX_RANK (\d+)", text).group(1)) == _core.MAX_RANK
    codes = {name.lower(): int(code) for name, code in re.findall(r"GE_(\w+) = (\d+),", text)}
    assert codes == {dtype.value: code for dtype, code in DTYPE_CODES.items()}
    itemsize = ctypes.CDLL(plugin).plugin_itemsize
    itemsize.restype = ctypes.c_size_t
    for dtype, code in DTYPE_CODES.items():
        assert itemsize(code) == dtype.itemsize, dtype
    assert itemsize(len(DTYPE_CODES)) == 0 and itemsize(-1) == 0


def test_builtin_kernels_are_listed_by_symbol():
    table = _core.builtin_kernels()
    assert {"ge_copy", "ge_nn_matmul_f32"} <= table.keys()
    # Test kernels (core/testing/) are built for the tests only, never into the core.
    assert not [name for name in table if name.startswith("ge_test_")]
    assert all(isinstance(address, int) and address > 0 for address in table.values())
    assert len(set(table.values())) == len(table)


# -- an outside kernel library ------------------------------------------------------------


def test_an_outside_library_kernel_runs_with_its_attributes(plugin, rng):
    attrs = pack_values(floats=[-1.5, 0.25])
    executor = Executor(unary_plan("test.plugin_affine", 37, attrs), plugin_resolver(plugin))
    x = rng.uniform(-3, 3, 37).astype(np.float32)
    (out,) = executor.run([x])
    np.testing.assert_allclose(out, -1.5 * x + 0.25, rtol=1e-6)


def test_an_outside_kernel_error_names_the_node(plugin, rng):
    executor = Executor(unary_plan("test.plugin_affine", 4, pack_values(floats=[1.0])),
                        plugin_resolver(plugin))
    with pytest.raises(KernelError, match=r"node 'node0' \(op test.Op\): plugin_affine: "
                                          r"expected 16 attribute bytes, got 8"):
        executor.run([rng.uniform(-3, 3, 4).astype(np.float32)])


def test_a_kernel_gets_its_aligned_scratch(plugin, rng):
    n = 45
    scratch = (192, -(-n * 4 // 64) * 64)
    executor = Executor(unary_plan("test.plugin_reverse", n, scratch=scratch),
                        plugin_resolver(plugin))
    x = rng.uniform(-3, 3, n).astype(np.float32)
    np.testing.assert_array_equal(executor.run([x])[0], x[::-1])
    short = Executor(unary_plan("test.plugin_reverse", n, scratch=(0, 64)),
                     plugin_resolver(plugin))
    with pytest.raises(KernelError, match="needs 180 scratch bytes, has 64"):
        short.run([x])


def test_parallel_for_spreads_chunks_over_the_pool(plugin):
    threads = _core.num_threads()
    n = 4 * threads
    executor = Executor(unary_plan("test.plugin_threads", n, pack_values([20_000_000])),
                        plugin_resolver(plugin))
    (out,) = executor.run([np.ones(n, np.float32)])
    assert sorted(set(out.tolist())) == [float(i) for i in range(threads)]


def test_the_pool_has_the_size_asked_for(plugin):
    code = f"""
        import numpy as np
        from ge_hub import _core
        from ge_hub.executor import Executor
        from ge_hub.kernels.base import pack_values
        from test_kernel_abi import plugin_resolver, unary_plan
        executor = Executor(unary_plan("test.plugin_threads", 16, pack_values([20_000_000])),
                            plugin_resolver({plugin!r}))
        (out,) = executor.run([np.ones(16, np.float32)])
        print(_core.num_threads(), len(set(out.tolist())))
    """
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60, cwd=os.path.dirname(__file__),
                          env={**os.environ, "GE_HUB_NUM_THREADS": "4"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["4", "4"]


def _threads_by_item(plugin, n, sleep_ns, slow_items):
    """Which thread ran each of n items (numbered by first appearance) on a pool of 4
    threads, in a process of its own; item i sleeps sleep_ns, or sleep_ns / 50 from
    slow_items on."""
    code = f"""
        import numpy as np
        from ge_hub.executor import Executor
        from ge_hub.kernels.base import pack_values
        from test_kernel_abi import plugin_resolver, unary_plan
        attrs = pack_values([{sleep_ns}, {slow_items}])
        executor = Executor(unary_plan("test.plugin_threads", {n}, attrs),
                            plugin_resolver({plugin!r}))
        (out,) = executor.run([np.ones({n}, np.float32)])
        print(" ".join(str(int(v)) for v in out))
    """
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60, cwd=os.path.dirname(__file__),
                          env={**os.environ, "GE_HUB_NUM_THREADS": "4"})
    assert done.returncode == 0, done.stderr
    return np.array(done.stdout.split(), dtype=int)


def test_each_thread_runs_its_own_range_of_chunks(plugin):
    # 16 items, 4 chunks per thread: with every thread awake, each runs its home range
    # (consecutive items, the same share of every loop), none anyone else's.
    by_item = _threads_by_item(plugin, 16, 20_000_000, 16).reshape(4, 4)
    assert (by_item == by_item[:, :1]).all(), by_item
    assert len(set(by_item[:, 0])) == 4, by_item


def test_threads_done_with_their_range_take_what_is_left_of_the_others(plugin):
    # The first range's items are slow: the threads that finish theirs take its rest.
    by_item = _threads_by_item(plugin, 16, 40_000_000, 4)
    assert len(set(by_item[:4])) > 1, by_item


def test_a_nested_parallel_loop_runs_inline(plugin):
    n = 4 * _core.num_threads()
    executor = Executor(unary_plan("test.plugin_nested", n), plugin_resolver(plugin))
    (out,) = executor.run([np.ones(n, np.float32)])
    np.testing.assert_array_equal(out, np.ones(n, np.float32))


# -- loading libraries --------------------------------------------------------------------


def test_the_abi_version_of_a_library_is_checked(tmp_path):
    kernel = ("int k(void *c, const void *i, int ni, const void *o, int no, const void *a, "
              "unsigned long s) { return 0; }\n")
    stale = compile_library(tmp_path, "stale", "const int ge_kernel_abi_version = 999;\n"
                            + kernel)
    unversioned = compile_library(tmp_path, "unversioned", kernel)
    for library, message in ((stale, "was built for kernel ABI 999, this ge_hub runs ABI 1"),
                             (unversioned, "does not export ge_kernel_abi_version")):
        registry = Registry()
        registry.add_kernel(KernelSpec("Op", CKernel("k", library=library), name="k"))
        with pytest.raises(ValueError, match=rf"node 'node0' \(op test.Op, kernel 'k'\): "
                                             rf"kernel library .* {message}"):
            Executor(unary_plan("k", 4), registry_resolver(registry))


def test_missing_libraries_and_symbols_are_reported(plugin, tmp_path):
    registry = Registry()
    registry.add_kernel(KernelSpec("Op", CKernel("plugin_nothing", library=plugin), name="a"))
    registry.add_kernel(KernelSpec("Op", CKernel("k", library=str(tmp_path / "no.so")),
                                   name="b"))
    resolve = registry_resolver(registry)
    with pytest.raises(LookupError, match="has no symbol 'plugin_nothing'"):
        Executor(unary_plan("a", 4), resolve)
    with pytest.raises(OSError, match="no.so"):
        Executor(unary_plan("b", 4), resolve)


def test_the_header_is_found_beside_the_package():
    assert os.path.exists(HEADER)
    assert "ge_kernel_fn" in open(HEADER).read()
