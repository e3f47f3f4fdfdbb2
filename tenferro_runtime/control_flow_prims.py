"""The structured control-flow primitives: `cond`, `while` and `scan`.

Each holds its bodies as compiled callees (`compiled.Callee`: a graph traced once, its
optimized executable built on first run), so `compile` neither unrolls nor retraces them.

- ``cond(index, *ops; branches)``: ``branches[index](*ops)``; index an int32 scalar, clamped.
- ``while(*cond_consts, *body_consts, *carry; cond, body, cond_nconsts, body_nconsts)``:
  ``while cond(*cond_consts, *carry): carry = body(*body_consts, *carry)``.
- ``scan(*consts, *init, *xs; body, length, reverse, num_consts, num_carry, unroll)``:
  ``carry, y_i = body(*consts, *carry, *x_i)`` for i in range(length) (backwards when
  `reverse`), returning the final carry and every y stacked on a new leading axis.

Their shape rules check the operands against the bodies' inputs and that the bodies keep
the carry's avals. Evaluated eagerly (the bottom of the interpreter stack, or a plan step) a
loop runs its body's executable per iteration, below any observer: no retracing. The user
API is `tenferro_runtime.control_flow`; AD and batching rules live in tenferro_ad.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tenferro_core import dtypes as D
from tenferro_core.avals import Aval
from tenferro_core.catalog.cost import Cost
from tenferro_core.errors import ArgumentError, ConcretizationError, DeviceError, DTypeError, ShapeError
from tenferro_core.params import p_bool, p_nonneg_int
from tenferro_core.primitive import REQUIRED, Primitive

from .tensor import Tensor
from .tracing import Tracer, eager_only


class ControlFlowPrimitive(Primitive):
    """A primitive whose params hold sub-graphs (as callees): passes leave its node whole
    (`subgraphs` lets them and `verify_graph` look inside), and it is never folded."""

    loops = True  # graph_prims.foldable: never evaluated ahead of time
    pruned: Any = None  # (node, needed vars) -> the node without what is never read, or None

    def __init__(self, name: str, schema: dict, out_avals: Any, run: Any, callees: Any, doc: str):
        super().__init__(name, _no_rule, params=schema, nin=None, multiple_results=True,
                         decomposition=run, category="extension", doc=doc)
        self._out_avals = out_avals
        self._callees = callees

    def callees(self, params: dict) -> tuple:
        """The callees in `params` (branches; cond and body; body)."""
        return self._callees(params)

    def subgraphs(self, params: dict) -> tuple:
        """The graphs of the callees in `params`."""
        return tuple(c.graph for c in self._callees(params))

    def abstract_eval(self, avals: Sequence[Aval], params: Any) -> tuple[Aval, ...]:
        avals = tuple(avals)
        for a in avals[1:]:
            if a.device is not avals[0].device and a.device != avals[0].device:
                raise DeviceError(
                    f"{self.name}: all operands must be on one device, got {avals[0].device} and "
                    f"{a.device}; move one explicitly with x.to_device({str(avals[0].device)!r})")
        return tuple(self._out_avals(avals, **params))


def _no_rule(*avals: Any, **params: Any) -> Any:  # ControlFlowPrimitive.abstract_eval replaces it
    raise AssertionError("unreachable")


def _callee(prim: str, name: str, v: Any) -> Any:
    from .graph import Graph

    if not isinstance(getattr(v, "graph", None), Graph) or not hasattr(v, "run"):
        raise ArgumentError(f"{prim}: parameter {name!r} expects a compiled callee "
                            f"(tenferro_runtime.compiled.Callee), got {type(v).__name__}")
    return v


def _callees(prim: str, name: str, v: Any) -> tuple:
    if not isinstance(v, (tuple, list)) or not v:
        raise ArgumentError(f"{prim}: parameter {name!r} expects a non-empty tuple of compiled "
                            f"callees, got {v!r}")
    return tuple(_callee(prim, name, c) for c in v)


def _pos_int(prim: str, name: str, v: Any) -> int:
    v = p_nonneg_int(prim, name, v)
    if v < 1:
        raise ArgumentError(f"{prim}: parameter {name!r} must be >= 1, got {v}")
    return v


def short(avals: Sequence[Aval]) -> str:
    return "[" + ", ".join(a.str_short() for a in avals) + "]"


def in_avals(callee: Any) -> tuple:
    return tuple(v.aval for v in callee.graph.inputs)


def out_avals(callee: Any) -> tuple:
    return tuple(v.aval if hasattr(v, "aval") else v._aval for v in callee.graph.outputs)


def _expect(prim: str, what: str, got: Sequence[Aval], want: Sequence[Aval]) -> None:
    """ShapeError (DTypeError where only dtypes differ) unless `got` equals `want`."""
    got, want = tuple(got), tuple(want)
    if got == want:
        return
    same_shapes = len(got) == len(want) and all(g.shape == w.shape for g, w in zip(got, want))
    err = DTypeError if same_shapes else ShapeError
    raise err(f"{prim}: {what}: expected {short(want)}, got {short(got)}")


# ---- cond ----------------------------------------------------------------------------------------

def _cond_out(avals: tuple, *, branches: tuple) -> tuple:
    if not avals:
        raise ArgumentError("cond: expected the branch index operand first, got no operands")
    index, ops = avals[0], avals[1:]
    if index.shape != () or index.dtype is not D.int32:
        raise DTypeError(f"cond: the branch index must be an int32 scalar, got {index.str_short()}")
    outs = out_avals(branches[0])
    for k, b in enumerate(branches):
        _expect("cond", f"branch {k}'s inputs vs the operands", ops, in_avals(b))
        _expect("cond", f"branch {k}'s outputs vs branch 0's", out_avals(b), outs)
    return outs


def _run_cond(index: Tensor, *ops: Tensor, branches: tuple) -> tuple:
    i = min(max(_host(index, "cond's branch index"), 0), len(branches) - 1)
    with eager_only():
        return tuple(branches[i].run(ops))


def _host(x: Tensor, what: str) -> Any:
    if isinstance(x, Tracer):
        raise ConcretizationError(f"{what} is traced; control flow evaluates eagerly only on "
                                  f"concrete tensors (bind the primitive under transformations)")
    return x.item()


cond_p = ControlFlowPrimitive(
    "cond", {"branches": (_callees, REQUIRED)}, _cond_out, _run_cond, lambda p: p["branches"],
    doc="branches[index](*operands), index an int32 scalar clamped to the branches "
        "(params: branches, a tuple of callees with equal input and output avals).")


# ---- while ---------------------------------------------------------------------------------------

def _while_split(ops: Sequence[Any], cond_nconsts: int, body_nconsts: int) -> tuple:
    cc, bc = ops[:cond_nconsts], ops[cond_nconsts:cond_nconsts + body_nconsts]
    return cc, bc, ops[cond_nconsts + body_nconsts:]


def _while_out(avals: tuple, *, cond: Any, body: Any, cond_nconsts: int, body_nconsts: int) -> tuple:
    if cond_nconsts + body_nconsts > len(avals):
        raise ArgumentError(f"while: cond_nconsts + body_nconsts = {cond_nconsts + body_nconsts} "
                            f"exceeds the {len(avals)} operand(s)")
    cc, bc, carry = _while_split(avals, cond_nconsts, body_nconsts)
    _expect("while", "cond's inputs vs its operands", (*cc, *carry), in_avals(cond))
    pred = out_avals(cond)
    if len(pred) != 1 or pred[0].shape != () or pred[0].dtype is not D.bool_:
        raise DTypeError(f"while: cond must return one bool scalar, got {short(pred)}")
    _expect("while", "body's inputs vs its operands", (*bc, *carry), in_avals(body))
    _expect("while", "body's outputs vs the carry", out_avals(body), carry)
    return carry


def _run_while(*ops: Tensor, cond: Any, body: Any, cond_nconsts: int, body_nconsts: int) -> tuple:
    cc, bc, carry = _while_split(ops, cond_nconsts, body_nconsts)
    with eager_only():
        test, step = Runner(cond), Runner(body)
        pred_aval = out_avals(cond)[0]
        cc, bc, cur = test.unwrap(cc), step.unwrap(bc), step.unwrap(carry)
        while _host(test.wrap(test.run([*cc, *cur])[:1], (pred_aval,))[0], "while's predicate"):
            cur = step.run([*bc, *cur])
        return tuple(step.wrap(cur, [c._aval for c in carry]))


WHILE_SCHEMA = {"cond": (_callee, REQUIRED), "body": (_callee, REQUIRED),
                "cond_nconsts": (p_nonneg_int, 0), "body_nconsts": (p_nonneg_int, 0)}
while_p = ControlFlowPrimitive(
    "while", WHILE_SCHEMA, _while_out, _run_while, lambda p: (p["cond"], p["body"]),
    doc="while cond(*cond_consts, *carry): carry = body(*body_consts, *carry) "
        "(params: cond, body, cond_nconsts, body_nconsts).")


# ---- scan ----------------------------------------------------------------------------------------

def scan_split(ops: Sequence[Any], num_consts: int, num_carry: int) -> tuple:
    """(consts, carry, xs) of a scan's operands."""
    return ops[:num_consts], ops[num_consts:num_consts + num_carry], ops[num_consts + num_carry:]


def _scan_out(avals: tuple, *, body: Any, length: int, reverse: bool, num_consts: int,
              num_carry: int, unroll: int) -> tuple:
    if num_consts + num_carry > len(avals):
        raise ArgumentError(f"scan: num_consts + num_carry = {num_consts + num_carry} exceeds the "
                            f"{len(avals)} operand(s)")
    consts, carry, xs = scan_split(avals, num_consts, num_carry)
    for k, x in enumerate(xs):
        if not x.shape or x.shape[0] != length:
            raise ShapeError(f"scan: xs operand {k} ({x.str_short()}) must have a leading axis of "
                             f"the scan's length {length}")
    slices = tuple(Aval(x.shape[1:], x.dtype, x.device) for x in xs)
    _expect("scan", "body's inputs vs its operands", (*consts, *carry, *slices), in_avals(body))
    outs = out_avals(body)
    _expect("scan", "body's carry outputs vs the carry", outs[:num_carry], carry)
    ys = tuple(Aval((length, *y.shape), y.dtype, y.device) for y in outs[num_carry:])
    return (*carry, *ys)


def _run_scan(*ops: Tensor, body: Any, length: int, reverse: bool, num_consts: int, num_carry: int,
              unroll: int) -> tuple:
    from . import array_api as xp

    consts, carry, xs = scan_split(ops, num_consts, num_carry)
    y_avals = out_avals(body)[num_carry:]
    ys: list[list] = [[] for _ in y_avals]
    with eager_only():
        step = Runner(body)
        slices = [step.unstack(x) if step.native(x) else step.unwrap(_unstack(body, x, length)) for x in xs]
        fixed, cur = step.unwrap(consts), step.unwrap(carry)
        loop = step.scan_loop(num_consts, num_carry, reverse)
        if loop is not None:  # the body's plan inlined in one generated loop
            cur, ys = loop(fixed, cur, slices, length)
        else:
            for k in range(length):
                i = length - 1 - k if reverse else k
                out = step.run([*fixed, *cur, *[s[i] for s in slices]])
                cur = out[:num_carry]
                for acc, y in zip(ys, out[num_carry:]):
                    acc.append(y)
            if reverse:
                ys = [acc[::-1] for acc in ys]
        stacked = [Tensor._new(acc, Aval((length, *a.shape), a.dtype, a.device))
                   if not isinstance(acc, list) else  # written in place by the generated loop
                   xp.zeros((0, *a.shape), dtype=a.dtype, device=a.device) if not acc else
                   step.stack(acc, a) if step.native(a) else
                   _stack(body, step.wrap(acc, [a] * length), a)
                   for acc, a in zip(ys, y_avals)]
        return (*step.wrap(cur, [c._aval for c in carry]), *stacked)


class Runner:
    """A callee run once per iteration: on buffers where its executable runs on buffers (a
    plan, a backend's or executor's runner), so a loop pays no tensor wrapping per step;
    on tensors otherwise. `unwrap`/`wrap` convert at the loop's ends; where the buffers'
    backend has `unstack`/`stack` (optional backend methods), a scan's operands are sliced
    and its outputs stacked by them (`native`)."""

    __slots__ = ("run", "buffers", "exe")

    def __init__(self, callee: Any):
        exe = self.exe = callee.executable()
        runner = getattr(exe, "buffer_runner", None)
        run = runner() if runner is not None else getattr(exe, "run_buffers", None)
        fixed = [(k, v) for k, v in enumerate(callee.optimized().outputs) if not hasattr(v, "aval")]
        self.buffers = run is not None and all(type(v) is Tensor for _, v in fixed)
        if not self.buffers:
            self.run = callee.run
        elif fixed:  # a fixed output's entry is None in a plan's result
            fixed_bufs = tuple((k, v._buf) for k, v in fixed)

            def run_fixed(bufs: list, run: Any = run, fixed: tuple = fixed_bufs) -> list:
                out = list(run(bufs))
                for k, b in fixed:
                    out[k] = b
                return out

            self.run = run_fixed
        else:
            self.run = run

    def scan_loop(self, n_consts: int, n_carry: int, reverse: bool) -> Any:
        """The body's generated scan loop on buffers (its executable's `scan_loop`), or None."""
        make = getattr(self.exe, "scan_loop", None) if self.buffers else None
        return make(n_consts, n_carry, reverse) if make is not None else None

    def unwrap(self, tensors: Sequence[Tensor]) -> list:
        return [t._buf for t in tensors] if self.buffers else list(tensors)

    def wrap(self, values: Sequence[Any], avals: Sequence[Aval]) -> list:
        return [Tensor._new(b, a) for b, a in zip(values, avals)] if self.buffers else list(values)

    def native(self, x: Any) -> bool:
        """True where the loop runs on buffers of a backend with `unstack` and `stack`."""
        backend = (x._aval if isinstance(x, Tensor) else x).device.backend
        return self.buffers and getattr(backend, "unstack", None) is not None and \
            getattr(backend, "stack", None) is not None

    def unstack(self, x: Tensor) -> list:
        return x._aval.device.backend.unstack(x._buf)

    def stack(self, bufs: list, aval: Aval) -> Tensor:
        stacked = Aval((len(bufs), *aval.shape), aval.dtype, aval.device)
        return Tensor._new(aval.device.backend.stack(bufs), stacked)


def _unstack(body: Any, x: Tensor, length: int) -> list:
    """x[0], ..., x[length - 1]: one replay of a graph of slices traced once per operand aval
    (kept with the body), instead of an indexing call per iteration."""
    from . import lax
    from .graph import eval_graph, trace

    aval = x._aval

    def build() -> Any:
        rank = len(aval.shape)

        def unstack(v: Tensor) -> list:
            return [lax.reshape(lax.slice(v, start_indices=(i,) + (0,) * (rank - 1),
                                          limit_indices=(i + 1,) + aval.shape[1:],
                                          strides=(1,) * rank), new_sizes=aval.shape[1:])
                    for i in range(length)]

        return trace(unstack, aval)

    return eval_graph(body.derived(("unstack", aval), build), x)


def _stack(body: Any, pieces: list, aval: Aval) -> Tensor:
    """`pieces` (each of `aval`) stacked on a new leading axis: one replay of a graph traced
    once per aval and count (kept with the body)."""
    from . import lax
    from .graph import eval_graph, trace

    n = len(pieces)

    def build() -> Any:
        def stack(*ps: Tensor) -> Tensor:
            rows = [lax.reshape(p, new_sizes=(1, *aval.shape)) for p in ps]
            return rows[0] if n == 1 else lax.concatenate(*rows, dimension=0)

        return trace(stack, *[aval] * n)

    return eval_graph(body.derived(("stack", aval, n), build), *pieces)[0]


SCAN_SCHEMA = {"body": (_callee, REQUIRED), "length": (p_nonneg_int, REQUIRED),
               "reverse": (p_bool, False), "num_consts": (p_nonneg_int, 0),
               "num_carry": (p_nonneg_int, 0), "unroll": (_pos_int, 1)}
scan_p = ControlFlowPrimitive(
    "scan", SCAN_SCHEMA, _scan_out, _run_scan, lambda p: (p["body"],),
    doc="carry, y_i = body(*consts, *carry, *x_i) over the leading axis of xs; returns the "
        "final carry and the ys stacked (params: body, length, reverse, num_consts, num_carry, "
        "unroll).")


def _scan_pruned(node: Any, needed: Any = ()) -> Any:
    """`node` (a scan) without the constants and xs its body never reads and the stacked
    outputs nothing reads (not in `needed`), or None when nothing goes: a transposed scan gets
    every known operand, each unread xs is still sliced per iteration, and each unread ys
    still computed and written; a scan whose body reads none of its operands keeps its first.
    The pruned body is kept with the body (one per pruning)."""
    from .compiled import Callee
    from .graph import Node, Var

    p = node.params
    body = p["body"]
    graph = body.graph
    nk = p["num_carry"]
    keep_out = (*(True for _ in range(nk)), *(y in needed for y in node.outputs[nk:]))
    outputs = [v for v, k in zip(graph.outputs, keep_out) if k]
    read = {v for n in graph.nodes for v in n.inputs} | {v for v in outputs if isinstance(v, Var)}
    consts, carry, xs = scan_split(graph.inputs, p["num_consts"], nk)
    keep = (*(v in read for v in consts), *(True for _ in carry), *(v in read for v in xs))
    if keep and not any(keep):  # one operand stays: it gives the scan its device when it runs
        keep = (True, *keep[1:])
    if (all(keep) and all(keep_out)) or body.donated:
        return None

    def build() -> Any:
        inputs = [v for v, k in zip(graph.inputs, keep) if k]
        return Callee(graph.replace(inputs=inputs, outputs=outputs), body.name, body.passes, (),
                      body.executor)

    pruned = graph.derived(("scan_pruned", keep, keep_out), build)
    params = {**p, "body": pruned, "num_consts": sum(keep[:len(consts)])}
    return Node(node.prim, [v for v, k in zip(node.inputs, keep) if k], params,
                [v for v, k in zip(node.outputs, keep_out) if k], node.site)


scan_p.pruned = _scan_pruned

BY_NAME = {p.name: p for p in (cond_p, while_p, scan_p)}


# ---- cost ----------------------------------------------------------------------------------------

def control_flow_cost(prim: ControlFlowPrimitive, runtime: Any, params: dict) -> Cost:
    """FLOPs and bytes of one application: the costliest branch of a cond; one trip of a
    while's predicate and body (its trip count is unknown until it runs); `length` trips of a
    scan's body."""
    from .cost import graph_cost

    costs = [graph_cost(g, runtime) for g in prim.subgraphs(params)]
    if prim is cond_p:
        return max(costs, key=lambda c: (c.flops, c.bytes))
    total = Cost(sum(c.flops for c in costs), sum(c.bytes for c in costs))
    if prim is scan_p:
        n = params["length"]
        total = Cost(total.flops * n, total.bytes * n)
    return total


__all__ = ["BY_NAME", "ControlFlowPrimitive", "cond_p", "control_flow_cost", "scan_p", "scan_split",
           "while_p"]
