"""The compiler pipeline: a flat, named list of passes, then memory planning and emission.

    specialize_shapes   bind input shapes, re-infer every type, fold shape arithmetic
    <canonicalize>      passes plugins registered for each stage, in registration order
    <optimize>          (eliminate_dead_code is ge-hub's own, registered like a plugin's)
    <fuse>              (lower_control_flow, ge-hub's own: If/Loop/Scan become Closures)
    select_kernels      best kernel per node, or a counted reference fallback
    <select>
    schedule            execution order and streams
    <schedule>
    plan_memory         liveness, views, in-place, best-fit arena offsets  (ge_hub.memory)
    emit_plan           the Plan handed to the C executor                  (ge_hub.emit)

Options (the `options` dict of `ge_hub.compile`):

    disable_passes  names of passes to skip (any registered pass; the structural steps
                    specialize_shapes, select_kernels and schedule cannot be skipped)
    disable_rules   names of rewrite rules to skip (rules of rule passes, `ge-hub passes`)
    enable_rules    names of opt-in rules to run
    pass_config     a JSON/TOML file or a dict switching passes and rules on and off
                    (`ge_hub.passes.config`); merged into the three lists above
    dump_after      a pass name or list of names: print the graph after each to stderr
                    (or to `dump_dir/<n>_<pass>.txt` when `dump_dir` is given)
    verify          run graph.verify() after every pass (default: GE_HUB_VERIFY=1)
    device          "cpu" (the only one today)
    precision       "fp32" (default), "bf16" or "mixed": which products compute with bf16
                    inputs and fp32 sums (`ge_hub.passes.precision`)
    precision_ops   {node name or op type: "fp32" | "bf16"}: forced choices
    streams         "auto" (default), 1, or N: how many streams the schedule pass may run
                    independent branches on (`ge_hub.passes.schedule`)
    profile         True: keep each plan's compile phases (passes, planning, emission) for
                    `CompiledModel.profile` (`ge_hub.profiling`)

Each compilation makes a `PassContext` (options, registry, device, rule log); passes
whose function takes `ctx` receive it, kernel selection uses its registry, and the
rules' fire counts end up in `CompiledModel.summary()["rules"]`.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import inspect
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ge_hub.ir.graph import Graph
from ge_hub.passes import PassResult
from ge_hub.passes.context import PassContext
from ge_hub.passes.schedule import schedule, streams_option
from ge_hub.passes.select_kernels import select_kernels
from ge_hub.passes.specialize_shapes import specialize_shapes
from ge_hub.plan import Plan
from ge_hub.profiling_phases import note_graph, phase
from ge_hub.registry import PASS_STAGES

# lower_control_flow too: a plan cannot carry a subgraph attribute any other way.
STRUCTURAL_PASSES = ("specialize_shapes", "select_kernels", "schedule", "lower_control_flow")
KNOWN_OPTIONS = {"disable_passes", "disable_rules", "enable_rules", "pass_config",
                 "dump_after", "dump_dir", "verify", "device", "max_cached_plans", "streams",
                 "precision", "precision_ops", "profile"}


@dataclasses.dataclass(frozen=True)
class PipelineStep:
    name: str
    stage: str
    run: Callable[..., PassResult]
    rules: tuple[str, ...] = ()

    def __call__(self, graph: Graph, ctx: PassContext) -> PassResult:
        return self.run(graph, ctx=ctx) if takes_context(self.run) else self.run(graph)


def takes_context(function: Callable[..., Any]) -> bool:
    """Whether a pass function asks for the pass context (a parameter named `ctx`)."""
    try:
        return "ctx" in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False


def check_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    options = dict(options or {})
    unknown = set(options) - KNOWN_OPTIONS
    if unknown:
        raise ValueError(f"unknown compile options {sorted(unknown)}; "
                         f"known: {sorted(KNOWN_OPTIONS)}")
    for key in ("disable_passes", "disable_rules", "enable_rules", "dump_after"):
        value = options.get(key) or []
        options[key] = [value] if isinstance(value, str) else list(value)
        if not all(isinstance(name, str) for name in options[key]):
            raise ValueError(f"compile option {key!r} must be a name or a list of names, "
                             f"got {options[key]!r:.80}")
    if options.get("pass_config") is not None:
        from ge_hub.passes.config import read_pass_config

        config = read_pass_config(options.pop("pass_config"))
        options["disable_passes"] += [n for n, on in config["passes"].items() if not on]
        options["disable_rules"] += [n for n, on in config["rules"].items() if not on]
        options["enable_rules"] += [n for n, on in config["rules"].items() if on]
    options.pop("pass_config", None)
    options.setdefault("device", "cpu")
    from ge_hub.passes.precision import check_precision_options

    check_precision_options(options)
    if options["device"] != "cpu":
        raise ValueError(f"unknown device {options['device']!r}; available: cpu")
    options.setdefault("verify", os.environ.get("GE_HUB_VERIFY", "") not in ("", "0"))
    options["streams"] = streams_option(options)
    return options


# Built-in passes run at the end of their stage, after the plugins' passes of that stage.
RUN_LAST = ("fuse_elementwise",)


def all_steps(registry, input_shapes: Mapping[str, Sequence[int]] | None = None,
              input_values: Mapping[str, Any] | None = None,
              device: str = "cpu") -> list[PipelineStep]:
    """Every step of the pipeline in order, structural ones included, none disabled."""
    steps = [PipelineStep("specialize_shapes", "canonicalize",
                          functools.partial(specialize_shapes, input_shapes=input_shapes or {},
                                            input_values=input_values))]
    for stage in PASS_STAGES:
        if stage == "select":
            steps.append(PipelineStep("select_kernels", "select",
                                      functools.partial(select_kernels, device=device)))
        if stage == "schedule":
            steps.append(PipelineStep("schedule", "schedule", schedule))
        passes = registry.passes(stage)
        # Passes that take only what every other pass of their stage left, plugins' too
        # (fuse_elementwise: a plugin's fusion of elementwise ops comes first).
        passes = ([p for p in passes if p.name not in RUN_LAST]
                  + [p for p in passes if p.name in RUN_LAST])
        steps.extend(PipelineStep(p.name, p.stage, p.run, p.rules) for p in passes)
    return steps


def build_pipeline(input_shapes: Mapping[str, Sequence[int]], options: Mapping[str, Any],
                   input_values: Mapping[str, Any] | None = None,
                   registry=None) -> list[PipelineStep]:
    """The passes that will run, in order, after `disable_passes` is applied."""
    if registry is None:
        from ge_hub.plugins import get_registry

        registry = get_registry()
    steps = all_steps(registry, input_shapes, input_values, options["device"])
    known = {s.name for s in steps}
    rules = {r for s in steps for r in s.rules}
    for key in ("disable_rules", "enable_rules"):
        for name in options.get(key, ()):
            if name not in rules:
                raise ValueError(f"cannot switch unknown rule {name!r}; rules: {sorted(rules)}")
    for name in options["disable_passes"]:
        if name in STRUCTURAL_PASSES:
            raise ValueError(f"pass {name!r} cannot be disabled: the executor needs it")
        if name not in known:
            raise ValueError(f"cannot disable unknown pass {name!r}; passes: {sorted(known)}")
    for name in options["dump_after"]:
        if name not in known:
            raise ValueError(f"cannot dump after unknown pass {name!r}; passes: {sorted(known)}")
    return [s for s in steps if s.name not in options["disable_passes"]]


def optimize(graph: Graph | list[Graph], input_shapes: Mapping[str, Sequence[int]],
             options: Mapping[str, Any] | None = None,
             input_values: Mapping[str, Any] | None = None,
             ctx: PassContext | None = None, *, consume: bool = False) -> Graph:
    """Run the pass pipeline; returns the specialized, scheduled, kernel-selected graph.

    `ctx` (made from `options` when not given) collects the rules' log and counts.
    `consume`: `graph` is a one-item list holding a Graph nobody else holds, taken out
    here; once specialize_shapes has copied it, its reference cycles are collected, so
    that its weights are freed as soon as the optimized graph lets them go (prepacked:
    `ge_hub.emit`), not at some later collection. (The list, not the Graph, travels down
    the calls: an argument passed as `f(box.pop())` stays on the caller's stack for the
    whole call on Python 3.10.)"""
    if consume:
        graph = graph.pop()
    options = check_options(options)
    if ctx is None:
        ctx = PassContext(options)
    else:
        ctx.options = options
    steps = build_pipeline(input_shapes, options, input_values, ctx.registry)
    for index, step in enumerate(steps):
        with phase(step.name, "pass"):
            result = step(graph, ctx)
        if not isinstance(result, PassResult):
            raise TypeError(f"pass {step.name!r} returned {type(result).__name__}, "
                            "expected a PassResult")
        graph = result.graph
        if consume and index == 0:
            del result
            gc.collect()
        if options["verify"]:
            graph.verify(schemas=ctx.registry.get_op)
        if step.name in options["dump_after"]:
            _dump(graph, index, step.name, options.get("dump_dir"))
    return graph


def compile_plan(graph: Graph | list[Graph], input_shapes: Mapping[str, Sequence[int]],
                 options: Mapping[str, Any] | None = None,
                 input_values: Mapping[str, Any] | None = None,
                 ctx: PassContext | None = None, *, consume: bool = False) -> Plan:
    """Graph + input shapes (+ the values of shape-determining inputs) -> Plan.
    `consume`: `graph` is a one-item list holding the only reference to the Graph,
    handed on to `optimize`, which takes it out: a graph nobody else holds
    (CompiledModel._owning) is freed once specialize_shapes has copied it, and its
    weights as the passes and prepackers replace them (ge_hub.emit)."""
    from ge_hub.emit import emit_plan

    if ctx is None:
        ctx = PassContext(options)
    optimized = optimize(graph, input_shapes, options, input_values, ctx, consume=consume)
    note_graph(optimized)
    with phase("emit_plan", "emission"):
        return emit_plan(optimized, ctx.registry)


def _dump(graph: Graph, index: int, name: str, dump_dir: str | None) -> None:
    text = f"# after {name}\n{graph}\n"
    if dump_dir is None:
        sys.stderr.write(text)
        return
    os.makedirs(dump_dir, exist_ok=True)
    with open(os.path.join(dump_dir, f"{index:02d}_{name}.txt"), "w") as f:
        f.write(text)
