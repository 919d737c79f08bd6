"""Mutation fuzzer for loading .ghm offline model files (ge_hub.offline).

    python tests/offline_fuzz.py --cases 300             the bounded run tests make
    python tests/offline_fuzz.py --cases 100000 --seed 7 a long run (about 20 minutes)
    python tests/offline_fuzz.py --seed 21 --case 54031  one case again (a finding's repro)

Seed files: the conv net of tests/offline_models.py (prepacked weights, two profiles,
portable) and the Loop model (a Closure step, a plan specialized on a value), plus a
non-portable conv net, and a model that runs in segments (two stored sizes). Each case
mutates one seed file and loads it with `ge_hub.load_compiled`:

- raw: flipped bytes anywhere, truncation, appended bytes (checksums not fixed);
- resealed: the same inside one section, or a JSON number set to an edge value (0, -1,
  2**31, 2**63, ...), a JSON span deleted or repeated, a section table entry changed, with
  every checksum recomputed, so that the mutation reaches the parsers behind them;
- header fields set to edge values.

A case passes when loading returns a model or raises OfflineModelError. Any other
exception is a finding (printed with its case number and seed, exit status 1); a crash or
a hang ends the process, which the caller sees (the case about to run is printed first
with --trace). Address space is limited (--memory-mib, default 4096) so an unbounded
allocation fails instead of swapping. A loaded model is also run once on its first stored
shape (weights are data: wrong numbers, never a crash; a stored plan the loader let
through must run or be refused by a kernel or the input check, never allocate what it
did not declare truthfully); one whose graph section changed has its graph read (it is
read lazily), which may also raise a GeHubError (a graph that does not verify names its
node).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import sys
import tempfile
import traceback
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

EDGE_INTS = [0, 1, -1, 2, 7, 63, 64, 65, 255, 4096, 2**31 - 1, 2**31, 2**32, 2**40, 2**53,
             2**62, 2**63 - 1, 2**63, 2**64, -2**63, 10**30]
NUMBER = re.compile(rb"-?\d+")


def seed_files(directory: str) -> list[tuple[str, bytes]]:
    from offline_models import conv_net, feeds, loop, segmented

    import ge_hub

    out = []
    graph, shapes = conv_net()
    model = ge_hub.compile(graph, input_shapes=shapes)
    model.run(feeds(graph, {"x": (1, 3, 18, 18)}))
    for name, portable in (("conv.ghm", True), ("conv-bare.ghm", False)):
        path = os.path.join(directory, name)
        model.save(path, portable=portable)
        out.append((name, open(path, "rb").read()))
    graph, shapes = loop()
    model = ge_hub.compile(graph)
    model.run(feeds(graph, shapes, m=2))
    path = os.path.join(directory, "loop.ghm")
    model.save(path)
    out.append(("loop.ghm", open(path, "rb").read()))
    graph, shapes = segmented()
    model = ge_hub.compile(graph)
    for n in (4, 2):
        model.run(feeds(graph, {"x": (n, 3)}))
    path = os.path.join(directory, "segmented.ghm")
    model.save(path)
    out.append(("segmented.ghm", open(path, "rb").read()))
    return out


def _first_shapes(model):
    """The input shapes of the loaded model's first stored plan (segments: the first
    segment's), or None when no stored plan runs as it is (a portability record the
    mutation broke: the loader plans again from the stored graph on first use)."""
    if model.segmented is not None:
        return next(shapes for segment, shapes, _, _ in model.segmented.entries()
                    if segment is model.segmented.root)
    try:
        return model.plan.signature
    except RuntimeError:  # not specialized: nothing stored runs as it is
        return None


def _sections(data: bytes):
    from ge_hub import _core
    from ge_hub.offline import layout

    header = layout.read_header(memoryview(data), "seed", _core.ABI_VERSION)
    table = layout.read_sections(memoryview(data), header, "seed")
    return header, [(k, data[o:o + n]) for k, (o, n, _) in sorted(table.items(),
                                                                   key=lambda kv: kv[1][0])]


def _reseal(header, sections) -> bytes:
    from ge_hub.offline import layout

    return layout.assemble(sections, abi=header.abi, flags=header.flags,
                           ge_hub_version=header.ge_hub_version)


def _flip(rng: random.Random, body: bytes, count: int) -> bytes:
    if not body:
        return body
    data = bytearray(body)
    for _ in range(count):
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    return bytes(data)


def _json_number(rng: random.Random, body: bytes) -> bytes:
    spans = [m.span() for m in NUMBER.finditer(body)]
    if not spans:
        return body
    start, end = rng.choice(spans)
    value = rng.choice(EDGE_INTS) if rng.random() < 0.7 else rng.randrange(-5, 5000)
    return body[:start] + str(value).encode() + body[end:]


def _json_span(rng: random.Random, body: bytes) -> bytes:
    if len(body) < 2:
        return body
    start = rng.randrange(len(body))
    end = min(len(body), start + rng.randrange(1, 40))
    if rng.random() < 0.5:
        return body[:start] + body[end:]
    return body[:end] + body[start:end] + body[end:]


def _json_structure(rng: random.Random, body: bytes) -> bytes:
    """Swap a JSON value for another kind (a list for an int, null, a huge string)."""
    try:
        document = json.loads(body)
    except ValueError:
        return body
    slots = []

    def walk(node):
        if isinstance(node, dict):
            for key in node:
                slots.append((node, key))
                walk(node[key])
        elif isinstance(node, list):
            for index in range(len(node)):
                slots.append((node, index))
                walk(node[index])

    walk(document)
    if not slots:
        return body
    container, key = rng.choice(slots)
    container[key] = rng.choice([None, [], {}, "x" * rng.randrange(1, 100), -1, 2**64, 1.5,
                                 True, [[[[[]]]]], {"__tensor__": 1}])
    return json.dumps(document).encode()


def mutate(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    from ge_hub.offline import layout

    choice = rng.random()
    if choice < 0.12:
        return _flip(rng, data, rng.randrange(1, 9)), "raw flip"
    if choice < 0.18:
        return data[:rng.randrange(len(data))], "truncate"
    if choice < 0.20:
        return data + bytes(rng.randrange(1, 200)), "append"
    if choice < 0.28:
        fields = list(layout.HEADER.unpack_from(data))
        index = rng.randrange(1, len(fields) - 1)
        fields[index] = rng.choice(EDGE_INTS) % (2**64 if index == 7 else 2**32)
        return layout.HEADER.pack(*fields) + data[layout.HEADER.size:], f"header field {index}"
    header, sections = _sections(data)
    if choice < 0.34:  # a table entry, the table's checksum fixed
        out = bytearray(data)
        at = layout.HEADER.size + layout.SECTION.size * rng.randrange(len(sections))
        entry = list(layout.SECTION.unpack_from(out, at))
        index = rng.randrange(5)
        entry[index] = (rng.choice([b"meta", b"graph", b"plans", b"data", b"evil"])
                        if index == 0 else rng.choice(EDGE_INTS) % (2**64 if index < 3
                                                                    else 2**32))
        layout.SECTION.pack_into(out, at, *entry)
        table = bytes(out[layout.HEADER.size:layout.HEADER.size + len(sections) * 32])
        fields = list(layout.HEADER.unpack_from(out))
        fields[8] = layout.crc32(table)
        fields[9] = layout.crc32(memoryview(out)[layout.HEADER.size:])
        out[:layout.HEADER.size] = layout.HEADER.pack(*fields)
        return bytes(out), "table entry"
    index = rng.randrange(len(sections))
    kind, body = sections[index]
    if kind in ("meta", "plans") and choice < 0.85:
        how = rng.choice([_json_number, _json_number, _json_span, _json_structure])
        label = f"{kind} {how.__name__[1:]}"
        body = how(rng, body)
    elif kind == "graph" and choice < 0.7:
        # mostly the graph's JSON part, which sits after its 32-byte header
        text_end = 32 + int.from_bytes(body[16:24], "little")
        head = _json_number(rng, body[32:text_end]) if rng.random() < 0.5 else \
            _flip(rng, body[32:text_end], 1)
        body = body[:32] + head + body[text_end:]
        label = "graph json"
    else:
        body = _flip(rng, body, rng.randrange(1, 5))
        label = f"{kind} flip"
    sections[index] = (kind, body)
    return _reseal(header, sections), label


def _one(path: str, name: str, label: str) -> str:
    """Load (and run) one mutated file: "loaded", "refused", or raises (a finding)."""
    import numpy as np
    from ge_hub._core import KernelError

    import ge_hub
    from ge_hub.errors import GeHubError, OfflineModelError

    try:
        model = ge_hub.load_compiled(path)
    except OfflineModelError:
        return "refused"
    shapes = _first_shapes(model)
    if shapes is not None:
        try:
            model.run([np.zeros(s, dtype=t.dtype.numpy) for s, t in
                       zip(shapes, model._input_types)])
        # A kernel refusing what a resealed edit fed it (KernelError, naming the step),
        # or the input check refusing stored shapes that an edited interface no longer
        # declares.
        except (GeHubError, KernelError, ValueError):
            pass
    if label.startswith("graph"):
        try:  # the graph is read on first use: read it now
            model.graph  # noqa: B018
        except GeHubError:  # malformed (OfflineModelError) or not verifying
            pass
    return "loaded"


def _forked(path: str, name: str, label: str) -> str:
    """`_one` in a child process, so that a crash is counted and the run goes on."""
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            code = {"loaded": 0, "refused": 1}[_one(path, name, label)]
        except BaseException:  # noqa: BLE001 (reported by the parent as a finding)
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        raise RuntimeError(f"the process died of signal {os.WTERMSIG(status)}")
    code = os.WEXITSTATUS(status)
    if code == 3:
        raise RuntimeError("an exception (printed above)")
    return ("loaded", "refused")[code]


def run(cases: int, seed: int, memory_mib: int, trace: bool, only=None,
        fork: bool = False) -> int:
    import numpy as np

    if memory_mib:
        limit = memory_mib * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    warnings.simplefilter("ignore")
    np.seterr(all="ignore")
    counts = {"loaded": 0, "refused": 0}
    findings = 0
    with tempfile.TemporaryDirectory() as directory:
        seeds = seed_files(directory)
        path = os.path.join(directory, "case.ghm")
        for case in (only or range(cases)):
            rng = random.Random(seed * 1_000_003 + case)
            name, data = seeds[case % len(seeds)]
            mutated, label = mutate(rng, data)
            if trace:
                print(f"case {case} ({name}: {label})", flush=True)
            with open(path, "wb") as f:
                f.write(mutated)
            try:
                counts[(_forked if fork else _one)(path, name, label)] += 1
            except Exception:  # a finding: anything but the file's own error
                findings += 1
                print(f"FINDING case {case} seed {seed} ({name}: {label}):", flush=True)
                traceback.print_exc()
    cases = len(only) if only else cases
    print(f"{cases} mutated loads (seed {seed}): {counts['loaded']} loaded, "
          f"{counts['refused']} refused with OfflineModelError, {findings} findings",
          flush=True)
    return 1 if findings else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--memory-mib", type=int, default=4096,
                        help="address-space limit (0: none)")
    parser.add_argument("--trace", action="store_true", help="print each case before it runs")
    parser.add_argument("--case", type=int, action="append",
                        help="run only this case number (repeatable): reproduces a finding")
    parser.add_argument("--fork", action="store_true",
                        help="run each case in a child process: a crash is a finding "
                             "and the run goes on (slower)")
    args = parser.parse_args(argv)
    return run(args.cases, args.seed, args.memory_mib, args.trace, args.case, args.fork)


if __name__ == "__main__":
    sys.exit(main())
