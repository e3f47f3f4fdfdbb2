"""A tape's backward pass as one graph, for tapes whose structure repeats (a training loop).

`GradientTape.gradient` walks its records backwards, one VJP graph per record. When the
same records (primitives, avals, params, wiring) come back, the whole walk is traced once
into one graph of the per-record VJP graphs, cached by that signature, and replayed as one
plan: no per-record cache lookup, wrapping or cotangent bookkeeping in Python. The first
sighting of a signature takes the per-record walk (a tape used once pays no tracing); the
second builds the graph and replays it. It applies where the backward ops run eagerly with no observer
that needs each op (`tracing` stack: the eager interpreter, or graph-taking observers such
as energy monitors); elsewhere (an outer tape, a trace) the per-record walk runs.
"""

from __future__ import annotations

from typing import Any

from tenferro_runtime import array_api as xp
from tenferro_runtime import tracing
from tenferro_runtime.eager import params_key
from tenferro_runtime.graph import Graph, dead_code_elimination, eval_graph, trace
from tenferro_runtime.passes.memory import plan_memory

from .ad_util import add_tangents, instantiate

CACHE_SIZE = 256


def gradients(records: list, live_ids: dict, targets: list, seeds: list, sources: list,
              vjp_graph: Any) -> list | None:
    """The sources' gradients from one replay of the tape's backward graph, or None where
    the per-record walk must run (this context needs each op, or the signature is new).
    `vjp_graph(cache, prim, args, params, outs, live, has_ct)` is the tape's per-record VJP
    graph."""
    stack = tracing.interpreters()
    if stack is not tracing.BOTTOM and not stack.graphs or not records:
        return None
    slots: dict[int, int] = {}  # id of a tensor -> its slot (its index in `values`)
    values: list = []

    def place(tensors: tuple) -> list:
        out = []
        for t in tensors:
            s = slots.setdefault(id(t), len(values))
            if s == len(values):
                values.append(t)
            out.append(s)
        return out

    recs = []
    try:
        for prim, args, params, outs in records:
            ss = place((*args, *outs))
            na = len(args)
            live = tuple([id(a) in live_ids for a in args])
            recs.append((prim, tuple(ss[:na]), tuple(ss[na:]), live, *params_key(prim, params)))
        ends = place((*targets, *sources))
        nt = len(targets)
        key = (tuple(recs), tuple(ends[:nt]), tuple(ends[nt:]), tuple([v._aval for v in values]),
               tuple([g._aval for g in seeds]))
        runtime = values[0]._aval.device.runtime
        cache = runtime.caches.get("tape_backward", CACHE_SIZE)
        new: list = []
        entry = cache.get_or_build(key, _new_entry, new)
    except TypeError:  # an unhashable param: no signature
        return None
    if new:  # first sighting
        return None
    if entry.graph is None:  # second: build (two threads may both build; one is kept)
        entry.graph = _build(records, key, runtime.caches.get("tape_vjp", 4096), vjp_graph)
    return eval_graph(entry.graph, *values, *seeds)


class Entry:
    """A signature's cache entry: its backward graph, once the signature came back."""

    __slots__ = ("graph",)

    def __init__(self) -> None:
        self.graph: Graph | None = None


def _new_entry(new: list) -> Entry:
    entry = Entry()
    new.append(entry)
    return entry


def _build(records: list, key: tuple, vjp_cache: Any, vjp_graph: Any) -> Graph:
    """Trace the per-record walk over slot values into one graph: (*slot values, *seeds) ->
    the sources' gradients."""
    recs, target_slots, source_slots, avals, _ = key
    n = len(avals)

    def backward(*ins: Any) -> list:
        vals, seeds = ins[:n], ins[n:]
        ct: dict[int, Any] = {}
        for s, g in zip(target_slots, seeds):
            ct[s] = add_tangents(ct[s], g) if s in ct else g
        for (prim, arg_slots, out_slots, live, *_), (_, _, params, _) in zip(reversed(recs),
                                                                            reversed(records)):
            outs = [vals[o] for o in out_slots]
            cts = [ct.pop(o, None) for o in out_slots]
            if not prim.effects and all(c is None for c in cts):
                continue
            if all(c is None for c in cts):
                cts = [xp.zeros_like(o) for o in outs]
            args = [vals[a] for a in arg_slots]
            graph = vjp_graph(vjp_cache, prim, args, params, outs, live,
                              tuple([c is not None for c in cts]))
            grads = eval_graph(graph, *args, *[c for c in cts if c is not None], *outs)
            i = 0
            for a, receives in zip(arg_slots, graph.meta["receives"]):
                if receives:  # not a structurally zero cotangent (tape.py, `_build_vjp_graph`)
                    g = grads[i]
                    i += 1
                    ct[a] = g if a not in ct else add_tangents(ct[a], g)
        return [instantiate(ct[s]) if s in ct else xp.zeros_like(vals[s]) for s in source_slots]

    # with a buffer plan, the replay drops each backward intermediate after its last use
    return plan_memory(dead_code_elimination(trace(backward, *avals, *key[4])))
