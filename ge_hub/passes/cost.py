"""The cost model the `schedule` pass plans streams with: time of a step from its shapes.

A step's work is its arithmetic (FLOPs: a convolution's or matrix product's
multiply-adds counted twice, one per output element for everything else) at
`FLOP_RATE`, plus the bytes it reads and writes at `BYTE_RATE`, plus a fixed
`STEP_OVERHEAD`. Run with t threads of the pool, the work divides among at most t
threads, and at most one per `PER_THREAD_WORK` of work, at `PARALLEL_EFFICIENCY`; the
step then pays `POOL_WAKE` for handing chunks to the pool's workers. A step whose work is
below `INLINE_WORK` never wakes the pool (it runs on its calling thread, so a stream of
tiny ops costs what the plain loop costs).

The model compares schedules of the same steps with each other, so its constants need
to be right in ratio only. FLOP_RATE is from one-thread runs of the branchy bench models
on the development machine (a shared 2-CPU VM); the hand-off costs (POOL_WAKE,
EVENT_COST, REGION_LAUNCH) are estimates: that machine ran at a load of 3-4, where a
woken thread starts milliseconds late, so they could not be measured there.
"""

from __future__ import annotations

import math
import os

from ge_hub.ir.graph import Node

# One thread on the development machine: ~90 GFLOP/s in the 8-tower MLP's small GEMMs,
# ~36 in the Inception blocks' convolutions (bench/branchy_models.py).
FLOP_RATE = 5.0e10          # FLOP/s of one core in a conv/GEMM kernel
BYTE_RATE = 4.0e9           # bytes/s of one core streaming memory
STEP_OVERHEAD = 0.5e-6      # s: calling a kernel
POOL_WAKE = 12e-6           # s: waking the pool's workers and waiting for the last chunk
# Two threads in one conv/GEMM step run it nearly twice as fast on the development machine
# (0.85 had `auto` put the Inception blocks' branches on 2 streams, measured 0.95-0.97x of
# one stream on a quiet machine; the 8-tower MLP, whose steps are too small to split, keeps
# its streams and its 1.6x).
PARALLEL_EFFICIENCY = 0.95
# A thread of an intra-op loop needs about this much work to pay for its share of the
# hand-off: a step of w seconds keeps at most w / PER_THREAD_WORK threads busy.
PER_THREAD_WORK = 25e-6
EVENT_COST = 3e-6           # s: a cross-stream wait that finds its event not yet recorded
REGION_LAUNCH = 15e-6       # s: starting the stream runners of a concurrent region
# Below this much work a step runs on its calling thread: on two threads, waking the
# pool would cost more than the half of the step it saves (2 x POOL_WAKE).
INLINE_WORK = 2 * POOL_WAKE
# `auto` takes a concurrent schedule for a region only when the model says it is this
# much faster than running the region's steps one by one with the whole pool.
AUTO_MARGIN = 0.9

_MATMUL_OPS = {"MatMul", "Gemm", "MatMulInteger", "QLinearMatMul", "FusedGemm", "FusedMatMul"}
_CONV_OPS = {"Conv", "FusedConv", "ConvTranspose", "ConvInteger", "QLinearConv"}


def threads_available() -> int:
    """The executor's pool size (threadpool.c's rule): GE_HUB_NUM_THREADS, else the CPUs
    this process may run on."""
    text = os.environ.get("GE_HUB_NUM_THREADS", "")
    try:
        wanted = int(text)
    except ValueError:
        wanted = 0
    if wanted >= 1:
        return min(wanted, 256)
    try:
        return max(1, min(len(os.sched_getaffinity(0)), 256))
    except (AttributeError, OSError):
        return max(1, min(os.cpu_count() or 1, 256))


def _numel(value) -> int:
    if value is None:
        return 0
    try:
        return math.prod(int(d) for d in value.type.shape)
    except (TypeError, ValueError):
        return 0


def _nbytes(value) -> int:
    if value is None:
        return 0
    return _numel(value) * value.type.dtype.itemsize


def step_flops(node: Node) -> int:
    out = _numel(node.outputs[0]) if node.outputs else 0
    op = node.op
    if op in _CONV_OPS and len(node.inputs) > 1 and node.inputs[1] is not None:
        weight = node.inputs[3 if op == "QLinearConv" else 1]
        shape = [int(d) for d in weight.type.shape] if weight is not None else []
        if op == "ConvTranspose":  # [Cin, Cout/g, k...]: each input element scatters
            return 2 * _numel(node.inputs[0]) * math.prod(shape[1:])
        return 2 * out * math.prod(shape[1:])
    if op == "PointwiseDepthwise" and len(node.inputs) > 3 and node.inputs[3] is not None:
        # the pointwise product over every input position, then the depthwise window
        expanded = int(node.inputs[1].type.shape[0])
        taps = math.prod(int(d) for d in node.inputs[3].type.shape[1:])
        return 2 * _numel(node.inputs[0]) * expanded + 2 * out * taps
    if op == "StridedMatMul" and node.attrs.get("a_shape"):
        return 2 * out * int(node.attrs["a_shape"][-1])
    if op in _MATMUL_OPS and node.inputs and node.inputs[0] is not None:
        a = [int(d) for d in node.inputs[0].type.shape]
        if not a:
            return out
        k = a[0] if op == "Gemm" and node.attrs.get("transA", 0) and len(a) == 2 else a[-1]
        return 2 * out * k
    if op == "Attention" and len(node.inputs) >= 2 and node.inputs[1] is not None:
        keys = [int(d) for d in node.inputs[1].type.shape]
        return 4 * out * (keys[-2] if len(keys) >= 2 else 1)
    return out


def step_bytes(node: Node) -> int:
    return sum(_nbytes(v) for v in node.inputs) + sum(_nbytes(v) for v in node.outputs)


def step_work(node: Node) -> float:
    """Seconds of work on one thread, overhead excluded."""
    return step_flops(node) / FLOP_RATE + step_bytes(node) / BYTE_RATE


def runs_inline(node: Node) -> bool:
    """Whether the step's work is too small to be worth waking the pool."""
    return step_work(node) < INLINE_WORK


def step_time(node: Node, threads: int) -> float:
    """Seconds the step takes given `threads` threads (1: on its calling thread)."""
    work = step_work(node)
    if threads <= 1 or work < INLINE_WORK:
        return STEP_OVERHEAD + work
    useful = max(1.0, min(threads, work / PER_THREAD_WORK))
    return STEP_OVERHEAD + POOL_WAKE + work / (useful * PARALLEL_EFFICIENCY)
