"""Structured control flow, as JAX's: `cond`, `switch`, `while_loop`, `fori_loop`, `scan`, `map`.

Each body is traced once (on the avals of its operands) into a graph and bound as one
primitive holding it (control_flow_prims.py), so `compile` neither unrolls nor retraces a
loop, and transformations apply their rules to the whole construct. Tensors a body closes
over that a transformation may follow (tracers, floating and complex tensors) become
explicit operands of the primitive (closure conversion), so gradients and batching reach
them. Operands and carries are pytrees of tensors or Python numbers. Every check (a
predicate's shape and dtype, branches returning different avals, a loop body changing its
carry) raises a typed error before anything runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, DTypeError, ShapeError

from .compiled import Callee
from .control_flow_prims import cond_p, scan_p, while_p
from .graph import Graph, Var, trace
from .pytree import LEAF, TreeDef, tree_flatten, tree_unflatten
from .tensor import Tensor
from .tracing import Tracer

_SCALARS = (bool, int, float, complex)


# ---- helpers -------------------------------------------------------------------------------------

def _callable(fn: Any, who: str, what: str) -> None:
    if not callable(fn):
        raise ArgumentError(f"{who}: {what} must be a function (a callable), got {type(fn).__name__}; "
                            f"pass the function itself, not its result")


def _device(*trees: Any) -> Any:
    """The device of the first tensor leaf of `trees` (None: the default device)."""
    for tree in trees:
        for leaf in tree_flatten(tree)[0]:
            if isinstance(leaf, Tensor):
                return leaf.device
    return None


def _as_tensor(x: Any, device: Any, who: str, what: str) -> Tensor:
    from . import array_api as xp

    if isinstance(x, Tensor):
        return x
    if isinstance(x, _SCALARS) or type(x).__module__ == "numpy":
        return xp.asarray(x, device=device)
    raise ArgumentError(f"{who}: {what} must be tensors or Python numbers (a pytree of them), got a "
                        f"{type(x).__name__}; convert it with xp.asarray")


def _leaves(tree: Any, device: Any, who: str, what: str) -> tuple[list[Tensor], TreeDef]:
    leaves, td = tree_flatten(tree)
    return [_as_tensor(x, device, who, what) for x in leaves], td


def leaf_names(td: TreeDef, root: str = "") -> list[str]:
    """A path per leaf of `td`: ``[0]['w']``, for error messages."""
    if td.kind == "leaf":
        return [root or "(the value itself)"]
    keys: Sequence[Any]
    if td.kind == "dict":
        keys = [f"[{k!r}]" for k in td.meta]
    elif td.kind == "namedtuple":
        keys = [f".{f}" for f in td.meta._fields]
    else:
        keys = [f"[{i}]" for i in range(len(td.children))]
    return [name for k, c in zip(keys, td.children) for name in leaf_names(c, root + k)]


def _mismatch(who: str, what: str, names: list[str], got: Sequence[Any], want: Sequence[Any],
              fix: str) -> None:
    """ShapeError / DTypeError naming the first leaf whose aval in `got` differs from `want`."""
    for name, g, w in zip(names, got, want):
        if g != w:
            err = DTypeError if g.shape == w.shape else ShapeError
            raise err(f"{who}: {what} leaf {name} is {g.str_short()}, expected {w.str_short()}; {fix}")


class Traced(NamedTuple):
    """A body traced into a graph whose inputs are its lifted constants then its arguments."""

    graph: Graph
    lifted: list  # the values of the lifted constants (operands of the primitive)
    out_tree: TreeDef


def trace_body(fn: Callable, in_tree: TreeDef, avals: Sequence[Any], device: Any, who: str) -> Traced:
    """`fn` traced on `avals` (its arguments' leaves, structured by `in_tree`); Python numbers it
    returns become tensors, and constants it closes over that a transformation may follow
    (tracers, floating and complex tensors) become inputs in front of its arguments."""
    out_tree: list = []

    def flat(*leaves: Any) -> list:
        out = fn(*tree_unflatten(in_tree, leaves))
        outs, td = tree_flatten(out)
        out_tree.append(td)
        return [_as_tensor(o, device, who, "a body's results") for o in outs]

    graph = trace(flat, *avals)
    lift = [v for v, c in graph.consts.items() if isinstance(c, Tracer) or c._aval.dtype.kind in "fc"]
    values = [graph.consts[v] for v in lift]
    kept = {v: c for v, c in graph.consts.items() if v not in set(lift)}
    graph = graph.replace(inputs=[*lift, *graph.inputs], consts=kept, out_tree=None)
    return Traced(graph, values, out_tree[0])


def _avals(xs: Sequence[Tensor]) -> list:
    return [x._aval for x in xs]


def _scalar(x: Any, device: Any, who: str, what: str, kinds: str, want: str) -> Tensor:
    """`x` as a scalar tensor of one of the dtype `kinds`, else a typed error."""
    t = _as_tensor(x, device, who, what)
    if t.shape != ():
        raise ShapeError(f"{who}: {what} must be a scalar, got {t._aval.str_short()}; reduce it "
                         f"(xp.all, xp.any, indexing) to one value")
    if t.dtype.kind not in kinds:
        raise DTypeError(f"{who}: {what} must be {want}, got {t._aval.str_short()}; compare it "
                         f"(x > 0) or cast it with astype")
    return t


# ---- cond / switch -------------------------------------------------------------------------------

def cond(pred: Any, true_fun: Callable, false_fun: Callable, *operands: Any) -> Any:
    """``true_fun(*operands)`` if `pred` else ``false_fun(*operands)``; `pred` a boolean scalar.
    Both branches are traced and must return the same structure and avals."""
    from . import lax

    _callable(true_fun, "cond", "true_fun")
    _callable(false_fun, "cond", "false_fun")
    device = _device(pred, operands)
    p = _scalar(pred, device, "cond", "the predicate", "b", "a boolean scalar")
    index = lax.convert(p, new_dtype=D.int32)
    return _branches(index, (false_fun, true_fun), operands, ("false_fun", "true_fun"), "cond", device)


def switch(index: Any, branches: Sequence[Callable], *operands: Any) -> Any:
    """``branches[index](*operands)``, `index` an integer scalar clamped to the branches (as
    JAX's `switch`). Every branch is traced and must return the same structure and avals."""
    from . import lax

    if not isinstance(branches, (list, tuple)) or not branches:
        raise ArgumentError(f"switch: branches must be a non-empty sequence of functions, got "
                            f"{type(branches).__name__} {branches!r:.60}")
    for k, b in enumerate(branches):
        _callable(b, "switch", f"branches[{k}]")
    device = _device(index, operands)
    i = _scalar(index, device, "switch", "the index", "iu", "an integer scalar")
    i = lax.convert(i, new_dtype=D.int32) if i.dtype is not D.int32 else i
    lo, hi = (lax.full(shape=(), fill_value=v, dtype=D.int32, device=i.device)
              for v in (0, len(branches) - 1))
    i = lax.clamp(lo, i, hi)
    names = tuple(f"branches[{k}]" for k in range(len(branches)))
    return _branches(i, tuple(branches), operands, names, "switch", device)


def _branches(index: Tensor, fns: tuple, operands: tuple, names: tuple, who: str, device: Any) -> Any:
    ops, in_tree = _leaves(operands, device, who, "operands")
    avals = _avals(ops)
    traced = [trace_body(f, in_tree, avals, device, f"{who} ({n})") for f, n in zip(fns, names)]
    first = traced[0]
    for t, name in zip(traced[1:], names[1:]):
        if t.out_tree != first.out_tree:
            raise ArgumentError(
                f"{who}: {names[0]} and {name} return different structures ({first.out_tree} vs "
                f"{t.out_tree}); both branches must return the same pytree")
        got = [v.aval for v in t.graph.outputs]
        want = [v.aval for v in first.graph.outputs]
        _mismatch(who, f"{name} and {names[0]} differ: {name}'s output", leaf_names(first.out_tree),
                  got, want, f"{names[0]} returns {[a.str_short() for a in want]} and {name} returns "
                  f"{[a.str_short() for a in got]}: make both branches return the same avals")
    lifted = [x for t in traced for x in t.lifted]
    callees = []
    offset = 0
    for t, name in zip(traced, names):
        n = len(t.lifted)
        before, after = _avals(lifted[:offset]), _avals(lifted[offset + n:])
        g = t.graph
        inputs = [*[Var(a) for a in before], *g.inputs[:n], *[Var(a) for a in after], *g.inputs[n:]]
        callees.append(Callee(g.replace(inputs=inputs), f"{who}.{name}"))
        offset += n
    outs = cond_p.bind(index, *lifted, *ops, branches=tuple(callees))
    return tree_unflatten(first.out_tree, outs)


# ---- loops ---------------------------------------------------------------------------------------

def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any) -> Any:
    """``val = init_val; while cond_fun(val): val = body_fun(val)``; `cond_fun` returns a boolean
    scalar and `body_fun` the carry with the avals it was given. Forward-mode differentiable;
    reverse mode needs a trip count known ahead: use `scan` or `fori_loop` with int bounds."""
    _callable(cond_fun, "while_loop", "cond_fun")
    _callable(body_fun, "while_loop", "body_fun")
    device = _device(init_val)
    carry, tree = _leaves(init_val, device, "while_loop", "init_val")
    avals = _avals(carry)
    in_tree = TreeDef("tuple", None, (tree,))
    ct = trace_body(cond_fun, in_tree, avals, device, "while_loop (cond_fun)")
    pred = [v.aval for v in ct.graph.outputs]
    if ct.out_tree != LEAF or pred[0].shape != ():
        raise ShapeError(f"while_loop: cond_fun must return a boolean scalar, got "
                         f"{[a.str_short() for a in pred]} (structure {ct.out_tree})")
    if pred[0].dtype is not D.bool_:
        raise DTypeError(f"while_loop: cond_fun must return a boolean scalar, got {pred[0].str_short()}; "
                         f"compare it (x > 0)")
    bt = trace_body(body_fun, in_tree, avals, device, "while_loop (body_fun)")
    _check_carry("while_loop", "body_fun", tree, bt.out_tree, avals, [v.aval for v in bt.graph.outputs])
    outs = while_p.bind(*ct.lifted, *bt.lifted, *carry, cond=Callee(ct.graph, "while_loop.cond_fun"),
                        body=Callee(bt.graph, "while_loop.body_fun"), cond_nconsts=len(ct.lifted),
                        body_nconsts=len(bt.lifted))
    return tree_unflatten(tree, outs)


def _check_carry(who: str, fn: str, tree: TreeDef, got_tree: TreeDef, avals: list, got: list) -> None:
    if got_tree != tree:
        raise ArgumentError(f"{who}: {fn} returned a carry of structure {got_tree}, but the carry is "
                            f"{tree}; a loop body must return the carry it was given")
    names = leaf_names(tree)
    if who == "fori_loop":  # the carry is (index, init_val)
        names = ["(the loop index)", *[n[3:] or "(the value itself)" for n in names[1:]]]
    _mismatch(who, f"{fn} changed the carry:", names, got, avals,
              "a loop body must keep the carry's shape and dtype (cast with astype, or change the "
              "initial value)")


def fori_loop(lower: Any, upper: Any, body_fun: Callable, init_val: Any) -> Any:
    """``val = body_fun(i, val)`` for i in range(lower, upper). With Python int bounds it is a
    `scan` of static length (reverse-mode differentiable); with tensor bounds a `while_loop`."""
    from . import array_api as xp

    _callable(body_fun, "fori_loop", "body_fun")
    device = _device(lower, upper, init_val)
    static = all(isinstance(b, int) and not isinstance(b, bool) for b in (lower, upper))
    if static:
        i0 = xp.asarray(lower, device=device)

        def step(c: Any, _: Any) -> Any:
            i, x = c
            return (i + 1, body_fun(i, x)), None

        (_, out), _ = _scan(step, (i0, init_val), None, max(upper - lower, 0), False, 1, "fori_loop")
        return out
    lo = _scalar(lower, device, "fori_loop", "lower", "iu", "an integer scalar")
    hi = _scalar(upper, device, "fori_loop", "upper", "iu", "an integer scalar")
    dtype = D.result_type(lo.dtype, hi.dtype) if lo.dtype is not hi.dtype else lo.dtype
    lo, hi = lo.astype(dtype), hi.astype(dtype)

    def body(c: Any) -> Any:
        i, u, x = c
        return i + 1, u, body_fun(i, x)

    return while_loop(lambda c: c[0] < c[1], body, (lo, hi, init_val))[2]


def scan(f: Callable, init: Any, xs: Any = None, length: int | None = None, reverse: bool = False,
         unroll: int | bool = 1) -> tuple[Any, Any]:
    """``carry, y = f(carry, x)`` over the leading axis of `xs` (pytrees): returns the final
    carry and the ys stacked on a new leading axis (as JAX's `scan`). `length` is needed
    when `xs` is None; `reverse` scans from the end; `unroll=k` runs k steps per iteration of
    the loop (one body traced with k copies of `f`, the remainder in a second scan; True:
    every step in one body), trading trace size for fewer iterations."""
    _callable(f, "scan", "f")
    return _scan(f, init, xs, length, reverse, unroll, "scan")


def _scan(f: Callable, init: Any, xs: Any, length: Any, reverse: Any, unroll: Any, who: str) -> tuple:
    fn = "f" if who == "scan" else "body_fun"
    if not isinstance(reverse, bool):
        raise ArgumentError(f"scan: reverse must be a bool, got {reverse!r}")
    if not isinstance(unroll, int) or unroll < 1 and not isinstance(unroll, bool):
        raise ArgumentError(f"scan: unroll must be a positive int or a bool, got {unroll!r}")
    device = _device(init, xs)
    carry, c_tree = _leaves(init, device, "scan", "init")
    x_leaves, x_tree = _leaves(xs, device, "scan", "xs")
    n = _length(x_leaves, x_tree, length)
    k = (n if unroll is True else 1) if isinstance(unroll, bool) else min(unroll, n)
    if k > 1:
        return _unrolled(f, init, xs, x_leaves, x_tree, n, k, reverse, who)
    unroll = 1
    from tenferro_core.avals import Aval

    slices = [Aval(x.shape[1:], x.dtype, x.device) for x in x_leaves]
    c_avals = _avals(carry)
    bt = trace_body(f, TreeDef("tuple", None, (c_tree, x_tree)), [*c_avals, *slices], device, "scan (f)")
    if bt.out_tree.kind not in ("tuple", "list") or len(bt.out_tree.children) != 2:
        raise ArgumentError(f"scan: f must return a pair (carry, y), got a result of structure "
                            f"{bt.out_tree}")
    got_c, y_tree = bt.out_tree.children
    nc = len(carry)
    _check_carry(who, fn, c_tree, got_c, c_avals, [v.aval for v in bt.graph.outputs[:nc]])
    outs = scan_p.bind(*bt.lifted, *carry, *x_leaves, body=Callee(bt.graph, "scan.f"), length=n,
                       reverse=reverse, num_consts=len(bt.lifted), num_carry=nc, unroll=unroll)
    return tree_unflatten(c_tree, outs[:nc]), tree_unflatten(y_tree, outs[nc:])


def _unrolled(f: Callable, init: Any, xs: Any, x_leaves: list, x_tree: TreeDef, n: int, k: int,
              reverse: bool, who: str) -> tuple:
    """`scan` with `k` steps per loop iteration: a scan over n // k chunks of k steps (xs
    reshaped to (n // k, k, ...)), and the n % k steps left over in a plain scan (after the
    chunks, or before them when reversed: the order of the steps is kept)."""
    from . import array_api as xp

    m, r = n // k * k, n % k
    main, rest = (slice(r, n), slice(0, r)) if reverse else (slice(0, m), slice(m, n))

    def part(sl: slice, chunks: bool) -> Any:
        leaves = [x[sl] for x in x_leaves]
        if chunks:
            leaves = [xp.reshape(x, (m // k, k, *x.shape[1:])) for x in leaves]
        return tree_unflatten(x_tree, leaves) if x_leaves else None

    def chunk(carry: Any, xk: Any) -> tuple:
        ys = []
        for j in (range(k - 1, -1, -1) if reverse else range(k)):
            x_j = tree_unflatten(x_tree, [x[j] for x in tree_flatten(xk)[0]]) if x_leaves else None
            carry, y = f(carry, x_j)
            ys.append(y)
        ys = ys[::-1] if reverse else ys
        leaves = [tree_flatten(y)[0] for y in ys]
        return carry, tree_unflatten(tree_flatten(ys[0])[1], [xp.stack(c) for c in zip(*leaves)])

    carry, ys = _scan(chunk, init, part(main, True), m // k, reverse, 1, who)
    y_leaves, y_tree = tree_flatten(ys)
    y_leaves = [xp.reshape(y, (m, *y.shape[2:])) for y in y_leaves]
    if not r:
        return carry, tree_unflatten(y_tree, y_leaves)
    carry, tail = _scan(f, carry, part(rest, False), r, reverse, 1, who)
    t_leaves = tree_flatten(tail)[0]
    pairs = zip(t_leaves, y_leaves) if reverse else zip(y_leaves, t_leaves)
    return carry, tree_unflatten(y_tree, [xp.concat(list(p), axis=0) for p in pairs])


def _length(xs: list, x_tree: TreeDef, length: Any) -> int:
    if length is not None and (not isinstance(length, int) or isinstance(length, bool) or length < 0):
        raise ArgumentError(f"scan: length must be a non-negative int, got {length!r}")
    names = leaf_names(x_tree)
    for name, x in zip(names, xs):
        if not x.shape:
            raise ShapeError(f"scan: xs leaf {name} is a scalar ({x._aval.str_short()}); each leaf of "
                             f"xs needs a leading axis to scan over")
    sizes = {x.shape[0] for x in xs}
    if len(sizes) > 1:
        desc = ", ".join(f"{name}: {x.shape[0]}" for name, x in zip(names, xs))
        raise ShapeError(f"scan: the leaves of xs have different leading sizes ({desc}); they must "
                         f"all have the scan's length")
    if length is None:
        if not sizes:
            raise ArgumentError("scan: with no xs, pass length= (the number of steps)")
        return sizes.pop()
    if sizes and sizes != {length}:
        raise ShapeError(f"scan: length={length} but xs have leading size {sizes.pop()}")
    return length


def map(f: Callable, xs: Any) -> Any:  # noqa: A001  (JAX's name)
    """``stack([f(x) for x in xs])`` over the leading axis of `xs` (a pytree), as one scan."""
    _callable(f, "map", "f")
    return scan(lambda c, x: (c, f(x)), (), xs)[1]


__all__ = ["cond", "fori_loop", "leaf_names", "map", "scan", "switch", "trace_body", "while_loop"]
