"""Reading a `.ghm` offline model file: `load_compiled(path) -> CompiledModel`.

The file is mapped read-only; its header, section table, checksums, metadata, plans and
kernel table are checked (`ge_hub.offline.layout`, `.plans`, `.kernels`,
`.portability`), every constant becomes a read-only `np.frombuffer` view of the mapping
(shared with the page cache, never copied), and the plans go straight to the executor:
nothing is compiled, and no frontend plugin is needed. The graph section is read only
when it is needed (a shape outside the stored profiles, planned from it and cached, or
`model.graph`); without a graph, or with compiling off, such a shape is refused.
"""

from __future__ import annotations

import dataclasses
import json
import mmap
import os
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from ge_hub.errors import GeHubError, OfflineModelError, SerializationError
from ge_hub.ir import symbolic
from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Graph, Value
from ge_hub.ir.types import TensorType
from ge_hub.offline import kernels, layout, portability
from ge_hub.offline import segments as offline_segments
from ge_hub.offline.plans import decode_plan, nested


@dataclasses.dataclass
class OfflineFile:
    """A mapped, checked `.ghm` file: header, sections and metadata; the graph and plans
    are decoded on request."""

    path: str
    header: layout.Header
    sections: dict[str, tuple[int, int, int]]
    meta: dict[str, Any]
    buffer: memoryview  # the whole file, mapped read-only
    verified: bool  # whether the whole-file checksum was checked
    _plans_document: dict | None = None

    @property
    def where(self) -> str:
        return f"offline model {self.path!r}"

    def section(self, kind: str) -> memoryview:
        offset, length, _ = self.sections[kind]
        return self.buffer[offset:offset + length]

    def graph(self) -> Graph | None:
        """The stored graph (portable files), its constants views of the mapping."""
        if "graph" not in self.sections:
            return None
        from ge_hub.ir import serialize

        try:
            return serialize.loads(self.section("graph"))
        except SerializationError as exc:
            raise OfflineModelError(f"{self.where}: its graph section is malformed: "
                                    f"{exc}") from None

    def interface_graph(self) -> Graph:
        """A graph with only the model's inputs and outputs, for a file without a graph
        (what CompiledModel checks inputs against; it cannot be compiled)."""
        graph = Graph(_text(self.meta.get("graph_name"), "model"))
        inputs = [self._interface(e) for e in _list(self.meta, "inputs", self.where)]
        outputs = [self._interface(e) for e in _list(self.meta, "outputs", self.where)]
        names = [name for name, _ in inputs]
        if len(set(names)) != len(names):
            raise OfflineModelError(f"{self.where}: input names repeat: {names!r:.200}")
        for name, type in inputs:
            graph.add_input(name, type)
        graph.outputs = [Value(name, type) for name, type in outputs]
        return graph

    def _interface(self, entry: Any) -> tuple[str, TensorType]:
        try:
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) \
                    or not entry["name"]:
                raise TypeError("needs a non-empty name")
            shape = entry["shape"]
            if shape is not None:
                if not isinstance(shape, list):
                    raise TypeError("a shape is null or a list of sizes and symbolic dims")
                shape = [symbolic.from_json(d) for d in shape]
            return entry["name"], TensorType(DType(entry["dtype"]), shape)
        except (KeyError, TypeError, ValueError) as exc:
            raise OfflineModelError(f"{self.where}: malformed input/output entry "
                                    f"{entry!r:.80}: {exc}") from None

    def plans_document(self) -> dict[str, Any]:
        """The plans section's JSON, parsed once."""
        if self._plans_document is None:
            self._plans_document = _json(self.section("plans"), f"{self.where}: plans section")
        return self._plans_document

    def constant(self, dtype: DType, shape, ref: dict, nbytes: int, where: str) -> np.ndarray:
        """A constant reference resolved to a read-only view of the mapped file, after
        checking that it lies inside its section, aligned."""
        kind = ref.get("section")
        if kind not in ("graph", "data") or kind not in self.sections:
            raise OfflineModelError(f"{where}: names section {kind!r:.20}, which the file "
                                    "does not have")
        base, length, _ = self.sections[kind]
        offset = ref["offset"]
        if offset % layout.ALIGNMENT or offset + nbytes > length:
            raise OfflineModelError(f"{where}: bytes [{offset}, {offset + nbytes}) lie "
                                    f"outside the {length}-byte {kind} section or are not "
                                    f"{layout.ALIGNMENT}-byte aligned")
        if nbytes == 0:
            return np.zeros(shape, dtype.numpy)
        count = nbytes // np.dtype(dtype.numpy).itemsize
        array = np.frombuffer(self.buffer, dtype.numpy, count, base + offset)
        return array.reshape(shape)

    def plans(self) -> list[tuple[str, tuple, Any, dict[str, int]]]:
        """(profile name, cache key, Plan, rule counts) for every stored profile."""
        entries = _list(self.plans_document(), "plans", self.where)
        return [decode_plan(entry, f"{self.where}: plan {i}", self.constant)
                for i, entry in enumerate(entries)]

    def segments(self, options, registry, resolver, *, root_loader, allow_compile: bool):
        """The stored segments of a model that runs in segments, as a SegmentedModel
        running the stored segment plans (their kernels checked against the file's
        kernel table first)."""
        return offline_segments.restore(
            self.plans_document()["segments"], self.where, self.constant, options, registry,
            resolver, root_loader=root_loader, portable="graph" in self.sections,
            allow_compile=allow_compile,
            check=lambda plans: kernels.check(self.meta.get("kernels"), plans, self.where))


def open_file(path: str | os.PathLike, *, verify: bool = True) -> OfflineFile:
    """Map and check a `.ghm` file (header, section table, checksums, metadata).

    `verify=False` skips the checksum of the graph and data sections (weights) for a
    faster start; the metadata and plans are always checked, and every offset and size
    is bounds-checked either way, so a corrupt weight then gives wrong numbers, never a
    crash."""
    from ge_hub import _core

    path = os.fspath(path)
    where = f"offline model {path!r}"
    if not os.path.exists(path):
        raise FileNotFoundError(f"{where} does not exist")
    if os.path.isdir(path):
        raise IsADirectoryError(f"{where} is a directory, not a file")
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise OfflineModelError(f"{where}: the file is empty")
        mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    buffer = memoryview(mapping)
    header = layout.read_header(buffer, where, _core.ABI_VERSION)
    sections = layout.read_sections(buffer, header, where)
    if verify:
        if layout.crc32(buffer[layout.HEADER.size:]) != header.crc:
            raise OfflineModelError(f"{where}: checksum mismatch: the file is corrupt "
                                    "(a changed or damaged byte)")
    else:
        for kind in ("meta", "plans"):
            offset, length, crc = sections[kind]
            if layout.crc32(buffer[offset:offset + length]) != crc:
                raise OfflineModelError(f"{where}: checksum mismatch in the {kind} section: "
                                        "the file is corrupt")
    offset, length, _ = sections["meta"]
    meta = _json(buffer[offset:offset + length], f"{where}: metadata")
    if meta.get("format") != "ge-hub-offline":
        raise OfflineModelError(f"{where}: its metadata is not a ge-hub offline model's")
    if meta.get("format_version") != header.version:
        raise OfflineModelError(f"{where}: its metadata says format version "
                                f"{meta.get('format_version')!r:.20}, its header "
                                f"{header.version}")
    return OfflineFile(path, header, sections, meta, buffer, verify)


def load_compiled(path: str | os.PathLike, *, allow_compile: bool = True,
                  verify: bool = True, options: Mapping[str, Any] | None = None):
    """Load an offline model file (`.ghm`) as a CompiledModel, without a frontend.

    Inputs matching a stored profile run its plan as stored. Others are planned from the
    stored graph and cached (portable files), or refused with ProfileNotCompiledError
    when `allow_compile` is False. `options` are compile options for those new plans
    (default: the ones the file was compiled with). `verify=False` skips the weights'
    checksum (see `open_file`). Raises OfflineModelError for a file that cannot be used.
    """
    from ge_hub.runtime import CompiledModel

    file = open_file(path, verify=verify)
    where = file.where
    stored = file.plans()
    if not stored and "segments" not in file.plans_document():
        raise OfflineModelError(f"{where}: the file holds no plan")
    kernels.check(file.meta.get("kernels"),
                  [(name, sub) for name, _, plan, _ in stored for sub in nested(plan)], where)
    portable = "graph" in file.sections
    loader = None
    as_stored = portability.check(file.meta.get("portability"), portable, where)
    if not as_stored:
        reasons = "; ".join(portability.problems(file.meta.get("portability")))
        warnings.warn(f"{where}: its plans cannot run on this machine as stored ({reasons}); "
                      "each profile is planned again from its graph on first use",
                      RuntimeWarning, stacklevel=2)
        stored = []
        graph = file.graph()
    else:
        # Running stored plans needs only the inputs' types; the graph (JSON decoding and
        # verification, the bulk of loading) is read when a new shape must be planned.
        graph = file.interface_graph()
        loader = file.graph if portable else None
    allow = allow_compile and portable
    compile_options = (file.meta.get("options") or {}) if options is None else options
    if not isinstance(compile_options, Mapping):
        raise OfflineModelError(f"{where}: malformed compile options {compile_options!r:.80}")
    value_inputs = file.meta.get("value_inputs") or []
    if not isinstance(value_inputs, list) or not all(
            isinstance(i, int) and 0 <= i < len(graph.inputs) for i in value_inputs):
        raise OfflineModelError(f"{where}: malformed value_inputs {value_inputs!r:.80}")
    for name, _key, plan, _ in stored:
        if tuple(plan.input_names) != tuple(graph.input_names) \
                or tuple(plan.output_names) != tuple(graph.output_names):
            raise OfflineModelError(f"{where}: profile {name!r} has inputs/outputs "
                                    f"{list(plan.input_names)}/{list(plan.output_names)}, the "
                                    f"model {graph.input_names}/{graph.output_names}")
        for value, t in zip(graph.inputs + graph.outputs, plan.inputs + plan.outputs):
            if plan.tensors[t].dtype != value.type.dtype:
                raise OfflineModelError(f"{where}: profile {name!r} takes {value.name!r} as "
                                        f"{plan.tensors[t].dtype}, the model as "
                                        f"{value.type.dtype}")
        _check_output_shapes(where, name, graph, plan)
    try:
        model = CompiledModel.from_plans(
            graph, [(key, plan, rules) for _, key, plan, rules in stored],
            options=compile_options, value_inputs=value_inputs, allow_compile=allow,
            graph_loader=loader)
    except OfflineModelError:
        raise
    except (GeHubError, ValueError, LookupError, TypeError, OSError) as exc:
        raise OfflineModelError(f"{where}: {exc}") from exc
    model.profiles = {key: name for name, key, _, _ in stored}
    if as_stored and "segments" in file.plans_document():
        # A model that runs in segments: its stored segment plans run as they are; other
        # sizes are planned from the stored segment graphs (portable files).
        from ge_hub.executor import registry_resolver

        def segments(model):
            restored = file.segments(compile_options, model.registry,
                                     registry_resolver(model.registry),
                                     root_loader=lambda: model.graph, allow_compile=allow)
            # The first segment is fed the caller's inputs by the model's names, and the
            # run returns its outputs as the model's.
            if tuple(restored.root.input_names) != tuple(model.input_names):
                raise OfflineModelError(
                    f"{where}: the first segment takes the inputs "
                    f"{list(restored.root.input_names)!r:.80}, the model "
                    f"{list(model.input_names)!r:.80}")
            if tuple(restored.root.output_names) != tuple(model.output_names):
                raise OfflineModelError(
                    f"{where}: the first segment gives the outputs "
                    f"{list(restored.root.output_names)!r:.80}, the model "
                    f"{list(model.output_names)!r:.80}")
            return restored

        try:
            model.restore_segments(segments)
        except OfflineModelError:
            raise
        except (GeHubError, ValueError, LookupError, TypeError, OSError) as exc:
            raise OfflineModelError(f"{where}: {exc}") from exc
    return model


def _check_output_shapes(where: str, name: str, graph: Graph, plan) -> None:
    """A stored plan's outputs have the shapes the model's output types give for its
    input shapes, wherever those types say (the outputs are allocated at their stored
    shapes before any kernel runs: a file must not declare an output larger than the
    model makes). Outputs whose size depends on values (symbols no input binds) and
    inputs whose shapes do not match their types are left to the run-time checks."""
    bindings: dict[str, int] = {}
    for value, t in zip(graph.inputs, plan.inputs):
        declared, given = value.type.shape, plan.tensors[t].shape
        if declared is None or len(declared) != len(given):
            return
        for want, got in zip(declared, given):
            if isinstance(want, symbolic.Sym) and want.is_symbol:
                bindings.setdefault(want.name, got)
    for value, t in zip(graph.outputs, plan.outputs):
        declared, stored = value.type.shape, tuple(plan.tensors[t].shape)
        if declared is None:
            continue
        if len(declared) != len(stored):
            raise OfflineModelError(f"{where}: profile {name!r} stores output {value.name!r} "
                                    f"with rank {len(stored)}, the model's is {len(declared)}")
        for axis, dim in enumerate(declared):
            if isinstance(dim, symbolic.Sym):
                try:
                    dim = symbolic.evaluate(dim, bindings)
                except (KeyError, ZeroDivisionError):  # a value-dependent or odd size
                    continue
            if dim != stored[axis]:
                raise OfflineModelError(
                    f"{where}: profile {name!r} stores output {value.name!r} as "
                    f"{list(stored)!r:.80}; the model's type {value.type} gives {dim} at "
                    f"dim {axis} for these inputs")


def _json(data, where: str) -> Any:
    if len(data) > layout.MAX_JSON_BYTES:
        raise OfflineModelError(f"{where} is larger than {layout.MAX_JSON_BYTES} bytes")
    try:
        document = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise OfflineModelError(f"{where} is not valid JSON: {exc}") from None
    except RecursionError:
        raise OfflineModelError(f"{where} is nested too deeply") from None
    if not isinstance(document, dict):
        raise OfflineModelError(f"{where} is not a JSON object")
    return document


def _list(document: dict, key: str, where: str) -> list:
    value = document.get(key)
    if not isinstance(value, list):
        raise OfflineModelError(f"{where}: {key!r} must be a list")
    return value


def _text(value: Any, default: str) -> str:
    return value if isinstance(value, str) and value else default
