"""Algebraic simplification: uses of a result that equals one of its operands (x*1, x-0,
neg(neg(x)), a no-op reshape, ...) read that operand; chains of transposes, reshapes and
broadcasts become one node. Only exact identities: never x + 0.0 for floats (-0.0 + 0.0
is +0.0), never x*1 for complex (inf and -0.0 parts change)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tenferro_core import catalog as C

from ..graph import Graph, Node, Var
from ..tensor import Tensor

_MAX_CONST = 1 << 16  # elements of a graph constant read back to test for ones / zeros


def simplify(graph: Graph) -> Graph:
    """`graph` with identities removed (their uses rewired; the inputs they left dead stay)."""
    sub: dict[Var, Var] = {}
    ctx = _Ctx(graph.consts)
    nodes = []
    for n in graph.nodes:
        ins = [sub.get(v, v) for v in n.inputs]
        node = n if ins == n.inputs else Node(n.prim, ins, n.params, n.outputs, n.site)
        rule = _RULES.get(n.prim)
        if rule is not None and not n.prim.effects and len(n.outputs) == 1:
            new = rule(node, ctx)
            if isinstance(new, Var):
                if new.aval is n.outputs[0].aval:
                    sub[n.outputs[0]] = new
                    continue
            elif new is not None:
                node = new
        nodes.append(node)
        for o in node.outputs:
            ctx.producer[o] = node
    outputs = [sub.get(v, v) if isinstance(v, Var) else v for v in graph.outputs]
    return graph.replace(nodes=nodes, outputs=outputs)


class _Ctx:
    """What the rules may ask: the node producing a var, a constant var's values."""

    def __init__(self, consts: dict):
        self.consts = consts
        self.producer: dict[Var, Node] = {}
        self.values: dict[Var, Any] = {}

    def source(self, v: Var, prim: Any) -> Node | None:
        n = self.producer.get(v)
        return n if n is not None and n.prim is prim else None

    def value(self, v: Var) -> Any:
        """A NumPy array with v's values up to broadcasting, or None where v is not constant."""
        if v not in self.values:
            self.values[v] = self._value(v)
        return self.values[v]

    def _value(self, v: Var) -> Any:
        try:
            c = self.consts.get(v)
            if c is not None:
                return c.numpy() if type(c) is Tensor and c._aval.size <= _MAX_CONST else None
            n = self.producer.get(v)
            if n is None:
                return None
            if n.prim is C.full:
                return np.full((), n.params["fill_value"], dtype=v.aval.dtype.numpy)
            if n.prim in (C.broadcast_in_dim, C.reshape, C.transpose, C.reverse, C.copy):
                return self.value(n.inputs[0])  # the same values, rearranged or repeated
        except Exception:  # a dtype NumPy lacks, a backend that cannot read back: not known
            return None
        return None

    def all(self, v: Var, test: Any) -> bool:
        a = self.value(v)
        try:
            return a is not None and bool(np.all(test(a)))
        except Exception:
            return False


def _one(a: Any) -> Any:
    return a == 1


def _pos_zero(a: Any) -> Any:  # x - z == x exactly for these z (integers: any zero)
    return (a == 0) & ~np.signbit(a) if a.dtype.kind == "f" else a == 0


def _neg_zero(a: Any) -> Any:  # x + z == x exactly for these z (integers: any zero)
    return (a == 0) & np.signbit(a) if a.dtype.kind == "f" else a == 0


def _kind(n: Node) -> str:
    return n.outputs[0].aval.dtype.kind


def _mul(n: Node, ctx: _Ctx) -> Any:
    if _kind(n) in "iuf":
        x, y = n.inputs
        if ctx.all(y, _one):
            return x
        if ctx.all(x, _one):
            return y
    return None


def _div(n: Node, ctx: _Ctx) -> Any:
    return n.inputs[0] if _kind(n) in "iuf" and ctx.all(n.inputs[1], _one) else None


# Not for complex: torch's complex add/sub lose signed zeros ((0-0j) - 0 gives 0+0j there),
# so x - 0 == x holds bitwise on one backend and not the other.
def _sub(n: Node, ctx: _Ctx) -> Any:
    return n.inputs[0] if _kind(n) in "iuf" and ctx.all(n.inputs[1], _pos_zero) else None


def _add(n: Node, ctx: _Ctx) -> Any:
    x, y = n.inputs
    if _kind(n) not in "iuf":
        return None
    if ctx.all(y, _neg_zero):
        return x
    return y if ctx.all(x, _neg_zero) else None


def _involution(n: Node, ctx: _Ctx) -> Any:  # f(f(x)) == x
    inner = ctx.source(n.inputs[0], n.prim)
    return inner.inputs[0] if inner is not None else None


def _real_identity(n: Node, ctx: _Ctx) -> Any:  # conj / real of a real operand
    if n.inputs[0].aval.dtype.kind != "c":
        return n.inputs[0]
    return _involution(n, ctx) if n.prim is C.conj else None


def _idempotent(n: Node, ctx: _Ctx) -> Any:  # f(x, x) == x
    return n.inputs[0] if n.inputs[0] is n.inputs[1] else None


def _select(n: Node, ctx: _Ctx) -> Any:
    return n.inputs[1] if n.inputs[1] is n.inputs[2] else None


def _same(n: Node, ctx: _Ctx) -> Any:  # convert to the same dtype, one-operand concatenate
    return n.inputs[0] if len(n.inputs) == 1 else None


def _transpose(n: Node, ctx: _Ctx) -> Any:
    x, perm = n.inputs[0], n.params["permutation"]
    inner = ctx.source(x, C.transpose)
    if inner is not None:
        x, perm = inner.inputs[0], tuple(inner.params["permutation"][p] for p in perm)
    if perm == tuple(range(len(perm))):
        return x
    return _remake(n, x, permutation=perm) if inner is not None else None


def _reshape(n: Node, ctx: _Ctx) -> Any:
    inner = ctx.source(n.inputs[0], C.reshape)
    x = n.inputs[0] if inner is None else inner.inputs[0]
    if x.aval is n.outputs[0].aval:
        return x
    return _remake(n, x, **n.params) if inner is not None else None


def _broadcast(n: Node, ctx: _Ctx) -> Any:
    x, dims = n.inputs[0], n.params["broadcast_dimensions"]
    inner = ctx.source(x, C.broadcast_in_dim)
    if inner is not None:
        x, dims = inner.inputs[0], tuple(dims[d] for d in inner.params["broadcast_dimensions"])
    if dims == tuple(range(len(dims))) and x.aval is n.outputs[0].aval:
        return x
    if inner is None:
        return None
    return _remake(n, x, shape=n.params["shape"], broadcast_dimensions=dims)


def _slice(n: Node, ctx: _Ctx) -> Any:  # starts at 0 and keeps the shape: takes everything
    return n.inputs[0] if not any(n.params["start_indices"]) else None


def _reverse(n: Node, ctx: _Ctx) -> Any:
    shape = n.inputs[0].aval.shape
    return n.inputs[0] if all(shape[d] <= 1 for d in n.params["dimensions"]) else None


def _pad(n: Node, ctx: _Ctx) -> Any:
    return n.inputs[0] if not any(any(c) for c in n.params["padding_config"]) else None


def _remake(n: Node, x: Var, **params: Any) -> Node:
    """`n`'s primitive applied to `x` instead, with `params`, defining n's output var."""
    return Node(n.prim, [x], n.prim.check_params(params, (x.aval,)), n.outputs, n.site)


_RULES = {
    C.mul: _mul, C.div: _div, C.sub: _sub, C.add: _add,
    C.neg: _involution, C.logical_not: _involution, C.bitwise_not: _involution,
    C.conj: _real_identity, C.real: _real_identity,
    C.maximum: _idempotent, C.minimum: _idempotent, C.logical_and: _idempotent,
    C.logical_or: _idempotent, C.bitwise_and: _idempotent, C.bitwise_or: _idempotent,
    C.select: _select, C.convert: _same, C.concatenate: _same,
    C.transpose: _transpose, C.reshape: _reshape, C.broadcast_in_dim: _broadcast,
    C.slice: _slice, C.reverse: _reverse, C.pad: _pad,
}

__all__ = ["simplify"]
