"""Portability of a compiled model across machines: what a `.ghm` file records, and the
rules the loader enforces.

Prepacked constants (Conv's packed and Winograd weights, `ge_hub.kernels.conv.prepack_conv`)
are laid out for the packed GEMM (core/kernels/nn_gemm_packed.h): panels of `PACK_MR` rows
of A in k-slices of `PACK_KC`, read by a micro-kernel of `PACK_MR` x `PACK_NR` tiles. The
micro-kernel is chosen once per process from the CPU (avx512, avx2+fma, or generic C;
`GE_HUB_GEMM_KERNEL=generic|avx2` forces one). A file records:

- `gemm_kernel`: the micro-kernel of the compiling process, and the CPU features it needs;
- `layouts`: every prepacked layout its plans hold, by name, with its geometry and the
  CPU features needed to run it (a Winograd Conv's constant, U in `packed_gemm` panels
  followed by one sign byte per weight, also records `winograd_signs`). The layout
  `packed_gemm` is read the same way by all three micro-kernels (the AVX ones split the
  same tile into strips), so it needs no CPU feature: a file compiled on an AVX-512
  machine runs on an AVX2 or a plain one (results may differ from the compiling
  machine's in the last bit, as between two BLAS builds, because the SIMD kernels use
  fused multiply-add);
- `bf16_kernel`: the bf16 micro-kernel of the compiling process (amx, avx512bf16 or
  generic; core/kernels/nn_gemm_bf16.c), for plans compiled with precision bf16 or
  mixed, whose weights are in the layout `packed_bf16` (nn_gemm_bf16.h: 16-row panels in
  16 x 32 blocks of bf16). That layout, too, is read by all three bf16 micro-kernels
  (the AMX tiles load its blocks as they are), so it needs no CPU feature: on a CPU
  without AMX or AVX512-BF16 the plain C kernel runs it, with the same results to fp32
  rounding, only slower. The compile options stored with the file keep the precision,
  so a file planned again elsewhere (new shapes, another geometry) stays bf16; a bf16
  Winograd Conv's constant (its U in that layout, then its weights' signs; conv path 9)
  adds the layout `winograd_bf16`, which a ge-hub from before that path does not know, so
  it plans such a file again (or refuses it) instead of failing on the path; a bf16 Conv
  compiled where the bf16 micro-kernel is AMX may hold its weight as the packed B of the
  channels-last path (conv path 10, core/kernels/conv_nhwc_bf16.h), the layout
  `nhwc_bf16`, which needs AMX: the plain C kernel reads it too (where Linux refuses the
  tile state), but far slower than the layouts a CPU without AMX gets when the file is
  planned again, so such a CPU re-plans a portable file and refuses any other; a bf16x3
  product's weight (`ge_hub.kernels.nn_bf16`, the products `mixed` keeps accurate: the
  packed_bf16 panels of its high, finite-high and low parts, read with a blob of one more
  value) adds the layout `split_bf16`, which a ge-hub from before bf16x3 does not know,
  so it plans such a file again (or refuses it) instead of failing on the blob; and a
  depthwise Conv of a channels-last chain (core/kernels/conv_depthwise_nhwc.c, bf16 plans
  on AMX) holds its fp32 weights tap by tap, the layout `depthwise_nhwc`, which needs no
  CPU feature and which a ge-hub from before that kernel plans again (or refuses);
- a direct Conv's constant (`conv._direct_weights`: blocks of `DIRECT_OC` output channels,
  core/kernels/conv_direct.c) as the layout `direct_conv`, read the same way by its
  AVX-512 and plain C tiles (no CPU feature); a ge-hub from before that path does not
  know the layout, so it plans such a file again (or refuses it);
- the byte order (little-endian only) and the kernel ABI version, in the header.

When loading, for each recorded layout: if this ge-hub packs it with another geometry, or
this CPU lacks a feature it needs, the plans holding it cannot be used as stored. A
portable file (the default: it keeps the graph and its original weights) is then planned
again from its graph, re-packing the weights for this machine; a file written with
`portable=False` is refused with an `OfflineModelError` naming the layout and the missing
CPU feature (or the geometry that differs).
"""

from __future__ import annotations

import os
import sys

from ge_hub.errors import OfflineModelError
from ge_hub.kernels.cpu import cpu_flags

# The features each micro-kernel needs (core/kernels/nn_gemm_packed.c, pick_kernel).
KERNEL_FEATURES = {"avx512": ("avx512f",), "avx2": ("avx2", "fma"), "generic": ()}
# The features each prepacked layout needs to be read (see the module docstring).
LAYOUT_FEATURES = {"packed_gemm": (), "packed_bf16": (), "winograd_signs": (),
                   "direct_conv": (), "winograd_bf16": (), "nhwc_bf16": ("amx_tile", "amx_bf16"),
                   "split_bf16": (), "depthwise_nhwc": ()}
# The features each bf16 micro-kernel needs (ge_simd_choose_bf16 in core/src/simd.c).
BF16_KERNEL_FEATURES = {"amx": ("amx_tile", "amx_bf16"), "avx512bf16": ("avx512_bf16",),
                        "generic": ()}


def gemm_kernel() -> str:
    """The packed GEMM's micro-kernel in this process, chosen as the C core chooses it
    (core/src/simd.c: the CPU's features, then GE_HUB_GEMM_KERNEL)."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return "generic"
    features = cpu_flags()
    wanted = os.environ.get("GE_HUB_GEMM_KERNEL")
    has_avx2 = {"avx2", "fma"} <= features
    if wanted == "generic":
        return "generic"
    if wanted == "avx2" and has_avx2:
        return "avx2"
    if "avx512f" in features:
        return "avx512"
    return "avx2" if has_avx2 else "generic"


def layout_geometry() -> dict[str, dict[str, int]]:
    """How this ge-hub lays out each prepacked layout."""
    from ge_hub.kernels import conv, conv_depthwise_nhwc, nn_bf16

    return {"packed_gemm": {"mr": conv.PACK_MR, "nr": conv.PACK_NR, "kc": conv.PACK_KC},
            "winograd_signs": {"signs": 1},
            "direct_conv": {"oc": conv.DIRECT_OC},
            "winograd_bf16": {"tile": 2, "signs": 1},
            "nhwc_bf16": {"nr": nn_bf16.BF16_NR, "kb": nn_bf16.BF16_KB},
            "split_bf16": {"parts": 3},
            "depthwise_nhwc": {"block": conv_depthwise_nhwc.BLOCK},
            "packed_bf16": {"mr": nn_bf16.BF16_MR, "nr": nn_bf16.BF16_NR,
                            "kb": nn_bf16.BF16_KB, "linear": nn_bf16.LINEAR_WEIGHT_LAYOUT}}


def record(layouts: set[str]) -> dict:
    """The portability record of a file whose plans hold these prepacked layouts."""
    from ge_hub.precision_report import kernel_name

    kernel = gemm_kernel()
    bf16 = kernel_name()
    geometry = layout_geometry()
    return {
        "byte_order": sys.byteorder,
        "machine": _machine(),
        "gemm_kernel": {"name": kernel, "cpu_features": list(KERNEL_FEATURES.get(kernel, ()))},
        "bf16_kernel": {"name": bf16, "cpu_features": list(BF16_KERNEL_FEATURES.get(bf16, ()))},
        "layouts": {name: {"geometry": geometry.get(name, {}),
                           "cpu_features": list(LAYOUT_FEATURES.get(name, ()))}
                    for name in sorted(layouts)},
    }


def _machine() -> str:
    import platform

    return platform.machine()


def problems(recorded: dict) -> list[str]:
    """Why the stored plans cannot run here as they are (empty: they can)."""
    found = []
    layouts = recorded.get("layouts") if isinstance(recorded, dict) else None
    if not isinstance(layouts, dict):
        return ["the file's portability record is malformed"]
    geometry = layout_geometry()
    features = cpu_flags()
    for name, entry in layouts.items():
        if not isinstance(entry, dict):
            found.append(f"layout {name!r}: malformed record")
            continue
        if name not in geometry:
            found.append(f"layout {name!r} is unknown to this ge-hub")
            continue
        if entry.get("geometry") != geometry[name]:
            found.append(f"layout {name!r} was packed as {entry.get('geometry')}, this ge-hub "
                         f"packs it as {geometry[name]}")
        needed = entry.get("cpu_features") or []
        if not isinstance(needed, list):
            found.append(f"layout {name!r}: malformed CPU feature list")
            continue
        missing = [f for f in needed if isinstance(f, str) and f not in features]
        if missing and features:  # no flag list at all (not Linux): cannot tell, trust it
            found.append(f"layout {name!r} needs CPU feature(s) {', '.join(missing)}, which "
                         "this CPU lacks")
    return found


def check(recorded: dict, portable: bool, where: str) -> bool:
    """True when the stored plans can run here; False when they must be planned again
    from the graph (portable files); raises OfflineModelError otherwise."""
    found = problems(recorded)
    if not found:
        return True
    if portable:
        return False
    raise OfflineModelError(f"{where}: its plans cannot run on this machine and the file "
                            f"is not portable (compiled without the original weights): "
                            f"{'; '.join(found)}; compile it again here, or with --portable")


def layouts_of(plan) -> set[str]:
    """The prepacked layouts a plan holds (constants the emitter named `:packed:`); a
    Winograd Conv's (U in packed_gemm panels, then its weights' signs) adds
    winograd_signs, which a ge-hub from before that layout does not know, so it plans
    such a file again (or refuses it) instead of reading the signs as packed weights; a
    direct Conv's weights are direct_conv, a bf16x3 product's split_bf16 and a
    channels-last depthwise Conv's (its weights tap by tap) depthwise_nhwc, for the same
    reason."""
    import struct

    from ge_hub.ir.dtypes import DType
    from ge_hub.kernels import conv, conv_depthwise_nhwc, nn_bf16

    paths = {s.inputs[1]: struct.unpack_from("=q", s.attrs)[0] for s in plan.steps
             if s.kernel in ("ge_nn_conv_f32", "ge_conv_fused_f32", conv.CONV_NHWC_KERNEL)
             and len(s.attrs) >= 8
             and len(s.inputs) > 1}
    found = {"split_bf16" for s in plan.steps if s.kernel in nn_bf16.LINEAR_X3_SPECS}
    depthwise = {s.inputs[1] for s in plan.steps if s.kernel == conv_depthwise_nhwc.KERNEL}
    for index, t in enumerate(plan.tensors):
        if ":packed:" in t.name and index in depthwise:
            found.add("depthwise_nhwc")
        elif ":packed:" in t.name:
            if paths.get(index) == conv.CONV_DIRECT:
                found.add("direct_conv")
                continue
            if paths.get(index) == conv.CONV_WINOGRAD_BF16:
                found.add("winograd_bf16")
            if paths.get(index) in (conv.CONV_NHWC_BF16, conv.CONV_NHWC_BF16_CL):
                found.add("nhwc_bf16")
            found.add("packed_bf16" if t.dtype == DType.UINT16 else "packed_gemm")
            if paths.get(index) == conv.CONV_WINOGRAD:
                found.add("winograd_signs")
    return found
