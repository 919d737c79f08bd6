"""The Paddle frontend: which models it accepts and how it opens them.

`accepts` is called on every model handed to `ge_hub.load` and stays cheap: paths are
judged by `ge_paddle.files` (suffix, prefix, directory, and a PIR `.json` by its first
bytes), objects only when paddle is already imported (a Layer implies it is).

`load` of saved files imports neither paddle nor protobuf: the program is read by
`ge_paddle.pir` or `ge_paddle.legacy`, the parameters by `ge_paddle.params`. Only a
`paddle.nn.Layer` needs Paddle, to save it first (`ge_paddle.layer`).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ge_hub.plugin import SerializationError

from ge_paddle import files


def accepts(model: Any) -> bool:
    if isinstance(model, (str, os.PathLike)):
        return files.resolve(os.fspath(model)) is not None
    paddle = sys.modules.get("paddle")
    if paddle is None:
        return False
    return isinstance(model, paddle.nn.Layer)


def claims_path(path: Any) -> bool:
    """Paths named by a prefix or a directory, which no suffix or magic bytes claim."""
    return files.resolve(os.fspath(path)) is not None


def load(model: Any, *, ctx: Any = None, input_spec=None, example_inputs=None,
         input_shapes: dict | None = None) -> Any:
    """Import a saved Paddle inference model (a path) or a `paddle.nn.Layer` as a
    verified ge-hub Graph.

    For a Layer give `input_spec` (a list of `paddle.static.InputSpec`; None dims become
    symbols) or `example_inputs` (arrays or tensors, whose shapes are fixed).
    `input_shapes` ({input name: shape}) fixes dims a saved program leaves at -1.
    """
    registry = None if ctx is None else ctx.registry
    if isinstance(model, (str, os.PathLike)):
        if input_spec is not None or example_inputs is not None:
            raise TypeError("input_spec and example_inputs are for paddle.nn.Layer models; a "
                            "saved program declares its inputs")
        return load_saved(os.fspath(model), registry=registry, input_shapes=input_shapes)
    from ge_paddle.layer import load_layer

    return load_layer(model, input_spec=input_spec, example_inputs=example_inputs,
                      registry=registry, input_shapes=input_shapes)


def load_saved(path: str, *, registry=None, input_shapes: dict | None = None):
    from ge_paddle.convert import convert_program

    program = read_saved(path)
    return convert_program(program.program, program.params, registry=registry,
                           input_shapes=input_shapes)


class _Loaded:
    def __init__(self, program, params):
        self.program, self.params = program, params


def read_saved(path: str) -> _Loaded:
    """The program and its parameters, read without Paddle."""
    from ge_paddle import legacy, pir
    from ge_paddle.params import read_params

    saved = files.resolve(path)
    if saved is None:
        if not os.path.exists(path) and not any(os.path.exists(path + s)
                                                for s in (".json", ".pdmodel")):
            raise FileNotFoundError(f"no Paddle model at {path!r} (neither the file nor "
                                    f"{path}.json / {path}.pdmodel exists)")
        raise SerializationError(f"{path!r} is not a saved Paddle model (a PIR .json program "
                                 "or a .pdmodel with its .pdiparams)")
    reader = pir if saved.format == "pir" else legacy
    program = reader.read_program(saved.program)
    expected = [(p.name, p.type.dtype, p.type.shape) for p in program.parameters]
    if expected and saved.params is None:
        raise FileNotFoundError(f"Paddle program {saved.program!r} has {len(expected)} "
                                "parameters, but no .pdiparams file is beside it")
    params = read_params(saved.params, expected) if expected else {}
    return _Loaded(program, params)
