"""GridSample and RoiAlign's C kernels (float32; core/kernels/resize_sample.c documents
the blobs).

GridSample runs in C for float32 X and grid of static shapes with 1 to 3 spatial axes,
every mode and padding mode; RoiAlign for float32 X and rois with int64 batch indices.
Anything else keeps the ops' NumPy references (ge_hub/ops/resize.py), counted.
"""

from __future__ import annotations

from ge_hub.kernels.base import Packed, pack_values
from ge_hub.kernels.nn_common import F32, all_static, c_kernel, filled_attrs, numel_of

GRID_MODES = {"linear": 0, "nearest": 1, "cubic": 2}
GRID_PADDINGS = {"zeros": 0, "border": 1, "reflection": 2}


def supports_grid_sample(node, input_types, output_types) -> bool:
    """float32 X and grid, static shapes, 1 to 3 spatial axes."""
    x, grid = input_types[0], input_types[1]
    attrs = filled_attrs(node)
    return (all_static(input_types) and x.dtype == F32 and grid.dtype == F32
            and 3 <= x.rank <= 5 and grid.rank == x.rank and attrs["mode"] in GRID_MODES
            and attrs["padding_mode"] in GRID_PADDINGS)


def pack_grid_sample(node, input_types, output_types) -> Packed:
    """Blob: n, channels, in[3], out_size, spatial, mode, padding, align_corners."""
    x, grid = input_types[0].shape, input_types[1].shape
    attrs = filled_attrs(node)
    spatial = len(x) - 2
    in_dims = [1] * (3 - spatial) + list(x[2:])
    return Packed(pack_values([x[0], x[1], *in_dims, numel_of(grid[1:-1]), spatial,
                               GRID_MODES[attrs["mode"]], GRID_PADDINGS[attrs["padding_mode"]],
                               attrs["align_corners"]]))


def supports_roi_align(node, input_types, output_types) -> bool:
    """float32 X and rois, int64 batch indices, static shapes."""
    x, rois = input_types[0], input_types[1]
    return (all_static(input_types) and x.dtype == F32 and rois.dtype == F32
            and x.rank == 4 and numel_of(x.shape) > 0)


def pack_roi_align(node, input_types, output_types) -> Packed:
    """Blob: n, channels, height, width, rois, output_height, output_width, sampling_ratio,
    mode, half_pixel; then spatial_scale."""
    n, c, h, w = input_types[0].shape
    attrs = filled_attrs(node)
    return Packed(pack_values(
        [n, c, h, w, input_types[1].shape[0], attrs["output_height"], attrs["output_width"],
         attrs["sampling_ratio"], int(attrs["mode"] == "max"),
         int(attrs["coordinate_transformation_mode"] == "half_pixel")],
        [attrs["spatial_scale"]]))


KERNELS = [
    c_kernel("GridSample", "ge_grid_sample_f32", (F32, F32), pack_grid_sample,
             supports_grid_sample),
    c_kernel("RoiAlign", "ge_roi_align_f32", (F32, F32), pack_roi_align, supports_roi_align),
]
