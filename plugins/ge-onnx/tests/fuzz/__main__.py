"""The fuzzer's command line: replay the corpus, then run fresh mutated cases.

Run from plugins/ge-onnx (`python -m tests.fuzz --help`); see the package docstring.
Exit status 1 when a case failed (crash, hang, internal exception) that
`known_findings.txt` does not list, else 0.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import os
import random
import sys
import tempfile
import time

from .corpus_files import CORPUS_DIR, corpus_cases, known_findings, record_finding
from .mutate import mutate_bytes, mutate_gehub, mutate_onnx
from .runner import Outcome, run_case
from .seeds import Seed, gehub_seeds, onnx_seeds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--cases", type=int, default=1500, help="fresh cases at most")
    parser.add_argument("--seconds", type=float, default=240.0,
                        help="stop starting fresh cases after this many seconds")
    parser.add_argument("--seed", type=int, default=0, help="the run's seed (cases differ)")
    parser.add_argument("--first-case", type=int, default=0,
                        help="start at this case index (with --cases 1: replay one case)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per case")
    parser.add_argument("--memory-mib", type=int, default=3072, help="RLIMIT_AS per case (0: none)")
    parser.add_argument("--replay-only", action="store_true", help="only the corpus")
    parser.add_argument("--no-save", action="store_true",
                        help="do not add findings to the corpus")
    parser.add_argument("--verbose", "-v", action="store_true", help="one line per case")
    args = parser.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # progress shows in CI logs as it comes
    limits = {"timeout": args.timeout, "memory_bytes": args.memory_mib << 20}

    tally: collections.Counter[str] = collections.Counter()
    unexpected: list[str] = []
    start = time.monotonic()
    known = known_findings()
    signatures = set()
    print(f"replaying the corpus in {CORPUS_DIR}")
    for path in corpus_cases():
        outcome = run_case(str(path), **limits)
        name = path.name
        signatures.add(_signature(outcome, name))
        if outcome.failed and name in known:
            tally["expected (known finding)"] += 1
            print(f"  expected  {name}: {outcome.line()}")
        elif outcome.failed:
            tally[f"corpus {outcome.kind}"] += 1
            unexpected.append(f"{name}: {outcome.line()}")
            print(f"  FAILED    {name}: {outcome.line()}")
        else:
            tally[f"corpus {outcome.kind}"] += 1
            note = " (listed in known_findings.txt: remove it)" if name in known else ""
            if args.verbose or note:
                print(f"  {outcome.kind:9} {name}{note}")
    if not args.replay_only:
        _fresh_cases(args, limits, tally, unexpected, signatures, start)
    print(f"\n{sum(tally.values())} cases in {time.monotonic() - start:.0f} s:")
    for kind, count in sorted(tally.items()):
        print(f"  {kind:28} {count}")
    if unexpected:
        print(f"\n{len(unexpected)} unexpected failures:")
        for line in unexpected:
            print(f"  {line}")
        return 1
    return 0


def _fresh_cases(args, limits, tally, unexpected, signatures, start) -> None:
    onnx_models = onnx_seeds()
    gehub_models = gehub_seeds(onnx_models)
    print(f"seeds: {len(onnx_models)} ONNX models, {len(gehub_models)} .gehub files "
          f"({time.monotonic() - start:.0f} s)")
    with tempfile.TemporaryDirectory(prefix="ge-fuzz-") as scratch:
        for index in range(args.first_case, args.first_case + args.cases):
            if time.monotonic() - start > args.seconds:
                print(f"time budget of {args.seconds:g} s spent after "
                      f"{index - args.first_case} fresh cases")
                break
            rng = random.Random(f"{args.seed}-{index}")
            try:
                seed, data, how = make_case(rng, onnx_models, gehub_models)
            except Exception as exc:  # noqa: BLE001  a mutation that cannot be made
                tally["skipped (mutation not made)"] += 1
                if args.verbose:
                    print(f"  skipped   case {index}: {type(exc).__name__}: {exc}")
                continue
            path = os.path.join(scratch, f"case{seed.suffix}")
            with open(path, "wb") as file:
                file.write(data)
            outcome = run_case(path, seed=index, **limits)
            tally[f"fresh {outcome.kind}"] += 1
            label = f"case {index} ({seed.name}{seed.suffix}: {how})"
            if args.verbose:
                print(f"  {outcome.kind:9} {label}: {outcome.detail[:120]}")
            if not outcome.failed:
                continue
            signature = _signature(outcome, seed.name)
            print(f"  FAILED    {label}: {outcome.line()}")
            unexpected.append(f"{label}: {outcome.line()}")
            if signature in signatures or args.no_save:
                continue
            signatures.add(signature)
            digest = hashlib.sha1(data).hexdigest()[:10]
            name = f"{outcome.kind}-{seed.name}-{digest}{seed.suffix}"
            saved = record_finding(name, data, f"--seed {args.seed} --first-case {index}: "
                                               f"{seed.name}{seed.suffix}: {how} => "
                                               f"{outcome.line()}")
            print(f"            saved as {saved}")


def make_case(rng: random.Random, onnx_models: list[Seed],
              gehub_models: list[Seed]) -> tuple[Seed, bytes, str]:
    """One mutated model: a seed, its mutated bytes and how they were made."""
    if gehub_models and rng.random() < 0.3:
        seed = rng.choice(gehub_models)
        roll = rng.random()
        if roll < 0.6:
            data, how = mutate_gehub(seed.data, rng)
        else:
            data, how = mutate_bytes(seed.data, rng, keep_header=32 if roll < 0.9 else 0)
        return seed, data, how
    seed = rng.choice(onnx_models)
    if rng.random() < 0.75:
        data, how = mutate_onnx(seed.data, rng)
    else:
        data, how = mutate_bytes(seed.data, rng)
    return seed, data, how


def _signature(outcome: Outcome, where: str) -> tuple:
    """Failures alike enough to keep one corpus file for: the exception and its frame
    for an internal error; the seed model for a crash or a hang."""
    if outcome.kind == "internal":
        exc = outcome.detail.split(":", 1)[0]
        frame = outcome.detail.rsplit("[", 1)[-1] if "[" in outcome.detail else ""
        return (outcome.kind, exc, frame)
    return (outcome.kind, where.split("-", 2)[1] if where.count("-") >= 2 else where)


if __name__ == "__main__":
    sys.exit(main())
