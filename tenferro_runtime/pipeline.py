"""The pass pipeline: the runtime's registered passes, in position order, each `Graph -> Graph`.

A pass is registered by a plugin (`registry.add_pass(name, fn, position=...)`); the
built-in ones come from `tenferro_runtime.passes` through the same hook. `TENFERRO_PASSES`
(comma-separated names, ``none`` for no pass) or `compile(..., passes=...)` selects a subset
for debugging. A pass that raises, returns something else than a Graph, or changes the
graph's types is reported as a `PluginError` in a `PassWarning`, and the function runs
unoptimized: a broken optimization never breaks the program.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from tenferro_core.errors import ArgumentError, PluginError

from .graph import Graph, Var, verify_graph

PassSpec = str | Sequence[str] | None


class PassWarning(UserWarning):
    """A compiler pass failed; the function runs without the pipeline's optimizations."""


def select(runtime: Any, passes: PassSpec = None) -> list[tuple[str, Callable[[Graph], Graph]]]:
    """(name, fn) of the passes to run, in position order: `passes` (names, or a
    comma-separated string; ``"none"`` or ``()`` for none), else $TENFERRO_PASSES, else all."""
    ordered = sorted(runtime.passes.items(), key=lambda kv: (kv[1][1], kv[0]))
    spec: Any = passes if passes is not None else os.environ.get("TENFERRO_PASSES")
    if spec is None:
        return [(n, entry[0]) for n, entry in ordered]
    if isinstance(spec, str):
        spec = [s.strip() for s in spec.split(",") if s.strip() and s.strip() != "none"]
    elif not isinstance(spec, (list, tuple)) or not all(isinstance(s, str) for s in spec):
        raise ArgumentError(
            f"passes must be a comma-separated string or a sequence of pass names, got {spec!r}")
    unknown = sorted(set(spec) - set(runtime.passes))
    if unknown:
        raise ArgumentError(
            f"unknown pass(es) {unknown} (from {'passes=' if passes is not None else 'TENFERRO_PASSES'}"
            f"); registered passes in order: {[n for n, _ in ordered]}"
        )
    return [(n, entry[0]) for n, entry in ordered if n in spec]


def optimize(graph: Graph, runtime: Any, passes: PassSpec = None) -> Graph:
    """`graph` after the selected passes; the unoptimized graph (with a PassWarning) when one
    of them fails or breaks the graph's types."""
    current = graph
    for name, fn in select(runtime, passes):
        try:
            new = fn(current.copy())  # a pass that edits in place cannot reach `current`
            _check(name, current, new)
        except Exception as exc:
            err = exc if isinstance(exc, PluginError) else PluginError(
                f"compiler pass {name!r} ({_where(fn)}) failed on a graph of {len(current.nodes)} "
                f"node(s): {type(exc).__name__}: {exc}; fix the pass, or leave it out with "
                f"TENFERRO_PASSES / compile(..., passes=...)")
            warnings.warn(f"{err} -- running this function unoptimized", PassWarning, stacklevel=4)
            return graph.replace(meta={**graph.meta, "pass_error": err})
        current = new
    return current


def _where(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _check(name: str, before: Graph, after: Any) -> None:
    """Raise PluginError unless `after` is a well-formed Graph with `before`'s signature."""
    if not isinstance(after, Graph):
        raise PluginError(f"compiler pass {name!r} returned {type(after).__name__}, expected a Graph")
    try:
        verify_graph(after)
    except Exception as exc:
        raise PluginError(f"compiler pass {name!r} produced a malformed graph: {exc}") from None
    ins = [v.aval for v in before.inputs], [v.aval for v in after.inputs]
    outs = [_aval(v) for v in before.outputs], [_aval(v) for v in after.outputs]
    if ins[0] != ins[1] or outs[0] != outs[1]:
        raise PluginError(
            f"compiler pass {name!r} changed the graph's signature from {_sig(ins[0], outs[0])} "
            f"to {_sig(ins[1], outs[1])}; a pass must keep inputs and outputs")


def _aval(v: Any) -> Any:
    return v.aval if isinstance(v, Var) else getattr(v, "_aval", type(v))


def _sig(ins: list, outs: list) -> str:
    def s(a: Any) -> str:
        return a.str_short() if hasattr(a, "str_short") else str(a)

    return f"({', '.join(map(s, ins))}) -> ({', '.join(map(s, outs))})"


__all__ = ["PassWarning", "optimize", "select"]
