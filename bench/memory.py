"""Resident memory of the current process: now, at its peak, and a peak that can be reset.

Each engine worker resets its peak right after importing its libraries and records its
RSS then as the baseline, so that "peak above baseline" counts what running the model
costs (weights, sessions, compiled code, arenas), not the interpreter or the framework's
import. Linux keeps both numbers in /proc/self/status (VmRSS, VmHWM); writing "5" to
/proc/self/clear_refs resets VmHWM to the current RSS.
"""

from __future__ import annotations

import resource
import sys

STATUS = "/proc/self/status"


def _status_kib(field: str) -> int | None:
    try:
        with open(STATUS) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def current_rss() -> int:
    """Resident set size in bytes (the peak so far where /proc is missing)."""
    kib = _status_kib("VmRSS")
    return kib * 1024 if kib is not None else peak_rss()


def peak_rss() -> int:
    """High-water mark of the resident set size in bytes (since the last reset)."""
    kib = _status_kib("VmHWM")
    if kib is not None:
        return kib * 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere


def reset_peak() -> bool:
    """Start the high-water mark afresh from the current RSS; False where not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True
