"""JVP and transpose rules of the control-flow primitives (`cond`, `while`, `scan`).

A body's JVP is traced once per pattern of nonzero tangents into a joint graph (primals and
tangents in, primal and tangent results out) and, as `call`'s (call_rules.py), split into a
primal graph (primals -> results and the residuals the tangent part reads) and a tangent graph
(residuals, tangents -> result tangents), linear in the tangents.

- `cond`: the primal branches return the union of every branch's residuals (zeros for the
  others'); a second `cond` of the tangent branches reads them. Transpose: a `cond` of the
  transposed tangent branches.
- `scan`: which carry tangents are nonzero is found by a fixed point; the primal scan stacks
  the residuals per iteration (as JAX does; residuals that are loop constants are passed
  once, residuals that are xs are read from the xs), the tangent scan reads them as xs.
  Transpose: the linear scan run the other way, the carry holding the carry cotangent and
  the constants' accumulated cotangents, except those that are one product per iteration
  (a recurrent weight's): their operands are stacked and multiplied once after the loop.
- `while`: forward mode runs one loop over the joint body. Reverse mode would need every
  iteration's residuals with no trip count known ahead, and is a `MissingRuleError` naming
  `scan` and `fori_loop` with static bounds.

Under linearization a joint body (a `while`, or a `cond`/`scan` whose body does not split
because of one) is recorded for the tangents only, next to the primal op that gives the
values; its transpose raises that error, and only where a cotangent reaches it (a loop whose
results are unused, or used only by comparisons, does not stop `grad`).
"""

from __future__ import annotations

from typing import Any

from tenferro_core import dtypes as D
from tenferro_core.avals import Aval
from tenferro_core.errors import MissingRuleError
from tenferro_runtime import lax
from tenferro_runtime.compiled import Callee
from tenferro_runtime.control_flow_prims import cond_p, scan_p, scan_split, while_p
from tenferro_runtime.graph import Graph, Node, Var, dead_code_elimination, eval_graph, trace

from .ad_util import Zero, instantiate, is_undefined, is_zero
from .call_rules import (
    PRIMAL_PART,
    WHILE_REVERSE,
    _transpose,
    check_transposable,
    forward_only,
    linearizing,
    split,
)
from .jvp import has_tangent
from .transpose import backward_pass

# ---- the joint JVP graph and its split --------------------------------------------------------------

def jvp_joint(graph: Graph, nonzero: tuple, force: tuple) -> tuple[Graph, tuple]:
    """(joint graph, which results carry a tangent): inputs the primals then the tangents of
    the `nonzero` inputs; results the primal results then the tangents of the floating
    results whose tangent is nonzero or `force`d (instantiated)."""
    from .api import _jvp_flat

    in_avals = [v.aval for v in graph.inputs]
    n_in = len(in_avals)
    out_nz: list = []

    def joint(*xs: Any) -> list:
        it = iter(xs[n_in:])
        tangents = [next(it) if nz else Zero(a) for a, nz in zip(in_avals, nonzero)]
        po, to = _jvp_flat(lambda ins: eval_graph(graph, *ins), list(xs[:n_in]), tangents)
        out_nz[:] = [has_tangent(p._aval) and (not is_zero(t) or f) for p, t, f in zip(po, to, force)]
        return [*po, *[instantiate(t) for t, nz in zip(to, out_nz) if nz]]

    g = trace(joint, *in_avals, *[a for a, nz in zip(in_avals, nonzero) if nz])
    return g.replace(out_tree=None), tuple(out_nz)


def _zeros(aval: Any) -> Any:
    fill = False if aval.dtype is D.bool_ else 0
    return lax.full(shape=aval.shape, fill_value=fill, dtype=aval.dtype, device=aval.device)


def _nonzero(tangents: Any, primals: Any) -> tuple:
    return tuple(not is_zero(t) and has_tangent(p._aval) for p, t in zip(primals, tangents))


# ---- cond ----------------------------------------------------------------------------------------

def cond_jvp(primals: tuple, tangents: tuple, *, branches: tuple) -> tuple[tuple, tuple]:
    index, ops, ts = primals[0], primals[1:], tangents[1:]
    nz = _nonzero(ts, ops)
    parts = branches[0].derived(("cond_jvp", branches, nz), lambda: _cond_jvp_parts(branches, nz))
    n_out = len(branches[0].graph.outputs)
    live = [t for t, z in zip(ts, nz) if z]
    primal_b, tangent_b, out_nz, joint = parts
    if joint is not None and (primal_b is None or not linearizing(primals, tuple(live))):
        outs = cond_p.bind(index, *ops, *live, branches=joint)  # forward mode: the loop runs once
        primal_out = outs[:n_out]
        if primal_b is None and linearizing(primals, tuple(live)):  # the linear graph's
            primal_out = cond_p.bind(index, *ops, branches=branches)
        return _with_tangents(primal_out, iter(outs[n_out:]), out_nz)
    outs = cond_p.bind(index, *ops, branches=primal_b)
    primal_out, residuals = outs[:n_out], outs[n_out:]
    t_out = iter(())
    if any(out_nz):
        t_out = iter(cond_p.bind(index, *residuals, *[instantiate(t) for t in live], branches=tangent_b))
    return _with_tangents(primal_out, t_out, out_nz)


def _with_tangents(primal_out: Any, t_out: Any, out_nz: tuple) -> tuple[tuple, tuple]:
    return tuple(primal_out), tuple(next(t_out) if z else Zero(p._aval) for p, z in zip(primal_out, out_nz))


def _cond_jvp_parts(branches: tuple, nz: tuple) -> tuple:
    n_in, n_out = len(branches[0].graph.inputs), len(branches[0].graph.outputs)
    force = (True,) * n_out
    joints = [jvp_joint(b.graph, nz, force) for b in branches]
    out_nz = joints[0][1]
    splits = [split(j, n_in, n_out) for j, _ in joints]
    joint = None
    if any(s is None for s in splits):  # a while loop inside (see call_rules._split_jvp)
        joint = tuple(Callee(forward_only(j), f"jvp({b.name})") for (j, _), b in zip(joints, branches))
        splits = [split(j, n_in, n_out, recompute=True) for j, _ in joints]
        if any(s is None for s in splits):
            return None, None, out_nz, joint
    res_avals = [[v.aval for v in s[2]] for s in splits]
    all_res = [a for r in res_avals for a in r]
    primal_b, tangent_b = [], []
    offset = 0
    for b, (primal, tangent, _), avals in zip(branches, splits, res_avals):
        k = len(avals)

        def prim_fn(*ins: Any, primal: Graph = primal, offset: int = offset, k: int = k) -> list:
            outs = eval_graph(primal, *ins)
            zeros = [_zeros(a) for a in all_res]
            return [*outs[:n_out], *zeros[:offset], *outs[n_out:], *zeros[offset + k:]]

        def tan_fn(*ins: Any, tangent: Graph = tangent, offset: int = offset, k: int = k) -> list:
            return eval_graph(tangent, *ins[offset:offset + k], *ins[len(all_res):])

        t_avals = [v.aval for v in tangent.inputs[k:]]
        primal_b.append(Callee(trace(prim_fn, *[v.aval for v in primal.inputs]).replace(out_tree=None),
                               f"jvp({b.name}).primal"))
        tangent_b.append(Callee(trace(tan_fn, *all_res, *t_avals).replace(out_tree=None),
                                f"jvp({b.name}).tangent"))
        offset += k
    return tuple(primal_b), tuple(tangent_b), out_nz, joint


def cond_transpose(cts: tuple, index: Any, *ops: Any, branches: tuple) -> tuple:
    check_transposable(*branches)
    unknown = tuple(is_undefined(o) for o in ops)
    ct_nz = tuple(not is_zero(c) for c in cts)
    transposed = branches[0].derived(("cond_transpose", branches, unknown, ct_nz),
                                     lambda: tuple(_transpose(b, unknown, ct_nz) for b in branches))
    known = [o for o in ops if not is_undefined(o)]
    out = iter(cond_p.bind(index, *known, *[c for c in cts if not is_zero(c)], branches=transposed))
    return (None, *[next(out) if u else None for u in unknown])


# ---- while ---------------------------------------------------------------------------------------

def while_jvp(primals: tuple, tangents: tuple, *, cond: Callee, body: Callee, cond_nconsts: int,
              body_nconsts: int) -> tuple[tuple, tuple]:
    n_cc, n_bc = cond_nconsts, body_nconsts
    cc, bc, carry = primals[:n_cc], primals[n_cc:n_cc + n_bc], primals[n_cc + n_bc:]
    bct, ct = tangents[n_cc:n_cc + n_bc], tangents[n_cc + n_bc:]
    bc_nz, carry_nz = _nonzero(bct, bc), _nonzero(ct, carry)
    if not any(bc_nz) and not any(carry_nz):
        outs = while_p.bind(*primals, cond=cond, body=body, cond_nconsts=n_cc, body_nconsts=n_bc)
        return tuple(outs), tuple(Zero(o._aval) for o in outs)
    live = [t for t, z in zip((*bct, *ct), (*bc_nz, *carry_nz)) if z]
    new_cond, new_body, carry_nz = body.derived(
        ("while_jvp", cond, bc_nz, carry_nz), lambda: _while_jvp_graphs(cond, body, bc_nz, carry_nz))
    bct_live = [t for t, z in zip(bct, bc_nz) if z]
    ct_live = [instantiate(t if not is_zero(t) else Zero(c._aval))
               for t, c, z in zip(ct, carry, carry_nz) if z]
    outs = while_p.bind(*cc, *bc, *bct_live, *carry, *ct_live, cond=new_cond, body=new_body,
                        cond_nconsts=n_cc, body_nconsts=n_bc + len(bct_live))
    n = len(carry)
    primal_out = outs[:n]
    if linearizing(primals, tuple(live)):  # the joint outputs are the linear graph's
        primal_out = while_p.bind(*primals, cond=cond, body=body, cond_nconsts=n_cc, body_nconsts=n_bc)
    return _with_tangents(primal_out, iter(outs[n:]), carry_nz)


def _fixpoint(graph: Graph, consts_nz: tuple, carry_nz: tuple, rest_nz: tuple, n_y: int) -> tuple:
    """(joint graph, carry pattern, results pattern): the carry tangents that are nonzero
    once the loop has run any number of times (a fixed point of the body's JVP)."""
    while True:
        joint, out_nz = jvp_joint(graph, (*consts_nz, *carry_nz, *rest_nz), (*carry_nz, *(False,) * n_y))
        grown = tuple(a or b for a, b in zip(carry_nz, out_nz[:len(carry_nz)]))
        if grown == carry_nz:
            return joint, carry_nz, out_nz
        carry_nz = grown


def _while_jvp_graphs(cond: Callee, body: Callee, bc_nz: tuple, carry_nz: tuple) -> tuple:
    n_bc = len(body.graph.inputs) - len(carry_nz)
    joint, carry_nz, _ = _fixpoint(body.graph, bc_nz, carry_nz, (), 0)
    ins = joint.inputs
    n_bct = sum(bc_nz)
    n_p = len(body.graph.inputs)
    order = [*ins[:n_bc], *ins[n_p:n_p + n_bct], *ins[n_bc:n_p], *ins[n_p + n_bct:]]
    new_body = Callee(joint.replace(inputs=order, meta={**joint.meta, "jvp_of": (cond, body, n_bct)}),
                      f"jvp({body.name})")
    extra = [Var(v.aval) for v, z in zip(body.graph.inputs[n_bc:], carry_nz) if z]
    new_cond = Callee(cond.graph.replace(inputs=[*cond.graph.inputs, *extra]), cond.name)
    return new_cond, new_body, carry_nz


def while_transpose(cts: tuple, *ops: Any, **params: Any) -> tuple:
    raise MissingRuleError(WHILE_REVERSE)


def while_primal(node: Node) -> Node | None:
    """The loop a joint JVP loop node differentiates, on the node's primal operands, giving
    the node's primal results (`call_rules.split` recomputes it on the primal side)."""
    jvp_of = node.params["body"].graph.meta.get("jvp_of")
    if jvp_of is None:
        return None
    cond, body, n_bct = jvp_of
    n_cc, n_bc = node.params["cond_nconsts"], node.params["body_nconsts"] - n_bct
    n = len(body.graph.outputs)
    carry_at = n_cc + n_bc + n_bct
    ins = [*node.inputs[:n_cc + n_bc], *node.inputs[carry_at:carry_at + n]]
    params = dict(cond=cond, body=body, cond_nconsts=n_cc, body_nconsts=n_bc)
    return Node(node.prim, ins, params, node.outputs[:n], node.site)


# ---- scan ----------------------------------------------------------------------------------------

def scan_jvp(primals: tuple, tangents: tuple, *, body: Callee, length: int, reverse: bool,
             num_consts: int, num_carry: int, unroll: int) -> tuple[tuple, tuple]:
    consts, carry, xs = scan_split(primals, num_consts, num_carry)
    c_t, carry_t, x_t = scan_split(tangents, num_consts, num_carry)
    c_nz, carry_nz, x_nz = _nonzero(c_t, consts), _nonzero(carry_t, carry), _nonzero(x_t, xs)
    n_out = len(body.graph.outputs)
    if not any((*c_nz, *carry_nz, *x_nz)):
        outs = scan_p.bind(*primals, body=body, length=length, reverse=reverse, num_consts=num_consts,
                           num_carry=num_carry, unroll=unroll)
        return tuple(outs), tuple(Zero(o._aval) for o in outs)
    carry_nz, out_nz, parts, joint = body.derived(
        ("scan_jvp", c_nz, carry_nz, x_nz), lambda: _scan_jvp_parts(body, c_nz, carry_nz, x_nz, num_consts,
                                                                    num_carry))
    ct_live = [instantiate(t if not is_zero(t) else Zero(c._aval))
               for t, c, z in zip(carry_t, carry, carry_nz) if z]
    c_live = [t for t, z in zip(c_t, c_nz) if z]
    x_live = [t for t, z in zip(x_t, x_nz) if z]
    common = dict(length=length, reverse=reverse, unroll=unroll)
    if joint is not None and (parts is None or not linearizing(primals, (*ct_live, *c_live, *x_live))):
        # a while loop in the body: forward mode runs it once, primals and tangents at once
        outs = scan_p.bind(*consts, *c_live, *carry, *ct_live, *xs, *x_live, body=joint,
                           num_consts=num_consts + len(c_live), num_carry=num_carry + len(ct_live),
                           **common)
        nt = len(ct_live)
        primal_out = [*outs[:num_carry], *outs[num_carry + nt:num_carry + nt + n_out - num_carry]]
        t_out = [*outs[num_carry:num_carry + nt], *outs[num_carry + nt + n_out - num_carry:]]
        if parts is None and linearizing(primals, (*ct_live, *c_live, *x_live)):  # the linear graph's
            primal_out = scan_p.bind(*primals, body=body, num_consts=num_consts, num_carry=num_carry,
                                     **common)
        return _with_tangents(primal_out, iter(t_out), out_nz)
    primal, tangent, const_res, x_res = parts
    outs = scan_p.bind(*consts, *carry, *xs, body=primal, num_consts=num_consts, num_carry=num_carry,
                       **common)
    primal_out, stacked = outs[:n_out], outs[n_out:]
    rc = [consts[k] for k in const_res]
    rx = [xs[k] for k in x_res]
    t_out = iter(())
    if any(out_nz):
        t_out = iter(scan_p.bind(*rc, *c_live, *ct_live, *stacked, *rx, *x_live, body=tangent,
                                 num_consts=len(rc) + len(c_live), num_carry=len(ct_live), **common))
    return _with_tangents(primal_out, t_out, out_nz)


def _scan_jvp_parts(body: Callee, c_nz: tuple, carry_nz: tuple, x_nz: tuple, n_c: int, n_carry: int) -> tuple:
    graph = body.graph
    n_in, n_out = len(graph.inputs), len(graph.outputs)
    joint, carry_nz, out_nz = _fixpoint(graph, c_nz, carry_nz, x_nz, n_out - n_carry)
    ins, outs = joint.inputs, joint.outputs
    t_ins = ins[n_in:]
    n_ct, n_cat = sum(c_nz), sum(carry_nz)
    ct_in, cat_in, xt_in = t_ins[:n_ct], t_ins[n_ct:n_ct + n_cat], t_ins[n_ct + n_cat:]
    n_cat_out = sum(out_nz[:n_carry])
    s = split(joint, n_in, n_out)
    joint_fn = None
    if s is None:  # a while loop in the body: one scan over the joint body (forward mode) ...
        order = [*ins[:n_c], *ct_in, *ins[n_c:n_c + n_carry], *cat_in, *ins[n_c + n_carry:n_in], *xt_in]
        t_outs = outs[n_out:]
        out_order = [*outs[:n_carry], *t_outs[:n_cat_out], *outs[n_carry:n_out], *t_outs[n_cat_out:]]
        g = forward_only(joint.replace(inputs=order, outputs=out_order))
        joint_fn = Callee(g, f"jvp({body.name})")
        s = split(joint, n_in, n_out, recompute=True)  # ... and the split recomputing the loop
        if s is None:
            return carry_nz, out_nz, None, joint_fn
    primal, tangent, residuals = s
    const_vars = {v: k for k, v in enumerate(ins[:n_c])}
    x_vars = {v: k for k, v in enumerate(ins[n_c + n_carry:n_in])}
    const_res = [const_vars[v] for v in residuals if v in const_vars]
    x_res = [x_vars[v] for v in residuals if v in x_vars]  # read from the xs as they are
    stacked = [v for v in residuals if v not in const_vars and v not in x_vars]
    primal = primal.replace(outputs=[*primal.outputs[:n_out], *stacked])
    rc_vars = [ins[k] for k in const_res]
    rx_vars = [ins[n_c + n_carry + k] for k in x_res]
    tangent = tangent.replace(inputs=[*rc_vars, *ct_in, *cat_in, *stacked, *rx_vars, *xt_in])
    return (carry_nz, out_nz, (Callee(primal, f"jvp({body.name}).primal"),
                               Callee(tangent, f"jvp({body.name}).tangent"), tuple(const_res),
                               tuple(x_res)), joint_fn)


def scan_transpose(cts: tuple, *ops: Any, body: Callee, length: int, reverse: bool, num_consts: int,
                   num_carry: int, unroll: int) -> tuple:
    check_transposable(body)
    consts, carry, xs = scan_split(ops, num_consts, num_carry)
    c_unknown = tuple(is_undefined(c) for c in consts)
    x_unknown = tuple(is_undefined(x) for x in xs)
    ct_nz = tuple(not is_zero(c) for c in cts)
    transposed, how, pre, carry_nz = body.derived(
        ("scan_transpose", c_unknown, x_unknown, ct_nz),
        lambda: _scan_transposed(body, c_unknown, x_unknown, num_carry, ct_nz))
    kc = [c for c in consts if not is_undefined(c)]
    kc += [lax.copy(lax.transpose(kc[k], permutation=(1, 0))) for k in pre]
    kx = [x for x in xs if not is_undefined(x)]
    acc = [_zeros(c.aval) for c, h in zip((c for c in consts if is_undefined(c)), how) if h[0] == "acc"]
    ct_carry = [instantiate(c) for c in cts[:num_carry]]
    ct_ys = [instantiate(c) for c in cts[num_carry:]]
    outs = scan_p.bind(*kc, *acc, *ct_carry, *kx, *ct_ys, body=transposed, length=length,
                       reverse=not reverse, num_consts=len(kc), num_carry=len(acc) + num_carry,
                       unroll=unroll)
    acc_out = iter(outs[:len(acc)])
    carry_ct = outs[len(acc):len(acc) + num_carry]
    n_xu = sum(x_unknown)
    x_ct = iter(outs[len(acc) + num_carry:len(acc) + num_carry + n_xu])
    per_step = [*kx, *ct_ys], outs[len(acc) + num_carry + n_xu:]
    c_ct = iter([next(acc_out) if h[0] == "acc" else _hoisted(h, per_step) for h in how])
    return (*[next(c_ct) if u else None for u in c_unknown],
            *[(ct if nz else Zero(c.aval)) if is_undefined(c) else None
              for c, ct, nz in zip(carry, carry_ct, carry_nz)],
            *[next(x_ct) if u else None for u in x_unknown])


def _hoisted(how: tuple, per_step: tuple) -> Any:
    """A constant's cotangent from values stacked over the iterations: the sum over them of
    one product per iteration as a single product contracting the iteration axis too, or of
    a stacked value as one reduction."""
    def stacked(src: tuple) -> Any:
        return per_step[0 if src[0] == "x" else 1][src[1]]

    if how[0] == "sum":
        return lax.reduce_sum(stacked(how[1]), axes=(0,))
    _, prim, a, b, params = how
    (lc, rc), _ = params["contracting_dims"], params["batch_dims"]
    dims = ((0, *(c + 1 for c in lc)), (0, *(c + 1 for c in rc)))
    return prim.bind(stacked(a), stacked(b), **{**params, "contracting_dims": dims})


def _scan_transposed(body: Callee, c_unknown: tuple, x_unknown: tuple, n_carry: int, ct_nz: tuple) -> tuple:
    """(the body of the transposed scan, how each unknown constant's cotangent is made, the
    scan's constant inputs made before the loop, which carries' cotangents are not zero).

    `ct_nz` marks the outputs (carries, ys) whose cotangents are not symbolic zeros; the
    others are zeros in every iteration, unless the body's transpose makes a carry's nonzero
    (a fixed point), and their slots are ignored, so nodes only they reach are not
    transposed (a while loop whose results no cotangent reaches).

    The body: (known consts; accumulators, carry cotangent; known x_i, y_i cotangents) ->
    (accumulators, carry cotangent; x_i cotangents; values stacked for the constants).
    A constant's cotangent is accumulated in the carry (``("acc",)``) unless, per iteration,
    it is one unbatched product of per-iteration values (a weight's gradient in a recurrent
    cell, ``h_t^T dz_t``): then the product's operands are stacked and multiplied once after
    the loop, contracting the iteration axis (``("dot", prim, lhs, rhs, params)``), one large
    product instead of one small product and one addition per iteration, as cuDNN's RNNs do;
    a cotangent that is itself a stacked value is summed after the loop (``("sum", src)``).
    A source is ``("x", k)`` (the transposed scan's k-th xs operand) or ``("y", k)`` (its
    k-th extra stacked output)."""
    graph = body.graph
    n_c = len(c_unknown)
    c_vars, carry_vars, x_vars = scan_split(graph.inputs, n_c, n_carry)
    kc_vars = [v for v, u in zip(c_vars, c_unknown) if not u]
    uc_avals = [v.aval for v, u in zip(c_vars, c_unknown) if u]
    kx_vars = [v for v, u in zip(x_vars, x_unknown) if not u]
    out_avals = [v.aval if isinstance(v, Var) else v._aval for v in graph.outputs]
    n_kc, n_uc, n_kx = len(kc_vars), len(uc_avals), len(kx_vars)

    nz = list(ct_nz)
    grown: list = []

    def backward(*ins: Any) -> list:
        kc, ct_carry = ins[:n_kc], ins[n_kc:n_kc + n_carry]
        kx, ct_y = ins[n_kc + n_carry:n_kc + n_carry + n_kx], ins[n_kc + n_carry + n_kx:]
        known = {**graph.consts, **dict(zip(kc_vars, kc)), **dict(zip(kx_vars, kx))}
        cts = [c if z else Zero(a) for c, z, a in zip((*ct_carry, *ct_y), nz, out_avals)]
        in_cts = backward_pass(graph.replace(consts=known), cts)
        c_cts, carry_cts, x_cts = scan_split(in_cts, n_c, n_carry)
        grown[:] = [z or not is_zero(c) for z, c in zip(nz, carry_cts)]
        return [*[instantiate(c) for c, u in zip(c_cts, c_unknown) if u],
                *[instantiate(c) for c in carry_cts],
                *[instantiate(c) for c, u in zip(x_cts, x_unknown) if u]]

    step_avals = [*[v.aval for v in kc_vars], *out_avals[:n_carry], *[v.aval for v in kx_vars],
                  *out_avals[n_carry:]]
    while True:  # until the carries with cotangents are a fixed point of the body's transpose
        step = trace(backward, *step_avals)
        if grown == nz[:n_carry]:
            break
        nz[:n_carry] = grown
    how, accumulated, stacked = _const_cotangents(step, n_uc, n_kc + n_carry)
    rest = step.outputs[n_uc:]
    step = dead_code_elimination(step.replace(outputs=[*accumulated, *rest, *stacked], out_tree=None))
    step, pre = _transposed_weights(step, n_kc)
    n_acc, n_kc = len(accumulated), n_kc + len(pre)
    acc_avals = [a for a, h in zip(uc_avals, how) if h[0] == "acc"]

    def with_accumulators(*ins: Any) -> list:
        kc, acc, others = ins[:n_kc], ins[n_kc:n_kc + n_acc], ins[n_kc + n_acc:]
        outs = eval_graph(step, *kc, *others)
        return [*[a + c for a, c in zip(acc, outs[:n_acc])], *outs[n_acc:]]

    avals = [*[v.aval for v in step.inputs[:n_kc]], *acc_avals, *step_avals[n_kc - len(pre):]]
    transposed = trace(with_accumulators, *avals).replace(out_tree=None)
    return Callee(transposed, f"transpose({body.name})"), tuple(how), pre, tuple(nz[:n_carry])


def _transposed_weights(step: Graph, n_kc: int) -> tuple[Graph, tuple]:
    """`step` with each product by a 2-D loop constant contracted on its last axis, x @ W.T
    (a carry's cotangent through a recurrent weight), reading W.T from a new constant input
    (after the first `n_kc`, which are the constants) made once before the loop as a
    row-major copy: BLAS multiplies a few rows by a transposed matrix up to 2x slower than
    by a row-major one. Returns the graph and, per new input, the constant it transposes."""
    kc = step.inputs[:n_kc]
    made: dict[int, Var] = {}
    nodes = []
    for n in step.nodes:
        if n.prim.name == "dot_general" and n.params["batch_dims"] == ((), ()):
            (lhs, rhs), (lc, rc) = n.inputs, n.params["contracting_dims"]
            if (rhs in kc and lhs not in kc and len(rhs.aval.shape) == 2 and rc == (1,)
                    and lc == (len(lhs.aval.shape) - 1,)):
                k = kc.index(rhs)
                if k not in made:
                    a = rhs.aval
                    made[k] = Var(Aval(a.shape[::-1], a.dtype, a.device))
                n = Node(n.prim, [lhs, made[k]], {**n.params, "contracting_dims": (lc, (0,))}, n.outputs,
                         n.site)
        nodes.append(n)
    pre = tuple(made)
    return step.replace(inputs=[*kc, *[made[k] for k in pre], *step.inputs[n_kc:]], nodes=nodes), pre


def _const_cotangents(step: Graph, n_uc: int, first_x: int) -> tuple[list, list, list]:
    """(how each of `step`'s first `n_uc` outputs becomes a constant's cotangent, the outputs
    accumulated in the carry, the values to stack): see `_scan_transposed`. Inputs from
    `first_x` on are the transposed scan's xs."""
    producer = {o: n for n in step.nodes for o in n.outputs}
    xs = {v: k for k, v in enumerate(step.inputs[first_x:])}
    stacked: list = []

    def source(v: Any, add: bool) -> tuple | None:
        if not isinstance(v, Var):
            return None
        if v in xs:
            return ("x", xs[v])
        if v in stacked:
            return ("y", stacked.index(v))
        if add and v in producer:
            stacked.append(v)
            return ("y", len(stacked) - 1)
        return None

    how: list = [None] * n_uc
    for k, o in enumerate(step.outputs[:n_uc]):
        node = producer.get(o) if isinstance(o, Var) else None
        if (node is not None and node.prim.name == "dot_general" and node.params["batch_dims"] == ((), ())
                and all(source(v, False) is not None or v in producer for v in node.inputs)):
            a, b = (source(v, True) for v in node.inputs)
            how[k] = ("dot", node.prim, a, b, dict(node.params))
    for k, o in enumerate(step.outputs[:n_uc]):
        if how[k] is None:
            src = source(o, False)
            how[k] = ("sum", src) if src is not None else ("acc",)
    accumulated = [o for o, h in zip(step.outputs[:n_uc], how) if h[0] == "acc"]
    return how, accumulated, stacked


def register(registry: Any) -> None:
    """The control-flow primitives' jvp and transpose rules (tenferro_ad's plugin)."""
    registry.add_rule("jvp", cond_p, cond_jvp)
    registry.add_rule("transpose", cond_p, cond_transpose)
    registry.add_rule("jvp", while_p, while_jvp)
    registry.add_rule("transpose", while_p, while_transpose)
    PRIMAL_PART[while_p] = while_primal
    registry.add_rule("jvp", scan_p, scan_jvp)
    registry.add_rule("transpose", scan_p, scan_transpose)


__all__ = ["cond_jvp", "cond_transpose", "jvp_joint", "linearizing", "register", "scan_jvp",
           "scan_transpose", "split", "while_jvp", "while_transpose"]
