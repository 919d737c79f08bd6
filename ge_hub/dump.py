"""Dumps of intermediate tensors: every value a step produces, as that step wrote it.

`CompiledModel.dump(inputs, directory, filter=...)` (and `ge-hub run --dump DIR
--dump-filter GLOB`) runs the plan once through the executor's per-step observer
(`Executor.run_traced`): right after each step, before any later step can reuse or
overwrite its memory (the planner computes values in place and shares arena bytes
between values whose lifetimes do not overlap), its outputs are copied. So a value is
dumped as it was produced, not as the arena holds it at the end.

Each value is saved as `<file-safe value name>.npy`, and `manifest.json` lists them in
step order: step, op, node, value name, dtype, shape, file. Graph inputs come first,
with step null; graph outputs written through a view come last. Other values the planner
turned into views of another value (a Reshape with no step of its own, a Concat whose
inputs were written into their slices of it) are not dumped; their sources are.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ge_hub.ops.select_bounded import real_shapes

MANIFEST = "manifest.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass
class Dump:
    """The values captured by one run, in the order they were produced."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)   # when kept in memory
    outputs: list[np.ndarray] = field(default_factory=list)
    directory: str | None = None


def _matcher(filter: str | Sequence[str] | None) -> Callable[[str], bool]:
    if filter is None:
        return lambda name: True
    patterns = [filter] if isinstance(filter, str) else list(filter)
    return lambda name: any(fnmatch.fnmatchcase(name, p) for p in patterns)


class _Files:
    """File-safe, unique file names for value names."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def __call__(self, name: str) -> str:
        stem = _UNSAFE.sub("_", name).lstrip(".") or "value"
        candidate, n = stem, 1
        while candidate.lower() in self.used:
            candidate = f"{stem}_{n}"
            n += 1
        self.used.add(candidate.lower())
        return candidate + ".npy"


def capture(executor, arrays: Sequence[np.ndarray], *, directory: str | None = None,
            filter: str | Sequence[str] | None = None, keep: bool | None = None,
            progress: Callable[[int, int], None] | None = None) -> Dump:
    """Run `executor` once on `arrays`, capturing every (matching) produced value.

    With `directory`, values are written there with a manifest; with `keep` (default:
    when there is no directory) they are also kept in `Dump.arrays` by value name.
    `progress(done_steps, total_steps)` is called after each step."""
    session = _Session(directory, filter, keep)
    dump = session.dump
    dump.outputs = session.segment(executor, arrays, progress=progress)
    session.finish(executor.plan.input_names, executor.plan.output_names)
    return dump


def capture_segments(segmented, names: Sequence[str], arrays: Sequence[np.ndarray], *,
                     directory: str | None = None, filter: str | Sequence[str] | None = None,
                     keep: bool | None = None,
                     progress: Callable[[int, int], None] | None = None) -> Dump:
    """`capture` for a model that runs in segments (`ge_hub.segments.SegmentedModel`):
    each segment's plan runs through the per-step observer in turn. Entries carry their
    `segment` and a step number counted over the whole run (segment by segment); a
    value a cut produced (NonZero's indices and the like) is dumped at its real shape,
    under its graph name, not as the bound-sized buffer its kernel wrote. A later
    segment's inputs were dumped where an earlier segment produced them."""
    session = _Session(directory, filter, keep)
    dump = session.dump

    def runner(index: int, entry, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        outputs = session.segment(entry.executor, inputs, segment=index,
                                  output_names=entry.output_names, inputs=index == 0,
                                  progress=progress)
        for cut in entry.cuts:
            count = int(outputs[cut.positions[-1]][0])
            for name, shape in zip(cut.names, real_shapes(cut.bound_types, cut.axes, count)):
                if name is not None:
                    session.reshape(name, shape)
        return outputs

    dump.outputs = segmented.run(names, arrays, runner=runner)
    session.finish(list(names), [v.name for v in segmented.root.graph.outputs])
    return dump


class _Session:
    """One dump being written: entries, files and kept arrays over one or more plans."""

    def __init__(self, directory, filter, keep) -> None:
        self.keep = directory is None if keep is None else keep
        self.matches = _matcher(filter)
        self.files = _Files()
        self.dump = Dump(directory=directory)
        self.steps = 0  # steps of the plans captured before the current one
        if directory is not None:
            if os.path.exists(directory) and not os.path.isdir(directory):
                raise ValueError(f"dump directory {directory!r} exists and is not a directory")
            os.makedirs(directory, exist_ok=True)

    def record(self, entry: dict[str, Any], array: np.ndarray) -> None:
        directory = self.dump.directory
        if directory is not None:
            entry["file"] = self.files(entry["value"])
            np.save(os.path.join(directory, entry["file"]), array, allow_pickle=False)
        if self.keep:
            self.dump.arrays[entry["value"]] = array
        self.dump.entries.append(entry)

    def reshape(self, name: str, shape: Sequence[int]) -> None:
        """The entry of `name` (a bound-sized buffer) cut to its leading `shape`."""
        for entry in reversed(self.dump.entries):
            if entry["value"] != name:
                continue
            path = None if "file" not in entry else os.path.join(self.dump.directory,
                                                                 entry["file"])
            array = self.dump.arrays.get(name)
            if array is None and path is not None:
                array = np.load(path)
            if array is None:
                return
            size = int(np.prod(shape, dtype=np.int64))
            array = array.reshape(-1)[:size].reshape(shape).copy()
            entry["shape"] = [int(d) for d in shape]
            if path is not None:
                np.save(path, array, allow_pickle=False)
            if self.keep:
                self.dump.arrays[name] = array
            return

    def segment(self, executor, arrays: Sequence[np.ndarray], *, segment: int | None = None,
                output_names: Sequence[str] | None = None, inputs: bool = True,
                progress: Callable[[int, int], None] | None = None) -> list[np.ndarray]:
        """Run one plan, recording what its steps produce; returns its outputs."""
        plan = executor.plan
        offset = self.steps
        self.steps += len(plan.steps)
        # The plan names a graph output's tensor "<value>:output<i>"; dumps use value
        # names (of a segment: the names its outputs have in the whole model).
        names = {t: plan.tensors[t].name for t in range(len(plan.tensors))}
        names.update(zip(plan.inputs, plan.input_names))
        names.update(zip(plan.outputs, output_names or plan.output_names))

        def entry(step: int | None, t: int) -> dict[str, Any]:
            spec = plan.tensors[t]
            step_spec = plan.steps[step] if step is not None else None
            made = {"step": None if step is None else offset + step,
                    "op": step_spec.op if step_spec else None,
                    "node": step_spec.node if step_spec else None, "value": names[t],
                    "dtype": spec.dtype.value, "shape": list(spec.shape)}
            if segment is not None:
                made["segment"] = segment
            return made

        if inputs:
            for t, array in zip(plan.inputs, arrays):
                if self.matches(names[t]):
                    self.record(entry(None, t), np.array(array, copy=True))

        total = len(plan.steps)

        def observe(step: int, buffers) -> None:
            for t, buffer in zip(plan.steps[step].outputs, buffers):
                if t < 0 or buffer is None:
                    continue
                spec = plan.tensors[t]
                if not self.matches(names[t]):
                    continue
                array = np.frombuffer(buffer, spec.dtype.numpy).reshape(spec.shape).copy()
                self.record(entry(step, t), array)
            if progress is not None:
                progress(offset + step + 1, offset + total)

        outputs, _ = executor.run_traced(arrays, records=False, observer=observe)
        # A graph output that no step wrote under its own name (a step wrote a view of
        # it, or it is an input or constant passed through) is recorded from the
        # returned array, under the last step that wrote into that output's buffer.
        recorded = {e["value"] for e in self.dump.entries}
        writers = {plan.tensors[t].index: s for s, step in enumerate(plan.steps)
                   for t in step.outputs
                   if t >= 0 and plan.tensors[t].storage.value == "output"}
        for position, (t, array) in enumerate(zip(plan.outputs, outputs)):
            if names[t] not in recorded and self.matches(names[t]):
                self.record(entry(writers.get(position), t), np.array(array, copy=True))
        return outputs

    def finish(self, input_names: Sequence[str], output_names: Sequence[str]) -> None:
        directory = self.dump.directory
        if directory is not None:
            with open(os.path.join(directory, MANIFEST), "w") as f:
                json.dump({"inputs": list(input_names), "outputs": list(output_names),
                           "values": self.dump.entries}, f, indent=1)
