"""One fuzz case in a forked child: load, compile, run on random feeds; classify the end.

The child gets an address-space limit (RLIMIT_AS) and a CPU-time limit, and the parent
kills it when it outlives its wall-clock limit. What the child reports back through a
pipe (a JSON line) decides the outcome:

- "ok": it loaded, compiled and ran (or was left unrun because its declared inputs are
  too big to make random data for, or of unknown rank);
- "refused": a ge-hub error (`CLEAN_ERRORS`), the documented way to reject a model;
- "resource": NumPy could not allocate an array of a stated size under the child's
  RLIMIT_AS. Tensors up to `ge_hub.ops.limits.MAX_ELEMENTS` (2**40) elements are legal,
  so a model may ask for more memory than the fuzzer grants (an 8 GiB Conv output);
  NumPy's error names that size. Counted, not a failure. A bare MemoryError (a list
  or dict grown from a hostile number) stays an internal failure;
- "internal": any other exception, a finding (its type, message and innermost frame);
- "crash": the child died of a signal (or exited without reporting);
- "hang": the child ran past its time limit.
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import time
import traceback
from dataclasses import dataclass

import numpy as np
from ge_hub.errors import GeHubError
from ge_hub.executor import KernelError

# The ge-hub errors a hostile model may end in: the GeHubError family (GraphError,
# OpError, SerializationError, UnsupportedTypeError, ...) and the executor's
# KernelError, which names its node and op. FileNotFoundError etc. cannot happen:
# the harness always hands over an existing file.
CLEAN_ERRORS: tuple[type[BaseException], ...] = (GeHubError, KernelError)

FAILURES = ("internal", "crash", "hang")
MAX_FEED_ELEMENTS = 1 << 22  # random inputs beyond this are not made (the case is not run)


@dataclass
class Outcome:
    kind: str  # ok, refused, internal, crash, hang
    stage: str = ""  # load, compile, feeds, run (where the child was when it ended)
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.kind in FAILURES

    def line(self) -> str:
        if self.stage:
            return f"{self.kind} at {self.stage}: {self.detail}"
        return f"{self.kind}: {self.detail}" if self.detail else self.kind


def run_case(path: str, *, seed: int = 0, timeout: float = 20.0,
             memory_bytes: int = 3 << 30) -> Outcome:
    """Run the model file at `path` in a forked child; see the module docstring."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        try:
            _limit(memory_bytes, timeout)
            report = _exercise(path, seed)
        except BaseException as exc:  # noqa: B036  the harness itself failed: report it
            report = {"kind": "internal", "stage": "harness", "detail": _describe(exc)}
        try:
            os.write(write_end, (json.dumps(report) + "\n").encode())
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        return _wait(pid, read_end, timeout)
    finally:
        os.close(read_end)


def _limit(memory_bytes: int, timeout: float) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory_bytes:  # 0 under AddressSanitizer, which reserves terabytes of addresses
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    cpu = int(timeout * 4) + 1  # several threads may share the wall-clock time
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))


def _exercise(path: str, seed: int) -> dict:
    import warnings

    import ge_hub

    warnings.simplefilter("ignore")  # NumPy's overflow warnings on random data are noise
    stage = "load"
    try:
        graph = ge_hub.load(path)
        stage = "compile"
        model = ge_hub.compile(graph)
        stage = "feeds"
        feeds = random_feeds(graph, seed)
        if feeds is None:
            return {"kind": "ok", "stage": "compile", "detail": "inputs not made, not run"}
        stage = "run"
        model.run(feeds)
    except CLEAN_ERRORS as exc:
        return {"kind": "refused", "stage": stage, "detail": _describe(exc, frame=False)}
    except MemoryError as exc:
        kind = "resource" if _is_sized_array_allocation(exc) else "internal"
        return {"kind": kind, "stage": stage, "detail": _describe(exc)}
    except BaseException as exc:  # noqa: B036  MemoryError, RecursionError count too
        return {"kind": "internal", "stage": stage, "detail": _describe(exc)}
    return {"kind": "ok", "stage": "run", "detail": ""}


def _is_sized_array_allocation(exc: MemoryError) -> bool:
    """NumPy's "Unable to allocate 8.00 GiB for an array with shape ..." error."""
    return (type(exc).__module__.split(".")[0] == "numpy"
            and "for an array with shape" in str(exc))


def random_feeds(graph, seed: int) -> list[np.ndarray] | None:
    """Random arrays of the graph inputs' declared types, symbols bound to 1..3 (one
    size per symbol); None when a rank is unknown or the data would be too big."""
    from ge_hub.commands.feeds import random_array
    from ge_hub.ir import Sym

    rng = np.random.default_rng(seed)
    sizes: dict[str, int] = {}
    feeds = []
    for value in graph.inputs:
        if value.type.shape is None:
            return None
        shape = []
        for dim in value.type.shape:
            if isinstance(dim, Sym):
                dim = sizes.setdefault(dim.name, int(rng.integers(1, 4)))
            shape.append(int(dim))
        if any(d < 0 for d in shape) or np.prod(shape, dtype=object) > MAX_FEED_ELEMENTS:
            return None
        feeds.append(random_array(rng, value.type.dtype, tuple(shape)))
    return feeds


def _describe(exc: BaseException, frame: bool = True) -> str:
    text = f"{type(exc).__module__}.{type(exc).__qualname__}: {str(exc)[:300]}"
    if frame:
        frames = traceback.extract_tb(exc.__traceback__)
        if frames:
            last = frames[-1]
            text += f" [{os.path.relpath(last.filename)}:{last.lineno} in {last.name}]"
    return text


def _wait(pid: int, read_end: int, timeout: float) -> Outcome:
    deadline = time.monotonic() + timeout
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return Outcome("hang", "", f"still running after {timeout:g} s, killed")
        ready, _, _ = select.select([read_end], [], [], min(left, 0.5))
        if ready:
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                break  # the child closed its end: it ended
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        kind = "hang" if sig == signal.SIGXCPU else "crash"
        return Outcome(kind, "", f"killed by {signal.Signals(sig).name}")
    text = b"".join(chunks).decode(errors="replace").strip()
    if not text:
        return Outcome("crash", "", f"exited with status {os.WEXITSTATUS(status)} "
                                    "without a report")
    report = json.loads(text.splitlines()[-1])
    return Outcome(report["kind"], report["stage"], report["detail"])
