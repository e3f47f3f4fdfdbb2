"""`custom_jvp` and `custom_vjp`: functions with user-written derivative rules."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from tenferro_core.errors import ArgumentError, MissingRuleError, ShapeError
from tenferro_core.extension import define_op
from tenferro_core.params import p_any
from tenferro_runtime.pytree import tree_flatten, tree_unflatten
from tenferro_runtime.tensor import Tensor
from tenferro_runtime.tracing import BOTTOM, Tracer, interpreters, top_trace

from .ad_util import Zero, instantiate, is_zero
from .batching import BatchTrace
from .jvp import JVPTrace


def _split_at_jvp_trace(args: tuple) -> tuple | None:
    """(trace, in_tree, primals, tangents) at the JVP trace of the arguments; (batch trace,)
    when a vmap's trace is on top (the function is batched with its rules); None when no
    transformation's trace owns them (then the function just runs)."""
    leaves, in_tree = tree_flatten(args)
    trace = top_trace(tuple(leaves))
    if isinstance(trace, BatchTrace):
        return (trace,)
    if not isinstance(trace, JVPTrace):
        return None
    primals, tangents = zip(*[trace.unpack(x) for x in leaves])
    return trace, in_tree, primals, tangents


class custom_jvp:  # noqa: N801  (used as a decorator, like functools.partial)
    """Decorate `fun`; give its JVP with `@fun.defjvp`: ``jvp(primals, tangents) -> (out, t_out)``."""

    def __init__(self, fun: Callable):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.jvp: Callable | None = None

    def defjvp(self, jvp: Callable) -> Callable:
        self.jvp = jvp
        return jvp

    def __call__(self, *args: Any) -> Any:
        if self.jvp is None:
            raise MissingRuleError(
                f"custom_jvp function {self.fun.__name__!r} has no rule; add one with @f.defjvp"
            )
        split = _split_at_jvp_trace(args)
        if split is None:
            return _call(self, args)
        if len(split) == 1:
            from .custom_batching import call_batched

            return call_batched(self, args, split[0])
        trace, in_tree, primals, tangents = split
        o_leaves, t_leaves, o_tree = self.rule(in_tree, primals, tangents)
        return tree_unflatten(o_tree, [trace.tracer(p, t) for p, t in zip(o_leaves, t_leaves)])

    def rule(self, in_tree: Any, primals: tuple, tangents: tuple) -> tuple[list, list, Any]:
        """(output leaves, their tangents, the output's structure) from the user's rule."""
        out, t_out = self.jvp(tree_unflatten(in_tree, primals),
                              tree_unflatten(in_tree, [instantiate(t) for t in tangents]))
        o_leaves, o_tree = tree_flatten(out)
        t_leaves, t_tree = tree_flatten(t_out)
        if o_tree != t_tree:
            raise ArgumentError(
                f"custom_jvp rule of {self.fun.__name__!r} must return (output, tangent) of one "
                f"structure, got {o_tree} and {t_tree}"
            )
        return o_leaves, t_leaves, o_tree


class _Residuals:
    """Residuals of a custom_vjp forward pass, hashed by identity (they are a primitive param)."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


def _lin_rule(*tangent_avals, out_avals, **_):
    return tuple((a.shape, a.dtype) for a in out_avals)


def _lin_forward(*tangents, forward_error, **_):
    raise MissingRuleError(forward_error)


_PAYLOAD = {k: (p_any, None) for k in
            ("bwd", "residuals", "out_avals", "in_tree", "out_tree", "name", "forward_error")}
custom_vjp_lin_p = define_op(
    "tenferro_ad.custom_vjp_lin.v1", _lin_rule, payload=_PAYLOAD, nin=None, multiple_results=True,
    decomposition=_lin_forward,
    doc="The linear map of a custom_vjp function or of an op with a vjp rule; its transpose is bwd.",
)


def _lin_transpose(cts, *operands, bwd, residuals, out_avals, in_tree, out_tree, name, forward_error):
    """``bwd(residuals, ct)``: a tuple with one cotangent (pytree) per argument; None is a zero."""
    cts = [instantiate(c) for c in cts]
    got = bwd(residuals.value, tree_unflatten(out_tree, cts))
    if not isinstance(got, tuple) or len(got) != len(in_tree.children):
        raise ArgumentError(
            f"the backward function of {name} must return a tuple with one cotangent per "
            f"positional argument ({len(in_tree.children)}), None for a zero one; got "
            f"{type(got).__name__}" + (f" of length {len(got)}" if isinstance(got, tuple) else "")
        )
    leaves = []
    for ct, arg_tree in zip(got, in_tree.children):
        if ct is None:
            leaves += [None] * arg_tree.num_leaves
            continue
        ct_leaves, tree = tree_flatten(ct)
        if tree != arg_tree:
            raise ArgumentError(
                f"the backward function of {name} returned a cotangent shaped {tree} for an "
                f"argument shaped {arg_tree}"
            )
        leaves += ct_leaves
    out = []
    for op, ct in zip(operands, leaves):
        if ct is not None and not is_zero(ct) and ct.shape != op.aval.shape:
            raise ShapeError(
                f"the backward function of {name} returned a cotangent of shape {ct.shape} for an "
                f"argument of shape {op.aval.shape}"
            )
        out.append(Zero(op.aval) if ct is None else ct)
    return tuple(out)


def _lin_batch(args, dims, *, bwd, residuals, out_avals, in_tree, out_tree, name, forward_error):
    """The linear map on batched tangents (batch axis first): the same map whose backward
    function runs under vmap over the cotangents."""
    from tenferro_core.avals import Aval

    from .batching import batch_flat, batch_size, to_front

    size = batch_size(args, dims)
    args = [to_front(x, d, size) for x, d in zip(args, dims)]

    def batched_bwd(res: Any, ct: Any) -> Any:
        ct_leaves, ct_tree = tree_flatten(ct)
        holder: dict = {}

        def per(ins: list) -> list:
            leaves, holder["got"] = tree_flatten(bwd(res, tree_unflatten(ct_tree, ins)))
            return leaves

        outs = batch_flat(per, ct_leaves, [0] * len(ct_leaves), size, 0)
        return tree_unflatten(holder["got"], outs)

    outs = custom_vjp_lin_p.bind(
        *args, bwd=batched_bwd, residuals=residuals,
        out_avals=tuple(Aval((size,) + a.shape, a.dtype, a.device) for a in out_avals),
        in_tree=in_tree, out_tree=out_tree, name=name, forward_error=forward_error)
    return tuple(outs), (0,) * len(outs)


def _apply_backward(backward, ct):
    return backward(ct)


def vjp_rule_jvp(prim, vjp, primals, tangents, **params):
    """JVP of an op that has only a ``vjp`` rule ``vjp(primals, **params) -> (out, backward)``:
    the tangent is a `custom_vjp_lin_p` node whose transpose calls ``backward(ct)``, so the op
    differentiates in reverse mode (to any order where `backward` does) and not forward."""
    out, backward = vjp(tuple(primals), **params)
    outs = tuple(out) if prim.multiple_results else (out,)
    what = f"extension op {prim.name!r}" if prim.family else f"primitive {prim.name!r}"
    t_out = custom_vjp_lin_p.bind(
        *[instantiate(t) for t in tangents], bwd=_apply_backward, residuals=_Residuals(backward),
        out_avals=tuple(o.aval for o in outs), in_tree=tree_flatten(tuple(primals))[1],
        out_tree=tree_flatten(out)[1], name=f"the vjp rule of {what}",
        forward_error=(
            f"{what} has only a vjp rule, so forward mode (jvp, jacfwd, hessian) is unavailable "
            f"for it; register a jvp rule too, registry.add_rule('jvp', {prim.name!r}, fn) with "
            f"fn(primals, tangents, **params) -> (out, tangent_out) (see docs/extensions.md)"
        ),
    )
    return out, (t_out if prim.multiple_results else t_out[0])


class custom_vjp:  # noqa: N801
    """Decorate `fun`; give ``fwd(*args) -> (out, residuals)`` and ``bwd(residuals, ct) -> tuple``
    (one cotangent per argument, None for a zero one) with `fun.defvjp(fwd, bwd)`."""

    def __init__(self, fun: Callable):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.fwd: Callable | None = None
        self.bwd: Callable | None = None

    def defvjp(self, fwd: Callable, bwd: Callable) -> None:
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args: Any) -> Any:
        if self.fwd is None:
            raise MissingRuleError(
                f"custom_vjp function {self.fun.__name__!r} has no rule; call f.defvjp(fwd, bwd)"
            )
        split = _split_at_jvp_trace(args)
        if split is None:
            return _call(self, args)
        if len(split) == 1:
            from .custom_batching import call_batched

            return call_batched(self, args, split[0])
        trace, in_tree, primals, tangents = split
        o_leaves, t_out, o_tree = self.rule(in_tree, primals, tangents)
        return tree_unflatten(o_tree, [trace.tracer(p, t) for p, t in zip(o_leaves, t_out)])

    def rule(self, in_tree: Any, primals: tuple, tangents: tuple) -> tuple[list, list, Any]:
        """(output leaves, their tangents: one `custom_vjp_lin_p` node, the output's structure)."""
        res = self.fwd(*tree_unflatten(in_tree, primals))
        if not (isinstance(res, tuple) and len(res) == 2):
            raise ArgumentError(
                f"custom_vjp forward of {self.fun.__name__!r} must return (output, residuals)"
            )
        out, residuals = res
        o_leaves, o_tree = tree_flatten(out)
        t_out = custom_vjp_lin_p.bind(
            *[instantiate(t) for t in tangents], bwd=self.bwd, residuals=_Residuals(residuals),
            out_avals=tuple(o._aval for o in o_leaves), in_tree=in_tree, out_tree=o_tree,
            name=f"custom_vjp function {self.fun.__name__!r}",
            forward_error=(
                f"custom_vjp function {self.fun.__name__!r} supports reverse mode only (vjp, "
                f"grad, jacrev); for forward mode (jvp, jacfwd) define it with custom_jvp"
            ),
        )
        return o_leaves, list(t_out), o_tree


def _call(fn: Any, args: tuple) -> Any:
    """A custom_jvp/custom_vjp function called outside a JVP trace: it runs. Where observers
    see each op (a GradientTape), the call is then also bound as one `custom_call_p` op on the
    outputs it gave, so a tape records it with the user's rule (the backward walk reaches that
    record first; the function's own records then get no cotangent)."""
    out = fn.fun(*args)
    stack = interpreters()
    if stack is BOTTOM or not stack.observers:
        return out
    leaves, in_tree = tree_flatten(args)
    o_leaves, o_tree = tree_flatten(out)
    if not all(isinstance(x, Tensor) and not isinstance(x, Tracer) for x in (*leaves, *o_leaves)):
        return out
    spec = _CallSpec(fn, in_tree, o_tree, tuple([o._aval for o in o_leaves]))
    spec.ready = tuple(o_leaves)
    try:
        outs = custom_call_p.bind(*leaves, spec=spec)
    finally:
        spec.ready = None
    return tree_unflatten(o_tree, list(outs))


class _CallSpec:
    """A custom function with its argument and output structure (the `custom_call_p` param;
    equal for equal signatures, so cached derivative graphs are shared). `ready`: the
    outputs of the call being bound, which its decomposition returns instead of a rerun."""

    __slots__ = ("fn", "in_tree", "out_tree", "out_avals", "ready")

    def __init__(self, fn: Any, in_tree: Any, out_tree: Any, out_avals: tuple):
        self.fn, self.in_tree, self.out_tree, self.out_avals = fn, in_tree, out_tree, out_avals
        self.ready: tuple | None = None

    def _key(self) -> tuple:
        return (id(self.fn), self.in_tree, self.out_tree, self.out_avals)

    def __eq__(self, other: Any) -> bool:
        return type(other) is _CallSpec and other._key() == self._key()

    def __hash__(self) -> int:
        return hash(self._key())


def _call_shape(*avals: Any, spec: _CallSpec) -> tuple:
    return tuple((a.shape, a.dtype) for a in spec.out_avals)


def _call_run(*leaves: Any, spec: _CallSpec) -> tuple:
    if spec.ready is not None:
        return spec.ready
    return tuple(tree_flatten(spec.fn.fun(*tree_unflatten(spec.in_tree, leaves)))[0])


custom_call_p = define_op(
    "tenferro_ad.custom_call.v1", _call_shape, payload={"spec": (p_any, None)}, nin=None,
    multiple_results=True, decomposition=_call_run,
    doc="A custom_jvp/custom_vjp function called eagerly where a GradientTape records.",
)


def custom_call_jvp(primals: tuple, tangents: tuple, *, spec: _CallSpec) -> tuple:
    o_leaves, t_leaves, _ = spec.fn.rule(spec.in_tree, primals, tangents)
    return tuple(o_leaves), tuple(t_leaves)
