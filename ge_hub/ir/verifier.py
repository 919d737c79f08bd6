"""Placeholder: the graph verifier (filled by the IR work)."""


def verify(graph) -> None:
    pass
