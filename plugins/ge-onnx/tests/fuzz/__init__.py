"""A fuzzer for hostile model files: mutated ONNX and `.gehub` files must be refused
cleanly or run, never crash, hang or leak an internal exception.

Seeds are the ONNX node-test models and light models shipped in the installed onnx
package, and `.gehub` files made by importing some of them (`seeds`). Each case is a
seed mutated structurally (protobuf fields or the `.gehub` JSON: attributes, dims,
dtypes, inputs removed or renamed, huge and negative values) or byte-wise (`mutate`),
loaded with `ge_hub.load`, compiled and run on random feeds of the declared shapes in
a forked child with memory and time limits (`runner`). Everything is deterministic
for a given `--seed`.

A case fails on a signal (crash), on running past its time limit (hang) or on an
exception that is not a ge-hub error (`runner.CLEAN_ERRORS`): AttributeError,
IndexError, struct.error, KeyError, TypeError, RecursionError, a bare MemoryError and
the like are findings. NumPy failing to allocate an array of a legal but large size
under the child's memory limit is counted as "resource", not a finding.
Failing cases are written to `corpus/` (small files, indexed in `corpus/index.txt`),
which every run replays first; `handmade.py` adds issue 11's hand-built models there.
`known_findings.txt` lists corpus files whose fix is still pending, reported as
expected failures (the aim is an empty list).

    python -m tests.fuzz                                # cwd plugins/ge-onnx
    python -m tests.fuzz --cases 50000 --seconds 3600 --seed 7   # before a release
    python -m tests.fuzz --replay-only                  # the corpus alone
    python -m tests.fuzz --seed 4 --first-case 19038 --cases 1 -v   # one case again

`tox -e fuzz` runs the CI budget (2,000 cases or 240 s); `tox -e fuzz-asan` replays
the corpus under the AddressSanitizer build (`-- --cases N` adds fresh cases); the
onnx env's test_fuzz_corpus.py replays the corpus too.
"""
