"""The results document: its JSON schema, a check of it, and its Markdown rendering.

The JSON file holds every figure; the Markdown table is a view of it. Both are built
from the same dict, so the table never shows a number the file lacks.
"""

from __future__ import annotations

import json
import math

SCHEMA = "ge-hub-bench/1"
STATUSES = ("ok", "error", "mismatch", "ready")
MIB = 1024 * 1024


# -- the JSON document ------------------------------------------------------------------

def validate(doc: dict) -> list[str]:
    """Problems with a results document; an empty list when it follows the schema."""
    problems = []
    for key, kind in (("schema", str), ("created", str), ("command", str), ("mode", str),
                      ("environment", dict), ("settings", dict), ("models", list)):
        if not isinstance(doc.get(key), kind):
            problems.append(f"top level: {key!r} missing or not a {kind.__name__}")
    if doc.get("schema") != SCHEMA:
        problems.append(f"schema is {doc.get('schema')!r}, expected {SCHEMA!r}")
    for key in ("cpu_model", "usable_cpus", "packages"):
        if key not in doc.get("environment", {}):
            problems.append(f"environment: {key!r} missing")
    for model in doc.get("models", []):
        problems += _validate_model(model)
    return problems


def _validate_model(model: dict) -> list[str]:
    name = model.get("name", "?")
    problems = [f"{name}: {key!r} missing" for key in ("name", "description", "engines",
                                                        "tolerance") if key not in model]
    for engine, entry in model.get("engines", {}).items():
        where = f"{name}/{engine}"
        status = entry.get("status")
        if status not in STATUSES:
            problems.append(f"{where}: status {status!r} is not one of {STATUSES}")
        if status in ("error", "mismatch") and not entry.get("error"):
            problems.append(f"{where}: status {status} without an error message")
        if status != "ok":
            continue
        latency = entry.get("latency_s", {})
        values = [latency.get(k) for k in ("p10", "median", "p90")]
        if not all(_is_number(v) and v > 0 for v in values):
            problems.append(f"{where}: latency_s needs positive p10, median, p90")
        elif not values[0] <= values[1] <= values[2]:
            problems.append(f"{where}: latency_s is not ordered p10 <= median <= p90")
        for key in ("setup_s", "import_s", "peak_rss_bytes"):
            if not _is_number(entry.get(key)):
                problems.append(f"{where}: {key!r} missing or not a number")
        if not isinstance(entry.get("ratio_vs"), dict):
            problems.append(f"{where}: 'ratio_vs' missing")
        if not entry.get("check", {}).get("ok"):
            problems.append(f"{where}: timed although its outputs were not checked")
    return problems


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def to_json(doc: dict) -> str:
    """The document as strict JSON: non-finite floats become null."""
    return json.dumps(_finite(doc), indent=1, sort_keys=False)


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


# -- Markdown ----------------------------------------------------------------------------

def format_ms(seconds: float | None) -> str:
    """Milliseconds with about three significant digits."""
    if seconds is None:
        return "–"
    ms = seconds * 1e3
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    if ms >= 1:
        return f"{ms:.2f}"
    return f"{ms:.3f}"


def format_ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def markdown(doc: dict) -> str:
    lines = [*_header(doc), "", *_latency_table(doc)]
    chains = chain_costs(doc)
    if chains:
        lines += ["", *_chain_table(chains)]
    steps = _steps_table(doc)
    if steps:
        lines += ["", *steps]
    profiles = [m for m in doc["models"] if m.get("profile")]
    if profiles:
        lines += ["", "### Where the time goes where ge-hub is slower than ONNX Runtime", ""]
        lines += [profile_sentence(m) for m in profiles]
    return "\n".join(lines) + "\n"


def _header(doc: dict) -> list[str]:
    env, settings = doc["environment"], doc["settings"]
    source = env.get("source") or {}
    revision = (f" at {source['commit'][:10]}{' (with local changes)' if source['dirty'] else ''}"
                if source.get("commit") else "")
    return [
        f"## ge-hub benchmark, {doc['mode']} run, {doc['created']}",
        "",
        f"`{doc['command']}`{revision} on {env['cpu_model']} ({env['usable_cpus']} usable "
        f"CPUs, load average {env.get('load_average_at_start')} at start, "
        f"{env.get('load_average_at_end')} at the end). Threads: ge-hub 2 (ge-hub-1t: 1), "
        "ONNX Runtime 1 and 2 intra-op, OpenVINO 1 and 2 (fp32 precision pinned, one "
        "stream, latency mode), PyTorch 2. Up to "
        f"{settings['rounds']} interleaved rounds of at least "
        f"{format_ms(settings['min_round_seconds'])} ms per engine, after "
        f"{settings['warmup']} warm-up calls.",
        "",
        "Latency: median per call in ms (p10-p90). Ratio: engine median / ONNX Runtime "
        "or OpenVINO median (below 1: faster than that peer). Setup: model load and "
        "session creation or compilation, plus the first run. Peak: peak RSS of the "
        "engine's own process above its baseline after imports.",
    ]


def _latency_table(doc: dict) -> list[str]:
    lines = ["| model | engine | median ms | p10-p90 ms | / ORT 1t | / ORT 2t | / OV 1t "
             "| / OV 2t | setup s | peak MiB | note |",
             "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
    for model in doc["models"]:
        for engine, entry in model["engines"].items():
            latency = entry.get("latency_s", {})
            ratios = entry.get("ratio_vs", {})
            spread = (f"{format_ms(latency['p10'])}-{format_ms(latency['p90'])}"
                      if latency else "–")
            setup = f"{entry['setup_s']:.2f}" if "setup_s" in entry else "–"
            peak = (f"{entry['peak_rss_bytes'] / MIB:.0f}" if "peak_rss_bytes" in entry
                    else "–")
            lines.append(
                f"| {model['name']} | {engine} | {format_ms(latency.get('median'))} | "
                f"{spread} | {format_ratio(ratios.get('ort-1t'))} | "
                f"{format_ratio(ratios.get('ort-2t'))} | {format_ratio(ratios.get('ov-1t'))} | "
                f"{format_ratio(ratios.get('ov-2t'))} | {setup} | {peak} | {_note(entry)} |")
    return lines


def _steps_table(doc: dict) -> list[str]:
    """ge-hub's steps per model with its fusion passes on (as timed) and off."""
    rows = []
    for model in doc["models"]:
        details = next((e.get("details", {}) for name, e in model["engines"].items()
                        if name.startswith("ge-hub") and "steps_without_fusion" in
                        e.get("details", {})), None)
        if details:
            rules = details.get("rules", {})
            fired = ", ".join(f"{name} x{n}" for name, n in sorted(rules.items())
                              if name.split(".")[0] in details["fusion_passes"])
            rows.append(f"| {model['name']} | {details['steps']} | "
                        f"{details['steps_without_fusion']} | {fired or '–'} |")
    if not rows:
        return []
    return ["ge-hub steps per run, with fusion (as timed) and with every rule pass of the "
            "fuse stage off:", "", "| model | steps | steps without fusion | rules fired |",
            "|---|--:|--:|---|", *rows]


def _note(entry: dict) -> str:
    if entry.get("status") in ("error", "mismatch"):
        first = entry.get("error", "").strip().splitlines()
        return f"{entry['status']}: " + (first[0][:120] if first else "")
    fallback = entry.get("details", {}).get("fallback_ops")
    if fallback:
        return "fallback: " + ", ".join(f"{op} x{n}" for op, n in sorted(fallback.items()))
    return ""


def chain_costs(doc: dict) -> dict[str, dict]:
    """Per-op and per-call cost of each engine, from the 1-op and 200-op chains."""
    models = {m["name"]: m for m in doc["models"]}
    one, many = models.get("chain-1"), models.get("chain-200")
    if not one or not many:
        return {}
    costs = {}
    for engine, entry in one["engines"].items():
        other = many["engines"].get(engine, {})
        if "latency_s" not in entry or "latency_s" not in other:
            continue
        t1, t200 = entry["latency_s"]["median"], other["latency_s"]["median"]
        per_op = (t200 - t1) / 199
        costs[engine] = {"per_op_s": per_op, "per_call_s": t1 - per_op,
                         "steps": other.get("details", {}).get("steps")}
    return costs


def _chain_table(costs: dict[str, dict]) -> list[str]:
    # An engine that fuses the chain (ge-hub's fuse_elementwise makes it one step) shows
    # the cost of an op inside its fused kernel, not of dispatching a step: the steps
    # column says which.
    lines = ["Elementwise chains on [1, 64]: per-op = (200-op - 1-op) / 199, per-call = "
             "1-op - per-op; steps: what the 200-op chain ran as, where the engine says "
             "(1: fused into one kernel, so per-op is not a dispatch cost).", "",
             "| engine | per op, us | per call, us | steps |", "|---|--:|--:|--:|"]
    for engine, cost in costs.items():
        steps = cost.get("steps")
        lines.append(f"| {engine} | {cost['per_op_s'] * 1e6:.2f} | "
                     f"{cost['per_call_s'] * 1e6:.2f} | {'–' if steps is None else steps} |")
    return lines


def _top_ops(profile: dict, count: int = 3) -> str:
    if "ops" not in profile:
        return f"no profile ({profile.get('error', 'unknown error').splitlines()[0]})"
    parts = [f"{o['op']} {o['share'] * 100:.0f}% ({format_ms(o['seconds'])} ms, "
             f"{o['nodes']} nodes)" for o in profile["ops"][:count]]
    return ", ".join(parts)


def _beside(profile: dict) -> str:
    run = profile.get("run_s")
    return "" if run is None else f" beside a whole run of {format_ms(run)} ms"


def profile_sentence(model: dict) -> str:
    """One line: the profiled ge-hub configuration and its ONNX Runtime peer, top ops each."""
    profile = model["profile"]
    ge_name = next(e for e in profile if e.startswith("ge-hub"))
    peer = next(e for e in profile if e != ge_name)
    engines = model["engines"]
    ge = engines[ge_name]["latency_s"]["median"]
    ort = engines[peer]["latency_s"]["median"]
    ge_profile, ort_profile = profile[ge_name], profile[peer]
    text = (f"- **{model['name']}**: {ge_name} {format_ms(ge)} ms vs {peer} {format_ms(ort)} ms. "
            f"{ge_name} per op type (single-op graphs, sum "
            f"{format_ms(ge_profile.get('total_s'))} ms{_beside(ge_profile)}): "
            f"{_top_ops(ge_profile)}. {peer} (its profiler, sum "
            f"{format_ms(ort_profile.get('total_s'))} ms{_beside(ort_profile)}): "
            f"{_top_ops(ort_profile)}.")
    fallback = ge_profile.get("fallback_nodes")
    if fallback:
        text += " Reference fallbacks: " + ", ".join(f"{k} x{v}" for k, v in fallback.items())
    return text
