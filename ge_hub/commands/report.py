"""What `ge-hub run` reports: statistics of each array, latency, and their text form.

The report is one plain dict (`--json` prints it as it is); `format_text` turns it into
the human-readable listing. Statistics are over the finite elements, so that one NaN
does not hide the range of the rest; NaN and infinity are counted separately.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ge_hub.ir.dtypes import DType

LATENCY_PERCENTILE = 90


def array_stats(name: str, array: np.ndarray) -> dict[str, Any]:
    """Name, shape, dtype, min/max/mean/std of the finite elements, NaN and inf counts."""
    dtype = DType.from_numpy(array.dtype)
    stats: dict[str, Any] = {"name": name, "shape": list(array.shape), "dtype": dtype.value}
    values = array.reshape(-1)
    nan = inf = 0
    if dtype.is_float:
        values = values.astype(np.float64)  # float16/bfloat16 stats would overflow or round
        finite = np.isfinite(values)
        nan = int(np.count_nonzero(np.isnan(values)))
        inf = values.size - nan - int(np.count_nonzero(finite))
        values = values[finite]
    if values.size:
        as_float = values.astype(np.float64)
        low, high = values.min(), values.max()
        stats.update(min=_scalar(low), max=_scalar(high), mean=float(as_float.mean()),
                     std=float(as_float.std()))
    else:  # empty, or nothing finite: no statistic is meaningful
        stats.update(min=None, max=None, mean=None, std=None)
    stats.update(nan=nan, inf=inf)
    return stats


def _scalar(value) -> int | float | bool:
    # Integers and booleans stay exact; floats are reported as Python floats.
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    return float(value)


def latency_stats(seconds: Sequence[float]) -> dict[str, Any]:
    """Median, p90 and min of run times, in milliseconds."""
    ms = np.asarray(seconds, dtype=np.float64) * 1e3
    return {"runs": len(ms), "median_ms": float(np.median(ms)),
            f"p{LATENCY_PERCENTILE}_ms": float(np.percentile(ms, LATENCY_PERCENTILE)),
            "min_ms": float(ms.min())}


# -- text ----------------------------------------------------------------------------


def format_text(report: dict[str, Any], *, quiet: bool = False) -> str:
    """The report as the listing `ge-hub run` prints; `quiet` keeps only the outputs and
    latency."""
    lines: list[str] = []
    if not quiet:
        lines.append(f"model: {report['model']}")
        lines.append("inputs:")
        lines += _table([[i["name"], _type(i), i["source"]] for i in report["inputs"]])
    lines.append("outputs:")
    lines += _table([[o["name"], _type(o), _stats_text(o)] + _saved(o)
                     for o in report["outputs"]])
    if not quiet:
        lines.append(_compile_text(report["compile"]))
        rules = report["compile"].get("rules") or {}
        lines.append("rules: " + (", ".join(f"{name} {count}" for name, count in rules.items())
                                  or "none fired"))
        timings = report["timings_ms"]
        lines.append(f"time: load {timings['load']:.1f} ms, compile {timings['compile']:.1f} "
                     f"ms, first run {timings['first_run']:.2f} ms")
    latency = report.get("latency")
    if latency:
        p = f"p{LATENCY_PERCENTILE}_ms"
        lines.append(f"latency over {latency['runs']} runs: median {latency['median_ms']:.3f} "
                     f"ms, p{LATENCY_PERCENTILE} {latency[p]:.3f} ms, "
                     f"min {latency['min_ms']:.3f} ms")
    if report.get("profile"):
        profile = report["profile"]
        lines.append(f"profile: {profile['trace']} ({profile['events']} events, lanes "
                     f"{profile['lanes']}; steps cover {profile['coverage']:.1%} of the "
                     f"{profile['run_ms']:.3f} ms run)")
    if report.get("dump"):
        dump = report["dump"]
        lines.append(f"dump: {dump['values']} values in {dump['directory']} "
                     f"(manifest {dump['manifest']})")
    return "\n".join(lines)


def _type(entry: dict[str, Any]) -> str:
    return f"{entry['dtype']}[{','.join(map(str, entry['shape']))}]"


def _number(value) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    return f"{value:.6g}" if math.isfinite(value) else str(value)


def _stats_text(stats: dict[str, Any]) -> str:
    if stats["min"] is None:
        text = "no finite values" if stats["nan"] or stats["inf"] else "empty"
    else:
        text = "  ".join(f"{key} {_number(stats[key])}" for key in ("min", "max", "mean", "std"))
    if stats["nan"] or stats["inf"]:
        text += f"  NaN {stats['nan']}  inf {stats['inf']}"
    return text


def _saved(stats: dict[str, Any]) -> list[str]:
    return [f"-> {stats['file']}"] if stats.get("file") else []


def _compile_text(summary: dict[str, Any]) -> str:
    python = summary["python_ops"]
    fallback = summary["fallback_ops"]
    parts = [f"{op}: {n}" + (" reference" if op in fallback else "")
             for op, n in python.items()]
    which = f" ({', '.join(parts)})" if parts else ""
    text = f"compile: {summary['steps']} steps, {summary['python_steps']} run Python{which}"
    if summary.get("segments"):
        cuts = ", ".join(f"{op}: {n}" for op, n in summary["cut_ops"].items())
        text += (f"; {summary['segments']} segments" + (f" cut at {cuts}" if cuts else "")
                 + f", {summary['segment_compiles']} segment plans compiled so far")
    if summary["specialized_on"]:
        folded = ", ".join(f"{op}: {n}" for op, n in summary["folded_ops"].items())
        text += (f"; specialized on the values of {', '.join(summary['specialized_on'])}, "
                 f"{summary['folded_steps']} nodes folded from them at plan time by the "
                 f"NumPy references" + (f" ({folded})" if folded else ""))
    text = (f"{text}; arena {format_bytes(summary['arena_bytes'])} (lower bound "
            f"{format_bytes(summary['lower_bound_bytes'])}, naive "
            f"{format_bytes(summary['naive_bytes'])})")
    precision = summary.get("precision") or {}
    if precision.get("mode", "fp32") != "fp32":
        kept = precision["fp32_products"]
        split = precision.get("bf16x3_steps", 0)
        text += (f"; precision {precision['mode']}: {precision['bf16_steps']} product steps "
                 f"in bf16 ({precision['bf16_kernel'] or 'none'} micro-kernel), "
                 + (f"{split} in bf16x3, " if split else "")
                 + f"{len(kept)} in fp32" + (f" ({', '.join(kept)})" if kept else ""))
        if precision.get("bf16_activation_steps"):
            text += (f", {precision['bf16_activation_steps']} of them channels-last on bf16 "
                     "activations")
    if summary.get("streams", 1) > 1:
        text += (f"; {summary['streams']} streams, {summary['events']} events, arena on one "
                 f"stream {format_bytes(summary['serial_arena_bytes'])}")
    return text


def format_bytes(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def _table(rows: list[list[str]]) -> list[str]:
    """Rows of cells, indented, each column padded to its widest cell (the last column is
    not padded, so lines carry no trailing blanks)."""
    if not rows:
        return ["  (none)"]
    columns = max(len(r) for r in rows)
    widths = [max((len(r[c]) for r in rows if c < len(r)), default=0) for c in range(columns)]
    lines = []
    for row in rows:
        cells = [cell.ljust(widths[c]) if c < len(row) - 1 else cell
                 for c, cell in enumerate(row)]
        lines.append("  " + "  ".join(cells))
    return lines
