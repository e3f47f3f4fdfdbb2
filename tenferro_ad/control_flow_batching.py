"""Batch rules of the control-flow primitives (`cond`, `while`, `scan`) for `vmap`.

Bodies are traced under a `BatchTrace` once per pattern of batched operands and batch size
(batch axes first) into new callees; which carries come out batched is a fixed point.

- `cond` with a shared index batches its branches; with a batched index every branch runs on
  the whole batch and a `select` per example keeps the chosen branch's results.
- `while` with a shared predicate batches its bodies; with a batched predicate the loop runs
  until no example's predicate holds, each carry updated only where its own still does.
- `scan` batches its body; xs carry their batch axis second (after the scanned axis), and
  so do the stacked ys.
"""

from __future__ import annotations

from typing import Any

from tenferro_core import dtypes as D
from tenferro_runtime import lax
from tenferro_runtime.compiled import Callee
from tenferro_runtime.control_flow_prims import cond_p, scan_p, scan_split, while_p
from tenferro_runtime.graph import Graph, eval_graph, trace
from tenferro_runtime.graph_prims import call_p

from .batching import batch_first, batch_graph, batch_size, moveaxis, to_front


def _front(args: tuple, dims: tuple) -> tuple[list, tuple]:
    """Operands with their batch axes first, and which are batched."""
    vals, dims = batch_first(args, dims)
    return vals, tuple(d is not None for d in dims)


def _fixpoint(graph: Graph, consts_b: tuple, carry_b: tuple, rest_b: tuple, n_y: int, size: int) -> tuple:
    """(batched graph, carry pattern, results pattern): the carries that end up batched."""
    while True:
        g, out_b = batch_graph(graph, (*consts_b, *carry_b, *rest_b), size, (*carry_b, *(False,) * n_y))
        grown = tuple(a or b for a, b in zip(carry_b, out_b[:len(carry_b)]))
        if grown == carry_b:
            return g, carry_b, out_b
        carry_b = grown


def _select(pred: Any, on_true: Any, on_false: Any) -> Any:
    """select with a per-example predicate (shape (size,)) broadcast over the batched values."""
    p = lax.broadcast_in_dim(pred, shape=on_true.shape, broadcast_dimensions=(0,))
    return lax.select(p, on_true, on_false)


# ---- cond ----------------------------------------------------------------------------------------

def cond_batch(args: tuple, dims: tuple, *, branches: tuple) -> tuple:
    size = batch_size(args, dims)
    ops, batched = _front(args[1:], dims[1:])
    n_out = len(branches[0].graph.outputs)
    if dims[0] is None:
        new, out_b = branches[0].derived(("cond_batch", branches, batched, size),
                                         lambda: _batch_branches(branches, batched, size))
        outs = cond_p.bind(args[0], *ops, branches=new)
        return tuple(outs), tuple(0 if b else None for b in out_b)
    every = branches[0].derived(("cond_batch_all", branches, batched, size), lambda: tuple(
        Callee(batch_graph(b.graph, batched, size, (True,) * n_out)[0], f"vmap({b.name})")
        for b in branches))
    index = moveaxis(args[0], dims[0], 0)
    limit = lambda v: lax.full(shape=(size,), fill_value=v, dtype=D.int32, device=index.device)  # noqa: E731
    index = lax.clamp(limit(0), index, limit(len(branches) - 1))
    results = [call_p.bind(*ops, fn=c) for c in every]
    out = list(results[0])
    for k, res in enumerate(results[1:], 1):
        pick = lax.eq(index, limit(k))
        out = [_select(pick, r, o) for r, o in zip(res, out)]
    return tuple(out), (0,) * n_out


def _batch_branches(branches: tuple, batched: tuple, size: int) -> tuple:
    n_out = len(branches[0].graph.outputs)
    union = (False,) * n_out
    for b in branches:
        union = tuple(u or o for u, o in zip(union, batch_graph(b.graph, batched, size, union)[1]))
    new = tuple(Callee(batch_graph(b.graph, batched, size, union)[0], f"vmap({b.name})") for b in branches)
    return new, union


# ---- while ---------------------------------------------------------------------------------------

def while_batch(args: tuple, dims: tuple, *, cond: Callee, body: Callee, cond_nconsts: int,
                body_nconsts: int) -> tuple:
    size = batch_size(args, dims)
    vals, batched = _front(args, dims)
    n_cc, n_bc = cond_nconsts, body_nconsts
    cc_b, bc_b, carry_b = batched[:n_cc], batched[n_cc:n_cc + n_bc], batched[n_cc + n_bc:]
    parts = body.derived(("while_batch", cond, batched, size),
                         lambda: _while_parts(cond, body, cc_b, bc_b, carry_b, size))
    new_cond, new_body, carry_b, pred_b = parts
    cc, bc, carry = vals[:n_cc], vals[n_cc:n_cc + n_bc], vals[n_cc + n_bc:]
    carry = [to_front(c, None, size) if b and not was else c
             for c, b, was in zip(carry, carry_b, batched[n_cc + n_bc:])]
    body_consts = [*cc, *bc] if pred_b else bc
    outs = while_p.bind(*cc, *body_consts, *carry, cond=new_cond, body=new_body, cond_nconsts=n_cc,
                        body_nconsts=len(body_consts))
    return tuple(outs), tuple(0 if b else None for b in carry_b)


def _while_parts(cond: Callee, body: Callee, cc_b: tuple, bc_b: tuple, carry_b: tuple, size: int) -> tuple:
    n_carry = len(carry_b)
    while True:  # the carries batched once the loop has run, and whether the predicate is
        bg, carry_b, _ = _fixpoint(body.graph, bc_b, carry_b, (), 0, size)
        cg, (pred_b,) = batch_graph(cond.graph, (*cc_b, *carry_b), size, (False,))
        if not pred_b or all(carry_b):
            break
        carry_b = (True,) * n_carry  # a per-example predicate updates every carry per example
    if not pred_b:
        return Callee(cg, f"vmap({cond.name})"), Callee(bg, f"vmap({body.name})"), carry_b, False
    n_cc = len(cc_b)
    c_avals = [v.aval for v in cg.inputs]
    b_avals = [v.aval for v in bg.inputs[:len(bc_b)]]

    def any_pred(*xs: Any) -> Any:
        return [lax.reduce_or(eval_graph(cg, *xs)[0], axes=(0,))]

    def masked_body(*xs: Any) -> list:
        cc, bc, carry = xs[:n_cc], xs[n_cc:len(xs) - n_carry], xs[len(xs) - n_carry:]
        pred = eval_graph(cg, *cc, *carry)[0]
        new = eval_graph(bg, *bc, *carry)
        return [_select(pred, n, c) for n, c in zip(new, carry)]

    new_cond = Callee(trace(any_pred, *c_avals).replace(out_tree=None), f"vmap({cond.name})")
    new_body = Callee(trace(masked_body, *c_avals[:n_cc], *b_avals, *c_avals[n_cc:]).replace(out_tree=None),
                      f"vmap({body.name})")
    return new_cond, new_body, carry_b, True


# ---- scan ----------------------------------------------------------------------------------------

def scan_batch(args: tuple, dims: tuple, *, body: Callee, length: int, reverse: bool, num_consts: int,
               num_carry: int, unroll: int) -> tuple:
    size = batch_size(args, dims)
    consts, carry, xs = scan_split(args, num_consts, num_carry)
    c_d, carry_d, x_d = scan_split(dims, num_consts, num_carry)
    consts, c_b = _front(consts, c_d)
    carry, carry_b = _front(carry, carry_d)
    xs = [x if d is None else moveaxis(x, d, 1) for x, d in zip(xs, x_d)]
    x_b = tuple(d is not None for d in x_d)
    n_y = len(body.graph.outputs) - num_carry
    new, carry_b2, out_b = body.derived(
        ("scan_batch", c_b, carry_b, x_b, size),
        lambda: _scan_parts(body, c_b, carry_b, x_b, n_y, size))
    carry = [to_front(c, None, size) if b and not was else c for c, b, was in zip(carry, carry_b2, carry_b)]
    outs = scan_p.bind(*consts, *carry, *xs, body=new, length=length, reverse=reverse,
                       num_consts=num_consts, num_carry=num_carry, unroll=unroll)
    out_dims = (*[0 if b else None for b in carry_b2], *[1 if b else None for b in out_b[num_carry:]])
    return tuple(outs), out_dims


def _scan_parts(body: Callee, c_b: tuple, carry_b: tuple, x_b: tuple, n_y: int, size: int) -> tuple:
    g, carry_b, out_b = _fixpoint(body.graph, c_b, carry_b, x_b, n_y, size)
    return Callee(g, f"vmap({body.name})"), carry_b, out_b


def register(registry: Any) -> None:
    """The control-flow primitives' batch rules (tenferro_ad's plugin)."""
    registry.add_rule("batch", cond_p, cond_batch)
    registry.add_rule("batch", while_p, while_batch)
    registry.add_rule("batch", scan_p, scan_batch)


__all__ = ["cond_batch", "register", "scan_batch", "while_batch"]
