"""What `ge-hub profile`, `compare` and `bench` share: the model and input options, loading
and compiling a model with its feeds, one-line errors, and progress on a terminal.

The options mean what they mean for `ge-hub run` (`--input`, `--input-shape`, `--seed`,
`--disable-pass`, `--precision`, `--trust-pickle`, `--verbose`); the feeds come from
`ge_hub.commands.feeds`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ge_hub.commands.feeds import CommandError, make_feeds, parse_input_shapes, read_input_files
from ge_hub.errors import GeHubError


def add_model_arguments(parser: argparse.ArgumentParser, *, shapes: bool = True) -> None:
    parser.add_argument("model", help="the model: a path in any format an installed frontend "
                        "accepts (.onnx with ge-onnx, .gehub, .ghm, ...)")
    parser.add_argument("--input", action="append", default=[],
                        metavar="NAME=FILE.npy | FILE.npz",
                        help="an input's data (repeatable); other inputs get random data")
    if shapes:
        parser.add_argument("--input-shape", "--shape", action="append", default=[],
                            dest="input_shape", metavar="NAME:D1,D2,...",
                            help="the shape of an input's random data, fixing its symbolic "
                            "dims (repeatable)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--disable-pass", action="append", default=[], metavar="NAME",
                        help="skip a compiler pass (repeatable)")
    parser.add_argument("--precision", choices=("fp32", "bf16", "mixed"), default=None,
                        help="what the products (Conv, Gemm, MatMul) compute in, as for ge-hub "
                        "run: fp32 (the default), bf16 or mixed; a .ghm file keeps what it "
                        "was compiled with and uses this only for shapes it must plan anew")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="on error, print the traceback too")
    parser.add_argument("--trust-pickle", action="store_true",
                        help="allow a model format that can run code while it loads (torch's "
                        ".pt2 pickles); only for files you trust")


@dataclass
class LoadedModel:
    path: str
    graph: Any
    model: Any                      # the CompiledModel
    feeds: dict[str, np.ndarray]
    load_s: float
    compile_s: float


def load_model(args: argparse.Namespace, options: dict[str, Any] | None = None,
               batch: int | None = None) -> LoadedModel:
    """Load `args.model`, make its feeds, compile it for their shapes.

    `batch` fixes the leading dim of every input whose leading dim is symbolic (when no
    --input-shape names that input)."""
    from ge_hub.frontend import load
    from ge_hub.runtime import compile as compile_graph

    path = args.model
    if not os.path.exists(path):
        raise CommandError(f"model file {path!r} does not exist")
    options = {"disable_passes": list(args.disable_pass), **(options or {})}
    if getattr(args, "precision", None) is not None:
        options["precision"] = args.precision
    started = time.perf_counter()
    offline = _offline(path, options)
    graph = offline.interface if offline is not None else load(path, trusted=args.trust_pickle)
    loaded = time.perf_counter()
    shapes = parse_input_shapes(getattr(args, "input_shape", []), graph)
    if batch is not None:
        shapes = _with_batch(graph, shapes, batch)
    given = read_input_files(args.input, graph)
    feeds = {f.name: f.array for f in make_feeds(graph, given, shapes, args.seed)}
    if offline is not None:
        model = offline
    else:
        model = compile_graph(graph, input_shapes={n: a.shape for n, a in feeds.items()},
                              options=options)
    return LoadedModel(path, graph, model, feeds, loaded - started,
                       time.perf_counter() - loaded)


def _offline(path: str, options: dict[str, Any]):
    """A .ghm file's CompiledModel (its stored plans as compiled; `options` only for the
    plans of new shapes, and only where they change something, as ge-hub run does), else
    None."""
    from ge_hub.offline import load_compiled
    from ge_hub.offline.frontend import is_offline_file

    if not is_offline_file(path):
        return None
    return load_compiled(path, options=offline_options(options))


def offline_options(options: dict[str, Any]) -> dict[str, Any] | None:
    """The compile options a .ghm file plans new shapes with: these, where they change
    something (passes, a pass config, the precision); else None, the file's own."""
    changed = options["disable_passes"] or "pass_config" in options or "precision" in options
    return options if changed else None


def _with_batch(graph, shapes: dict, batch: int) -> dict:
    if batch < 1:
        raise CommandError(f"--batch must be at least 1, got {batch}")
    shapes = dict(shapes)
    found = False
    for value in graph.inputs:
        dims = list(value.type.shape)
        if value.name in shapes or not dims or isinstance(dims[0], int):
            continue
        if not all(isinstance(d, int) for d in dims[1:]):
            raise CommandError(f"--batch: input {value.name!r} has symbolic dims besides "
                               f"the first ({dims}); give its shape with --shape")
        shapes[value.name] = (batch, *dims[1:])
        found = True
    if not found:
        raise CommandError("--batch: no input has a symbolic leading (batch) dim; "
                           "use --shape to set input shapes")
    return shapes


def one_line(exc: BaseException) -> str:
    message = " ".join(str(exc).split())
    if isinstance(exc, (GeHubError, ValueError, OSError)) and message:
        return message
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def guarded(prog: str, body: Callable[[argparse.Namespace], int]) -> Callable[..., int]:
    """Run a command body: any failure is one line on stderr and exit status 1 (with the
    traceback too under --verbose)."""

    def run(args: argparse.Namespace) -> int:
        try:
            return body(args)
        except BrokenPipeError:
            raise  # the reader went away (`| head`): ge_hub.cli ends quietly
        except KeyboardInterrupt:
            print(f"{prog}: interrupted", file=sys.stderr)
            return 130
        except Exception as exc:  # noqa: BLE001 (every failure is one line)
            if getattr(args, "verbose", False):
                traceback.print_exc()
            print(f"{prog}: error: {one_line(exc)}", file=sys.stderr)
            return 1

    return run


class Progress:
    """A one-line progress counter on stderr, only when stderr is a terminal."""

    def __init__(self, label: str, stream=None) -> None:
        self.stream = stream or sys.stderr
        self.label = label
        self.on = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last = 0.0

    def __call__(self, done: int, total: int | None = None) -> None:
        if not self.on:
            return
        now = time.monotonic()
        if now - self._last < 0.1 and (total is None or done < total):
            return
        self._last = now
        text = f"{done}/{total}" if total else f"{done}"
        self.stream.write(f"\r{self.label}: {text}\x1b[K")
        self.stream.flush()

    def done(self) -> None:
        if self.on:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
