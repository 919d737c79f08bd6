"""`paddle.nn.Layer` -> ge-hub Graph, through the saved inference program.

The layer is traced by `paddle.jit.save` (dynamic-to-static, `to_static` with the given
input spec) into a temporary directory, and that program is read like any saved model.
The layer's training flag is restored afterwards; it is traced in eval mode.
"""

from __future__ import annotations

import os
import tempfile


def input_spec_for(example_inputs):
    import paddle

    specs = []
    for index, example in enumerate(example_inputs):
        tensor = example if isinstance(example, paddle.Tensor) else paddle.to_tensor(example)
        dtype = str(tensor.dtype).replace("paddle.", "")
        specs.append(paddle.static.InputSpec(list(tensor.shape), dtype, f"x{index}"))
    return specs


def load_layer(layer, *, input_spec=None, example_inputs=None, registry=None,
               input_shapes=None):
    import paddle

    from ge_paddle.frontend import load_saved

    if input_spec is None:
        if example_inputs is None:
            raise TypeError("a paddle.nn.Layer needs input_spec=[paddle.static.InputSpec(...)] "
                            "or example_inputs=(...) to be traced")
        if not isinstance(example_inputs, (list, tuple)):
            example_inputs = (example_inputs,)
        input_spec = input_spec_for(example_inputs)
    training = layer.training
    layer.eval()
    try:
        with tempfile.TemporaryDirectory(prefix="ge-paddle-") as directory:
            prefix = os.path.join(directory, "model")
            paddle.jit.save(layer, prefix, input_spec=list(input_spec))
            return load_saved(prefix, registry=registry, input_shapes=input_shapes)
    finally:
        if training:
            layer.train()
