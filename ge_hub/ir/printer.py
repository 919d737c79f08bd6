"""Placeholder: the text form (filled by the IR work)."""


def format_graph(graph) -> str:
    return repr(graph)
