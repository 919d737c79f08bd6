"""CompiledModel: the Python face of the C executor.

`ge_hub.compile(model)` returns a CompiledModel. Running it checks the inputs against
the graph's declared types (names, dtypes, ranks, static dims and consistent symbols),
finds or compiles the plan for that input signature (plans are cached per signature in
a bounded LRU cache), and runs the whole plan in one C call.

When a shape depends on values computed at run time (the length of NonZero, Compress,
Unique or NonMaxSuppression; a Reshape, Slice, Tile, Expand or Pad target, TopK's K or
Range's bounds computed in the graph: the inputs the schemas mark `decides_shape`), the
model runs as a chain of static segments, each a plan of its own, cut where such a shape
is decided (`ge_hub.segments`): the data-dependent op runs as a C kernel that reports the
size it produced, and the next segment is planned for the sizes (and small deciding
values) actually produced, cached in an LRU of `max_cached_plans` plans (default 32).
"""

from __future__ import annotations

import collections
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from ge_hub import profiling_phases
from ge_hub.compiler import check_options, compile_plan
from ge_hub.errors import GeHubError, ProfileNotCompiledError, ValueDependentShapeError
from ge_hub.inputs import bind_inputs
from ge_hub.ir.graph import Graph, Value, node_reads
from ge_hub.kernels import closure as closure_kernels
from ge_hub.kernels import control as control_kernels
from ge_hub.passes.context import PassContext
from ge_hub.plan import FALLBACK_PREFIX, KernelKind, Plan
from ge_hub.plugins import get_registry
from ge_hub.precision_report import precision_summary
from ge_hub.registry import Registry
from ge_hub.segments import BOUNDED_FORMS, SegmentedModel, folded_by_values

DEFAULT_MAX_CACHED_PLANS = 8


def _compile_body(body: Graph, shapes: Mapping[str, Sequence[int]]):
    """A control-flow body planned for these input shapes, ready to run: what the Closure
    kernel (a layer below the compiler and executor) asks for once a body's shapes repeat."""
    from ge_hub.executor import Executor

    return Executor(compile_plan(body, shapes))


control_kernels.install_body_compiler(_compile_body)
# What compiles If/Loop/Scan bodies into the sub-plans of a C control step.
closure_kernels.install_plan_compiler(
    lambda body, shapes, values: compile_plan(body, shapes, None, values))


class OfflineFormat(NamedTuple):
    """The offline model file (`ge_hub.offline`, a layer above this one: it builds
    CompiledModels from files): `save(model, path, **options)`, `is_file(model)`,
    `load(path, options=...)`. `ge_hub.offline` installs itself when imported, as
    `import ge_hub` does."""

    save: Callable[..., None]
    is_file: Callable[[Any], bool]
    load: Callable[..., CompiledModel]


_offline: OfflineFormat | None = None


def install_offline_format(offline: OfflineFormat) -> None:
    global _offline
    _offline = offline


def _offline_format() -> OfflineFormat:
    if _offline is None:
        raise GeHubError("the offline model format is not installed: import ge_hub.offline "
                         "(import ge_hub does)")
    return _offline


class _Entry(NamedTuple):
    key: tuple
    plan: Plan
    executor: Any
    rules: dict[str, int]  # how many times each rewrite rule fired for this plan
    log: tuple  # the pass context's log: every rule firing and refusal, with reasons


class CompiledModel:
    """A graph compiled for the C executor; call it like a function."""

    def __init__(self, graph: Graph, input_shapes: Mapping[str, Sequence[int]] | None = None,
                 options: Mapping[str, Any] | None = None, *, registry: Registry | None = None):
        self._setup(graph, options, registry)
        self._plan_first([], input_shapes)  # the caller's graph: read, not consumed

    @classmethod
    def _owning(cls, box: list, input_shapes, options, registry) -> CompiledModel:
        """A model of the graph in `box` (one Graph, which nobody else holds: `compile`
        just loaded it), taken out while its first plan compiles, so that the original
        weights are freed as the passes and the prepackers replace them."""
        self = cls.__new__(cls)
        self._setup(box[0], options, registry)
        self._plan_first(box, input_shapes)
        return self

    def _setup(self, graph: Graph, options, registry) -> None:
        self.options = check_options(options)
        # The registry every plan of this model is compiled, verified and run against
        # (each plan's PassContext carries it); default: the loaded plugins'.
        self.registry = registry if registry is not None else get_registry()
        graph.verify(schemas=self.registry.get_op)
        self.graph = graph
        self._graph_loader = None
        self._graph_ref = None  # the graph read again from its file, while something holds it
        self.input_names = graph.input_names
        self.output_names = graph.output_names
        self._input_types = [v.type for v in graph.inputs]
        self._cache: collections.OrderedDict[tuple, _Entry] = collections.OrderedDict()
        self._max_cached = int(self.options.get("max_cached_plans", DEFAULT_MAX_CACHED_PLANS))
        self._lock = threading.Lock()
        self._graph_lock = threading.Lock()
        self._last: _Entry | None = None
        self._value_inputs: tuple[int, ...] = ()
        self._pinned: dict[tuple, _Entry] = {}  # plans loaded from a file: never evicted
        self._allow_compile = True
        self._segmented: SegmentedModel | None = None  # once a shape proved value-dependent
        from ge_hub.frontend import source_loader

        reload = source_loader(graph)
        if reload is not None:
            # Read from a file: the plans hold what they read (prepacked weights in place
            # of the originals), and the file gives the graph again when a new shape is
            # planned or the graph is saved, so the model does not keep the original
            # weights alive (whoever else holds the graph still does).
            self._graph = interface_of(graph)
            self._graph_loader = reload
            self._graph_ref = weakref.ref(graph)

    def _plan_first(self, box: list, input_shapes) -> None:
        """Plan the shapes given or declared, if static: from the graph in `box`, taken
        out (`_owning`), or from `self.graph` when `box` is empty."""
        if input_shapes is not None or all(t.is_static for t in self._input_types):
            full = self._full_shapes(input_shapes or {})
            shapes = [tuple(full[n]) for n in self.input_names]
            try:
                self._last = self._plan_for(tuple(shapes), None, shapes, box)
            except ValueDependentShapeError:
                pass  # some shape depends on input values: specialize on the first run
        box.clear()

    @classmethod
    def from_plans(cls, graph: Graph, plans: Sequence[tuple[tuple, Plan, Mapping[str, int]]],
                   *, options: Mapping[str, Any] | None = None,
                   value_inputs: Sequence[int] = (), allow_compile: bool = True,
                   resolve=None, graph_loader=None) -> CompiledModel:
        """A model whose plans were compiled before (an offline file, `ge_hub.offline`):
        `plans` are (cache key, Plan, rule counts) triples, used as they are and never
        evicted. Inputs whose key matches none of them are planned from `graph` and cached,
        or refused with ProfileNotCompiledError when `allow_compile` is False.

        With `graph_loader`, `graph` holds only the inputs and outputs (what running needs)
        and `graph_loader()` gives the whole graph, called (and its result verified) the
        first time the graph is needed: planning a new shape, or reading `model.graph`.
        Without it, `graph` is verified when compiling is on."""
        from ge_hub.executor import Executor

        self = cls.__new__(cls)
        self.options = check_options(options)
        self.registry = get_registry()
        if allow_compile and graph_loader is None:
            graph.verify()
        self.graph = graph
        self._graph_loader = graph_loader
        self._graph_ref = None
        self.input_names = graph.input_names
        self.output_names = graph.output_names
        self._input_types = [v.type for v in graph.inputs]
        self._cache = collections.OrderedDict()
        self._max_cached = int(self.options.get("max_cached_plans", DEFAULT_MAX_CACHED_PLANS))
        self._lock = threading.Lock()
        self._graph_lock = threading.Lock()
        self._value_inputs = tuple(value_inputs)
        self._allow_compile = allow_compile
        self._pinned = {}
        self._last = None
        self._segmented = None
        for key, plan, rules in plans:
            entry = _Entry(key, plan, Executor(plan, resolve), dict(rules), ())
            self._pinned[key] = entry
            self._last = self._last or entry
        return self

    def save(self, path, **options: Any) -> None:
        """Write this model, with every plan compiled so far, as an offline model file
        (`.ghm`) that `ge_hub.load_compiled` runs without the frontend or the compiler.
        Options: see `ge_hub.offline.save`. A model that runs in segments saves its
        segments and every segment plan compiled so far (`ge_hub.offline.segments`)."""
        _offline_format().save(self, path, **options)

    @property
    def segmented(self) -> SegmentedModel | None:
        """The segments this model runs in, once a shape proved to depend on values it
        computes (None until then, or never)."""
        return self._segmented

    def restore_segments(self, build: Callable[[CompiledModel], SegmentedModel]) -> None:
        """Run in segments from the start, with `build(self)`'s (an offline file's stored
        segment plans, `ge_hub.offline.segments`)."""
        self._segmented = build(self)

    def plans(self) -> list[tuple[tuple, Plan, dict[str, int]]]:
        """Every plan this model holds: (cache key, Plan, rule counts), loaded ones first."""
        with self._lock:
            entries = list(self._pinned.values()) + [e for k, e in self._cache.items()
                                                      if k not in self._pinned]
        return [(e.key, e.plan, dict(e.rules)) for e in entries]

    @property
    def graph(self) -> Graph:
        """The model's graph (for a model loaded from a `.ghm` file, read on first use;
        for one compiled from a model file, read from that file again whenever nothing
        else holds it: see `ge_hub.frontend.source_loader`)."""
        if self._graph_loader is not None:
            # its own lock: callers may hold self._lock (_start_segments)
            with self._graph_lock:
                if self._graph_ref is not None:  # read again from its model file
                    graph = self._graph_ref()
                    if graph is None:
                        graph = self._graph_loader()
                        self._graph_ref = weakref.ref(graph)
                    return graph
                if self._graph_loader is not None:
                    graph = self._graph_loader()
                    graph.verify()
                    self._graph, self._graph_loader = graph, None
        return self._graph

    @graph.setter
    def graph(self, graph: Graph) -> None:
        self._graph = graph

    @property
    def interface(self) -> Graph:
        """A graph with the model's inputs and outputs, enough to check or make inputs:
        the graph itself, or for a model loaded from a file whose graph has not been read,
        just its inputs and outputs (reading `graph` would load the rest)."""
        return self._graph

    # -- inputs ------------------------------------------------------------------

    def _full_shapes(self, input_shapes: Mapping[str, Sequence[int]]) -> dict[str, list[int]]:
        unknown = set(input_shapes) - set(self.input_names)
        if unknown:
            raise ValueError(f"input_shapes names unknown inputs {sorted(unknown)}; "
                             f"the model's inputs are {self.input_names}")
        shapes = {}
        for name, t in zip(self.input_names, self._input_types):
            if name in input_shapes:
                shapes[name] = [int(d) for d in input_shapes[name]]
            elif t.is_static:
                shapes[name] = list(t.shape)
            else:
                raise ValueError(f"input {name!r} has symbolic shape {t}; give input_shapes "
                                 "for it or run the model to specialize on first sight")
        return shapes

    def _arrays(self, inputs) -> list[np.ndarray]:
        return bind_inputs(self._graph, inputs)  # the inputs' types: no need to load it

    # -- plans -------------------------------------------------------------------
    # A plan is specialized to the input shapes and, for inputs whose values decide a
    # shape (a Reshape target or Slice bounds fed as graph inputs), to those values too;
    # the cache key holds both.

    def _key(self, arrays: Sequence[np.ndarray]) -> tuple:
        shapes = tuple(x.shape for x in arrays)
        if not self._value_inputs:
            return shapes
        return shapes + tuple(arrays[i].tobytes() for i in self._value_inputs)

    def _inputs_feeding(self, value_names: Sequence[str]) -> set[int]:
        """Indices of the graph inputs that the named values are computed from."""
        graph = self.graph
        position = {id(v): i for i, v in enumerate(graph.inputs)}
        stack = [graph.find_value(name) for name in value_names]
        seen: set[int] = set()
        found: set[int] = set()
        while stack:
            value = stack.pop()
            if id(value) in seen:
                continue
            seen.add(id(value))
            if id(value) in position:
                found.add(position[id(value)])
            elif value.producer is not None:
                stack.extend(node_reads(value.producer))  # a body's captures count too
        return found

    def _plan_for(self, key: tuple, arrays: Sequence[np.ndarray] | None,
                  shapes: Sequence[Sequence[int]], box: list | None = None) -> _Entry:
        """The plan for `key`, cached or compiled now (from the graph in `box`, taken
        out of it, when given: see `_owning`)."""
        with self._lock:
            entry = self._pinned.get(key) or self._cache.get(key)
            if entry is not None:
                if key in self._cache:
                    self._cache.move_to_end(key)
                return entry
        if not self._allow_compile:
            raise ProfileNotCompiledError(self._no_profile_message(shapes))
        values = {self.input_names[i]: arrays[i] for i in self._value_inputs}
        ctx = PassContext(self.options, self.registry)
        try:
            consume = bool(box)
            with profiling_phases.collect() as record:  # options["profile"] keeps it
                # the box itself: optimize takes the graph out (see compile_plan)
                plan = compile_plan(box if consume else self.graph,
                                    dict(zip(self.input_names, shapes)),
                                    self.options, values, ctx, consume=consume)
            if self.options.get("profile"):
                self.__dict__.setdefault("_compile_records", {})[key] = record
        except ValueDependentShapeError as exc:
            if arrays is None:
                raise
            # Deciding values that are graph inputs themselves (a Reshape target, a Loop's
            # trip count fed by the caller) cost nothing to specialize on: one plan per
            # value, savable as offline profiles. Anything computed runs in segments.
            direct = {i for i, n in enumerate(self.input_names) if n in exc.sources}
            # (NonZero, NMS, ... of graph inputs: their C kernels, not a plan per value)
            bounded = getattr(exc, "op", None) in BOUNDED_FORMS
            if exc.sources and not bounded and len(direct) == len(set(exc.sources)) and \
                    not direct <= set(self._value_inputs):
                self._value_inputs = tuple(sorted(direct | set(self._value_inputs)))
                return self._plan_for(self._key(arrays), arrays, shapes)
            self._start_segments()
            return None
        from ge_hub.executor import Executor, registry_resolver

        entry = _Entry(key, plan, Executor(plan, registry_resolver(self.registry)),
                       dict(sorted(ctx.fired.items())),
                       tuple(ctx.log))
        with self._lock:
            self._cache[key] = entry
            while len(self._cache) > self._max_cached:
                self._cache.popitem(last=False)
        return entry

    def _no_profile_message(self, shapes: Sequence[Sequence[int]]) -> str:
        given = ", ".join(f"{n}: {list(s)}" for n, s in zip(self.input_names, shapes))
        profiles = "; ".join(", ".join(f"{n}: {list(s)}" for n, s in zip(self.input_names, key))
                             for key in self._pinned) or "none"
        return (f"no compiled profile matches the inputs ({given}) and compiling is off; "
                f"the compiled profiles: {profiles}")

    @property
    def rule_log(self) -> list:
        """What each rewrite rule matched for the most recent plan: `LogEntry`s with the
        rule, `fired` or `refused`, the matched node names and the reason of a refusal."""
        self.plan  # noqa: B018 (raises when the model has not been specialized yet)
        return list(self._last.log)

    @property
    def plan(self) -> Plan:
        """The most recently used plan (of a segmented model: its latest run's last
        segment; `segment_plans` has them all)."""
        if self._segmented is not None and self._segmented.last:
            return self._segmented.last[-1].plan
        if self._last is None:
            raise RuntimeError("the model has not been specialized yet: run it once or "
                               "compile with input_shapes")
        return self._last.plan

    # -- running -----------------------------------------------------------------

    def run(self, inputs) -> list[np.ndarray]:
        arrays = self._arrays(inputs)
        if self._segmented is not None:
            return self._segmented.run(self.input_names, arrays)
        key = self._key(arrays)
        entry = self._last
        if entry is None or entry.key != key:
            entry = self._plan_for(key, arrays, [x.shape for x in arrays])
            if entry is None:  # a shape depends on run-time values: run in segments
                return self._segmented.run(self.input_names, arrays)
            self._last = entry
        return entry.executor.run(arrays)

    def _start_segments(self) -> None:
        from ge_hub.executor import registry_resolver

        with self._lock:
            if self._segmented is None:
                self._segmented = SegmentedModel(self.graph, self.options, self.registry,
                                                 registry_resolver(self.registry))

    __call__ = run

    # -- seeing inside a run (ge_hub.profiling, ge_hub.dump) --------------------------

    def _traceable(self, inputs) -> tuple[_Entry | None, list[np.ndarray]]:
        """The plan to observe and the input arrays; no plan (None) when the model runs
        in segments (`self._segmented` runs them, each segment's plan observed)."""
        arrays = self._arrays(inputs)
        if self._segmented is None:
            key = self._key(arrays)
            entry = self._last
            if entry is None or entry.key != key:
                entry = self._plan_for(key, arrays, [x.shape for x in arrays])
            if entry is not None:
                self._last = entry
                return entry, arrays
        return None, arrays

    def profile(self, inputs, runs: int = 1, warmup: int = 1, name: str = "model"):
        """Run `warmup` times, then `runs` times with per-step timing: a
        `ge_hub.profiling.Profile` (`.save(path)` writes a Chrome trace, `.summary()`
        the top steps and ops). The compile phases come from this model's compile when
        it was compiled with options={"profile": True}, else from a fresh compile of the
        same plan made for the profile."""
        from ge_hub import profiling

        entry, arrays = self._traceable(inputs)
        if entry is None:  # segments: each segment's steps, no compile phases
            return profiling.profile_segments(self._segmented, self.input_names, arrays,
                                              name=name, runs=runs, warmup=warmup)
        record = getattr(self, "_compile_records", {}).get(entry.key)
        if record is None and entry.key not in self._pinned:
            shapes = dict(zip(self.input_names, (x.shape for x in arrays)))
            values = {self.input_names[i]: arrays[i] for i in self._value_inputs}
            with profiling_phases.collect() as record:
                with profiling_phases.phase("compile", "compile"):
                    compile_plan(self.graph, shapes, self.options, values,
                                 PassContext(self.options, self.registry))
        return profiling.profile_executor(entry.executor, arrays, name=name, runs=runs,
                                          warmup=warmup, record=record,
                                          streams=entry.plan.n_streams)

    def dump(self, inputs, directory: str | None = None, filter=None, *, keep=None,
             progress=None):
        """Run once, capturing every produced value (or those whose name matches the
        glob(s) in `filter`) as its step wrote it: a `ge_hub.dump.Dump`; with
        `directory`, saved there as .npy files with a manifest.json."""
        from ge_hub import dump

        entry, arrays = self._traceable(inputs)
        if entry is None:  # segments: each segment's plan in turn, cut values at real shape
            return dump.capture_segments(self._segmented, self.input_names, arrays,
                                         directory=directory, filter=filter, keep=keep,
                                         progress=progress)
        return dump.capture(entry.executor, arrays, directory=directory, filter=filter,
                            keep=keep, progress=progress)

    @property
    def segment_plans(self) -> list[Plan]:
        """The plans of the latest run's segments, in order (one plan when the model is
        not segmented)."""
        if self._segmented is not None and self._segmented.last:
            return self._segmented.plans
        return [self.plan]

    def summary(self) -> dict[str, Any]:
        """What the latest plan runs, and where.

        - `steps`; `python_steps` and `python_ops`: every step whose kernel is Python (a
          reference fallback, a Closure running If/Loop/Scan, a plugin's Python kernel),
          by op; `fallback_steps` and `fallback_ops`: the reference fallbacks among them;
        - `specialized_on`: the graph inputs whose values the plan was specialized on, and
          `folded_steps`/`folded_ops`: the nodes computed from those values at plan time,
          by the NumPy references, instead of by the executor at run time;
        - arena bytes against the lower bound and the naive sum, cached plans;
        - `streams` and `events` of the schedule (`ge_hub.passes.schedule`), and the arena
          and lower bound the plan would need on one stream (`serial_arena_bytes`,
          `serial_lower_bound_bytes`; the same figures when it has one); and
          `rules`: how many times each rewrite rule fired (`rule_log` has every firing
          and refusal with its reason);
        - `precision`: the `precision` option, and which product steps ran in bf16 and on
          which micro-kernel (`ge_hub.precision_report.precision_summary`).

        A segmented model (a shape decided by run-time values) adds up the segments of
        its latest run, and says `segments`, `cut_ops` (the data-dependent ops its cuts
        ran), `segment_plans` cached, `segment_compiles` so far and the bound `max_cached_plans`;
        `specialized_on` then names the values (graph inputs or values crossing a cut)
        that some segment was planned on, and `folded_ops` what folded from them.
        """
        if self._segmented is not None and self._segmented.last:
            return self._segmented_summary()
        plan = self.plan
        fallback = collections.Counter(
            s.op for s in plan.steps if s.kernel.startswith(FALLBACK_PREFIX))
        python = collections.Counter(s.op for s in plan.steps if s.kind is not KernelKind.C)
        specialized_on = [self.input_names[i] for i in self._value_inputs]
        # (only a plan specialized on values needs the whole graph, which may be unread)
        folded = folded_by_values(self.graph if specialized_on else self._graph,
                                  specialized_on)
        return {
            "steps": len(plan.steps),
            "python_steps": sum(python.values()),
            "python_ops": dict(python),
            "fallback_steps": sum(fallback.values()),
            "fallback_ops": dict(fallback),
            "specialized_on": specialized_on,
            "folded_steps": sum(folded.values()),
            "folded_ops": dict(folded),
            "arena_bytes": plan.memory.arena_bytes,
            "lower_bound_bytes": plan.memory.lower_bound_bytes,
            "naive_bytes": plan.memory.naive_bytes,
            "streams": plan.n_streams,
            "events": len(plan.events),
            "serial_arena_bytes": _or(plan.memory.serial_arena_bytes, plan.memory.arena_bytes),
            "serial_lower_bound_bytes": _or(plan.memory.serial_lower_bound_bytes,
                                            plan.memory.lower_bound_bytes),
            "cached_plans": len(self._cache) + len(self._pinned),
            "rules": dict(self._last.rules),
            "precision": precision_summary(plan, self.options.get("precision", "fp32")),
        }


    def _segmented_summary(self) -> dict[str, Any]:
        segmented = self._segmented.summary()
        steps = [s for plan in self._segmented.plans for s in plan.steps]
        fallback = collections.Counter(
            s.op for s in steps if s.kernel.startswith(FALLBACK_PREFIX))
        plans = self._segmented.plans
        precision = [precision_summary(p, self.options.get("precision", "fp32")) for p in plans]
        products = {k: v for each in precision for k, v in each["products"].items()}
        return {
            **segmented,
            "fallback_steps": sum(fallback.values()),
            "fallback_ops": dict(fallback),
            # segments run one after another: streams within one at a time
            "streams": max(p.n_streams for p in plans),
            "events": sum(len(p.events) for p in plans),
            "serial_arena_bytes": sum(_or(p.memory.serial_arena_bytes, p.memory.arena_bytes)
                                      for p in plans),
            "serial_lower_bound_bytes": sum(_or(p.memory.serial_lower_bound_bytes,
                                                p.memory.lower_bound_bytes) for p in plans),
            "cached_plans": segmented["segment_plans"],
            "rules": {},
            "precision": {**precision[0],
                          "bf16_kernel": next((e["bf16_kernel"] for e in precision
                                               if e["bf16_kernel"]), None),
                          "bf16_steps": sum(e["bf16_steps"] for e in precision),
                          "bf16_activation_steps": sum(e.get("bf16_activation_steps", 0)
                                                       for e in precision),
                          "fp32_products": [n for e in precision for n in e["fp32_products"]],
                          "products": products},
        }


def interface_of(graph: Graph) -> Graph:
    """A graph with `graph`'s inputs and outputs only (their names and types): what
    running stored plans and checking inputs need."""
    interface = Graph(graph.name)
    for value in graph.inputs:
        interface.add_input(value.name, value.type)
    interface.outputs = [Value(value.name, value.type) for value in graph.outputs]
    return interface


def _or(value, default):
    return default if value is None else value


def compile(model, input_shapes: Mapping[str, Sequence[int]] | None = None,
            options: Mapping[str, Any] | None = None, *, registry: Registry | None = None,
            trusted: bool = False) -> CompiledModel:
    """Compile a Graph (or any model a frontend accepts) for the C executor.

    `registry`: the one to load, compile, verify and run with (default: the loaded
    plugins'); a test or an embedding application can pass an isolated one. `trusted`:
    as for `ge_hub.load`, allows formats that run code while they load.

    A `.ghm` offline model file is not compiled again: its stored plans are loaded
    (`ge_hub.load_compiled`), and `input_shapes`, if given, planned now unless stored."""
    from ge_hub.frontend import load

    offline = _offline_format()
    if not isinstance(model, Graph) and offline.is_file(model):
        loaded = offline.load(model, options=options)
        if input_shapes is not None:
            full = loaded._full_shapes(input_shapes)
            shapes = [tuple(full[n]) for n in loaded.input_names]
            loaded._last = loaded._plan_for(tuple(shapes), None, shapes)
        return loaded
    if isinstance(model, Graph):
        return CompiledModel(model, input_shapes, options, registry=registry)
    # Loaded here: nobody else holds the graph, so its first compile may consume it.
    return CompiledModel._owning([load(model, trusted=trusted, registry=registry)],
                                 input_shapes, options, registry)
