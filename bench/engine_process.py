"""The suite's handle on one engine worker process (the other end of bench.worker).

Requests wait for their answer with a deadline; a worker that misses it (a compiler that
never finishes, a hung kernel) is killed and reported, so one engine cannot stall the
suite.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench import protocol
from bench.engines import ModelFiles

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class EngineError(RuntimeError):
    """An engine failed, timed out or died; the message says which and why."""


class EngineProcess:
    def __init__(self, engine: str, model: str, env: dict[str, str] | None = None):
        self.engine = engine
        self.model = model
        self._stderr = tempfile.TemporaryFile()
        environment = dict(os.environ, **(env or {}))
        # The worker imports `bench` from this checkout, wherever the suite was started.
        environment["PYTHONPATH"] = os.pathsep.join(
            p for p in (PACKAGE_ROOT, environment.get("PYTHONPATH")) if p)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "bench.worker"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._stderr, env=environment, bufsize=0)

    def start(self, files: ModelFiles, timeout: float) -> dict:
        """Send the model; returns the worker's setup report (times, first outputs)."""
        reply = self._exchange({"engine": self.engine, "files": files}, timeout)
        return {k: v for k, v in reply.items() if k != "ok"}

    def request(self, *command: Any, timeout: float = 600.0) -> Any:
        return self._exchange(command, timeout)["value"]

    def time(self, calls: int) -> float:
        """Seconds per call over `calls` back-to-back calls, as the worker measured them.

        Returns only once the worker has gone quiet: thread pools spin-wait for a while
        after their last task (ONNX Runtime's for tens of milliseconds), and that spinning
        must not eat into the next engine's turn.
        """
        seconds = self.request("time", calls)
        self.wait_idle()
        return seconds

    def cpu_seconds(self) -> float | None:
        """CPU time used so far by all of the worker's threads (None where /proc is missing)."""
        total = 0
        try:
            tasks = os.listdir(f"/proc/{self._process.pid}/task")
            for task in tasks:
                with open(f"/proc/{self._process.pid}/task/{task}/schedstat") as f:
                    total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return total * 1e-9

    def wait_idle(self, quiet: float = 0.005, limit: float = 0.25) -> None:
        """Wait until the worker used no CPU for `quiet` seconds (at most `limit` seconds)."""
        deadline = time.perf_counter() + limit
        before = self.cpu_seconds()
        if before is None:
            time.sleep(quiet * 4)
            return
        while time.perf_counter() < deadline:
            time.sleep(quiet)
            now = self.cpu_seconds()
            if now is None or now - before < quiet * 0.05:
                return
            before = now

    def close(self) -> None:
        if self._process.poll() is None:
            try:
                self._exchange(("exit",), timeout=10.0)
                self._process.wait(timeout=10.0)
            except (EngineError, subprocess.TimeoutExpired):
                self._process.kill()
                self._process.wait()
        self._stderr.close()

    def _exchange(self, message: Any, timeout: float) -> dict:
        try:
            protocol.send(self._process.stdin, message)
        except (BrokenPipeError, OSError):
            self._fail("died before it could be asked anything")
        ready, _, _ = select.select([self._process.stdout], [], [], timeout)
        if not ready:
            self._process.kill()
            self._process.wait()
            self._fail(f"gave no answer within {timeout:.0f} s and was stopped")
        try:
            reply = protocol.receive(self._process.stdout)
        except EOFError:
            self._process.wait()
            self._fail(f"exited with status {self._process.returncode}")
        if not reply["ok"]:
            raise EngineError(f"{self.engine} on {self.model}: {reply['error']}")
        return reply

    def _fail(self, what: str):
        raise EngineError(f"{self.engine} on {self.model}: the worker {what}"
                          + _tail(self._stderr))


def _tail(stream, limit: int = 2000) -> str:
    stream.flush()
    stream.seek(0)
    text = stream.read().decode(errors="replace").strip()
    return "; its stderr ends:\n" + text[-limit:] if text else ""
