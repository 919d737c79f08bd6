"""An engine worker: one engine, one model, one process (`python -m bench.worker`).

The suite starts one worker per engine per model, so that each engine's memory is
measured alone, and drives all of them over pipes, so that their timing rounds still
interleave. The conversation, one pickled message each way (bench.protocol):

    suite -> {"engine", "files"}      worker imports, takes its memory baseline, prepares
                                      the model, runs it once
    worker -> {"ok", "import_s", "prepare_s", "first_run_s", "outputs", ...}
    suite -> ("time", n)              n calls back to back
    worker -> {"ok", "value": seconds per call}
    suite -> ("stats",)               peak RSS above the baseline, engine details
    suite -> ("profile", repeats)     per-op-type profile, where the engine has one
    suite -> ("outputs", seed)        the outputs on other inputs (varied_inputs: the
                                      model's own with their floats redrawn from `seed`)
    suite -> ("exit",)

The worker writes nothing else to its stdout: anything a library prints there goes to
stderr, which the suite keeps for error reports.
"""

from __future__ import annotations

import os
import sys
import time
import traceback

import numpy as np

from bench import memory, protocol


def varied_inputs(inputs: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    """The same inputs with every floating-point one redrawn from a standard normal (seeded,
    so that every engine gets the same arrays); integer inputs (indices, masks) are kept."""
    rng = np.random.default_rng(seed)
    return {name: (rng.standard_normal(array.shape).astype(array.dtype)
                   if np.issubdtype(array.dtype, np.floating) else array)
            for name, array in inputs.items()}


def _outputs_on(engine, inputs: dict[str, np.ndarray], seed: int) -> list[np.ndarray]:
    engine.bind(varied_inputs(inputs, seed))
    try:
        with engine.running():
            return [o.copy() for o in engine.to_numpy(engine.run())]
    finally:
        engine.bind(inputs)  # the timed calls keep running on the model's own inputs


def _serve(engine, channel_in, channel_out, baseline: int, inputs=None) -> None:
    while True:
        try:
            command, *args = protocol.receive(channel_in)
        except EOFError:
            return
        try:
            if command == "time":
                (count,) = args
                with engine.running():
                    start = time.perf_counter()
                    for _ in range(count):
                        engine.run()
                    value = (time.perf_counter() - start) / count
            elif command == "stats":
                value = {"baseline_rss_bytes": baseline,
                         "peak_rss_bytes": memory.peak_rss() - baseline,
                         "details": engine.details()}
            elif command == "profile":
                (repeats,) = args
                with engine.running():
                    value = engine.profile(repeats)
            elif command == "outputs":
                (seed,) = args
                value = _outputs_on(engine, inputs, seed)
            elif command == "exit":
                protocol.send(channel_out, {"ok": True, "value": None})
                return
            else:
                raise ValueError(f"unknown worker command {command!r}")
        except Exception as error:  # reported to the suite, which decides what it means
            protocol.send(channel_out, {"ok": False, "error": _describe(error)})
            continue
        protocol.send(channel_out, {"ok": True, "value": value})


def _describe(error: BaseException) -> str:
    lines = traceback.format_exception_only(type(error), error)
    return "".join(lines).strip() + "\n" + traceback.format_exc(limit=-3)


def main() -> int:
    from bench import engines

    # Keep the protocol on a private copy of stdout; route fd 1 to stderr for the rest.
    channel_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    channel_in = sys.stdin.buffer
    request = protocol.receive(channel_in)
    try:
        start = time.perf_counter()
        engine = engines.create(request["engine"])
        engine.load_libraries()
        inputs = request["files"].load_inputs()
        import_s = time.perf_counter() - start

        memory.reset_peak()
        baseline = memory.current_rss()
        start = time.perf_counter()
        engine.prepare(request["files"], inputs)
        prepare_s = time.perf_counter() - start
        with engine.running():
            start = time.perf_counter()
            outputs = engine.run()
            first_run_s = time.perf_counter() - start
            outputs = [o.copy() for o in engine.to_numpy(outputs)]
    except Exception as error:
        protocol.send(channel_out, {"ok": False, "error": _describe(error)})
        return 1
    protocol.send(channel_out, {
        "ok": True, "import_s": import_s, "prepare_s": prepare_s,
        "first_run_s": first_run_s, "outputs": outputs,
        "setup_peak_rss_bytes": memory.peak_rss() - baseline,
    })
    _serve(engine, channel_in, channel_out, baseline, inputs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
