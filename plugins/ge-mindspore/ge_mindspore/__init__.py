"""ge-mindspore: MindSpore models on ge-hub.

    import ge_hub
    graph = ge_hub.load("model.mindir")                     # a MINDIR file
    graph = ge_hub.load(cell, example_inputs=(x,))          # a mindspore.nn.Cell
    outputs = ge_hub.compile(graph).run([x.asnumpy()])

The plugin registers through the `ge_hub` entry point; nothing needs importing.
Reading a .mindir file does not import mindspore (only its MINDIR protobuf module,
`ge_mindspore.proto`); loading a Cell does. `ge_mindspore.testing.compare` runs a
model through MindSpore (`mindspore.load` + `nn.GraphCell`) and through ge-hub.
"""

from ge_mindspore.importer import UnsupportedPrimitiveError, import_model, load_file

__all__ = ["UnsupportedPrimitiveError", "import_model", "load_file"]
