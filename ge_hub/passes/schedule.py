"""Order the nodes for execution and assign them to streams, with events between streams.

1. Order: a topological order (the graph's own, repaired if a pass left it out of order).
2. Steps: the nodes that become executor steps (a view runs no step; a step reading a
   view depends on the step that produced the view's base; nor does a Concat run in
   place, whose readers depend on the steps that wrote its inputs).
3. Cuts and regions: a step that every other step either precedes or follows (a stem
   convolution, an Inception block's Concat) is a cut; the steps between two cuts form
   a region, whose branches may run at the same time.
4. Chains (the labelling step, in the spirit of GE's stream labels): in a region each
   step continues the chain of one of its producers that ends there (the one with the
   longest estimated path), else starts a chain: a branch that forks gets its own
   chain, a join continues one of the chains it joins.
5. Streams: per region, the cost model (`ge_hub.passes.cost`) simulates the region on
   k streams, one thread each, against running its steps one after another with the
   whole thread pool; `streams="auto"` keeps the fastest k, and 1 unless the model says
   the concurrent schedule is faster (by `AUTO_MARGIN`); `streams=N` takes
   min(N, chains). Chains are packed onto the k streams, reusing a stream whose last
   step precedes the chain.
6. Events (the dependency step): a step waits for a step on another stream only when
   neither its stream's order nor an earlier wait already makes it follow that step;
   producers are tried latest first, so no event is redundant.

Written on each node: `meta["stream"]`, `meta["threads"]` (0: the step may use the whole
thread pool, 1: it runs on its calling thread: a step of a concurrent region, or one
whose work is below `cost.INLINE_WORK`) and `meta["wait"]` (the step nodes on other
streams it waits for). The executor runs a step with threads 0 alone (every earlier step
done, no later one started), so only threads-1 steps overlap.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ge_hub.ir.graph import Graph, Node, node_reads
from ge_hub.passes import PassResult
from ge_hub.passes import cost as cost_model
from ge_hub.passes.context import PassContext


def streams_option(options: Mapping[str, Any]) -> int | str:
    """The `streams` compile option checked: "auto" or a count >= 1; its default is
    GE_HUB_STREAMS when set (the tsan tox env runs whole test files with streams on),
    else "auto"."""
    value = options.get("streams", os.environ.get("GE_HUB_STREAMS") or "auto")
    if value == "auto":
        return "auto"
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"option 'streams' must be 'auto' or a whole number >= 1, "
                         f"got {value!r}")
    return value


def is_step(node: Node) -> bool:
    """Whether the node becomes an executor step (`select_kernels` left it a kernel)."""
    return node.meta.get("kernel") is not None


def step_producers(node: Node | None) -> list[Node]:
    """The steps that wrote the memory a value of `node` lives in: the node itself when it
    is a step, through views the step that wrote their base, and for a Concat run in place
    (`ge_hub.passes.concat_in_place`) the steps that wrote its inputs."""
    if node is None:
        return []
    if is_step(node):
        return [node]
    if node.meta.get("concat_offsets") is not None:
        return [p for v in node.inputs for p in step_producers(v.producer)]
    view_of = node.meta.get("view_of")
    if view_of is None or view_of >= len(node.inputs) or node.inputs[view_of] is None:
        return []
    return step_producers(node.inputs[view_of].producer)


def step_preds(steps: list[Node]) -> list[list[int]]:
    """For each step, the positions (in `steps`) of the steps it reads from."""
    position = {id(n): i for i, n in enumerate(steps)}
    preds = []
    for node in steps:
        found = set()
        for value in node_reads(node):
            for producer in step_producers(value.producer):
                if id(producer) in position:
                    found.add(position[id(producer)])
        preds.append(sorted(found))
    return preds


def ancestors(preds: list[list[int]]) -> list[int]:
    """Bit masks: bit j of entry i set when step j must finish before step i starts."""
    anc: list[int] = []
    for ps in preds:
        mask = 0
        for p in ps:
            mask |= anc[p] | (1 << p)
        anc.append(mask)
    return anc


def stream_preds(streams: list[int], waits: list[list[int]]) -> list[list[int]]:
    """What orders steps at run time: the previous step of the same stream and the steps
    waited for through events."""
    last: dict[int, int] = {}
    preds = []
    for i, stream in enumerate(streams):
        ps = list(waits[i])
        if stream in last:
            ps.append(last[stream])
        last[stream] = i
        preds.append(ps)
    return preds


def cuts(anc: list[int]) -> list[bool]:
    """Steps every other step precedes or follows (all earlier ones are ancestors, all
    later ones descendants)."""
    n = len(anc)
    lowest_missing = []
    for i, mask in enumerate(anc):
        full = mask | (1 << i)
        lowest_missing.append((~full & (full + 1)).bit_length() - 1)
    result = [False] * n
    suffix = n + 1
    for i in range(n - 1, -1, -1):
        result[i] = anc[i] == (1 << i) - 1 and suffix > i
        suffix = min(suffix, lowest_missing[i])
    return result


def _chains(region: list[int], preds: list[list[int]], times: list[float]) -> list[list[int]]:
    """Split a region's steps (positions, in order) into chains (step 4 above)."""
    inside = set(region)
    chain_of: dict[int, int] = {}
    open_tail: set[int] = set()
    finish: dict[int, float] = {}
    chains: list[list[int]] = []
    for v in region:
        ps = [p for p in preds[v] if p in inside]
        start = max((finish[p] for p in ps), default=0.0)
        finish[v] = start + times[v]
        tails = [p for p in ps if p in open_tail]
        if tails:
            p = max(tails, key=lambda q: (finish[q], -q))
            open_tail.discard(p)
            chain_of[v] = chain_of[p]
            chains[chain_of[v]].append(v)
        else:
            chain_of[v] = len(chains)
            chains.append([v])
        open_tail.add(v)
    return chains


def _pack(chains: list[list[int]], k: int, anc: list[int], times: list[float]) -> dict[int, int]:
    """Put chains on at most k streams (0..k-1): a chain reuses a stream whose last step
    precedes its first step, else takes a new stream, else the least loaded one."""
    last: list[int] = []
    load: list[float] = []
    stream_of: dict[int, int] = {}
    for chain in sorted(chains, key=lambda c: c[0]):
        first = chain[0]
        free = [s for s in range(len(last)) if (anc[first] >> last[s]) & 1]
        if free:
            s = max(free, key=lambda q: last[q])
        elif len(last) < k:
            s = len(last)
            last.append(-1)
            load.append(0.0)
        else:
            s = min(range(len(last)), key=lambda q: (load[q], q))
        for v in chain:
            stream_of[v] = s
        last[s] = max(last[s], chain[-1])
        load[s] += sum(times[v] for v in chain)
    return stream_of


def _simulate(region: list[int], preds: list[list[int]], stream_of: dict[int, int],
              times: list[float]) -> float:
    """Model time of a region run concurrently, one thread per stream."""
    finish: dict[int, float] = {}
    free: dict[int, float] = {}
    for v in region:
        s = stream_of[v]
        start = free.get(s, 0.0)
        for p in preds[v]:
            if p in finish:
                wait = finish[p] + (cost_model.EVENT_COST if stream_of[p] != s else 0.0)
                start = max(start, wait)
        finish[v] = start + times[v]
        free[s] = finish[v]
    return cost_model.REGION_LAUNCH + max(finish.values(), default=0.0)


def plan_streams(steps: list[Node], option: int | str, threads: int
                 ) -> tuple[list[int], list[int], list[list[int]]]:
    """(stream, threads, waited step positions) for each step, in order."""
    n = len(steps)
    preds = step_preds(steps)
    anc = ancestors(preds)
    is_cut = cuts(anc)
    one = [cost_model.step_time(node, 1) for node in steps]
    wide = [cost_model.step_time(node, threads) for node in steps]
    inline = [cost_model.runs_inline(node) for node in steps]
    stream = [0] * n
    step_threads = [1 if inline[i] else 0 for i in range(n)]
    limit = threads if option == "auto" else option

    region: list[int] = []
    boundaries = [i for i in range(n) if is_cut[i]] + [n]
    start = 0
    for boundary in boundaries:
        region = list(range(start, boundary))
        start = boundary + 1
        if len(region) < 2 or limit < 2:
            continue
        chains = _chains(region, preds, one)
        if len(chains) < 2:
            continue
        best, best_time = None, sum(wide[v] for v in region)
        if option == "auto":
            serial = best_time
            for k in range(2, min(limit, len(chains)) + 1):
                packed = _pack(chains, k, anc, one)
                t = _simulate(region, preds, packed, one)
                if t < best_time and t < serial * cost_model.AUTO_MARGIN:
                    best, best_time = packed, t
        else:
            best = _pack(chains, min(limit, len(chains)), anc, one)
        if best is None:
            continue
        for v in region:
            stream[v] = best[v]
            step_threads[v] = 1
    for i, node in enumerate(steps):
        if _runs_python(node):
            step_threads[i] = 0  # the executor runs Python steps alone (they need the GIL)
    return stream, step_threads, events(stream, preds)


def _runs_python(node: Node) -> bool:
    from ge_hub.kernels.base import CKernel

    kernel = node.meta.get("kernel")
    return kernel is not None and not isinstance(kernel.impl, CKernel)


def events(stream: list[int], preds: list[list[int]]) -> list[list[int]]:
    """The waits each step needs (step 6 above): none missing, none redundant."""
    anc: list[int] = []
    last: dict[int, int] = {}
    waits: list[list[int]] = []
    for v, s in enumerate(stream):
        mask = 0
        if s in last:
            mask = anc[last[s]] | (1 << last[s])
        mine = []
        for p in sorted(preds[v], reverse=True):
            if stream[p] != s and not (mask >> p) & 1:
                mine.append(p)
                mask |= anc[p] | (1 << p)
        last[s] = v
        anc.append(mask)
        waits.append(sorted(mine))
    return waits


def schedule(graph: Graph, ctx: PassContext | None = None) -> PassResult:
    options = ctx.options if ctx is not None else {}
    option = streams_option(options)
    before = list(graph.nodes)
    graph.topological_sort()
    steps = [n for n in graph.nodes if is_step(n)]
    threads = cost_model.threads_available()
    streams, step_threads, waits = plan_streams(steps, option, threads)
    for i, node in enumerate(steps):
        node.meta["stream"] = streams[i]
        node.meta["threads"] = step_threads[i]
        node.meta["wait"] = [steps[p] for p in waits[i]]
    for node in graph.nodes:
        if not is_step(node):
            producers = step_producers(node)
            node.meta["stream"] = producers[0].meta["stream"] if producers else 0
            node.meta["threads"] = 0
            node.meta["wait"] = []
    return PassResult(graph, graph.nodes != before)
