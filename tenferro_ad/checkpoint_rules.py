"""The primitives of `checkpoint` (rematerialization) and their rules.

- `remat_p` runs a traced function (a `RematCallee`: its graph and policy), like `call`, but
  its JVP saves only the inputs and the values its policy names. An optimized graph only
  runs, so the `checkpoint` pass turns its nodes into `call` nodes, which `inline` expands.
- `remat_lin_p` (inputs, saved values, input tangents -> output tangents) is its linear
  part. Its transpose recomputes the function's forward pass from the inputs, under `vjp`,
  behind `remat_barrier_p`: an identity on the inputs that also reads the cotangents, so
  the recomputation can neither run before the backward pass reaches it nor be merged
  with the forward pass by CSE.
"""

from __future__ import annotations

from typing import Any

from tenferro_core.catalog.cost import ZERO
from tenferro_core.errors import ArgumentError
from tenferro_core.extension import define_op
from tenferro_core.params import p_any, p_nonneg_int
from tenferro_runtime.compiled import Callee
from tenferro_runtime.graph import Graph, Node, Var, eval_graph
from tenferro_runtime.graph_prims import GraphPrimitive, call_p
from tenferro_runtime.tensor import Tensor

from .ad_util import Zero, instantiate, is_zero
from .jvp import JVPTracer, jvp_rule


class RematCallee(Callee):
    """A checkpointed function's graph with the vars its policy saves (`saved`)."""

    __slots__ = ("policy", "saved")

    def __init__(self, graph: Graph, name: str, policy: Any):
        super().__init__(graph, name)
        self.policy = policy
        self.saved = _saved_vars(graph, policy)


def _saved_vars(graph: Graph, policy: Any) -> tuple:
    """Outputs of the nodes `policy` names (floating or complex results only)."""
    saved = []
    for n in graph.nodes:
        if isinstance(n.prim, GraphPrimitive) or not n.outputs:
            continue
        if all(v.aval.dtype.kind in "fc" for v in n.outputs):
            avals = [v.aval for v in n.inputs]
            if policy(n.prim, *avals, **n.params):
                saved.extend(n.outputs)
    return tuple(saved)


def _run(*args: Any, fn: Any) -> tuple:
    return tuple(fn.run(args))


remat_p = GraphPrimitive("tenferro_ad.checkpoint.v1", "fn", _run, category="extension",
                         doc="A checkpointed function: its JVP saves only what its policy names.")
remat_p.family = True


# ---- the forward part ----------------------------------------------------------------------------

def _forward(fn: RematCallee) -> tuple:
    """(the callee to run forward, where each saved value is among its outputs): `fn` itself
    when every saved var is an output, else `fn` returning the saved values too."""
    graph = fn.graph
    extra = [v for v in fn.saved if v not in graph.outputs]
    fwd = fn
    if extra:
        fwd = RematCallee(graph.replace(outputs=[*graph.outputs, *extra]), fn.name, _never)
        fwd.saved = fn.saved
    outs = list(fwd.graph.outputs)
    return fwd, tuple(outs.index(v) for v in fn.saved)


def _never(*_: Any, **__: Any) -> bool:
    return False


def remat_jvp(primals: tuple, tangents: tuple, *, fn: RematCallee) -> tuple[tuple, tuple]:
    nonzero = tuple(not is_zero(t) for t in tangents)
    fwd, positions = fn.derived("remat_forward", lambda: _forward(fn))
    outs = remat_p.bind(*primals, fn=fwd)
    n_out = len(fn.graph.outputs)
    primal_out = tuple(outs[:n_out])
    floats = [o._aval.dtype.kind in "fc" for o in primal_out]
    if not any(floats):
        return primal_out, tuple(Zero(o._aval) for o in primal_out)
    saved = [outs[i] for i in positions]
    t_out = iter(remat_lin_p.bind(*primals, *saved, *[t for t in tangents if not is_zero(t)],
                                  fn=fn, nonzero=nonzero))
    return primal_out, tuple(next(t_out) if f else Zero(o._aval) for o, f in zip(primal_out, floats))


# ---- the linear part -----------------------------------------------------------------------------

def _lin_shape(*avals: Any, fn: RematCallee, nonzero: tuple) -> tuple:
    return tuple((v.aval.shape, v.aval.dtype) for v in _float_outputs(fn.graph))


def _float_outputs(graph: Graph) -> list:
    return [v for v in graph.outputs if _aval(v).dtype.kind in "fc"]


def _aval(v: Any) -> Any:
    return v.aval if isinstance(v, Var) else v._aval


def _split_ops(ops: tuple, fn: RematCallee) -> tuple:
    n_x, n_s = len(fn.graph.inputs), len(fn.saved)
    return ops[:n_x], ops[n_x:n_x + n_s], ops[n_x + n_s:]


def _lin_forward(*ops: Any, fn: RematCallee, nonzero: tuple) -> tuple:
    """Forward mode: the output tangents, the function recomputed under `jvp`."""
    from .api import _jvp_flat

    xs, _, ts = _split_ops(ops, fn)
    it = iter(ts)
    tangents = [next(it) if nz else Zero(x._aval) for x, nz in zip(xs, nonzero)]
    _, t_out = _jvp_flat(lambda ins: _floats(fn.graph, eval_graph(fn.graph, *ins)), list(xs), tangents)
    return tuple(instantiate(t) for t in t_out)


def _floats(graph: Graph, outs: list) -> list:
    return [o for v, o in zip(graph.outputs, outs) if _aval(v).dtype.kind in "fc"]


def _lin_jvp(primals: tuple, tangents: tuple, *, fn: RematCallee, nonzero: tuple) -> tuple:
    from .api import _jvp_flat

    po, to = _jvp_flat(lambda ops: list(_lin_forward(*ops, fn=fn, nonzero=nonzero)),
                       list(primals), list(tangents))
    return tuple(po), tuple(to)


def _lin_transpose(cts: tuple, *ops: Any, fn: RematCallee, nonzero: tuple) -> tuple:
    """The input cotangents by `vjp` of the function recomputed from the inputs (and saved
    values), behind a barrier that makes the recomputation wait for the cotangents."""
    from .api import _vjp_flat

    xs, ss, _ = _split_ops(ops, fn)
    reached = [not is_zero(c) for c in cts]  # the others (and what only they need) are left out:
    cts = [c for c in cts if not is_zero(c)]  # a while loop there is not transposed
    known = [*xs, *ss]
    held = remat_barrier_p.bind(*known, *cts, n=len(known))
    xb, sb = list(held[:len(xs)]), dict(zip(fn.saved, held[len(xs):]))
    positions = [i for i, nz in enumerate(nonzero) if nz]

    def recompute(diff: list) -> list:
        ins = list(xb)
        for i, d in zip(positions, diff):
            ins[i] = d
        jt = diff[0]._trace if diff and isinstance(diff[0], JVPTracer) else None
        outs = _floats(fn.graph, _eval_saving(fn.graph, ins, sb, jt))
        return [o for o, r in zip(outs, reached) if r]

    _, vjp_fn = _vjp_flat(recompute, [xb[i] for i in positions])
    in_cts = vjp_fn(cts)
    return (None,) * len(known) + tuple(in_cts)


def _eval_saving(graph: Graph, ins: list, saved: dict, jt: Any) -> list:
    """`graph` evaluated on `ins`, the saved nodes' results taken from `saved` (their
    tangents, for the JVP trace `jt`, still from their jvp rules)."""
    env: dict = dict(graph.consts)
    env.update(zip(graph.inputs, ins))
    for n in graph.nodes:
        args = [env[v] for v in n.inputs]
        if n.outputs and n.outputs[0] in saved:
            out = _saved_node(n, args, [saved[v] for v in n.outputs], jt)
        else:
            out = n.prim.bind(*args, **n.params)
        env.update(zip(n.outputs, out if n.prim.multiple_results else (out,)))
    return [env[v] if isinstance(v, Var) else v for v in graph.outputs]


def _saved_node(node: Node, args: list, values: list, jt: Any) -> Any:
    """A saved node's value: its saved result, carrying the tangent its jvp rule gives."""
    single = not node.prim.multiple_results
    if jt is None:
        return values[0] if single else tuple(values)
    primals, tangents = zip(*[jt.unpack(a) for a in args]) if args else ((), ())
    prim = node.prim
    if not prim.differentiable or all(is_zero(t) for t in tangents):  # as JVPTrace.process
        return values[0] if single else tuple(values)
    rule = jvp_rule(prim, tangents, args[0]._aval.device.runtime)
    params = prim.check_params(node.params, tuple(p._aval for p in primals))
    _, t_out = rule(tuple(primals), tuple(tangents), **params)
    if single:
        return jt.tracer(values[0], t_out)
    return tuple(jt.tracer(v, t) for v, t in zip(values, t_out))


remat_lin_p = define_op(
    "tenferro_ad.checkpoint_lin.v1", _lin_shape, payload={"fn": (p_any, None), "nonzero": (p_any, None)},
    nin=None, multiple_results=True, decomposition=_lin_forward,
    doc="The linear part of a checkpointed function: (inputs, saved, input tangents) -> output tangents.",
)


# ---- the barrier ---------------------------------------------------------------------------------

def _barrier_shape(*avals: Any, n: int) -> tuple:
    if n > len(avals):
        raise ArgumentError(f"remat_barrier: n={n} exceeds the {len(avals)} operand(s)")
    return tuple((a.shape, a.dtype) for a in avals[:n])


def _barrier_run(*ops: Any, n: int) -> tuple:
    return tuple(Tensor._new(o._buf, o._aval) for o in ops[:n])  # fresh aliases, no copy


def _barrier_jvp(primals: tuple, tangents: tuple, *, n: int) -> tuple:
    return tuple(remat_barrier_p.bind(*primals, n=n)), tuple(tangents[:n])


remat_barrier_p = define_op(
    "tenferro_ad.remat_barrier.v1", _barrier_shape, payload={"n": (p_nonneg_int, None)}, nin=None,
    multiple_results=True, decomposition=_barrier_run,
    doc="The first n operands unchanged, after all operands are ready (a scheduling barrier).",
)


# ---- batching ------------------------------------------------------------------------------------

def remat_batch(args: tuple, dims: tuple, *, fn: RematCallee) -> tuple:
    """A checkpointed function batched: its graph traced under vmap (batch axes first), still
    checkpointed with the same policy."""
    from .batching import batch_first, batch_graph, batch_size

    size = batch_size(args, dims)
    args, in_dims = batch_first(args, dims)
    outs = remat_p.bind(*args, fn=fn.derived(("batch", in_dims, size), lambda: RematCallee(
        batch_graph(fn.graph, [d is not None for d in in_dims], size)[0], f"vmap({fn.name})",
        fn.policy)))
    return tuple(outs), (0,) * len(outs)


def _lin_batch(args: tuple, dims: tuple, *, fn: RematCallee, nonzero: tuple) -> tuple:
    """Batched forward-mode tangents: the function recomputed under jvp, batched."""
    from .batching import batch_flat, batch_size

    size = batch_size(args, dims)
    outs = batch_flat(lambda ops: list(_lin_forward(*ops, fn=fn, nonzero=nonzero)), list(args), dims,
                      size, 0)
    return tuple(outs), (0,) * len(outs)


def _barrier_batch(args: tuple, dims: tuple, *, n: int) -> tuple:
    return tuple(remat_barrier_p.bind(*args, n=n)), tuple(dims[:n])


# ---- the pass ------------------------------------------------------------------------------------

def remat_to_call(graph: Graph) -> Graph:
    """An optimized graph only runs: each checkpoint node (nested ones too) becomes a `call`
    node and is inlined, so the later passes see its nodes."""
    from tenferro_runtime.passes.inline import inline_calls

    graph = graph.replace()
    while any(n.prim is remat_p for n in graph.nodes):
        nodes = [Node(call_p, n.inputs, n.params, n.outputs, n.site) if n.prim is remat_p else n
                 for n in graph.nodes]
        graph = inline_calls(graph.replace(nodes=nodes))
    return graph


def register(registry: Any) -> None:
    """The checkpoint primitives, their AD and cost rules and the pass (tenferro_ad's plugin)."""
    registry.add_op(remat_p)
    registry.add_rule("jvp", remat_p, remat_jvp)
    registry.add_rule("batch", remat_p, remat_batch)
    registry.add_rule("batch", remat_lin_p, _lin_batch)
    registry.add_rule("batch", remat_barrier_p, _barrier_batch)
    registry.add_op(remat_lin_p)
    registry.add_rule("jvp", remat_lin_p, _lin_jvp)
    registry.add_rule("transpose", remat_lin_p, _lin_transpose)
    registry.add_rule("cost", remat_lin_p, _lin_cost)
    registry.add_op(remat_barrier_p)
    registry.add_rule("jvp", remat_barrier_p, _barrier_jvp)
    registry.add_rule("cost", remat_barrier_p, lambda i, o, **p: ZERO)
    registry.add_pass("checkpoint", remat_to_call, position=110)  # after inline


def _lin_cost(in_avals: Any, out_avals: Any, *, fn: RematCallee, nonzero: tuple) -> Any:
    from tenferro_runtime.cost import graph_cost

    return graph_cost(fn.graph, fn.graph.runtime)


__all__ = ["RematCallee", "register", "remat_barrier_p", "remat_jvp", "remat_lin_p", "remat_p",
           "remat_to_call"]
