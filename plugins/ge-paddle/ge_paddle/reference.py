"""Paddle as the reference of `ge-hub compare --against paddle`.

A saved inference model (a PIR `.json` or legacy `.pdmodel` with its `.pdiparams`, named
as `ge_paddle.files` accepts it) runs in Paddle Inference on the CPU; a
`paddle.nn.Layer` runs as it stands, in dynamic-graph mode, without gradients. Neither
exposes the program's intermediate values under names ge-hub's graph keeps (Paddle
Inference fuses and renames; a Layer's intermediates have no names at all), so only the
model's outputs come back, matched to ge-hub's outputs by position.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np


def run_paddle(model: Any, feeds: Mapping[str, np.ndarray], graph,
               trusted: bool = False) -> dict[str, np.ndarray]:
    try:
        import paddle
    except ImportError as exc:
        raise RuntimeError("--against paddle needs the paddlepaddle package "
                           "(pip install paddlepaddle)") from exc
    inputs = [np.ascontiguousarray(feeds[name]) for name in graph.input_names]
    if isinstance(model, paddle.nn.Layer):
        with paddle.no_grad():
            results = model(*[paddle.to_tensor(x) for x in inputs])
        outputs = [r.numpy() for r in _flat(results)]
    else:
        outputs = _run_inference(os.fspath(model), feeds, inputs)
    if len(outputs) != len(graph.output_names):
        raise RuntimeError(f"--against paddle: Paddle gives {len(outputs)} outputs, the "
                           f"ge-hub graph has {len(graph.output_names)}")
    return dict(zip(graph.output_names, (np.asarray(o) for o in outputs)))


def _run_inference(path: str, feeds: Mapping[str, np.ndarray], inputs) -> list[np.ndarray]:
    import paddle.inference as inference

    from ge_paddle import files

    saved = files.resolve(path)
    if saved is None:
        raise FileNotFoundError(f"--against paddle: no saved Paddle model at {path!r}")
    config = inference.Config()
    config.set_prog_file(saved.program)
    if saved.params is not None:
        config.set_params_file(saved.params)
    config.disable_gpu()
    config.disable_glog_info()
    config.switch_ir_optim(False)  # the program as saved, not Paddle's fused rewrite
    predictor = inference.create_predictor(config)
    names = predictor.get_input_names()
    # Inputs by name where the program's names are ge-hub's, else by position.
    by_name = all(name in feeds for name in names)
    for position, name in enumerate(names):
        array = feeds[name] if by_name else inputs[position]
        predictor.get_input_handle(name).copy_from_cpu(np.ascontiguousarray(array))
    predictor.run()
    return [predictor.get_output_handle(n).copy_to_cpu() for n in predictor.get_output_names()]


def _flat(result: Any) -> list:
    if isinstance(result, (tuple, list)):
        return [r for item in result for r in _flat(item)]
    if isinstance(result, dict):
        return [r for item in result.values() for r in _flat(item)]
    return [result]
