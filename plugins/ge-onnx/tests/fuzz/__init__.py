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
IndexError, struct.error, KeyError, TypeError, MemoryError and the like are findings.
Failing cases are written to `corpus/` (small files), which every run replays first;
`known_findings.txt` lists corpus files whose fix is still pending, reported as
expected failures.

    python -m tests.fuzz                           # CI budget (cwd plugins/ge-onnx)
    python -m tests.fuzz --cases 20000 --seconds 3600   # before a release
    python -m tests.fuzz --replay-only             # the corpus alone

`tox -e fuzz` runs the CI budget.
"""
