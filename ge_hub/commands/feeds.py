"""The input arrays of `ge-hub run`: read from .npy/.npz files, or random, of the right shapes.

Three sources, in order of precedence for each graph input:

1. `--input NAME=FILE.npy`, or the arrays of one `--input FILE.npz` (keys = input names);
2. random data (seeded) of the input's dtype and shape, the shape taken from
   `--input-shape NAME:D1,D2,...` where given, else from the graph; a symbolic dim is
   resolved from any input (given or shaped) that already fixes the same symbol.

Every mistake raises `CommandError` naming the option, the input and what was expected.
"""

from __future__ import annotations

import dataclasses
import os
import zipfile
from collections.abc import Sequence

import numpy as np

from ge_hub.errors import GeHubError
from ge_hub.inputs import check_input
from ge_hub.ir.dtypes import DType
from ge_hub.ir.graph import Graph, Value
from ge_hub.ir.types import Sym

# Random integers stay small and non-negative: integer inputs are often indices, counts
# or lengths, which a wide or negative range would push out of bounds.
RANDOM_INT_HIGH = 4

NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")  # a zip's first entry, or an empty zip


class CommandError(GeHubError, ValueError):
    """A bad command-line argument; the message is the one line the user sees."""


@dataclasses.dataclass(frozen=True)
class Feed:
    """One graph input's array and where it came from (a file, or "random")."""

    name: str
    array: np.ndarray
    source: str


# -- --input-shape -------------------------------------------------------------------


def parse_input_shapes(specs: Sequence[str], graph: Graph) -> dict[str, tuple[int, ...]]:
    """`NAME:D1,D2,...` options as {input name: shape}, checked against the graph's types."""
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        name, shape = _parse_shape_spec(spec)
        value = _graph_input(graph, name, f"--input-shape {spec!r}")
        if name in shapes:
            raise CommandError(f"--input-shape {spec!r}: input {name!r} is shaped twice")
        _check_shape_fits(value, shape, f"--input-shape {spec!r}")
        shapes[name] = shape
    return shapes


def _parse_shape_spec(spec: str) -> tuple[str, tuple[int, ...]]:
    # The last ':' splits, so an input name may itself contain ':' (TensorFlow-style "x:0").
    name, colon, dims = spec.rpartition(":")
    usage = "expected NAME:D1,D2,... with non-negative integer dims (e.g. input:1,3,224,224)"
    if not colon or not name:
        raise CommandError(f"--input-shape {spec!r}: {usage}")
    dims = dims.strip()
    if not dims:  # "NAME:" is a scalar
        return name, ()
    shape = []
    for text in dims.split(","):
        text = text.strip()
        if not text.isdigit():
            raise CommandError(f"--input-shape {spec!r}: dim {text!r} is not a non-negative "
                               f"integer; {usage}")
        shape.append(int(text))
    return name, tuple(shape)


def _check_shape_fits(value: Value, shape: tuple[int, ...], where: str) -> None:
    declared = value.type.shape
    if declared is None:
        return
    if len(declared) != len(shape):
        raise CommandError(f"{where}: input {value.name!r} has rank {len(declared)} "
                           f"({value.type}), got {len(shape)} dims {list(shape)}")
    for axis, (dim, size) in enumerate(zip(declared, shape)):
        if isinstance(dim, int) and dim != size:
            raise CommandError(f"{where}: input {value.name!r} dim {axis} is fixed at {dim} "
                               f"({value.type}), got {size}")


# -- --input -------------------------------------------------------------------------


def read_input_files(specs: Sequence[str], graph: Graph) -> dict[str, Feed]:
    """`NAME=FILE.npy` and `FILE.npz` options as {input name: Feed}; dtypes and shapes are
    checked later, against the graph, by `make_feeds`."""
    feeds: dict[str, Feed] = {}

    def add(name: str, array: np.ndarray, source: str, where: str) -> None:
        _graph_input(graph, name, where)
        if name in feeds:
            raise CommandError(f"{where}: input {name!r} is given twice (also by "
                               f"{feeds[name].source})")
        feeds[name] = Feed(name, array, source)

    for spec in specs:
        where = f"--input {spec!r}"
        if "=" in spec and not (spec.lower().endswith(".npz") and os.path.isfile(spec)):
            name, _, path = spec.partition("=")
            if not name or not path:
                raise CommandError(f"{where}: expected NAME=FILE.npy or FILE.npz")
            add(name, _read_npy(path, where), path, where)
        else:
            for name, array in _read_npz(spec, where).items():
                add(name, array, f"{spec}[{name}]", where)
    return feeds


def _check_readable(path: str, where: str) -> None:
    if not os.path.exists(path):
        raise CommandError(f"{where}: file {path!r} does not exist")
    if os.path.isdir(path):
        raise CommandError(f"{where}: {path!r} is a directory, not a file")


def _read_npy(path: str, where: str) -> np.ndarray:
    _check_readable(path, where)
    kind = _file_kind(path)
    if kind == "npz":
        raise CommandError(f"{where}: {path!r} is an .npz archive; give it as --input "
                           f"{path} (its keys name the inputs), not NAME={path}")
    if kind != "npy":
        raise CommandError(f"{where}: {path!r} is not a .npy file (it does not start "
                           "with NumPy's magic bytes)")
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise CommandError(f"{where}: cannot read {path!r} as a .npy array: {exc}") from None


def _read_npz(path: str, where: str) -> dict[str, np.ndarray]:
    if not path.lower().endswith(".npz"):
        raise CommandError(f"{where}: expected NAME=FILE.npy or FILE.npz")
    _check_readable(path, where)
    kind = _file_kind(path)
    if kind == "npy":
        raise CommandError(f"{where}: {path!r} is a single array, not an .npz archive; "
                           f"give it as NAME={path}")
    if kind != "npz":
        raise CommandError(f"{where}: {path!r} is not an .npz archive (it does not start "
                           "as a zip file does)")
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as exc:
        raise CommandError(f"{where}: cannot read {path!r} as an .npz archive: "
                           f"{exc}") from None


def _file_kind(path: str) -> str | None:
    """"npy" or "npz" by the file's first bytes; None for anything else.

    Checked before np.load, which takes an unknown file for a pickle and says so.
    """
    try:
        with open(path, "rb") as file:
            head = file.read(6)
    except OSError:
        return None  # np.load then reports why the file cannot be read
    if head.startswith(NPY_MAGIC):
        return "npy"
    if head[:4] in ZIP_MAGICS:
        return "npz"
    return None


# -- the feeds -----------------------------------------------------------------------


def make_feeds(graph: Graph, given: dict[str, Feed], shapes: dict[str, tuple[int, ...]],
               seed: int) -> list[Feed]:
    """One Feed per graph input, in order: the given arrays (checked against the graph's
    types and against `shapes`), random arrays for the rest."""
    symbols: dict[Sym, tuple[int, str]] = {}
    for value in graph.inputs:
        feed = given.get(value.name)
        if feed is None:
            continue
        where = f"--input {value.name}={feed.source}"
        feed = given[value.name] = _restore_bfloat16(value, feed)
        try:
            check_input(graph, value, feed.array, symbols)
        except ValueError as exc:
            raise CommandError(f"{where}: {exc}") from None
        wanted = shapes.get(value.name)
        if wanted is not None and tuple(feed.array.shape) != wanted:
            raise CommandError(f"{where}: the array has shape {list(feed.array.shape)}, but "
                               f"--input-shape gives {list(wanted)}")
    # Explicit shapes bind symbols too, so that random inputs sharing them agree.
    for value in graph.inputs:
        if value.name in shapes and value.name not in given:
            _bind_symbols(value, shapes[value.name], symbols, "--input-shape")
    rng = np.random.default_rng(seed)
    feeds = []
    for value in graph.inputs:
        if value.name in given:
            feeds.append(given[value.name])
            continue
        shape = shapes.get(value.name) or _resolved_shape(value, symbols)
        feeds.append(Feed(value.name, random_array(rng, value.type.dtype, shape),
                          f"random (seed {seed})"))
    return feeds


def _restore_bfloat16(value: Value, feed: Feed) -> Feed:
    # .npy has no bfloat16: NumPy saves it as 2-byte void ("|V2"), which is what
    # `--output-dir` writes for a bfloat16 output. Read such bytes back as bfloat16.
    array = feed.array
    if (value.type.dtype == DType.BFLOAT16 and array.dtype.kind == "V"
            and array.dtype.itemsize == 2 and array.dtype.fields is None):
        return dataclasses.replace(feed, array=array.view(DType.BFLOAT16.numpy))
    return feed


def _bind_symbols(value: Value, shape: tuple[int, ...], symbols: dict[Sym, tuple[int, str]],
                  option: str) -> None:
    if value.type.shape is None:
        return
    for axis, (dim, size) in enumerate(zip(value.type.shape, shape)):
        if not isinstance(dim, Sym):
            continue
        bound = symbols.setdefault(dim, (size, f"input {value.name!r} dim {axis}"))
        if bound[0] != size:
            raise CommandError(f"{option} {value.name}:{','.join(map(str, shape))}: dim "
                               f"{axis} is symbol {dim.name!r}, which {bound[1]} sets to "
                               f"{bound[0]}; got {size}")


def _resolved_shape(value: Value, symbols: dict[Sym, tuple[int, str]]) -> tuple[int, ...]:
    declared = value.type.shape
    hint = f"give --input-shape {value.name}:D1,D2,... or --input {value.name}=FILE.npy"
    if declared is None:
        raise CommandError(f"input {value.name!r} ({value.type}) has an unknown rank, so "
                           f"random data cannot be made for it; {hint}")
    unresolved = [str(d) for d in declared if isinstance(d, Sym) and d not in symbols]
    if unresolved:
        raise CommandError(f"input {value.name!r} ({value.type}) has symbolic dims "
                           f"{', '.join(unresolved)}, so random data cannot be made for it; "
                           f"{hint}")
    return tuple(d if isinstance(d, int) else symbols[d][0] for d in declared)


def random_array(rng: np.random.Generator, dtype: DType, shape: tuple[int, ...]) -> np.ndarray:
    """Standard normal floats, small non-negative integers, or fair booleans."""
    if dtype == DType.BOOL:
        return rng.random(shape) < 0.5
    if dtype.is_integer:
        return rng.integers(0, RANDOM_INT_HIGH, size=shape).astype(dtype.numpy)
    normal = rng.standard_normal(shape)
    if not dtype.is_signed:  # float8_e8m0fnu: a negative value would become NaN
        normal = np.abs(normal)
    return normal.astype(dtype.numpy)


def _graph_input(graph: Graph, name: str, where: str) -> Value:
    for value in graph.inputs:
        if value.name == name:
            return value
    listing = ", ".join(f"{v.name} ({v.type})" for v in graph.inputs) or "none"
    raise CommandError(f"{where}: the model has no input {name!r}; its inputs: {listing}")
