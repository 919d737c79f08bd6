"""The regression corpus: model files that once failed, and the list of those still open.

`corpus/` holds one file per finding (named `<outcome>-<seed model>-<hash>.<suffix>`)
and `corpus/index.txt`, one line per file saying how it was made and what it did.
`known_findings.txt` lists the corpus files whose fix is pending (one name per line,
then `#` and a note); replays report them as expected failures, and the goal is an
empty list.
"""

from __future__ import annotations

import pathlib

HERE = pathlib.Path(__file__).parent
CORPUS_DIR = HERE / "corpus"
KNOWN_FINDINGS = HERE / "known_findings.txt"
MAX_SAVED_BYTES = 256 << 10  # a corpus of small files


def corpus_cases() -> list[pathlib.Path]:
    return sorted(p for p in CORPUS_DIR.iterdir() if p.suffix in (".onnx", ".gehub"))


def known_findings() -> dict[str, str]:
    """Corpus file name -> note, from known_findings.txt."""
    found = {}
    if KNOWN_FINDINGS.exists():
        for line in KNOWN_FINDINGS.read_text().splitlines():
            name, _, note = line.partition("#")
            if name.strip():
                found[name.strip()] = note.strip()
    return found


def record_finding(name: str, data: bytes, how: str) -> str:
    """Save a failing case in the corpus (unless too big) and index it; returns where."""
    CORPUS_DIR.mkdir(exist_ok=True)
    if len(data) > MAX_SAVED_BYTES:
        where = f"not saved ({len(data)} bytes); rerun it with {how.split(':')[0]}"
    else:
        (CORPUS_DIR / name).write_bytes(data)
        where = str(CORPUS_DIR / name)
    with open(CORPUS_DIR / "index.txt", "a") as index:
        index.write(f"{name}: {' '.join(how.split())}\n")  # one line per file
    return where
