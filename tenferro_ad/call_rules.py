"""JVP and transpose of `call` (a compiled function), derived from its graph.

The JVP of a callee is traced once per pattern of nonzero tangents and split, as JAX's
partial evaluation does, into a primal callee (primal inputs -> primal outputs and the
residuals the tangent part reads) and a tangent callee (residuals and tangents -> output
tangents), linear in the tangents. The primal callee runs where the primals are (eagerly,
compiled); the tangent callee is what linearization records, and its transpose is traced
once per pattern of unknown operands by `backward_pass`. Every derived graph is itself a
compiled callee, so `grad(compile(f))` runs compiled graphs forward and backward.

A JVP that does not split (a while loop inside: forward mode only) is one joint callee. Under
linearization the primal results come from the callee itself and the joint callee is recorded
for the tangents only: a linearized function runs it forward, and transposing it (`vjp`,
`grad`, a tape) is a `MissingRuleError`, raised only where a cotangent reaches it, as the
tape's backward walk does.
"""

from __future__ import annotations

from typing import Any

from tenferro_core.errors import MissingRuleError
from tenferro_runtime.compiled import Callee
from tenferro_runtime.graph import Graph, GraphTrace, Node, Var, eval_graph, trace
from tenferro_runtime.graph_prims import call_p

from .ad_util import Zero, instantiate, is_undefined, is_zero
from .batching import batch_first, batch_flat, batch_graph, batch_size
from .transpose import backward_pass

WHILE_REVERSE = (
    "reverse-mode differentiation (grad, vjp, a GradientTape, transposing a linearized function) "
    "of a while_loop is not supported: its trip count is known only when it runs, so its "
    "per-iteration residuals cannot be stored; use tenferro_runtime.lax.scan, or fori_loop with "
    "Python int bounds (a scan of static length), or forward mode (jvp, jacfwd, linearize)")


def reverse_error() -> MissingRuleError:
    return MissingRuleError(WHILE_REVERSE)


def linearizing(primals: tuple, tangents: tuple) -> bool:
    """True where the tangents are being recorded as a linear graph (linearize, vjp, a tape's
    VJP): a tangent is a value of a plain graph trace that no primal belongs to."""
    traces = {id(getattr(p, "_trace", None)) for p in primals}
    for t in tangents:
        tr = getattr(t, "_trace", None)
        if type(tr) is GraphTrace and id(tr) not in traces:
            return True
    return False


def forward_only(graph: Graph) -> Graph:
    """A joint JVP graph that does not split, marked: its transpose is `reverse_error`."""
    return graph.replace(meta={**graph.meta, "forward_only": True})


def check_transposable(*callees: Callee) -> None:
    if any(c.graph.meta.get("forward_only") for c in callees):
        raise reverse_error()


def call_jvp(primals: tuple, tangents: tuple, *, fn: Callee) -> tuple[tuple, tuple]:
    nonzero = tuple(not is_zero(t) for t in tangents)
    primal_fn, tangent_fn, zero_out, n_out, joint_fn = fn.derived(("jvp", nonzero),
                                                                  lambda: _split_jvp(fn, nonzero))
    given = [t for t in tangents if not is_zero(t)]
    if joint_fn is not None and (primal_fn is None or not linearizing(primals, tuple(given))):
        # a while loop inside: forward mode runs it once, primals and tangents at once
        outs = call_p.bind(*primals, *given, fn=joint_fn)
        primal_out, computed = outs[:n_out], iter(outs[n_out:])
        if primal_fn is None and linearizing(primals, tuple(given)):  # the linear graph's
            primal_out = call_p.bind(*primals, fn=fn)
    else:
        outs = call_p.bind(*primals, fn=primal_fn)
        primal_out, residuals = outs[:n_out], outs[n_out:]
        computed = iter(())
        if tangent_fn is not None:
            computed = iter(call_p.bind(*residuals, *given, fn=tangent_fn))
    tangent_out = tuple(Zero(p._aval) if z else next(computed) for p, z in zip(primal_out, zero_out))
    return tuple(primal_out), tangent_out


def call_transpose(cts: tuple, *operands: Any, fn: Callee) -> tuple:
    check_transposable(fn)
    unknown = tuple(is_undefined(o) for o in operands)
    ct_nz = tuple(not is_zero(c) for c in cts)
    transposed = fn.derived(("transpose", unknown, ct_nz), lambda: _transpose(fn, unknown, ct_nz))
    known = [o for o in operands if not is_undefined(o)]
    out = iter(call_p.bind(*known, *[c for c in cts if not is_zero(c)], fn=transposed))
    return tuple(next(out) if u else None for u in unknown)


def fused_jvp(primals: tuple, tangents: tuple, *, graph: Graph) -> tuple[tuple, tuple]:
    """A fused group differentiates as the callee of its graph."""
    callee = graph.derived("callee", lambda: Callee(graph, "fused"))
    return call_jvp(primals, tangents, fn=callee)


def call_batch(args: tuple, dims: tuple, *, fn: Callee) -> tuple:
    """A callee batched once per pattern of batched operands and batch size: its graph
    traced under vmap (batch axes first), run as a compiled callee."""
    size = batch_size(args, dims)
    args, in_dims = batch_first(args, dims)
    batched = fn.derived(("batch", in_dims, size), lambda: Callee(
        batch_graph(fn.graph, [d is not None for d in in_dims], size)[0], f"vmap({fn.name})",
        fn.passes, executor=fn.executor))
    outs = call_p.bind(*args, fn=batched)
    return tuple(outs), (0,) * len(outs)


def fused_batch(args: tuple, dims: tuple, *, graph: Graph) -> tuple:
    """A fused group batches node by node (its graph evaluated under vmap)."""
    outs = batch_flat(lambda ins: list(eval_graph(graph, *ins)), list(args), dims,
                      batch_size(args, dims), 0)
    return tuple(outs), (0,) * len(outs)


def _split_jvp(fn: Callee, nonzero: tuple) -> tuple:
    """(primal callee, tangent callee or None, which output tangents are zero, #outputs,
    joint callee or None). Where a primal result depends on a tangent (a while loop inside),
    the joint callee computes primals and tangents at once (forward mode), and the split, if
    any, recomputes the loop's primal results in the primal callee (linearization)."""
    from .api import _jvp_flat

    graph = fn.graph
    in_avals = [v.aval for v in graph.inputs]
    n_in, n_out = len(in_avals), len(graph.outputs)
    zero_out: list = []

    def jvp_fn(*xs: Any) -> list:
        it = iter(xs[n_in:])
        tangents = [next(it) if nz else Zero(a) for a, nz in zip(in_avals, nonzero)]
        po, to = _jvp_flat(lambda ins: eval_graph(graph, *ins), list(xs[:n_in]), tangents)
        zero_out[:] = [is_zero(t) for t in to]
        return list(po) + [t for t in to if not is_zero(t)]

    t_avals = [a for a, nz in zip(in_avals, nonzero) if nz]
    joint = trace(jvp_fn, *in_avals, *t_avals)
    name = f"jvp({fn.name})"
    joint_fn = None
    parts = split(joint, n_in, n_out)
    if parts is None:  # a while loop carries both: one joint callee, and the split recomputing it
        joint_fn = Callee(forward_only(joint), name, fn.passes, executor=fn.executor)
        parts = split(joint, n_in, n_out, recompute=True)
        if parts is None:
            return None, None, tuple(zero_out), n_out, joint_fn
    primal, tangent_graph, _ = parts
    tangent = None
    if tangent_graph.outputs:
        tangent = Callee(tangent_graph, f"{name}.tangent", fn.passes, executor=fn.executor)
    return (Callee(primal, f"{name}.primal", fn.passes, executor=fn.executor), tangent,
            tuple(zero_out), n_out, joint_fn)


PRIMAL_PART: dict = {}
"""{primitive: node -> a node computing the node's primal results from its primal operands
only, or None}: for joint JVP nodes whose primal results depend on tangents structurally (a
while loop carrying both), registered by control_flow_rules."""


def split(joint: Graph, n_in: int, n_out: int, recompute: bool = False) -> tuple | None:
    """(primal graph: primals -> primal results + residuals, tangent graph: residuals +
    tangents -> tangent results, residual vars), or None where a primal result depends on a
    tangent (a forward-only construct such as a while loop inside). With `recompute`, such a
    node (a `PRIMAL_PART`) is also run on the primal side for its primal results, as JAX's
    partial evaluation of a while loop does: the tangent side keeps the joint node, which only
    a cotangent reaching it makes a `MissingRuleError`."""
    tangent_in = set(joint.inputs[n_in:])
    dependent = set(tangent_in)
    primal_nodes, tangent_nodes = [], []
    for node in joint.nodes:
        if any(v in dependent for v in node.inputs):
            part = PRIMAL_PART.get(node.prim) if recompute else None
            primal = part(node) if part is not None else None
            if primal is not None and not any(v in dependent for v in primal.inputs):
                primal_nodes.append(primal)
                fresh = {v: Var(v.aval) for v in primal.outputs}
                node = Node(node.prim, node.inputs, node.params,
                            [fresh.get(v, v) for v in node.outputs], node.site)
            tangent_nodes.append(node)
            dependent.update(node.outputs)
        else:
            primal_nodes.append(node)
    primal_outs, tangent_outs = joint.outputs[:n_out], joint.outputs[n_out:]
    if any(v in dependent for v in primal_outs):
        return None
    residuals: list[Var] = []
    seen: set = set()
    for v in [*(i for n in tangent_nodes for i in n.inputs), *tangent_outs]:
        if isinstance(v, Var) and v not in dependent and v not in joint.consts and v not in seen:
            seen.add(v)
            residuals.append(v)
    primal = Graph(inputs=list(joint.inputs[:n_in]), nodes=primal_nodes,
                   outputs=[*primal_outs, *residuals], consts=_used(joint.consts, primal_nodes, primal_outs))
    tangent = Graph(inputs=[*residuals, *joint.inputs[n_in:]], nodes=tangent_nodes,
                    outputs=list(tangent_outs), consts=_used(joint.consts, tangent_nodes, tangent_outs))
    return primal, tangent, residuals


def _used(consts: dict, nodes: list, outputs: Any = ()) -> dict:
    reads = {v for n in nodes for v in n.inputs} | set(outputs)
    return {v: c for v, c in consts.items() if v in reads}


def _transpose(fn: Callee, unknown: tuple, ct_nz: tuple) -> Callee:
    """The callee mapping (known operands, the cotangents of the outputs `ct_nz` marks) to the
    unknown operands' cotangents; `fn`'s graph is linear in its unknown inputs. The other
    outputs' cotangents are symbolic zeros: nodes only they reach are not transposed."""
    graph = fn.graph
    known_vars = [v for v, u in zip(graph.inputs, unknown) if not u]

    def backward(*xs: Any) -> list:
        known, given = xs[:len(known_vars)], iter(xs[len(known_vars):])
        cts = [next(given) if nz else Zero(v.aval) for v, nz in zip(graph.outputs, ct_nz)]
        linear = graph.replace(consts={**graph.consts, **dict(zip(known_vars, known))})
        in_cts = backward_pass(linear, cts)
        return [instantiate(c) for c, u in zip(in_cts, unknown) if u]

    ct_avals = [v.aval for v, nz in zip(graph.outputs, ct_nz) if nz]
    return Callee(trace(backward, *[v.aval for v in known_vars], *ct_avals), f"transpose({fn.name})",
                  fn.passes, executor=fn.executor)


__all__ = ["PRIMAL_PART", "WHILE_REVERSE", "call_batch", "call_jvp", "call_transpose", "check_transposable",
           "forward_only", "fused_batch", "fused_jvp", "linearizing", "reverse_error", "split"]
