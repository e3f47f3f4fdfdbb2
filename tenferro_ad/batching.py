"""`vmap`: the batching transformation, a `BatchTrace` driven by the registered ``batch`` rules.

A `BatchTracer` stands for one example of a batch: its aval is the per-example aval and its
value `val` holds every example, stacked along axis `bdim`. A ``batch`` rule
``rule(args, dims, **params) -> (out, out_dims)`` gets the operands' values and their batch
axes (None: the operand is the same for every example) and returns the batched result and its
batch axis (a tuple of both for multiple-result ops). Every result is checked against the
op's abstract eval, as a kernel's is. An op without a rule is batched by a loop over the
examples (`loop_batch`, with a `PerformanceWarning`).

Rules are written with `tenferro_runtime.lax` and the helpers here (`moveaxis`,
`to_front`, `batch_size`), so they nest: ``vmap(vmap(f))``, ``grad(vmap(f))``,
``vmap(grad(f))`` and ``compile(vmap(f))`` all bind primitives on lower-level values.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

from tenferro_core.avals import Aval
from tenferro_core.errors import (
    ArgumentError,
    AxisError,
    ConcretizationError,
    KernelError,
    ShapeError,
)
from tenferro_runtime import array_api as xp
from tenferro_runtime import lax
from tenferro_runtime.pytree import TreeDef, tree_flatten, tree_unflatten
from tenferro_runtime.tensor import Tensor
from tenferro_runtime.tracing import Trace, Tracer, new_trace


class PerformanceWarning(UserWarning):
    """A transformation took a slow route (an op batched by a loop over the examples)."""


class BatchTracer(Tracer):
    """One example of a batch: `val` holds all of them along axis `bdim`."""

    __slots__ = ("val", "bdim")


class BatchTrace(Trace):
    """Applies each primitive's batch rule to (values, batch axes)."""

    def __init__(self, axis_size: int):
        self.axis_size = axis_size

    def tracer(self, val: Any, bdim: int | None) -> Any:
        if bdim is None:
            return val
        t = object.__new__(BatchTracer)
        t._aval = _example_aval(val, bdim)
        t._trace = self
        t.val, t.bdim = val, bdim
        return t

    def unpack(self, x: Any) -> tuple[Any, int | None]:
        if isinstance(x, BatchTracer) and x._trace is self:
            return x.val, x.bdim
        return x, None

    def concrete(self, tracer: Any) -> Any:
        raise ConcretizationError(
            f"inside vmap a value ({tracer._aval.str_short()} per example) differs between the "
            f"{self.axis_size} examples, so it has no single concrete value for Python control "
            f"flow, bool(), float() or a data-dependent shape; use xp.where / lax.select, or "
            f"tenferro_runtime.lax.cond / while_loop, which batch")

    def process(self, prim: Any, args: tuple, params: dict) -> Any:
        vals, dims = zip(*[self.unpack(a) for a in args]) if args else ((), ())
        if all(d is None for d in dims):
            return prim.bind(*vals, **params)
        avals = tuple(a._aval for a in args)
        nparams = prim.check_params(params, avals)
        rule = avals[0].device.runtime.rule("batch", prim)
        if rule is None:
            out, out_dims = loop_batch(prim, vals, dims, self.axis_size, **nparams)
        else:
            out, out_dims = rule(tuple(vals), tuple(dims), **nparams)
        check_batched(prim, avals, nparams, out, out_dims, self.axis_size,
                      who=f"the batch rule of {_what(prim)}" if rule is not None else None)
        if prim.multiple_results:
            return tuple(self.tracer(o, d) for o, d in zip(out, out_dims))
        return self.tracer(out, out_dims)


def _what(prim: Any) -> str:
    return f"extension op {prim.name!r}" if prim.family else f"primitive {prim.name!r}"


def check_batched(prim: Any, avals: tuple, params: dict, out: Any, out_dims: Any, size: int,
                  who: str | None = None) -> None:
    """Raise KernelError unless each batched result, with its batch axis taken out, has the
    aval the op's abstract eval gives for one example (and the batch axis `size` entries)."""
    want = prim.abstract_eval(avals, params)
    outs, dims = (out, out_dims) if prim.multiple_results else ((out,), (out_dims,))
    who = who or f"the loop batching {_what(prim)}"
    if not isinstance(outs, (tuple, list)) or not isinstance(dims, (tuple, list)) \
            or len(outs) != len(want) or len(dims) != len(want):
        raise KernelError(f"{who} returned {type(outs).__name__} results with batch axes "
                          f"{dims!r}; the op has {len(want)} result(s): return (results, "
                          f"batch axes) with one of each per result")
    for i, (o, d, w) in enumerate(zip(outs, dims, want)):
        shape = tuple(getattr(o, "shape", ()))
        if d is None:
            per, n = shape, size
        elif isinstance(d, int) and 0 <= d < len(shape):
            per, n = shape[:d] + shape[d + 1:], shape[d]
        else:
            per, n = None, None
        ok = isinstance(o, Tensor) and per == w.shape and n == size and o.dtype is w.dtype
        if not ok:
            got = (f"{getattr(o, 'dtype', type(o).__name__)}{list(shape)} with batch axis {d!r}")
            raise KernelError(
                f"{who} returned {got} for result {i}; the op's abstract eval expects "
                f"{w.dtype}{list(w.shape)} per example and a batch axis of {size} entries; fix "
                f"the rule or its registration")


# ---- helpers for batch rules ---------------------------------------------------------------


def moveaxis(x: Any, src: int, dst: int) -> Any:
    """`x` with axis `src` moved to position `dst` (a transpose, or `x` itself)."""
    if src == dst:
        return x
    perm = list(range(x.ndim))
    perm.insert(dst, perm.pop(src))
    return lax.transpose(x, permutation=tuple(perm))


def broadcast_batch(x: Any, size: int, axis: int = 0) -> Any:
    """`x` repeated `size` times along a new axis `axis` (an unbatched operand made batched)."""
    shape = x.shape[:axis] + (size,) + x.shape[axis:]
    dims = tuple(i for i in range(len(shape)) if i != axis)
    return lax.broadcast_in_dim(x, shape=shape, broadcast_dimensions=dims)


def to_front(x: Any, d: int | None, size: int) -> Any:
    """`x` with its batch axis first: moved there, or made by broadcasting when unbatched."""
    return broadcast_batch(x, size) if d is None else moveaxis(x, d, 0)


def batch_first(args: Sequence[Any], dims: Sequence[int | None]) -> tuple[list, tuple]:
    """The operands with each batch axis moved first (shared ones as they are), and their
    batch axes now (0, or None)."""
    return ([x if d is None else moveaxis(x, d, 0) for x, d in zip(args, dims)],
            tuple(None if d is None else 0 for d in dims))


def batch_size(args: Sequence[Any], dims: Sequence[int | None]) -> int:
    """The batch size, read from the first batched operand."""
    for x, d in zip(args, dims):
        if d is not None:
            return x.shape[d]
    raise ArgumentError("batch_size: no operand is batched")


def example(x: Any, d: int | None, i: int) -> Any:
    """Example `i` of `x` batched along `d` (x itself when unbatched)."""
    if d is None:
        return x
    start = [0] * x.ndim
    limit = list(x.shape)
    start[d], limit[d] = i, i + 1
    piece = lax.slice(x, start_indices=tuple(start), limit_indices=tuple(limit),
                      strides=(1,) * x.ndim)
    return lax.reshape(piece, new_sizes=x.shape[:d] + x.shape[d + 1:])


def stack(xs: Sequence[Any], aval: Any, size: int) -> Any:
    """`xs` (one per example, all of `aval`) stacked along a new first axis."""
    if not xs:
        return lax.full(shape=(size,) + aval.shape, fill_value=0, dtype=aval.dtype,
                        device=aval.device)
    rows = [broadcast_batch(x, 1) for x in xs]
    return rows[0] if len(rows) == 1 else lax.concatenate(*rows, dimension=0)


def loop_batch(prim: Any, args: tuple, dims: tuple, size: int, **params: Any) -> tuple:
    """Batch `prim` by applying it to each example and stacking the results (what an op
    without a batch rule gets; warns once per call site)."""
    warnings.warn(
        f"vmap: {_what(prim)} has no batch rule, so it runs once per example ({size} times) "
        f"and the results are stacked; register one in your plugin's tenferro_register hook "
        f"with registry.add_rule('batch', {prim.name!r}, fn), fn(args, dims, **params) -> "
        f"(out, out_dims) (see docs/extensions.md)", PerformanceWarning, stacklevel=4)
    per = [prim.bind(*[example(a, d, i) for a, d in zip(args, dims)], **params)
           for i in range(size)]
    avals = prim.abstract_eval(tuple(_example_aval(a, d) for a, d in zip(args, dims)), params)
    if prim.multiple_results:
        outs = tuple(stack([p[k] for p in per], av, size) for k, av in enumerate(avals))
        return outs, (0,) * len(outs)
    return stack(per, avals[0], size), 0


def _example_aval(x: Any, d: int | None) -> Aval:
    """The aval of one example of `x` batched along `d`."""
    if d is None:
        return x._aval
    s = x.shape
    return Aval(s[:d] + s[d + 1:], x.dtype, x.device)


def batch_graph(graph: Any, batched: Sequence[bool], size: int,
                force: Sequence[bool] | None = None) -> tuple[Any, tuple]:
    """(graph of the whole batch, which results are batched): `graph` traced under vmap with
    its inputs batched on axis 0 where `batched`; results batched on axis 0 where they
    depend on a batched input or are `force`d (default: every result)."""
    from tenferro_runtime.graph import eval_graph, trace

    force = (True,) * len(graph.outputs) if force is None else tuple(force)
    out_b: list = []

    def fn(*xs: Any) -> list:
        with new_trace(BatchTrace(size)) as bt:
            outs = eval_graph(graph, *[bt.tracer(x, 0 if b else None) for x, b in zip(xs, batched)])
            res, pattern = [], []
            for o, f in zip(outs, force):
                val, d = bt.unpack(o)
                pattern.append(d is not None or f)
                res.append(to_front(val, d, size) if pattern[-1] else val)
        out_b[:] = pattern
        return res

    avals = [Aval((size, *v.aval.shape), v.aval.dtype, v.aval.device) if b else v.aval
             for v, b in zip(graph.inputs, batched)]
    return trace(fn, *avals).replace(out_tree=None), tuple(out_b)


# ---- vmap ----------------------------------------------------------------------------------


def batch_flat(fn: Callable[[list], list], vals: Sequence[Any], dims: Sequence[int | None],
               size: int, out_dims: Sequence[int | None] | int | None = 0) -> list:
    """`fn` (a list of per-example values -> a list of outputs) applied to every example of
    `vals` (batched along `dims`); each output's batch axis is put at `out_dims` (one per
    output, or one for all; None: the output must be unbatched). Non-tensor outputs pass
    through as they are."""
    with new_trace(BatchTrace(size)) as bt:
        outs = fn([bt.tracer(v, d) for v, d in zip(vals, dims)])
        if not isinstance(out_dims, (list, tuple)):
            out_dims = [out_dims] * len(outs)
        return [_place(bt, o, d, size, i) for i, (o, d) in enumerate(zip(outs, out_dims))]


def _place(bt: BatchTrace, o: Any, axis: int | None, size: int, i: int) -> Any:
    if not isinstance(o, Tensor):
        return o
    val, d = bt.unpack(o)
    if axis is None:
        if d is not None:
            raise ShapeError(
                f"vmap: output {i} ({o._aval.str_short()} per example) depends on the batched "
                f"inputs, but out_axes gives it None (unbatched); give it an axis")
        return val
    nd = val.ndim + (d is None)
    if not -nd <= axis < nd:
        raise AxisError(f"vmap: out_axes {axis} is out of range for output {i}, of rank "
                        f"{nd} with the batch axis; expected an axis in [{-nd}, {nd})")
    axis %= nd
    return broadcast_batch(val, size, axis) if d is None else moveaxis(val, d, axis)


def _axes_for(prefix: Any, td: TreeDef, what: str) -> list:
    """One axis per leaf of `td`: `prefix` (in_axes / out_axes) broadcast as a tree prefix."""
    if prefix is None or (isinstance(prefix, int) and not isinstance(prefix, bool)):
        return [prefix] * td.num_leaves
    kind = td.kind
    if isinstance(prefix, (tuple, list)) and kind in ("tuple", "list", "namedtuple") \
            or isinstance(prefix, dict) and kind == "dict":
        if isinstance(prefix, dict):
            if tuple(sorted(prefix)) != td.meta:
                raise ArgumentError(f"vmap: {what} is a dict with keys {sorted(prefix)}, but the "
                                    f"value it describes has keys {list(td.meta)}")
            items = [prefix[k] for k in td.meta]
        else:
            items = list(prefix)
        if len(items) != len(td.children):
            raise ArgumentError(
                f"vmap: {what} has {len(items)} entries, but the value it describes has "
                f"{len(td.children)}; give one axis (int or None) per entry, or one for all")
        out: list = []
        for k, (p, c) in enumerate(zip(items, td.children)):
            out += _axes_for(p, c, f"{what}[{k!r}]")
        return out
    raise ArgumentError(
        f"vmap: {what} must be an int, None, or a tuple/list/dict of them matching the value's "
        f"structure ({td.kind}), got {type(prefix).__name__} {prefix!r}")


def _check_axes_spec(spec: Any, name: str) -> None:
    leaves, _ = tree_flatten(spec)
    for a in leaves:
        if not isinstance(a, int) or isinstance(a, bool):
            raise ArgumentError(f"vmap: {name} entries must be ints or None, got "
                                f"{type(a).__name__} {a!r}")


def vmap(fn: Callable, in_axes: Any = 0, out_axes: Any = 0, axis_size: int | None = None) -> Callable:
    """`fn` mapped over an axis of its arguments: ``vmap(f)(xs)[i] == f(xs[i])``.

    `in_axes`: the batched axis of each argument (a tree prefix of the arguments: an int for
    all, a tuple with one entry per argument, None for an argument shared by every example,
    negative axes counted from the end). `out_axes`: where each output's batch axis goes.
    `axis_size`: the batch size, needed when no argument is batched.
    """
    from .api import _check_callable

    _check_callable(fn, "vmap")
    _check_axes_spec(in_axes, "in_axes")
    _check_axes_spec(out_axes, "out_axes")
    if axis_size is not None and (not isinstance(axis_size, int) or isinstance(axis_size, bool)
                                  or axis_size < 0):
        raise ArgumentError(f"vmap: axis_size must be a non-negative int, got {axis_size!r}")

    def batched(*args: Any) -> Any:
        spec = in_axes
        if isinstance(spec, list):
            spec = tuple(spec)
        if isinstance(spec, tuple) and len(spec) != len(args):
            raise ArgumentError(
                f"vmap: in_axes has {len(spec)} entries but the function was called with "
                f"{len(args)} positional argument(s); give one entry per argument")
        leaves, in_tree = tree_flatten(args)
        axes = _axes_for(spec, in_tree, "in_axes")
        vals, dims, size, first = [], [], axis_size, None
        for k, (x, a) in enumerate(zip(leaves, axes)):
            where = _leaf_name(in_tree, k)
            if a is None:
                vals.append(x)
                dims.append(None)
                continue
            if not isinstance(x, Tensor):
                if isinstance(x, (int, float, complex)) and not isinstance(x, bool):
                    raise ArgumentError(
                        f"vmap: {where} is a Python number, which has no axis {a} to map over; "
                        f"pass a tensor, or give it in_axes None")
                raise ArgumentError(f"vmap: {where} must be a tenferro Tensor to be mapped over "
                                    f"axis {a}, got {type(x).__name__}; give it in_axes None")
            if not -x.ndim <= a < x.ndim:
                raise AxisError(f"vmap: in_axes {a} is out of range for {where}, of shape "
                                f"{x.shape} (rank {x.ndim}); expected an axis in "
                                f"[{-x.ndim}, {x.ndim})")
            a %= x.ndim
            n = x.shape[a]
            if size is None:
                size, first = n, (where, a)
            elif n != size:
                src = (f"{first[0]} has size {size} on axis {first[1]}" if first
                       else f"axis_size is {size}")
                raise ShapeError(f"vmap: mapped axes must all have one size: {src}, but {where} "
                                 f"has size {n} on axis {a}")
            vals.append(x)
            dims.append(a)
        if size is None:
            raise ArgumentError("vmap: no argument is mapped (all in_axes are None) and no "
                                "axis_size was given; pass axis_size= to set the batch size")
        out_tree: list = []

        def flat(ins: list) -> list:
            out = fn(*tree_unflatten(in_tree, ins))
            o_leaves, td = tree_flatten(out)
            out_tree.append(td)
            bad = [o for o in o_leaves if not isinstance(o, Tensor)]
            if bad:
                raise ArgumentError(f"vmap: the mapped function must return tensors (a pytree of "
                                    f"them), got {type(bad[0]).__name__}")
            o_axes[:] = _axes_for(out_axes, td, "out_axes")
            return o_leaves

        o_axes: list = []
        outs = batch_flat(flat, vals, dims, size, o_axes)
        return tree_unflatten(out_tree[0], outs)

    batched.__wrapped__ = fn
    return batched


def _leaf_name(td: TreeDef, k: int) -> str:
    """'argument i' (or 'argument i, leaf j') of the leaf `k` of the arguments' tree."""
    for i, c in enumerate(td.children):
        n = c.num_leaves
        if k < n:
            return f"argument {i}" if c.kind == "leaf" else f"argument {i} (leaf {k})"
        k -= n
    return f"leaf {k}"


def eye_basis(like: Any) -> Any:
    """The standard basis of `like`'s elements: shape (like.size,) + like.shape."""
    n = like.size
    eye = xp.eye(n, dtype=like.dtype, device=like.device)
    return xp.reshape(eye, (n,) + tuple(like.shape))


__all__ = ["BatchTrace", "BatchTracer", "PerformanceWarning", "batch_first", "batch_flat",
           "batch_graph", "batch_size",
           "broadcast_batch", "check_batched", "example", "eye_basis", "loop_batch", "moveaxis",
           "stack", "to_front", "vmap"]
