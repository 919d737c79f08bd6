"""One model through every engine: prepare, start workers, check agreement, time, measure.

For each model the steps are, in order:

1. prepare the files every engine loads (bench.cases), once;
2. start one worker per engine, one after the other, so that each setup (session
   creation, compilation) has the machine to itself; each worker reports its setup time,
   its first outputs and its memory;
3. compare every engine's first outputs with the reference engine's (PyTorch eager for
   PyTorch models, else ONNX Runtime); an engine that disagrees is not timed;
4. time the agreeing engines interleaved (bench.timing.interleave), workers taking turns;
5. collect each worker's peak RSS above its baseline;
6. where ge-hub is slower than ONNX Runtime, profile both per op type (bench.op_profile).
"""

from __future__ import annotations

import dataclasses
import sys
import time

from bench.checks import compare_outputs
from bench.engine_process import EngineError, EngineProcess
from bench.timing import interleave

REFERENCE_ORDER = ("torch-eager", "ort-1t", "ort-2t", "ge-hub", "ge-hub-1t", "torch-compile",
                   "ov-1t", "ov-2t")
ORT_ENGINES = ("ort-1t", "ort-2t")
OV_ENGINES = ("ov-1t", "ov-2t")
# Every engine's median is also given as a ratio to each of these, when they ran.
PEER_ENGINES = ORT_ENGINES + OV_ENGINES
# Each ge-hub configuration beside the ONNX Runtime one with the same thread count.
GE_HUB_PEERS = {"ge-hub-1t": "ort-1t", "ge-hub": "ort-2t"}


@dataclasses.dataclass
class Settings:
    engines: list[str]
    rounds: int = 20
    min_rounds: int = 5
    warmup: int = 3
    warmup_seconds: float = 1.0       # fewer warm-up calls for slow models
    min_round_seconds: float = 0.05
    budget_seconds: float = 30.0      # timed rounds per model, all engines together
    setup_timeout: float = 300.0
    compile_timeout: float = 600.0    # torch.compile compiles during its first call
    profile: bool = True
    profile_rounds: int = 5
    cold_inductor: bool = False

    def worker_env(self, engine: str) -> dict[str, str]:
        if engine == "torch-compile" and self.cold_inductor:
            return {"TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}
        return {}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_case(case, settings: Settings, directory: str) -> dict:
    """Everything measured for one model, as a JSON-ready dict."""
    result = {"name": case.name, "description": case.description, **case.describe(),
              "tolerance": {"rtol": case.rtol, "atol": case.atol}, "engines": {}}
    start = time.perf_counter()
    files = case.prepare(directory)
    result["prepare_s"] = time.perf_counter() - start
    log(f"[{case.name}] prepared in {result['prepare_s']:.1f} s")
    workers: dict[str, EngineProcess] = {}
    try:
        outputs = _start_workers(case, settings, files, result["engines"], workers)
        _check_agreement(case, outputs, result, workers)
        _time(case, settings, result["engines"], workers)
        _collect_stats(result["engines"], workers)
        if settings.profile:
            _profile_if_slower(case, settings, result, workers)
    finally:
        for worker in workers.values():
            worker.close()
    return result


def _start_workers(case, settings, files, entries, workers) -> dict:
    outputs = {}
    for engine in case.engines(settings.engines):
        timeout = settings.compile_timeout if engine == "torch-compile" else settings.setup_timeout
        worker = EngineProcess(engine, case.name, settings.worker_env(engine))
        try:
            report = worker.start(files, timeout)
        except EngineError as error:
            worker.close()
            entries[engine] = {"status": "error", "error": str(error)}
            log(f"[{case.name}] {engine}: ERROR {str(error).splitlines()[0]}")
            continue
        workers[engine] = worker
        outputs[engine] = report.pop("outputs")
        report["setup_s"] = report["prepare_s"] + report["first_run_s"]
        entries[engine] = {"status": "ready", **report}
        log(f"[{case.name}] {engine}: ready in {report['setup_s']:.2f} s "
            f"(imports {report['import_s']:.1f} s)")
    return outputs


def _check_agreement(case, outputs, result, workers) -> None:
    reference = next((e for e in REFERENCE_ORDER if e in outputs), None)
    result["reference_engine"] = reference
    for engine, got in outputs.items():
        check = compare_outputs(got, outputs[reference], rtol=case.rtol, atol=case.atol)
        entry = result["engines"][engine]
        entry["check"] = check
        if not check["ok"]:
            entry["status"] = "mismatch"
            entry["error"] = f"outputs disagree with {reference}: {check['reason']}"
            workers.pop(engine).close()
            log(f"[{case.name}] {engine}: MISMATCH {check['reason']} "
                f"(max abs {check['max_abs']}, max rel {check['max_rel']})")


def _time(case, settings, entries, workers) -> None:
    while workers:
        try:
            timings = interleave({e: w.time for e, w in workers.items()},
                                 rounds=settings.rounds, min_rounds=settings.min_rounds,
                                 warmup=settings.warmup,
                                 min_round_seconds=settings.min_round_seconds,
                                 budget_seconds=settings.budget_seconds,
                                 warmup_seconds=settings.warmup_seconds)
        except EngineError as error:
            # Drop the engine that failed and time the others again from the start.
            engine = next(e for e in workers if str(error).startswith(f"{e} on "))
            workers.pop(engine).close()
            entries[engine].update(status="error", error=str(error))
            log(f"[{case.name}] {engine}: ERROR while timing: {str(error).splitlines()[0]}")
            continue
        break
    else:
        return
    for engine, timing in timings.items():
        entries[engine].update(status="ok", latency_s=timing)
    for entry in entries.values():
        if "latency_s" not in entry:
            continue
        entry["ratio_vs"] = {peer: entry["latency_s"]["median"]
                             / entries[peer]["latency_s"]["median"]
                             for peer in PEER_ENGINES if "latency_s" in entries.get(peer, {})}
    summary = ", ".join(f"{e} {t['median'] * 1e3:.3f} ms" for e, t in timings.items())
    log(f"[{case.name}] medians: {summary}")


def _collect_stats(entries, workers) -> None:
    for engine, worker in workers.items():
        entries[engine].update(worker.request("stats", timeout=60.0))


def _median(entries, engine) -> float | None:
    return entries.get(engine, {}).get("latency_s", {}).get("median")


def _profile_if_slower(case, settings, result, workers) -> None:
    """Profile ge-hub beside ONNX Runtime when a ge-hub configuration loses to its peer.

    The single-thread pair is profiled when it exists: one thread is the least disturbed
    by a busy machine, and it compares kernels rather than threading.
    """
    entries = result["engines"]
    slower = [ge for ge, ort in GE_HUB_PEERS.items()
              if None not in (_median(entries, ge), _median(entries, ort))
              and _median(entries, ge) > _median(entries, ort)]
    if not slower:
        return
    pair = next(((ge, ort) for ge, ort in GE_HUB_PEERS.items()
                 if ge in workers and ort in workers), None)
    if pair is None:
        return
    profile = {}
    for engine in pair:
        try:
            profile[engine] = workers[engine].request("profile", settings.profile_rounds)
        except EngineError as error:
            profile[engine] = {"error": str(error)}
    result["profile"] = profile
    log(f"[{case.name}] profiled {pair[0]} and {pair[1]}")
