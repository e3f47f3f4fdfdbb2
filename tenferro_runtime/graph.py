"""The traced-program IR: a `Graph` of SSA nodes, `trace(fn, *examples)` and `eval_graph`.

A node is (primitive, input vars, params, output vars, the user's call site).
Values the traced function captured from outside (tensors, or values of outer
transformations) are graph constants. Shape and dtype errors surface at trace
time with the user's file:line.
"""

from __future__ import annotations

import itertools
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tenferro_core.avals import Aval
from tenferro_core.errors import ArgumentError, TenferroError

from .eager import _not_tensor, _with_device
from .plan import build_plan
from .pytree import tree_flatten, tree_unflatten, unregistered_hint
from .tensor import Tensor
from .tracing import BOTTOM, Trace, Tracer, interpreters, new_trace, notify_graph

# The layers themselves; every loaded plugin's top-level package is skipped too (Runtime records).
_LAYERS = frozenset({"tenferro_core", "tenferro_runtime", "tenferro_ad", "contextlib"})


def _user_file(frame: Any, runtime: Any) -> str | None:
    """The file name of `frame` if it is the user's, None for a frame of tenferro's layers or
    of a plugin `runtime` loaded; remembered per code object in the runtime."""
    memo = runtime._site_memo
    if memo is None:
        memo = runtime._site_memo = {}
    code = frame.f_code
    name = memo.get(code, "")
    if name == "":
        mod = frame.f_globals.get("__name__", "")
        skip = mod.partition(".")[0] in _LAYERS | runtime.plugin_packages
        name = memo[code] = None if skip else os.path.basename(code.co_filename)
    return name


def _runtime(runtime: Any) -> Any:
    from .runtime import default_runtime

    return default_runtime() if runtime is None else runtime


def user_site(runtime: Any = None) -> str:
    """file:line of the innermost caller outside tenferro's layers and every plugin `runtime`
    loaded (default: the default runtime); a frame costs a dict lookup once seen."""
    runtime = _runtime(runtime)
    memo = runtime._site_memo or {}
    f = sys._getframe(1)
    while f is not None:
        name = memo.get(f.f_code, "")  # seen before: one lookup (this runs once per traced node)
        if name == "":
            name = _user_file(f, runtime)
        if name is not None:
            return f"{name}:{f.f_lineno}"
        f = f.f_back
    return "?"


def _site_of(tb: Any) -> str:
    """file:line of the innermost user frame of a traceback."""
    runtime = _runtime(None)
    site = "?"
    while tb is not None:
        name = _user_file(tb.tb_frame, runtime)
        if name is not None:
            site = f"{name}:{tb.tb_lineno}"
        tb = tb.tb_next
    return site


_ids = itertools.count()


class Var:
    """An SSA value of a graph (immutable)."""

    __slots__ = ("aval", "id")

    def __init__(self, aval: Aval):
        object.__setattr__(self, "aval", aval)
        object.__setattr__(self, "id", next(_ids))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a graph Var is immutable (tried to set {name!r}); make a new Var")

    def __repr__(self) -> str:
        return f"Var({self.id}:{self.aval.str_short()})"


@dataclass
class Node:
    prim: Any
    inputs: list[Var]
    params: dict
    outputs: list[Var]
    site: str = "?"


@dataclass(eq=False)
class Graph:
    """inputs -> nodes -> outputs; `consts` binds the captured values. Compared and hashed by
    identity: a graph is never edited once built (passes make new ones; the pipeline hands
    each plugin pass a `copy`, so one that edits in place cannot reach the original), so it
    keys caches. What the runtime derives from a graph (its plan, a backend's fused code)
    lives beside it (`derived`), not in it."""

    inputs: list[Var]
    nodes: list[Node] = field(default_factory=list)
    outputs: list[Any] = field(default_factory=list)
    consts: dict[Var, Any] = field(default_factory=dict)
    out_tree: Any = None
    # what passes concluded about the graph (the buffer plan, the schedule report, donated
    # inputs), given when the graph is made (`replace(meta=...)`)
    meta: dict = field(default_factory=dict, repr=False, compare=False)

    def replace(self, **changes: Any) -> Graph:
        """A new Graph with `changes` (nodes, outputs, consts, meta, ...); the rest shared.
        Passes never edit a graph in place: it may already be running elsewhere."""
        fields = {"inputs": self.inputs, "nodes": self.nodes, "outputs": self.outputs,
                  "consts": self.consts, "out_tree": self.out_tree, "meta": dict(self.meta)}
        fields.update(changes)
        return Graph(**fields)

    def copy(self) -> Graph:
        """A graph equal to this one that shares no mutable structure with it (lists, dicts,
        nodes, params, nested graphs); Vars and constants are shared (they are immutable)."""
        return Graph(list(self.inputs), [_copy_node(n) for n in self.nodes], list(self.outputs),
                     dict(self.consts), self.out_tree, dict(self.meta))

    @property
    def runtime(self) -> Any:
        """The runtime whose devices the graph's values are on: its inputs', constants' or
        node results' (the default runtime for a graph with none)."""
        try:  # the common case, read on every eval_graph
            return self.inputs[0].aval.device.runtime
        except (IndexError, AttributeError):
            pass
        values = itertools.chain(self.inputs, self.consts, (o for n in self.nodes for o in n.outputs))
        for v in values:
            rt = getattr(v.aval.device, "runtime", None)
            if rt is not None:
                return rt
        return _runtime(None)

    def derived(self, key: Any, build: Any) -> Any:
        """What the runtime derived from this graph under `key` (built once by `build()`,
        kept in its runtime's `graph data` cache for as long as the graph lives)."""
        return self.runtime.caches.graph_data.get_or_build(self, key, build)

    def __str__(self) -> str:
        names: dict[int, str] = {}

        def name(v: Any) -> str:
            if not isinstance(v, Var):
                return repr(v)
            if v.id not in names:
                n, s = len(names), ""
                while True:
                    s = chr(ord("a") + n % 26) + s
                    n = n // 26 - 1
                    if n < 0:
                        break
                names[v.id] = s
            return names[v.id]

        def decl(v: Var) -> str:
            return f"{name(v)}:{v.aval.str_short()}"

        ins = " ".join(decl(v) for v in self.inputs)
        consts = " ".join(decl(v) for v in self.consts)
        lines = [f"{{ lambda {ins}" + (f" ; consts {consts}" if consts else "") + "."]
        for n in self.nodes:
            params = ", ".join(f"{k}={_short(v)}" for k, v in n.params.items() if k != "device")
            head = n.prim.name + (f"[{params}]" if params else "")
            outs = " ".join(decl(v) for v in n.outputs)
            body = f"  {outs} = {head} {' '.join(name(v) for v in n.inputs)}"
            lines.append(f"{body:<60}  # {n.site}")
            subgraphs = getattr(n.prim, "subgraphs", None)  # control flow: its bodies, indented
            if subgraphs is not None:
                for k, sub in enumerate(subgraphs(n.params)):
                    lines.append(f"    body {k}:")
                    lines += [f"    {line}" for line in str(sub).splitlines()]
        lines.append(f"  in ({', '.join(name(v) for v in self.outputs)}) }}")
        return "\n".join(lines)


def _copy_node(n: Node) -> Node:
    params = {k: v.copy() if isinstance(v, Graph) else v for k, v in n.params.items()}
    return Node(n.prim, list(n.inputs), params, list(n.outputs), n.site)


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


class GraphTracer(Tracer):
    """A value being traced into a Graph."""

    __slots__ = ("_var",)


class GraphTrace(Trace):
    """Records every primitive applied to its tracers as a node of `graph`."""

    label = "trace"

    def __init__(self) -> None:
        super().__init__()
        self.graph = Graph(inputs=[])
        self._const_vars: dict[int, tuple[Var, Any]] = {}

    def new_input(self, aval: Aval) -> GraphTracer:
        v = Var(aval)
        self.graph.inputs.append(v)
        return self._tracer(v)

    def _tracer(self, v: Var) -> GraphTracer:
        t = object.__new__(GraphTracer)
        t._aval, t._trace, t._var = v.aval, self, v
        return t

    def to_var(self, x: Any) -> Var:
        if isinstance(x, GraphTracer) and x._trace is self:
            return x._var
        if not isinstance(x, Tensor):
            raise TenferroError(f"expected a tensor operand while tracing, got {type(x).__name__}")
        hit = self._const_vars.get(id(x))
        if hit is None:
            v = Var(x._aval)
            self.graph.consts[v] = x
            self._const_vars[id(x)] = hit = (v, x)  # keeps x alive so its id stays unique
        return hit[0]

    def process(self, prim: Any, args: tuple, params: dict) -> Any:
        try:
            avals = tuple(a._aval for a in args)
        except AttributeError:
            raise _not_tensor(prim, args) from None
        if not avals:
            params, _ = _with_device(prim, params)
        runtime = avals[0].device.runtime if avals else None
        site = user_site(runtime)
        try:
            nparams = prim.check_params(params, avals)
            out_avals = prim.abstract_eval(avals, nparams)
        except TenferroError as err:
            raise type(err)(f"{err} (at {site})") from None
        ins = [self.to_var(a) for a in args]
        outs = [Var(a) for a in out_avals]
        self.graph.nodes.append(Node(prim, ins, nparams, outs, site))
        tracers = [self._tracer(v) for v in outs]
        return tuple(tracers) if prim.multiple_results else tracers[0]


def trace(fn: Any, *examples: Any, graph_trace: GraphTrace | None = None) -> Graph:
    """Trace `fn` on example tensors (or avals) into a Graph; outputs may be a pytree.
    `graph_trace`: the (fresh) GraphTrace to record with, if not a plain one.

    Example leaves are taken as `compile` takes arguments: tensors and avals are the graph's
    inputs (a NumPy array is converted to a tensor first); any other leaf (a Python number, a
    string, None) is static: `fn` receives it as it is, the graph has no input for it."""
    if not callable(fn):
        raise ArgumentError(
            f"trace expects a function (a callable) as its first argument, got {type(fn).__name__}; "
            f"call trace(fn, *examples)"
        )
    leaves, in_tree = tree_flatten(examples)
    leaves = [_example(x, i) for i, x in enumerate(leaves)]
    with new_trace(graph_trace or GraphTrace()) as tr:
        tracers = [tr.new_input(x) if isinstance(x, Aval) else x for x in leaves]
        try:
            out = fn(*tree_unflatten(in_tree, tracers))
        except TenferroError as err:
            if "(at " in str(err):
                raise
            raise type(err)(f"{err} (at {_site_of(err.__traceback__)})").with_traceback(
                err.__traceback__) from None
        out_leaves, out_tree = tensor_leaves(out, "trace")
        tr.graph.outputs = [tr.to_var(o) for o in out_leaves]
    tr.graph.out_tree = out_tree
    return tr.graph


def tensor_leaves(out: Any, who: str) -> tuple[list, Any]:
    """(leaves, treedef) of what a traced function returned, every leaf a tensor; anything else
    is an ArgumentError naming `who` ("trace", "compile(f)", "grad(f)") and the fix."""
    leaves, treedef = tree_flatten(out)
    for o in leaves:
        if not isinstance(o, Tensor):
            hint = f"; {unregistered_hint(o)}" if type(o).__module__ != "builtins" else ""
            raise ArgumentError(
                f"{who}: the function returned a {type(o).__name__} leaf; transformed and compiled "
                f"functions return tensors (pytrees of tensors): convert it with xp.asarray inside "
                f"the function, or return it from outside{hint}")
    return leaves, treedef


def _example(x: Any, i: int) -> Any:
    """An example leaf as the aval of a graph input, or the static value it is."""
    if isinstance(x, Tensor):
        return x._aval
    if isinstance(x, Aval):
        return x
    if isinstance(x, np.ndarray):
        from .array_api import asarray

        return asarray(x)._aval
    try:
        hash(x)
    except TypeError:
        raise ArgumentError(
            f"trace: example leaf {i} of type {type(x).__name__} is neither a tensor, an aval, a NumPy "
            f"array nor a hashable Python value (a static argument); pass tensors; "
            f"{unregistered_hint(x)}"
        ) from None
    return x


def eval_graph(graph: Graph, *args: Any) -> list[Any]:
    """Run a graph's nodes on `args` (under whatever transformations are active).

    Where only the eager interpreter is active (or observers that take whole graphs, told
    once: `Observer.observe_graph`) and `args` are concrete tensors of the graph's input avals,
    the graph's Plan replays its kernels on buffers (plan.py)."""
    if len(args) != len(graph.inputs):
        raise TenferroError(f"graph takes {len(graph.inputs)} inputs, got {len(args)}")
    stack = interpreters()
    plan = _ready_plan(graph, stack)
    if plan is not None and plan.accepts(args):
        outs = plan.run(args)
        notify_graph(stack, graph, args, outs)
        return outs
    env: dict[Var, Any] = dict(graph.consts)
    env.update(zip(graph.inputs, args))
    for n in graph.nodes:
        out = n.prim.bind(*[env[v] for v in n.inputs], **n.params)
        env.update(zip(n.outputs, out if n.prim.multiple_results else (out,)))
    return [env[v] if isinstance(v, Var) else v for v in graph.outputs]


def _ready_plan(graph: Graph, stack: Any) -> Any:
    """The graph's Plan where it may replay now (only the eager interpreter, or observers that
    take whole graphs, in this context's `stack`), built on first use; None elsewhere, or
    where the graph has no plan."""
    if stack is not BOTTOM and not stack.graphs:
        return None
    plan = graph.derived("plan", lambda: build_plan(graph) or _NO_PLAN)
    return None if plan is _NO_PLAN else plan


def dead_code_elimination(graph: Graph) -> Graph:
    """`graph` without the nodes no output depends on (effectful nodes, and control flow
    whose bodies hold one, are always kept), and a kept control-flow node without the
    operands its bodies never read and the outputs nothing reads, where its primitive can
    drop them (`pruned(node, needed)`: a scan's stacked outputs)."""
    from .graph_prims import effectful
    needed = {v for v in graph.outputs if isinstance(v, Var)}
    kept = []
    for node in reversed(graph.nodes):
        if effectful(node) or any(v in needed for v in node.outputs):
            prune = getattr(node.prim, "pruned", None)
            node = (prune(node, needed) or node) if prune is not None else node
            kept.append(node)
            needed.update(node.inputs)
    consts = {v: c for v, c in graph.consts.items() if v in needed}
    return graph.replace(inputs=list(graph.inputs), nodes=kept[::-1], outputs=list(graph.outputs),
                         consts=consts)


def verify_graph(graph: Graph) -> None:
    """Raise TenferroError unless `graph` is well formed: every var defined once before its
    use (inputs, consts, node outputs), each node's params canonical and its output avals
    what its primitive's abstract eval gives (what a pass must preserve); the sub-graphs of
    control-flow nodes (cond, while, scan) are verified too."""
    defined = set(graph.inputs)
    for v, c in graph.consts.items():
        if getattr(c, "_aval", None) is not v.aval:
            raise TenferroError(f"graph constant {v} holds {type(c).__name__} of another aval")
    defined.update(graph.consts)
    if len(defined) != len(graph.inputs) + len(graph.consts):
        raise TenferroError("a graph var is both an input and a constant, or listed twice")
    for i, n in enumerate(graph.nodes):
        for v in n.inputs:
            if v not in defined:
                raise TenferroError(f"node {i} ({n.prim.name}) reads {v} before it is defined")
        avals = tuple(v.aval for v in n.inputs)
        out = n.prim.abstract_eval(avals, n.prim.check_params(n.params, avals))
        if tuple(v.aval for v in n.outputs) != tuple(out):
            raise TenferroError(
                f"node {i} ({n.prim.name}) declares outputs "
                f"{[v.aval.str_short() for v in n.outputs]} but its abstract eval gives "
                f"{[a.str_short() for a in out]}")
        for sub in getattr(n.prim, "subgraphs", lambda p: ())(n.params):  # control flow's bodies
            try:
                verify_graph(sub)
            except TenferroError as err:
                raise TenferroError(f"node {i} ({n.prim.name}): a sub-graph: {err}") from None
        for v in n.outputs:
            if v in defined:
                raise TenferroError(f"node {i} ({n.prim.name}) redefines {v}")
            defined.add(v)
    for v in graph.outputs:
        if isinstance(v, Var) and v not in defined:
            raise TenferroError(f"graph output {v} is never defined")


_NO_PLAN = object()

__all__ = ["Graph", "GraphTrace", "GraphTracer", "Node", "Var", "dead_code_elimination", "eval_graph",
           "tensor_leaves", "trace", "user_site", "verify_graph"]
