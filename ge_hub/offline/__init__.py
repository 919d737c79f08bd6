"""Offline models: a compiled model saved as one `.ghm` file and run without compiling.

    model = ge_hub.compile(graph, input_shapes={"x": (1, 3, 224, 224)})
    model.save("model.ghm")                      # or: ge-hub compile model.onnx -o model.ghm
    model = ge_hub.load_compiled("model.ghm")    # no frontend, no compiler for stored shapes

The file (`ge_hub.offline.layout` documents its bytes) holds one plan per shape profile,
the constants they read (mapped, not copied, when loaded), the model's graph when
portable (to plan other shapes and re-pack weights for another CPU), and metadata:
versions, checksums, the source model's name and hash, the kernels by name with their
plugins, and the portability record (`ge_hub.offline.portability`). Nothing in it is
code. Modules: `layout` (header, sections, checks), `plans` (the plan codec), `writer`,
`reader`, `kernels` (kernel provenance), `portability`, `frontend` (`.ghm` for
`ge_hub.load`), `describe` (what `ge-hub inspect` shows).

What the checksums protect: CRC-32C detects a damaged or truncated file, not a deliberate
edit. Offsets, sizes, indices and tensor extents are checked against the file and the
plan either way, but the attribute blobs of C kernels are used as the packers wrote them,
so a file edited on purpose (and its checksums recomputed) can still feed a kernel
inconsistent attributes: load `.ghm` files from sources you would take compiled code from.
"""

from __future__ import annotations

from ge_hub import runtime
from ge_hub.offline.frontend import is_offline_file
from ge_hub.offline.layout import FORMAT_VERSION, MAGIC, SUFFIX
from ge_hub.offline.reader import OfflineFile, load_compiled, open_file
from ge_hub.offline.writer import save

# CompiledModel.save and ge_hub.compile of a .ghm file reach this format through the
# runtime, a layer below, which cannot import it.
runtime.install_offline_format(runtime.OfflineFormat(save=save, is_file=is_offline_file,
                                                     load=load_compiled))

__all__ = ["FORMAT_VERSION", "MAGIC", "SUFFIX", "OfflineFile", "load_compiled", "open_file",
           "save"]
