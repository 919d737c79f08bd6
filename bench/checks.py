"""Do two engines compute the same thing? Checked on every model before anything is timed."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def compare_outputs(got: Sequence[np.ndarray], expected: Sequence[np.ndarray], *,
                    rtol: float, atol: float) -> dict:
    """Elementwise |got - expected| <= atol + rtol * |expected| on every output.

    Returns {"ok", "max_abs", "max_rel", "reason"}; NaNs must sit in the same places.
    """
    if len(got) != len(expected):
        return _verdict(False, reason=f"{len(got)} outputs, expected {len(expected)}")
    max_abs = max_rel = 0.0
    for index, (a, b) in enumerate(zip(got, expected)):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return _verdict(False, reason=f"output {index} has shape {list(a.shape)}, "
                                          f"expected {list(b.shape)}")
        if a.size == 0:
            continue
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        nan_a, nan_b = np.isnan(a64), np.isnan(b64)
        if not np.array_equal(nan_a, nan_b):
            return _verdict(False, reason=f"output {index} has NaNs where the reference "
                                          "has none, or the other way round")
        finite = ~nan_a
        diff = np.abs(a64[finite] - b64[finite])
        with np.errstate(invalid="ignore"):  # inf - inf where both agree on an infinity
            diff = np.where(a64[finite] == b64[finite], 0.0, diff)
        scale = np.abs(b64[finite])
        if diff.size:
            max_abs = max(max_abs, float(diff.max()))
            max_rel = max(max_rel, float((diff / np.maximum(scale, 1e-30)).max()))
            if not bool(np.all(diff <= atol + rtol * scale)):
                return _verdict(False, max_abs, max_rel,
                                f"output {index} differs beyond rtol={rtol}, atol={atol}")
    return _verdict(True, max_abs, max_rel)


def _verdict(ok: bool, max_abs: float | None = None, max_rel: float | None = None,
             reason: str = "") -> dict:
    return {"ok": ok, "max_abs": max_abs, "max_rel": max_rel, "reason": reason}
