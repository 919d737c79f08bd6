"""Where the time goes, per op type: ge-hub from single-op graphs, ONNX Runtime from its profiler.

ge-hub has no built-in profiler yet, so its profile is rebuilt from the outside: the
model is compiled as usual (the same passes run, so folded and fused nodes are the ones
that execute), and every node of the optimized graph is compiled again on its own, with
its constant inputs and random data of its real shapes for the others, and timed. Nodes
with the same op, attributes and input types are timed once and counted as often as they
occur. The fixed cost of one `run` call, measured on a one-element Relu, is taken off
each node's time, so that the per-node figures add up to about a whole-model run.

ONNX Runtime's own profiler gives per-node kernel times of the optimized (fused) graph.
Both profiles carry `run_s`, a whole-model run timed alongside, to set the sum against.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from bench.timing import time_interleaved


def _random_input(type_, rng: np.random.Generator) -> np.ndarray:
    dtype = type_.dtype.numpy
    shape = tuple(type_.shape)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    # Integer inputs computed inside a model are indices or sizes: zero is always valid.
    return np.zeros(shape, dtype)


def _node_key(node) -> tuple:
    """Nodes with equal keys cost the same: same op, attributes, input types and small
    constants (shapes, axes, pads); large constants (weights) only need the same type."""

    def describe(value):
        if value is None:
            return None
        if value.const is None:
            return str(value.type)
        small = value.const.size <= 64
        return str(value.type), "const", value.const.tobytes() if small else None

    return (node.qualified_op, repr(sorted(node.attrs.items())),
            tuple(describe(v) for v in node.inputs))


def _single_op_model(node, rng):
    import ge_hub
    from ge_hub.ir.graph import Graph

    graph = Graph(f"profile_{node.name}")
    inputs, feed = [], []
    for index, value in enumerate(node.inputs):
        if value is None:
            inputs.append(None)
        elif value.const is not None:
            inputs.append(graph.add_constant(value.const))
        else:
            inputs.append(graph.add_input(f"in{index}", value.type))
            feed.append(_random_input(value.type, rng))
    copy = graph.add_node(node.op, inputs, [v.type for v in node.outputs], dict(node.attrs),
                          domain=node.domain)
    graph.set_outputs(copy.outputs)
    return ge_hub.compile(graph), feed


def _call_overhead(rounds: int) -> float:
    import ge_hub
    from ge_hub import DType, TensorType
    from ge_hub.ir.graph import Graph

    graph = Graph("overhead")
    x = graph.add_input("x", TensorType(DType.FLOAT32, (1,)))
    graph.set_outputs(graph.add_node("Relu", [x], [x.type]).outputs)
    model = ge_hub.compile(graph)
    feed = [np.ones(1, np.float32)]
    return time_interleaved({"relu": lambda: model.run(feed)}, rounds=rounds)["relu"]["median"]


def profile_ge_hub(graph, input_shapes: Mapping[str, Sequence[int]], rounds: int = 5,
                   whole_model: Callable[[], object] | None = None) -> dict:
    """Seconds per run of each op type of `graph` compiled for `input_shapes`.

    `whole_model`, a call that runs the whole compiled model, is timed in the same
    interleaved rounds, so that the per-op sum can be set beside it.
    """
    from ge_hub.compiler import optimize
    from ge_hub.passes.schedule import is_step
    from ge_hub.plan import FALLBACK_PREFIX

    optimized = optimize(graph.copy(), {k: list(v) for k, v in input_shapes.items()})
    rng = np.random.default_rng(0)
    groups: dict[tuple, list] = {}
    views = collections.Counter()
    for node in optimized.nodes:
        if not is_step(node):
            # a view of its input, or a Concat its inputs were written into: no kernel runs
            views[node.qualified_op] += 1
            continue
        groups.setdefault(_node_key(node), []).append(node)

    runners, kernels = {}, {}
    for index, nodes in enumerate(groups.values()):
        model, feed = _single_op_model(nodes[0], rng)
        runners[str(index)] = (lambda m=model, f=feed: m.run(f))
        spec = nodes[0].meta.get("kernel")
        kernels[str(index)] = getattr(spec, "name", "")
    if whole_model is not None:
        runners["whole model"] = lambda: whole_model()
    timings = time_interleaved(runners, rounds=rounds, min_round_seconds=0.005, warmup=2)
    overhead = _call_overhead(rounds)
    whole_s = timings["whole model"]["median"] if whole_model is not None else None

    by_op = collections.defaultdict(float)
    counts = collections.Counter(views)
    fallback = collections.Counter()
    for index, (key, nodes) in enumerate(groups.items()):
        op = key[0]
        seconds = max(0.0, timings[str(index)]["median"] - overhead)
        by_op[op] += seconds * len(nodes)
        counts[op] += len(nodes)
        if kernels[str(index)].startswith(FALLBACK_PREFIX):
            fallback[op] += len(nodes)
    return _profile_dict(dict(by_op), dict(counts), call_overhead_s=overhead, run_s=whole_s,
                         method="single-op graphs", fallback_nodes=dict(fallback))


def summarize_ort_profile(path: str, skip_runs: int = 0) -> dict:
    """Per-op-type kernel seconds per run from an ONNX Runtime profile file.

    The first `skip_runs` runs (warm-up) are left out; node events are assigned to a run
    by their timestamps.
    """
    with open(path) as f:
        events = json.load(f)
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                  if e.get("cat") == "Session" and e.get("name") == "model_run")
    kept = runs[skip_runs:]
    if not kept:
        raise ValueError(f"{path}: no profiled runs after skipping {skip_runs}")
    start = kept[0][0]
    by_op = collections.defaultdict(float)
    counts = collections.Counter()
    for event in events:
        if event.get("cat") != "Node" or not event["name"].endswith("_kernel_time"):
            continue
        if event["ts"] < start:
            continue
        op = event.get("args", {}).get("op_name", "?")
        by_op[op] += event["dur"] * 1e-6 / len(kept)
        counts[op] += 1
    per_run_counts = {op: n // len(kept) for op, n in counts.items()}
    run_seconds = sum(end - begin for begin, end in kept) * 1e-6 / len(kept)
    return _profile_dict(dict(by_op), per_run_counts, run_s=run_seconds,
                         method="onnxruntime profiler")


def _profile_dict(by_op: dict[str, float], counts: dict[str, int], **extra) -> dict:
    total = sum(by_op.values())
    ops = sorted(by_op, key=by_op.get, reverse=True)
    return {
        "total_s": total,
        "ops": [{"op": op, "seconds": by_op[op], "share": by_op[op] / total if total else 0.0,
                 "nodes": counts.get(op, 0)} for op in ops],
        **extra,
    }
