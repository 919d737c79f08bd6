"""Which files a saved Paddle model is, given what the user named.

A saved inference model is a program file beside a parameter file of the same stem:
`model.json` (PIR, Paddle 3) or `model.pdmodel` (legacy protobuf) with `model.pdiparams`.
Users name the program file, the parameter file, the prefix `model` (as `paddle.jit.save`
and `paddle.inference.Config` take it), or the directory PaddleClas/PaddleOCR/
PaddleDetection publish (`inference.json` or `inference.pdmodel` inside). A `.json` file
counts only when it is a PIR program (`ge_paddle.pir.looks_like_pir`): the suffix is
everyone's.
"""

from __future__ import annotations

import dataclasses
import os

from ge_paddle.legacy import looks_like_pdmodel
from ge_paddle.pir import looks_like_pir

HEAD_BYTES = 64


@dataclasses.dataclass(frozen=True)
class SavedModel:
    program: str
    params: str | None  # None: the program has no parameter file beside it
    format: str  # "pir" or "legacy"


def head(path: str) -> bytes:
    try:
        with open(path, "rb") as stream:
            return stream.read(HEAD_BYTES)
    except OSError:
        return b""


def resolve(path: str) -> SavedModel | None:
    """The saved model `path` names, or None when it names none."""
    path = os.fspath(path)
    if os.path.isdir(path):
        for stem in ("inference", "model", "__model__"):
            found = resolve(os.path.join(path, stem))
            if found is not None:
                return found
        stems = sorted({os.path.splitext(n)[0] for n in os.listdir(path)
                        if n.endswith((".json", ".pdmodel"))})
        for stem in stems:
            found = resolve(os.path.join(path, stem))
            if found is not None:
                return found
        return None
    stem, suffix = os.path.splitext(path)
    suffix = suffix.lower()
    if suffix == ".json" and os.path.isfile(path):
        return _saved(path, stem, "pir") if looks_like_pir(head(path)) else None
    if suffix == ".pdmodel" and os.path.isfile(path):
        return _saved(path, stem, "legacy")
    if suffix == ".pdiparams":
        return _from_stem(stem)
    if os.path.isfile(path) and os.path.basename(path) == "__model__":
        params = os.path.join(os.path.dirname(path), "__params__")
        return SavedModel(path, params if os.path.isfile(params) else None, "legacy")
    return _from_stem(path)


def _from_stem(stem: str) -> SavedModel | None:
    if os.path.isfile(stem + ".json") and looks_like_pir(head(stem + ".json")):
        return _saved(stem + ".json", stem, "pir")
    if os.path.isfile(stem + ".pdmodel") and looks_like_pdmodel(head(stem + ".pdmodel")):
        return _saved(stem + ".pdmodel", stem, "legacy")
    return None


def _saved(program: str, stem: str, format: str) -> SavedModel:
    params = stem + ".pdiparams"
    return SavedModel(program, params if os.path.isfile(params) else None, format)
