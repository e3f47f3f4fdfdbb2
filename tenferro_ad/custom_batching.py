"""`custom_jvp` / `custom_vjp` functions under `vmap`: batched with their rules.

Called with a batch trace's values, such a function becomes a new custom function of the
batched values (batch axis first) whose body and rules are the user's, mapped over the
examples; so an outer `grad`/`jvp` still uses the user's rule, not the function's own ops
(JAX's issue class "custom rules under vmap"). The cotangent of an argument that was the
same for every example is the sum over the examples.
"""

from __future__ import annotations

from typing import Any

from tenferro_runtime import lax
from tenferro_runtime.pytree import tree_flatten, tree_unflatten
from tenferro_runtime.tensor import Tensor

from .batching import BatchTrace, batch_first, batch_flat, batch_size


def call_batched(fn: Any, args: tuple, trace: BatchTrace) -> Any:
    """`fn(*args)` (a custom function) where `trace` is the top trace of its arguments."""
    leaves, in_tree = tree_flatten(args)
    vals, dims = zip(*[trace.unpack(x) for x in leaves]) if leaves else ((), ())
    vals, dims = batch_first(vals, dims)
    out = batched_version(fn, in_tree, dims, trace.axis_size)(*tree_unflatten(in_tree, vals))
    o_leaves, o_tree = tree_flatten(out)
    return tree_unflatten(o_tree, [trace.tracer(o, 0) if isinstance(o, Tensor) else o
                                   for o in o_leaves])


def batch_custom_call(args: tuple, dims: tuple, *, spec: Any) -> tuple:
    """Batch rule of `custom_call_p` (a custom function recorded as one op on a tape)."""
    size = batch_size(args, dims)
    vals, dims = batch_first(args, dims)
    out = batched_version(spec.fn, spec.in_tree, dims, size)(*tree_unflatten(spec.in_tree, vals))
    outs = tuple(tree_flatten(out)[0])
    return outs, (0,) * len(outs)


def batched_version(fn: Any, in_tree: Any, dims: tuple, size: int) -> Any:
    """A custom function of the batched arguments (batch axes `dims`: 0 or None per leaf)
    with `fn`'s body and rules mapped over the examples; every output batched on axis 0."""
    from .custom import custom_jvp

    holder: dict = {}

    def fun(*args: Any) -> Any:
        def per(ins: list) -> list:
            o_leaves, holder["out"] = tree_flatten(fn.fun(*tree_unflatten(in_tree, ins)))
            return o_leaves

        outs = batch_flat(per, tree_flatten(args)[0], dims, size, 0)
        return tree_unflatten(holder["out"], outs)

    fun.__name__ = f"vmap({getattr(fn.fun, '__name__', 'fn')})"
    if isinstance(fn, custom_jvp):
        new = custom_jvp(fun)
        new.defjvp(_batched_jvp(fn, in_tree, dims, size))
        return new
    from .custom import custom_vjp

    new = custom_vjp(fun)
    new.defvjp(*_batched_vjp(fn, in_tree, dims, size))
    return new


def _batched_jvp(fn: Any, in_tree: Any, dims: tuple, size: int) -> Any:
    def jvp(primals: Any, tangents: Any) -> tuple:
        p_leaves, t_leaves = tree_flatten(primals)[0], tree_flatten(tangents)[0]
        n = len(p_leaves)
        holder: dict = {}

        def per(ins: list) -> list:
            out, t_out = fn.jvp(tree_unflatten(in_tree, ins[:n]), tree_unflatten(in_tree, ins[n:]))
            o_leaves, holder["out"] = tree_flatten(out)
            return o_leaves + tree_flatten(t_out)[0]

        res = batch_flat(per, p_leaves + t_leaves, dims + dims, size, 0)
        k = len(res) // 2
        return tree_unflatten(holder["out"], res[:k]), tree_unflatten(holder["out"], res[k:])

    return jvp


def _batched_vjp(fn: Any, in_tree: Any, dims: tuple, size: int) -> tuple:
    trees: dict = {}

    def fwd(*args: Any) -> tuple:
        def per(ins: list) -> list:
            out, res = fn.fwd(*tree_unflatten(in_tree, ins))
            o_leaves, trees["out"] = tree_flatten(out)
            r_leaves, trees["res"] = tree_flatten(res)
            trees["n_out"] = len(o_leaves)
            return o_leaves + r_leaves

        outs = batch_flat(per, tree_flatten(args)[0], dims, size, 0)
        n = trees["n_out"]
        return tree_unflatten(trees["out"], outs[:n]), tree_unflatten(trees["res"], outs[n:])

    def bwd(res: Any, ct: Any) -> tuple:
        r_leaves = tree_flatten(res)[0]
        ct_leaves, ct_tree = tree_flatten(ct)
        r_dims = [0 if isinstance(r, Tensor) else None for r in r_leaves]
        nr = len(r_leaves)
        holder: dict = {}

        def per(ins: list) -> list:
            got = fn.bwd(tree_unflatten(trees["res"], ins[:nr]), tree_unflatten(ct_tree, ins[nr:]))
            leaves, holder["got"] = tree_flatten(got)
            return leaves

        outs = batch_flat(per, r_leaves + ct_leaves, r_dims + [0] * len(ct_leaves), size, 0)
        got = tree_unflatten(holder["got"], outs)
        if not isinstance(got, tuple) or len(got) != len(in_tree.children):
            return got  # custom_vjp reports the malformed result
        summed = []
        start = 0
        for g, arg_tree in zip(got, in_tree.children):
            arg_dims = dims[start:start + arg_tree.num_leaves]
            start += arg_tree.num_leaves
            if g is None or all(d is not None for d in arg_dims):
                summed.append(g)
                continue
            g_leaves, g_tree = tree_flatten(g)
            if len(g_leaves) != len(arg_dims):
                summed.append(g)
                continue
            g_leaves = [lax.reduce_sum(x, axes=(0,)) if d is None and isinstance(x, Tensor) else x
                        for x, d in zip(g_leaves, arg_dims)]
            summed.append(tree_unflatten(g_tree, g_leaves))
        return tuple(summed)

    return fwd, bwd


__all__ = ["batch_custom_call", "batched_version", "call_batched"]
