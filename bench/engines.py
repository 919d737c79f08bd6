"""The engines under test, as seen from inside their worker process.

An engine imports its libraries, prepares the model (from the ONNX file, or from the
PyTorch definition and its saved weights), and then runs it on inputs bound once, in its
own native form (NumPy arrays for ge-hub and ONNX Runtime, tensors for PyTorch), so
that a timed call is exactly what a user of that engine would write. Nothing here is
imported by the parent process beyond the names in ENGINES.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import os
from collections.abc import Callable
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class ModelFiles:
    """Everything a worker needs to rebuild one model; plain data, sent over the pipe."""

    onnx_path: str
    inputs_path: str                  # .npz: graph input name -> array
    torch_spec: dict | None = None    # {"architecture", "config", "state_dict"} or None

    def load_inputs(self) -> dict[str, np.ndarray]:
        with np.load(self.inputs_path) as data:
            return {name: data[name] for name in data.files}


class Engine:
    """One way of running a model. Subclasses fill in the four steps."""

    name = ""
    needs_torch_model = False
    threads = 1

    def load_libraries(self) -> None:
        """Import what the engine needs (timed, and before the memory baseline)."""

    def prepare(self, files: ModelFiles, inputs: dict[str, np.ndarray]) -> None:
        """Build the engine's model and bind `inputs` for `run`."""
        raise NotImplementedError

    def run(self) -> Any:
        """One inference on the bound inputs; returns the engine's native outputs."""
        raise NotImplementedError

    def bind(self, inputs: dict[str, np.ndarray]) -> None:
        """Bind other inputs of the prepared model's shapes for `run` (the precision rows
        measure each engine's error over several inputs); the model is not prepared again."""
        raise NotImplementedError(f"{self.name or type(self).__name__} cannot bind other inputs")

    def to_numpy(self, outputs: Any) -> list[np.ndarray]:
        return [np.asarray(o) for o in outputs]

    def running(self) -> contextlib.AbstractContextManager:
        """The context every call of `run` happens in (inference mode, for PyTorch)."""
        return contextlib.nullcontext()

    def details(self) -> dict:
        """Engine-specific facts worth reporting beside the timings."""
        return {"threads": self.threads}

    def profile(self, repeats: int) -> dict:
        raise NotImplementedError(f"{self.name} has no per-op profile")


class GeHub(Engine):
    """ge-hub through its public API: ge_hub.load (the ONNX frontend), ge_hub.compile, run.

    "ge-hub" is its default configuration on this suite's 2-thread budget; "ge-hub-1t"
    runs one thread, to compare like with like against ONNX Runtime's single thread.
    """

    NODE_TIME_RUNS = 20

    def __init__(self, threads: int, precision: str | None = None, node_times: bool = False):
        self.threads = threads
        self.precision = precision  # None: the default (fp32), as the main suite runs it
        # bench.layers: the details say how long the plan's steps took (NODE_TIME_RUNS
        # profiled runs, median), without binding the inputs and returning the outputs
        self.node_times = node_times
        self.name = "ge-hub" if threads == 2 else f"ge-hub-{threads}t"
        if precision:
            self.name = f"ge-hub-{threads}t-{precision}"
        if node_times:
            self.name += "-nodes"

    def load_libraries(self) -> None:
        # The executor's pool reads its size once, on first use.
        os.environ["GE_HUB_NUM_THREADS"] = str(self.threads)
        import importlib

        import ge_hub
        from ge_hub.plugins import get_registry

        # Plugins and onnx load lazily on first use; that one-time cost is an import
        # cost, like `import torch`, not part of preparing a model.
        get_registry()
        importlib.import_module("ge_onnx.importer")
        self.ge_hub = ge_hub

    def prepare(self, files, inputs):
        # From the file, as a user would: the compiled model then reads the graph again
        # from it when it needs it, instead of keeping the original weights alive.
        options = {"precision": self.precision} if self.precision else None
        self.model = self.ge_hub.compile(files.onnx_path, options=options)
        self.bind(inputs)
        # Counted in details(), after the timed rounds and after the worker reads the
        # peak RSS: a second compile here would count in setup time and peak memory.
        self.unfused_steps = None

    def _steps_without_fusion(self, inputs) -> dict:
        """How many steps the model compiles to with every rule pass of the `fuse` stage
        (fold_batch_norm, fuse_conv_epilogue, ...) and fuse_elementwise off: what fusion
        saves."""
        from ge_hub.plugins import get_registry

        fusion = [p.name for p in get_registry().passes("fuse")
                  if p.rules or p.name == "fuse_elementwise"]
        shapes = {name: inputs[name].shape for name in self.model.input_names}
        model = self.ge_hub.compile(self.model.graph, input_shapes=shapes,
                                    options={"disable_passes": fusion})
        return {"fusion_passes": fusion, "steps_without_fusion": len(model.plan.steps)}

    def bind(self, inputs):
        self.feed = [inputs[name] for name in self.model.input_names]

    def run(self):
        return self.model.run(self.feed)

    def details(self):
        if self.precision:  # the precision rows: what ran in which precision, by op
            ops = {s.node: s.op.rpartition(".")[2] for s in self.model.plan.steps}
            precision = self.model.summary()["precision"]
            kept = collections.Counter(ops[node] for node in precision["fp32_products"])
            split = collections.Counter(ops[node] for node in precision["bf16x3_products"])
            details = {"threads": self.threads, **self.model.summary(),
                       "fp32_product_ops": dict(kept), "bf16x3_product_ops": dict(split)}
            if self.node_times:
                profile = self.model.profile(self.feed, runs=self.NODE_TIME_RUNS)
                details["nodes_ms"] = 1e3 * float(np.median(profile.steps_seconds_per_run()))
            return details
        if self.unfused_steps is None:
            self.unfused_steps = self._steps_without_fusion(
                dict(zip(self.model.input_names, self.feed)))
        return {"threads": self.threads, **self.model.summary(), **self.unfused_steps}

    def profile(self, repeats):
        from bench.op_profile import profile_ge_hub

        shapes = {name: x.shape for name, x in zip(self.model.input_names, self.feed)}
        return profile_ge_hub(self.model.graph, shapes, rounds=repeats, whole_model=self.run)


class OnnxRuntime(Engine):
    """ONNX Runtime's CPU provider, every graph optimization on, `threads` intra-op threads."""

    def __init__(self, threads: int):
        self.threads = threads
        self.name = f"ort-{threads}t"

    def load_libraries(self):
        import onnxruntime

        self.ort = onnxruntime

    def _options(self):
        options = self.ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = self.ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = self.ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # unused-initializer warnings of old model files
        return options

    def _session(self, options):
        return self.ort.InferenceSession(self.path, options, providers=["CPUExecutionProvider"])

    def prepare(self, files, inputs):
        self.path = files.onnx_path
        self.session = self._session(self._options())
        self.bind(inputs)

    def bind(self, inputs):
        self.feed = {i.name: inputs[i.name] for i in self.session.get_inputs()}

    def run(self):
        return self.session.run(None, self.feed)

    def details(self):
        return {"threads": self.threads, "providers": self.session.get_providers(),
                "version": self.ort.__version__}

    def profile(self, repeats):
        from bench.op_profile import summarize_ort_profile

        warmup = 2
        options = self._options()
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(
            os.environ.get("TMPDIR", "/tmp"), f"ge-hub-bench-ort-{os.getpid()}")
        session = self._session(options)
        for _ in range(warmup + repeats):
            session.run(None, self.feed)
        path = session.end_profiling()
        try:
            return summarize_ort_profile(path, skip_runs=warmup)
        finally:
            with contextlib.suppress(OSError):
                os.remove(path)


class OpenVino(Engine):
    """OpenVINO's CPU plugin on the ONNX file, `threads` inference threads, one stream,
    latency mode. `precision` "f32" pins fp32 arithmetic, the like-for-like peer of
    ge-hub's exact fp32 (OpenVINO's own default is bf16 on CPUs with AMX or AVX512-BF16,
    about 1e-2 relative error, which the suite's agreement check would refuse); None keeps
    that default. The precision in effect is reported with the engine's details.

    `node_times`: OpenVINO's own per-node counters on, and the details say how long its
    nodes took besides the Reorders (NODE_TIME_RUNS runs, median): a one-layer model's
    input and output are converted to and from OpenVINO's blocked layout, once per call,
    which a whole model pays once, not per layer (bench.layers)."""

    NODE_TIME_RUNS = 20

    def __init__(self, threads: int, precision: str | None = "f32", node_times: bool = False):
        self.threads = threads
        self.precision = precision
        self.node_times = node_times
        self.name = (f"ov-{threads}t" if precision else f"ov-{threads}t-default") \
            + ("-nodes" if node_times else "")

    def load_libraries(self):
        import openvino

        self.ov = openvino

    def prepare(self, files, inputs):
        import openvino.properties as props
        import openvino.properties.hint as hints

        core = self.ov.Core()
        config = {props.inference_num_threads: self.threads,
                  props.num_streams: 1,
                  hints.performance_mode: hints.PerformanceMode.LATENCY}
        if self.precision:
            config[hints.inference_precision] = self.precision
        if self.node_times:
            config[props.enable_profiling] = True
        model = core.read_model(files.onnx_path)
        self.compiled = core.compile_model(model, "CPU", config)
        self.request = self.compiled.create_infer_request()
        self.outputs = list(self.compiled.outputs)
        self.bind(inputs)

    def bind(self, inputs):
        self.feed = {port.any_name: inputs[port.any_name] for port in self.compiled.inputs}

    def run(self):
        results = self.request.infer(self.feed)
        return [results[port] for port in self.outputs]

    def details(self):
        import openvino.properties.hint as hints

        precision = self.compiled.get_property(hints.inference_precision)
        details = {"threads": self.threads, "precision": str(precision),
                   "version": self.ov.__version__}
        if self.node_times:
            details["nodes_ms"], details["reorder_ms"] = self._node_ms()
        return details

    def _node_ms(self) -> tuple[float, float]:
        """Median milliseconds per run in the executed nodes other than Reorders, and in
        the Reorders, by OpenVINO's counters."""
        nodes, reorders = [], []
        for _ in range(self.NODE_TIME_RUNS):
            self.request.infer(self.feed)
            counted = {"node": 0.0, "reorder": 0.0}
            for info in self.request.get_profiling_info():
                if info.status == info.Status.EXECUTED:
                    kind = "reorder" if info.node_type == "Reorder" else "node"
                    counted[kind] += info.real_time.total_seconds() * 1e3
            nodes.append(counted["node"])
            reorders.append(counted["reorder"])
        return float(np.median(nodes)), float(np.median(reorders))


class TorchEager(Engine):
    """PyTorch eager mode under torch.inference_mode, `threads` intra-op threads."""

    name = "torch-eager"
    needs_torch_model = True
    threads = 2

    def load_libraries(self):
        import torch

        from bench import torch_models

        torch.set_num_threads(self.threads)
        self.torch = torch
        self.torch_models = torch_models

    def _module(self, spec: dict):
        # Built on the meta device and then given the saved tensors, so that the weights
        # exist once (not a random initialisation plus the loaded copy).
        architecture = self.torch_models.ARCHITECTURES[spec["architecture"]]
        with self.torch.device("meta"):
            module = architecture(**spec["config"])
        state = self.torch.load(spec["state_dict"], weights_only=True)
        module.load_state_dict(state, assign=True)
        return module.eval()

    def prepare(self, files, inputs):
        if files.torch_spec is None:
            raise ValueError(f"{self.name} needs a PyTorch model; this one is an ONNX file")
        self.module = self._module(files.torch_spec)
        self.args = [self.torch.from_numpy(inputs[name]) for name in sorted(inputs)]

    def run(self):
        return self.module(*self.args)

    def to_numpy(self, outputs):
        if isinstance(outputs, self.torch.Tensor):
            outputs = [outputs]
        return [o.numpy() for o in outputs]

    def running(self):
        return self.torch.inference_mode()

    def details(self):
        return {"threads": self.torch.get_num_threads(), "version": self.torch.__version__}


class TorchCompile(TorchEager):
    """torch.compile with the default (inductor) backend; it compiles on the first call."""

    name = "torch-compile"

    def prepare(self, files, inputs):
        super().prepare(files, inputs)
        self.module = self.torch.compile(self.module, backend="inductor", dynamic=False)

    def details(self):
        return {**super().details(), "backend": "inductor",
                "caches_disabled": os.environ.get("TORCHINDUCTOR_FORCE_DISABLE_CACHES") == "1"}


ENGINES: dict[str, Callable[[], Engine]] = {
    "ge-hub": lambda: GeHub(2),
    "ge-hub-1t": lambda: GeHub(1),
    "ort-1t": lambda: OnnxRuntime(1),
    "ort-2t": lambda: OnnxRuntime(2),
    "ov-1t": lambda: OpenVino(1),
    "ov-2t": lambda: OpenVino(2),
    "torch-eager": TorchEager,
    "torch-compile": TorchCompile,
}
# What a full `python -m bench` runs. The precision rows below are bench.precision's: in
# the full run they would repeat ge-hub's fp32 rows and split each model's time budget
# among twice the engines.
SUITE_ENGINES = tuple(ENGINES)
# The precision rows (bench.precision): ge-hub per precision, OpenVINO at its default.
for _threads in (1, 2):
    for _precision in ("fp32", "bf16", "mixed"):
        ENGINES[f"ge-hub-{_threads}t-{_precision}"] = functools.partial(GeHub, _threads,
                                                                        _precision)
        ENGINES[f"ge-hub-{_threads}t-{_precision}-nodes"] = functools.partial(
            GeHub, _threads, _precision, node_times=True)
    ENGINES[f"ov-{_threads}t-default"] = functools.partial(OpenVino, _threads, None)
    # bench.layers: OpenVINO's per-node counters, to leave out its layout conversions
    for _ov_precision, _suffix in ((None, "-default"), ("f32", "")):
        ENGINES[f"ov-{_threads}t{_suffix}-nodes"] = functools.partial(
            OpenVino, _threads, _ov_precision, node_times=True)
TORCH_ENGINES = ("torch-eager", "torch-compile")


def create(name: str) -> Engine:
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; known: {sorted(ENGINES)}")
    return ENGINES[name]()
