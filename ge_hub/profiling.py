"""Profiles of a compiled model: per-step times from the executor's hook, as a Chrome trace.

`CompiledModel.profile(inputs, runs=N)` runs the plan through the executor's per-step
hook (`Executor.run_traced`: each step's start and end on CLOCK_MONOTONIC and the lane,
thread or stream, it ran on) and returns a `Profile`:

- `trace()` / `save(path)`: the Chrome trace-event JSON that Perfetto and
  chrome://tracing open: one complete event per step (node name; op, kernel, input and
  output shapes, bytes moved, FLOPs where known, in `args`), one lane (tid) per executor
  lane, each run as an enclosing event, and the compile phases (each pass, memory
  planning, emission) in a process of their own, on the same clock.
- `summary()` / `format_summary()`: the top steps and ops by time, their share of the
  run and the GFLOP/s they achieved (what `ge-hub profile` prints).

FLOPs are counted for Conv, ConvTranspose, MatMul, Gemm and their fused forms (2 per
multiply-add), from the optimized graph's nodes: a plan's weights may be prepacked into
shapes that no longer say the kernel size.
"""

from __future__ import annotations

import collections
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ge_hub import precision_report
from ge_hub.plan import Plan
from ge_hub.profiling_phases import CompileRecord, Phase

COMPILE_PID = 1
RUN_PID = 2


@dataclass(frozen=True)
class StepInfo:
    """What a step computes, for the trace and the summary."""

    index: int
    node: str
    op: str
    kernel: str
    inputs: tuple[str, ...]    # "name dtype[d0,d1]" of each input (omitted: "-")
    outputs: tuple[str, ...]
    bytes: int                 # bytes of its inputs and outputs
    flops: int | None          # None: not known for this op
    segment: int | None = None  # of a model run in segments: which segment's plan
    precision: str = "fp32"    # "bf16" or "bf16x3" for a product step on a bf16 kernel


def _describe(plan: Plan, t: int) -> str:
    if t < 0:
        return "-"
    spec = plan.tensors[t]
    return f"{spec.name} {spec.dtype.value}[{','.join(map(str, spec.shape))}]"


def _prod(values: Sequence[int]) -> int:
    return math.prod(int(v) for v in values)


def _static_shape(value) -> tuple[int, ...] | None:
    if value is None:
        return None
    shape = getattr(value.type, "shape", None)
    if shape is None or not all(isinstance(d, (int, np.integer)) for d in shape):
        return None
    return tuple(int(d) for d in shape)


def node_flops(node) -> int | None:
    """2 x multiply-adds of a Conv, ConvTranspose, MatMul or Gemm node (fused forms
    included: their op name says which; a PointwiseDepthwise's both Convs), else None."""
    op = node.op
    inputs = list(node.inputs)
    outputs = list(node.outputs)
    if not inputs or not outputs:
        return None
    x = _static_shape(inputs[0])
    y = _static_shape(outputs[0])
    w = _static_shape(inputs[1]) if len(inputs) > 1 else None
    if x is None or y is None:
        return None
    if op == "PointwiseDepthwise" and w is not None and len(inputs) > 3:
        w2 = _static_shape(inputs[3])  # the pointwise product, then the depthwise window
        return 2 * _prod(x) * w[0] + 2 * _prod(y) * _prod(w2[1:]) if w2 is not None else None
    if "ConvTranspose" in op:
        return 2 * _prod(x) * _prod(w[1:]) if w is not None and len(w) >= 2 else None
    if "Conv" in op and "Integer" not in op:
        return 2 * _prod(y) * _prod(w[1:]) if w is not None and len(w) >= 2 else None
    if op == "StridedMatMul":  # its depth is its A view's columns, not its input's
        a_shape = list(node.attrs.get("a_shape") or ())
        return 2 * _prod(y) * int(a_shape[-1]) if a_shape else None
    if "Gemm" in op:
        trans_a = int(node.attrs.get("transA", 0) or 0)
        if len(x) != 2:
            return None
        return 2 * _prod(y) * (x[0] if trans_a else x[1])
    if "MatMul" in op and "Integer" not in op:
        return 2 * _prod(y) * (x[-1] if len(x) >= 1 else 1)
    return None


def step_infos(plan: Plan, graphs: Sequence[Any] = (), *, offset: int = 0,
               segment: int | None = None) -> list[StepInfo]:
    """A StepInfo per step of the plan; FLOPs from the nodes of `graphs` (the optimized
    graphs the plan was emitted from) matched by node name. Indices start at `offset`
    (a segment's first step)."""
    nodes = {}
    for graph in graphs:
        for node in graph.nodes:
            nodes.setdefault(node.name, node)
    infos = []
    for index, step in enumerate(plan.steps):
        used = [t for t in (*step.inputs, *step.outputs) if t >= 0]
        node = nodes.get(step.node)
        infos.append(StepInfo(
            offset + index, step.node, step.op, step.kernel,
            tuple(_describe(plan, t) for t in step.inputs),
            tuple(_describe(plan, t) for t in step.outputs),
            sum(plan.tensors[t].nbytes for t in used),
            node_flops(node) if node is not None else None, segment,
            precision_report.step_precision(step)))
    return infos


@dataclass
class Profile:
    """Step records of one or more runs of one plan, with the plan's compile phases."""

    name: str
    steps: list[StepInfo]
    records: list[np.ndarray]              # per run: int64 [n_steps, 3] start, end, lane
    runs: list[tuple[int, int]]            # per run: measured start, end (ns)
    phases: list[Phase] = field(default_factory=list)
    streams: int = 1
    # of a model run in segments: per run, each segment's (start, end) in ns
    segment_spans: list[list[tuple[int, int]]] = field(default_factory=list)

    # -- figures ------------------------------------------------------------------

    def _durations(self) -> list[np.ndarray]:
        """Per run: each step's nanoseconds (a step that did not run: 0)."""
        return [np.where(r[:, 0] >= 0, r[:, 1] - r[:, 0], 0) for r in self.records]

    def step_seconds(self) -> np.ndarray:
        """Mean seconds of each step over the runs (a step that did not run: 0)."""
        if not self.records:
            return np.zeros(len(self.steps))
        return np.mean(self._durations(), axis=0) / 1e9

    def steps_seconds_per_run(self) -> np.ndarray:
        """Per run: its steps' seconds added up (what the steps took, without the call's
        binding and returning)."""
        return np.array([float(np.sum(d)) for d in self._durations()]) / 1e9

    def run_seconds(self) -> float:
        """Mean measured seconds of one run (the executor call, as the caller saw it)."""
        return float(np.mean([end - start for start, end in self.runs])) / 1e9

    def coverage(self) -> float:
        """Summed step time over measured run time, per run, averaged: how much of a run
        the steps account for (below 1 on one lane; above 1 when lanes overlap)."""
        return float(np.mean([np.sum(d) / max(end - start, 1)
                              for d, (start, end) in zip(self._durations(), self.runs)]))

    def lanes(self) -> list[int]:
        return sorted({int(lane) for r in self.records for lane in r[:, 2] if lane >= 0})

    def summary(self, top: int = 10) -> dict[str, Any]:
        seconds = self.step_seconds()
        total = float(seconds.sum()) or 1e-12

        def rate(flops, secs):
            return flops / secs / 1e9 if flops and secs > 0 else None

        order = np.argsort(-seconds, kind="stable")[:top]
        steps = [{"step": int(i), "node": self.steps[i].node, "op": self.steps[i].op,
                  "kernel": self.steps[i].kernel, "precision": self.steps[i].precision,
                  "ms": float(seconds[i]) * 1e3,
                  "share": float(seconds[i]) / total,
                  "gflops": rate(self.steps[i].flops, float(seconds[i]))}
                 for i in order]
        by_op: dict[str, list] = collections.defaultdict(lambda: [0.0, 0, 0, True])
        for info, secs in zip(self.steps, seconds):
            entry = by_op[info.op]
            entry[0] += float(secs)
            entry[1] += 1
            entry[2] += info.flops or 0
            entry[3] = entry[3] and info.flops is not None
        ops = [{"op": op, "steps": n, "ms": secs * 1e3, "share": secs / total,
                "gflops": rate(flops, secs) if known else None}
               for op, (secs, n, flops, known) in sorted(by_op.items(), key=lambda kv: -kv[1][0])]
        flops = [s.flops for s in self.steps if s.flops]
        return {
            "model": self.name,
            "runs": len(self.records),
            "steps": len(self.steps),
            "segments": len(self.segment_spans[0]) if self.segment_spans else 1,
            "lanes": self.lanes(),
            "run_ms": self.run_seconds() * 1e3,
            "steps_ms": total * 1e3,
            "coverage": self.coverage(),
            "gflop": sum(flops) / 1e9,
            "gflops": rate(sum(flops), self.run_seconds()),
            "top_steps": steps,
            "top_ops": ops[:top],
            "compile_ms": [{"phase": p.name, "category": p.category,
                            "ms": (p.end_ns - p.start_ns) / 1e6} for p in self.phases],
        }

    def format_summary(self, top: int = 10) -> str:
        s = self.summary(top)

        def gf(value):
            return f"{value:8.1f}" if value is not None else "       -"

        segments = f" in {s['segments']} segments" if s["segments"] > 1 else ""
        lines = [f"{s['model']}: {s['steps']} steps{segments}, {s['runs']} profiled run(s), "
                 f"lanes {s['lanes']}",
                 f"run {s['run_ms']:.3f} ms (mean); steps add up to {s['steps_ms']:.3f} ms "
                 f"({s['coverage']:.1%} of the run); {s['gflop']:.3f} GFLOP counted"
                 + (f", {s['gflops']:.1f} GFLOP/s" if s["gflops"] else ""),
                 "", f"top {len(s['top_steps'])} steps by time:",
                 f"  {'ms':>9} {'share':>6} {'GFLOP/s':>8}  step  node (op, kernel)"]
        for row in s["top_steps"]:
            lines.append(f"  {row['ms']:9.3f} {row['share']:6.1%} {gf(row['gflops'])}  "
                         f"{row['step']:4d}  {row['node']} ({row['op']}, {row['kernel']}"
                         + (f" in {row['precision']})" if row["precision"] != "fp32"
                            else ")"))
        lines += ["", f"top {len(s['top_ops'])} ops by time:",
                  f"  {'ms':>9} {'share':>6} {'GFLOP/s':>8}  steps  op"]
        for row in s["top_ops"]:
            lines.append(f"  {row['ms']:9.3f} {row['share']:6.1%} {gf(row['gflops'])}  "
                         f"{row['steps']:5d}  {row['op']}")
        if self.phases:
            def ms(category):
                return sum(p.end_ns - p.start_ns for p in self.phases
                           if p.category == category) / 1e6

            lines += ["", f"compile: passes {ms('pass'):.1f} ms, emission {ms('emission'):.1f}"
                      f" ms (of which memory planning {ms('planning'):.1f} ms); "
                      f"{len(self.phases)} phases in the trace"]
        return "\n".join(lines)

    # -- the Chrome trace ---------------------------------------------------------

    def trace(self) -> dict[str, Any]:
        """The trace-event JSON object (the 'JSON Object Format': traceEvents plus
        metadata); times in microseconds from the first event."""
        starts = [p.start_ns for p in self.phases] + [start for start, _ in self.runs]
        origin = min(starts, default=0)

        def us(ns: int) -> float:
            return (ns - origin) / 1e3

        events: list[dict[str, Any]] = [
            {"ph": "M", "name": "process_name", "pid": COMPILE_PID, "tid": 0,
             "args": {"name": f"ge-hub compile: {self.name}"}},
            {"ph": "M", "name": "process_name", "pid": RUN_PID, "tid": 0,
             "args": {"name": f"ge-hub run: {self.name}"}},
            {"ph": "M", "name": "thread_name", "pid": COMPILE_PID, "tid": 0,
             "args": {"name": "compiler"}},
        ]
        for lane in self.lanes() or [0]:
            # One stream: every step runs on the calling thread; with streams, the
            # executor's lane is the step's stream (ge_run_trace in core/src/executor.h).
            label = f"stream {lane}" if self.streams > 1 else "calling thread"
            events.append({"ph": "M", "name": "thread_name", "pid": RUN_PID, "tid": lane,
                           "args": {"name": label}})
        for p in sorted(self.phases, key=lambda p: (p.start_ns, -p.end_ns)):
            events.append({"ph": "X", "name": p.name, "cat": p.category, "pid": COMPILE_PID,
                           "tid": 0, "ts": us(p.start_ns), "dur": (p.end_ns - p.start_ns) / 1e3})
        for number, (records, (start, end)) in enumerate(zip(self.records, self.runs)):
            events.append({"ph": "X", "name": f"run {number}", "cat": "run", "pid": RUN_PID,
                           "tid": 0, "ts": us(start), "dur": (end - start) / 1e3,
                           "args": {"steps": len(self.steps)}})
            spans = self.segment_spans[number] if number < len(self.segment_spans) else []
            for index, (begin, finish) in enumerate(spans):
                events.append({"ph": "X", "name": f"segment {index}", "cat": "segment",
                               "pid": RUN_PID, "tid": 0, "ts": us(begin),
                               "dur": (finish - begin) / 1e3,
                               "args": {"steps": sum(1 for i in self.steps
                                                     if i.segment == index)}})
            for info, (begin, finish, lane) in zip(self.steps, records.tolist()):
                if begin < 0:
                    continue
                seconds = (finish - begin) / 1e9
                args: dict[str, Any] = {"step": info.index, "op": info.op,
                                        "kernel": info.kernel, "precision": info.precision,
                                        "inputs": list(info.inputs),
                                        "outputs": list(info.outputs), "bytes": info.bytes}
                if info.segment is not None:
                    args["segment"] = info.segment
                if info.flops is not None:
                    args["flops"] = info.flops
                    if seconds > 0:
                        args["gflops_per_s"] = round(info.flops / seconds / 1e9, 3)
                events.append({"ph": "X", "name": info.node, "cat": info.op, "pid": RUN_PID,
                               "tid": int(lane), "ts": us(begin),
                               "dur": (finish - begin) / 1e3, "args": args})
        return {"traceEvents": events, "displayTimeUnit": "ms",
                "otherData": {"model": self.name, "runs": len(self.records),
                              "steps": len(self.steps), "streams": self.streams,
                              "segments": len(self.segment_spans[0])
                              if self.segment_spans else 1,
                              "clock": "CLOCK_MONOTONIC"}}

    def save(self, path) -> None:
        with open(path, "w") as f:
            json.dump(self.trace(), f)


def profile_executor(executor, arrays: Sequence[np.ndarray], *, name: str = "model",
                     runs: int = 1, warmup: int = 1, record: CompileRecord | None = None,
                     streams: int = 1) -> Profile:
    """Run `executor` `warmup` times plainly, then `runs` times through the per-step hook."""
    if runs < 1:
        raise ValueError(f"runs must be at least 1, got {runs}")
    if warmup < 0:
        raise ValueError(f"warmup must be non-negative, got {warmup}")
    for _ in range(warmup):
        executor.run(arrays)
    records, spans = [], []
    for _ in range(runs):
        start = time.monotonic_ns()
        _, table = executor.run_traced(arrays)
        spans.append((start, time.monotonic_ns()))
        records.append(table)
    record = record or CompileRecord()
    return Profile(name, step_infos(executor.plan, record.graphs), records, spans,
                   list(record.phases), streams)


def profile_segments(segmented, names: Sequence[str], arrays: Sequence[np.ndarray], *,
                     name: str = "model", runs: int = 1, warmup: int = 1) -> Profile:
    """`profile_executor` for a model that runs in segments
    (`ge_hub.segments.SegmentedModel`): each run goes through every segment's plan with
    the per-step hook; the steps of all segments make one list (numbered over the run,
    each with its `segment`), and each segment is an event of its own in the trace.
    The profiled runs must take the same segments (the same inputs do). No compile
    phases: the segments are planned while the model runs."""
    if runs < 1:
        raise ValueError(f"runs must be at least 1, got {runs}")
    if warmup < 0:
        raise ValueError(f"warmup must be non-negative, got {warmup}")
    for _ in range(warmup):
        segmented.run(names, arrays)
    records, spans, segment_spans = [], [], []
    plans: list[Plan] | None = None
    for _ in range(runs):
        tables: list[np.ndarray] = []
        times: list[tuple[int, int]] = []
        used: list[Plan] = []
        start = time.monotonic_ns()
        segmented.run(names, arrays, runner=_traced_runner(tables, times, used))
        spans.append((start, time.monotonic_ns()))
        if plans is None:
            plans = used
        elif [id(p) for p in plans] != [id(p) for p in used]:
            raise ValueError("the profiled runs took different segments; profile with "
                             "inputs that decide the same shapes")
        records.append(np.concatenate(tables) if tables else np.zeros((0, 3), np.int64))
        segment_spans.append(times)
    steps: list[StepInfo] = []
    for index, plan in enumerate(plans or []):
        steps += step_infos(plan, offset=len(steps), segment=index)
    streams = max((p.n_streams for p in plans or []), default=1)
    return Profile(name, steps, records, spans, [], streams, segment_spans)


def _traced_runner(tables: list, times: list, used: list):
    """A `SegmentedModel.run` runner that runs each segment through the per-step hook,
    keeping its step table, its (start, end) and its plan."""
    def runner(index, entry, inputs):
        begin = time.monotonic_ns()
        outputs, table = entry.executor.run_traced(inputs)
        times.append((begin, time.monotonic_ns()))
        tables.append(table)
        used.append(entry.plan)
        return outputs
    return runner
