"""`GradientTape`: eager reverse mode on ordinary tensors, with the same rules.

A tape is an `Observer` on its context's interpreter stack: while it is open,
every primitive the eager interpreter runs in that thread or asyncio task on a
watched tensor (or on a value computed from one) is recorded; other contexts'
work is never seen. `gradient` walks the records
backwards; each record's cotangents come from `vjp` of that one primitive, i.e.
its jvp rule linearized and transposed. Backward ops run eagerly too, so an
outer tape records them: nested tapes give higher-order derivatives.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from tenferro_core.errors import ArgumentError, DTypeError, MissingRuleError, TenferroError
from tenferro_runtime import array_api as xp
from tenferro_runtime import tracing
from tenferro_runtime.eager import params_key
from tenferro_runtime.graph import Graph, Node, Var, dead_code_elimination, eval_graph, trace
from tenferro_runtime.graph_prims import GraphPrimitive
from tenferro_runtime.pytree import tree_flatten, tree_unflatten
from tenferro_runtime.tensor import Tensor, copy_slots

from .ad_util import Zero, add_tangents, instantiate, is_zero, ones
from .api import _jvp_flat, _linearize_flat
from .tape_backward import gradients
from .transpose import backward_pass


class GradientTape(tracing.Observer):
    """Record eager computations and differentiate them (TensorFlow-style)."""

    def __init__(self, persistent: bool = False, watch_accessed_variables: bool = False):
        self.persistent = persistent
        self._records: list[tuple[Any, tuple, dict, tuple]] = []
        self._live: dict[int, Tensor] = {}
        self._tokens: list[Any] = []
        self._used = False

    def __enter__(self) -> GradientTape:
        self._push()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._pop()

    def _push(self) -> None:
        if self._tokens:
            raise TenferroError("this GradientTape is already open; a tape can be entered once at a time")
        self._tokens.append(tracing.push_observer(self))

    def _pop(self) -> None:
        if self._tokens:
            tracing.pop(self._tokens.pop())

    @contextlib.contextmanager
    def stop_recording(self) -> Iterator[None]:
        """Run the block without recording on this tape."""
        token = tracing.remove_observer(self)
        try:
            yield
        finally:
            tracing.pop(token)

    def watch(self, tensor: Any) -> None:
        """Record computations on `tensor` (a tensor or a pytree of tensors)."""
        for t in tree_flatten(tensor)[0]:
            if not isinstance(t, Tensor):
                raise ArgumentError(f"GradientTape.watch expects tensors, got {type(t).__name__}")
            if t.dtype.kind not in "fc":
                raise DTypeError(
                    f"GradientTape.watch: gradients are defined for floating and complex tensors, "
                    f"got {t.dtype}"
                )
            self._live[id(t)] = t

    def assigned(self, obj: Tensor, new: Tensor) -> None:
        """`obj` is about to take `new`'s value in place: records that used `obj` keep a
        snapshot of its old value, and `obj` stands for `new` from now on."""
        if id(obj) not in self._live and id(new) not in self._live:
            return
        old = object.__new__(type(obj))
        copy_slots(obj, old)
        swap = {id(obj): old, id(new): obj}

        def sub(xs: tuple) -> tuple:
            return tuple(swap.get(id(x), x) for x in xs)

        self._records = [(p, sub(a), k, sub(o)) for p, a, k, o in self._records]
        was_live, new_live = self._live.pop(id(obj), None), self._live.pop(id(new), None)
        if was_live is not None:
            self._live[id(old)] = old
        if new_live is not None:
            self._live[id(obj)] = obj

    def observe(self, prim: Any, args: tuple, params: dict, out: Any) -> None:
        """Called by `bind` for every primitive that runs in this tape's context."""
        if not prim.differentiable:
            return  # its results carry no tangent (JVPTrace.process: floor, sign)
        live = self._live
        for a in args:
            if id(a) in live:
                break
        else:
            return
        outs = out if type(out) is tuple else (out,)
        for o in outs:
            if id(o) in live:  # produced by ops already recorded (a decomposition ran them)
                if not _own_rules(prim, args):
                    return  # those ops are differentiated
                break  # the op's own rules: its record takes the cotangents first
        self._records.append((prim, args, params, outs))
        carries = _tangent_outputs(prim, args, params, live, len(outs)) if _holds_graphs(prim) else None
        for k, o in enumerate(outs):
            if isinstance(o, Tensor) and o._aval.dtype.kind in "fc" and (carries is None or carries[k]):
                live[id(o)] = o

    def gradient(self, target: Any, sources: Any, output_gradients: Any = None, *,
                 on_ready: Any = None) -> Any:
        """d target / d sources (a tensor or pytree of tensors), shaped like `sources`.

        `on_ready(i, g)`, if given, is called during the backward walk as soon as the gradient
        `g` of source leaf `i` (in `tree_flatten` order) is final, i.e. once no record left
        to walk uses that source (data parallel starts a bucket's all_reduce there, while
        backward goes on). It takes the per-record walk (not the cached one-graph replay)."""
        if on_ready is not None and not callable(on_ready):
            raise ArgumentError(f"GradientTape.gradient: on_ready must be a callable on_ready(index, "
                                f"gradient) or None, got {type(on_ready).__name__}")
        if self._used and not self.persistent:
            raise TenferroError(
                "this GradientTape was already used; a non-persistent tape computes one gradient "
                "and then releases its records; create it with GradientTape(persistent=True) to "
                "call gradient more than once"
            )
        t_leaves, t_tree = tree_flatten(target)
        for t in t_leaves:
            if not isinstance(t, Tensor):
                raise ArgumentError(
                    f"GradientTape.gradient: target must be a tensor (or a pytree of tensors) computed "
                    f"under the tape, got {type(t).__name__}"
                )
        s_leaves, s_tree = tree_flatten(sources)
        for s in s_leaves:
            if not isinstance(s, Tensor):
                raise ArgumentError(
                    f"GradientTape.gradient: sources must be tensors (or a pytree of tensors) the tape "
                    f"watched, got {type(s).__name__}"
                )
        if output_gradients is None:
            seeds = None
        else:
            seeds, g_tree = tree_flatten(output_gradients)
            if g_tree != t_tree:
                raise ArgumentError(
                    f"GradientTape.gradient: output_gradients must have the structure of target "
                    f"({t_tree}), got {g_tree}; pass one tensor per target tensor, or None for ones"
                )
            for t, g in zip(t_leaves, seeds):
                if not isinstance(g, Tensor):
                    raise ArgumentError(
                        f"GradientTape.gradient: output_gradients entries must be tensors shaped like "
                        f"their targets ({t.dtype}{list(t.shape)}), got {type(g).__name__} {g!r:.40}; "
                        f"convert it with asarray, or pass None for ones"
                    )
                if g.shape != t.shape:
                    raise ArgumentError(
                        f"GradientTape.gradient: output_gradients entry has shape {g.shape}, its target "
                        f"has shape {t.shape}; pass one of the target's shape"
                    )
                if g.dtype is not t.dtype:
                    raise DTypeError(
                        f"GradientTape.gradient: output_gradients entry has dtype {g.dtype}, its target "
                        f"has dtype {t.dtype}; convert it with astype(g, {t.dtype})"
                    )
        self._used = True
        if seeds is None:
            seeds = [ones(t._aval) for t in t_leaves]
        grads = None
        if on_ready is None:
            with self.stop_recording():
                grads = gradients(self._records, self._live, t_leaves, seeds, s_leaves, _vjp_graph)
        if grads is None:
            grads = self._walk(t_leaves, seeds, s_leaves, on_ready)
        if not self.persistent:
            self._records.clear()
            self._live.clear()
        return tree_unflatten(s_tree, grads)

    def _walk(self, t_leaves: list, seeds: list, s_leaves: list, on_ready: Any = None) -> list:
        """The records walked backwards, one VJP graph replay per record; `on_ready` is
        told each source's gradient once the walk is past the source's first use."""
        ct: dict[int, Any] = {}
        for t, g in zip(t_leaves, seeds):
            ct[id(t)] = add_tangents(ct[id(t)], g) if id(t) in ct else g
        live_ids = self._live
        caches: dict[int, Any] = {}  # runtime id -> its tape_vjp cache
        fire = _first_uses(self._records, s_leaves) if on_ready is not None else {}

        def ready(k: int) -> None:
            for i in fire.pop(k, ()):
                s = s_leaves[i]
                on_ready(i, instantiate(ct[id(s)]) if id(s) in ct else xp.zeros_like(s))

        with self.stop_recording():
            ready(len(self._records))  # sources no record uses
            for r in range(len(self._records) - 1, -1, -1):
                if fire:
                    ready(r + 1)
                prim, args, params, outs = self._records[r]
                cts = [ct.pop(id(o), None) for o in outs]
                if all(c is None for c in cts):
                    if not prim.effects:
                        continue
                    cts = [xp.zeros_like(o) for o in outs]
                has_ct = tuple([c is not None for c in cts])
                live = tuple([id(a) in live_ids for a in args])
                runtime = args[0]._aval.device.runtime
                cache = caches.get(id(runtime))
                if cache is None:
                    cache = caches[id(runtime)] = runtime.caches.get("tape_vjp", 4096)
                graph = _vjp_graph(cache, prim, args, params, outs, live, has_ct)
                grads = eval_graph(graph, *args, *[c for c in cts if c is not None], *outs)
                i = 0
                for a, receives in zip(args, graph.meta["receives"]):
                    if receives:
                        g, k = grads[i], id(a)
                        i += 1
                        prev = ct.get(k)
                        ct[k] = g if prev is None else add_tangents(prev, g)
            if fire:
                ready(0)
        return [instantiate(ct[id(s)]) if id(s) in ct else xp.zeros_like(s) for s in s_leaves]


def _first_uses(records: list, sources: list) -> dict[int, list[int]]:
    """{k: positions of the sources whose first use is record k}: once the backward walk has
    processed record k, no record left uses them, so their gradients are final (k =
    len(records) for sources no record uses: final before the walk)."""
    first: dict[int, int] = {}
    for k, (_, args, _, _) in enumerate(records):
        for a in args:
            first.setdefault(id(a), k)
    out: dict[int, list[int]] = {}
    for i, s in enumerate(sources):
        out.setdefault(first.get(id(s), len(records)), []).append(i)
    return out


def _own_rules(prim: Any, args: tuple) -> bool:
    """Whether `prim` has derivative rules of its own (jvp, vjp, or linearity), which the
    traced transformations use instead of its decomposition: the backward walk then reaches
    the op's record first and pops its outputs' cotangents, and its decomposition's records,
    left without any, are skipped."""
    if prim.linear:
        return True
    runtime = args[0]._aval.device.runtime
    return runtime.rule("jvp", prim) is not None or runtime.rule("vjp", prim) is not None


def _holds_graphs(prim: Any) -> bool:
    """A `call` or control flow: which of its results carry tangents depends on its graphs."""
    return isinstance(prim, GraphPrimitive) or hasattr(prim, "subgraphs")


def _tangent_outputs(prim: Any, args: tuple, params: dict, live: dict, n_out: int) -> tuple:
    """Per output of a graph-holding op, whether its JVP gives it a tangent that is not
    structurally zero (a scan's output computed by floor, a branch's constant), cached per
    signature: the tape then holds the others fixed, as the traced routes do, so a loop
    behind them is not reached by a materialized zero cotangent (a while loop's refusal)."""
    is_live = tuple([id(a) in live for a in args])
    avals = tuple([a._aval for a in args])
    try:
        key = (prim, avals, is_live, *params_key(prim, params))
    except TypeError:  # an unhashable param: assume every output carries a tangent
        return (True,) * n_out
    cache = avals[0].device.runtime.caches.get("tape_tangents", 4096)
    try:
        return cache.get_or_build(key, _build_tangent_outputs, prim, avals, params, is_live)
    except MissingRuleError:  # an op inside without a rule: raised by `gradient` if reached
        return (True,) * n_out


def _build_tangent_outputs(prim: Any, avals: tuple, params: dict, is_live: tuple) -> tuple:
    carries: list[bool] = []

    def jvp_of_call(*primals: Any) -> list:
        ins = [p for p, on in zip(primals, is_live) if on]
        _, tangents = _jvp_flat(_bound_on_live(prim, params, primals, is_live), ins, list(ins))
        carries[:] = [not is_zero(t) for t in tangents]
        return [t for t in tangents if not is_zero(t)]

    trace(jvp_of_call, *avals)
    return tuple(carries)


def _bound_on_live(prim: Any, params: dict, primals: tuple, live: tuple) -> Any:
    """`prim` bound as a function of its `live` operands (the others held at `primals`),
    its results as a list: what a record's JVP and VJP differentiate."""
    def call(live_ins: list) -> list:
        it = iter(live_ins)
        return _as_list(prim.bind(*[next(it) if on else p for p, on in zip(primals, live)], **params))
    return call


def _as_list(out: Any) -> list:
    return list(out) if isinstance(out, tuple) else [out]


def _vjp_graph(cache: Any, prim: Any, args: tuple, params: dict, outs: tuple, live: tuple,
               has_ct: tuple) -> Graph:
    """The traced VJP of one primitive call: (*operands, *cotangents of the outputs that
    `has_ct` marks, *outputs) -> cotangents of the `live` operands (the others are held
    fixed), cached per signature in `cache` (the runtime's ``tape_vjp`` cache). The other
    outputs' cotangents are symbolic zeros, as in the traced `vjp`: a materialized zero would
    reach a while loop's transpose (a refusal) where the traced route gives the gradient."""
    avals = tuple([a._aval for a in args])
    key = (prim, avals, live, has_ct, *params_key(prim, params))
    return cache.get_or_build(key, _build_vjp_graph, prim, avals, params,
                              tuple([o._aval for o in outs]), live, has_ct)


def _build_vjp_graph(prim: Any, avals: tuple, params: dict, out_avals: tuple, live: tuple,
                     has_ct: tuple) -> Graph:
    """Tracing `vjp` itself (linearize, then transpose) records the residual computations and
    the transposed linear ops as one Graph, without the nodes no cotangent needs, so a tape's
    backward pass is one plan replay per recorded op.

    An operand whose cotangent is structurally zero (a rule's `Zero`: floor, sign, a
    comparison's operands) gets no output; ``graph.meta["receives"]`` says, per operand,
    whether an output holds its cotangent. The walk then adds nothing for it, as the traced
    `vjp` does: a materialized zero would meet later derivatives (0 * inf, 0 * NaN) and make
    the eager gradient NaN where `compile(grad(f))` gives 0."""
    n = len(avals)
    zero: list[bool] = []

    def vjp_of_call(*primals_and_cts: Any) -> list:
        primals, given = primals_and_cts[:n], iter(primals_and_cts[n:])
        cts = [next(given) if has else Zero(a) for a, has in zip(out_avals, has_ct)]

        call = _bound_on_live(prim, params, primals, live)
        _, linear = _linearize_flat(call, [p for p, is_live in zip(primals, live) if is_live])
        in_cts = backward_pass(linear, list(cts))
        zero[:] = [is_zero(c) for c in in_cts]
        return [c for c in in_cts if not is_zero(c)]

    graph = trace(vjp_of_call, *avals, *[a for a, has in zip(out_avals, has_ct) if has])
    graph = dead_code_elimination(_outputs_as_inputs(graph, prim, params, n, out_avals))
    it = iter(zero)
    receives = tuple([is_live and not next(it) for is_live in live])
    return graph.replace(meta={**graph.meta, "receives": receives})


def _outputs_as_inputs(graph: Graph, prim: Any, params: dict, n: int, out_avals: tuple) -> Graph:
    """`graph` with the recorded op's outputs as extra inputs: a node recomputing the op on the
    operands themselves (a jvp rule's primal, log_softmax's output in its derivative) reads
    the recorded outputs instead, and dead-code elimination drops it."""
    ins = graph.inputs[:n]
    key = params_key(prim, params)
    outs = [Var(a) for a in out_avals]
    swap: dict = {}
    for node in graph.nodes:
        if (node.prim is prim and node.inputs == ins and not swap
                and params_key(prim, node.params) == key):
            swap = dict(zip(node.outputs, outs))
    if not swap:
        return graph.replace(inputs=[*graph.inputs, *outs])
    nodes = [nd if not any(v in swap for v in nd.inputs) else
             Node(nd.prim, [swap.get(v, v) for v in nd.inputs], nd.params, nd.outputs, nd.site)
             for nd in graph.nodes]
    outputs = [swap.get(v, v) if isinstance(v, Var) else v for v in graph.outputs]
    return graph.replace(inputs=[*graph.inputs, *outs], nodes=nodes, outputs=outputs)
