"""The transformations: jvp, linearize, vjp, jacfwd, jacrev, hessian (grad: `grads`).

Forward mode runs the JVP trace. Reverse mode is linearize + transpose: the JVP
trace runs with tangents that are tracers of a Graph trace one level below, so
the tangent computation is recorded as a linear Graph (primal values enter it as
constants) and `transpose.backward_pass` runs it backwards. Everything binds
primitives, so every transformation nests with every other.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

from tenferro_core.errors import ArgumentError, DTypeError, ShapeError
from tenferro_runtime import array_api as xp
from tenferro_runtime.graph import Graph, GraphTrace, eval_graph, trace
from tenferro_runtime.pytree import tree_flatten, tree_unflatten, unregistered_hint
from tenferro_runtime.tensor import Tensor
from tenferro_runtime.tracing import new_trace

from .ad_util import instantiate, is_zero
from .batching import eye_basis, vmap
from .jvp import JVPTrace, JVPTracer
from .transpose import backward_pass


def _as_tensor(x: Any, what: str) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (float, complex, int)) and not isinstance(x, bool):
        return xp.asarray(x)
    hint = "" if type(x).__module__ == "builtins" else f"; {unregistered_hint(x)}"
    raise ArgumentError(f"{what} must be a tenferro Tensor (or a Python number), got "
                        f"{type(x).__name__}{hint}")


def _check_callable(fn: Any, name: str) -> None:
    """Reject a non-callable `fn` when a transformation is built, before anything runs."""
    if not callable(fn):
        raise ArgumentError(
            f"{name} expects a function (a callable) as its first argument, got "
            f"{type(fn).__name__} {_short(fn)}; pass the function itself, e.g. {name}(f) rather than "
            f"{name}(f(x))"
        )


def _short(x: Any) -> str:
    r = repr(x)
    return r if len(r) <= 40 else r[:37] + "..."


def _check_argnums_type(argnums: Any, name: str, single: bool = False) -> None:
    """argnums' type, checked when a transformation is built (its range needs the call)."""
    def is_int(a: Any) -> bool:
        return isinstance(a, int) and not isinstance(a, bool)

    if is_int(argnums):
        return
    if single:
        raise ArgumentError(
            f"{name}: argnums must be one int (the Jacobian is taken with respect to a single "
            f"argument), got {argnums!r}; call {name} once per argument"
        )
    if not (isinstance(argnums, (tuple, list)) and argnums and all(is_int(a) for a in argnums)):
        raise ArgumentError(
            f"{name}: argnums must be an int or a non-empty tuple of ints, got {argnums!r}"
        )


def _tensor_leaves(tree: Any, what: str) -> tuple[list[Tensor], Any]:
    leaves, td = tree_flatten(tree)
    return [_as_tensor(x, what) for x in leaves], td


def _check_tangent(p: Tensor, t: Any, i: int) -> Any:
    if is_zero(t):
        return t
    t = _as_tensor(t, "tangent")
    if t.shape != p.shape or t.dtype is not p.dtype:
        raise ShapeError(
            f"jvp: tangent {i} must match its primal ({p.dtype}{list(p.shape)}), got "
            f"{t.dtype}{list(t.shape)}"
        )
    return t


def _jvp_flat(fn: Callable, primals: list[Tensor], tangents: list[Any]) -> tuple[list, list]:
    with new_trace(JVPTrace()) as jt:
        outs = fn([jt.tracer(p, t) for p, t in zip(primals, tangents)])
        pairs = [jt.unpack(_as_tensor(o, "an output of the differentiated function")) for o in outs]
    return [p for p, _ in pairs], [t for _, t in pairs]


def jvp(fn: Callable, primals: Sequence[Any], tangents: Sequence[Any]) -> tuple[Any, Any]:
    """(fn(*primals), J·tangents); primals and tangents are matching pytrees."""
    _check_callable(fn, "jvp")
    p_leaves, in_tree = _tensor_leaves(tuple(primals), "a primal")
    t_leaves, t_tree = tree_flatten(tuple(tangents))
    if t_tree != in_tree:
        raise ArgumentError(f"jvp: tangents must have the structure of the primals ({in_tree}), got {t_tree}")
    t_leaves = [_check_tangent(p, t, i) for i, (p, t) in enumerate(zip(p_leaves, t_leaves))]
    out_tree: list[Any] = []

    def flat(ins):
        out = fn(*tree_unflatten(in_tree, ins))
        leaves, td = tree_flatten(out)
        out_tree.append(td)
        return leaves

    po, to = _jvp_flat(flat, p_leaves, t_leaves)
    return tree_unflatten(out_tree[0], po), tree_unflatten(out_tree[0], [instantiate(t) for t in to])


def _linearize_flat(fn: Callable, primals: list[Tensor]) -> tuple[list, Graph]:
    with new_trace(GraphTrace()) as gt:
        tangents = [gt.new_input(p._aval) for p in primals]
        primal_out, tangent_out = _jvp_flat(fn, primals, tangents)
        gt.graph.outputs = [t if is_zero(t) else gt.to_var(t) for t in tangent_out]
    return primal_out, gt.graph


def linearize(fn: Callable, *primals: Any) -> tuple[Any, Callable]:
    """(fn(*primals), f_jvp) where f_jvp(*tangents) is the linear map, as a recorded Graph."""
    _check_callable(fn, "linearize")
    p_leaves, in_tree = _tensor_leaves(primals, "a primal")
    out_tree: list[Any] = []

    def flat(ins):
        leaves, td = tree_flatten(fn(*tree_unflatten(in_tree, ins)))
        out_tree.append(td)
        return leaves

    primal_out, graph = _linearize_flat(flat, p_leaves)

    def f_jvp(*tangents: Any) -> Any:
        t_leaves, t_tree = tree_flatten(tangents)
        if t_tree != in_tree:
            raise ArgumentError(f"linearized function expects tangents shaped like {in_tree}, got {t_tree}")
        t_leaves = [_check_tangent(p, t, i) for i, (p, t) in enumerate(zip(p_leaves, t_leaves))]
        outs = eval_graph(graph, *[instantiate(t) for t in t_leaves])
        return tree_unflatten(out_tree[0], [instantiate(o) for o in outs])

    f_jvp.graph = graph
    return tree_unflatten(out_tree[0], primal_out), f_jvp


def transpose_graph(graph: Graph) -> Graph:
    """The transpose of a linear Graph (e.g. ``linearize(...)[1].graph``) as a Graph:
    output cotangents -> input cotangents."""
    avals = [o.aval for o in graph.outputs]
    return trace(lambda *cts: [instantiate(c) for c in backward_pass(graph, list(cts))], *avals)


def _vjp_flat(fn: Callable, primals: list[Tensor]) -> tuple[list, Callable]:
    primal_out, graph = _linearize_flat(fn, primals)

    def vjp_flat(cts: list[Any]) -> list[Any]:
        return [instantiate(c) for c in backward_pass(graph, cts)]

    return primal_out, vjp_flat


def vjp(fn: Callable, *primals: Any, has_aux: bool = False) -> tuple:
    """(fn(*primals), vjp_fn[, aux]) with vjp_fn(cotangents) -> cotangents of the primals."""
    _check_callable(fn, "vjp")
    p_leaves, in_tree = _tensor_leaves(primals, "a primal")
    out_info: list[Any] = []

    def flat(ins):
        out = fn(*tree_unflatten(in_tree, ins))
        if has_aux:
            if not (isinstance(out, tuple) and len(out) == 2):
                raise ArgumentError("with has_aux=True the function must return a pair (output, aux)")
            out, aux = out
            out_info.append(aux)
        leaves, td = tree_flatten(out)
        out_info.insert(0, td)
        return leaves

    primal_out, vjp_flat = _vjp_flat(flat, p_leaves)
    out_tree = out_info[0]

    def vjp_fn(cts: Any) -> Any:
        ct_leaves, ct_tree = tree_flatten(cts)
        if ct_tree != out_tree:
            raise ArgumentError(
                f"vjp: cotangents must have the structure of the outputs ({out_tree}), got {ct_tree}"
            )
        checked = []
        for i, (o, c) in enumerate(zip(primal_out, ct_leaves)):
            c = _as_tensor(c, "a cotangent")
            if c.shape != o.shape or c.dtype is not o.dtype:
                raise ShapeError(
                    f"vjp: cotangent {i} must match its output ({o.dtype}{list(o.shape)}), got "
                    f"{c.dtype}{list(c.shape)}"
                )
            checked.append(c)
        return tree_unflatten(in_tree, vjp_flat(checked))

    out = tree_unflatten(out_tree, primal_out)
    if not has_aux:
        return out, vjp_fn
    aux_leaves, aux_tree = tree_flatten(out_info[1])
    return out, vjp_fn, tree_unflatten(aux_tree, [_primal_of(a) for a in aux_leaves])


def _primal_of(x: Any) -> Any:
    """The primal value of an auxiliary output computed under a finished JVP trace."""
    while isinstance(x, JVPTracer) and not x._trace.active:
        x = x.primal
    return x


def _argnums(argnums: int | Sequence[int], nargs: int, name: str) -> tuple[int, ...]:
    if isinstance(argnums, int) and not isinstance(argnums, bool):
        nums: tuple = (argnums,)
    elif isinstance(argnums, (tuple, list)):
        nums = tuple(argnums)
    else:
        raise ArgumentError(f"{name}: argnums must be an int or a tuple of ints, got {argnums!r}")
    for a in nums:
        if not isinstance(a, int) or isinstance(a, bool) or not -nargs <= a < nargs:
            raise ArgumentError(
                f"{name}: argnums {argnums!r} is out of range for a call with {nargs} positional "
                f"argument(s); expected ints in [{-nargs}, {nargs})"
            )
    out = tuple(operator.index(a) % nargs for a in nums)
    if len(set(out)) != len(out):
        raise ArgumentError(f"{name}: argnums {argnums!r} names an argument twice; list each once")
    return out


def _check_differentiable(tree: Any, argnum: int, name: str) -> tuple[list[Tensor], Any]:
    """The differentiated argument `tree`'s leaves as tensors, and its structure; a typed error
    for a leaf that is no tensor or number, or not floating or complex."""
    leaves, td = tree_flatten(tree)
    tensors = [_as_tensor(leaf, f"{name}: argument {argnum}") for leaf in leaves]
    for t in tensors:
        if t.dtype.kind not in "fc":
            raise DTypeError(
                f"{name}: argument {argnum} has dtype {t.dtype}; gradients are defined for floating "
                f"and complex inputs only; convert it with astype(x, float64) or pass it as a "
                f"non-differentiated argument (argnums)"
            )
    return tensors, td


def _one_argument(fn: Callable, args: tuple, argnums: int, name: str) -> tuple[Tensor, Callable]:
    """The differentiated argument and fn as a function of it alone."""
    (a,) = _argnums(argnums, len(args), name)
    x = _as_tensor(args[a], f"{name} input")
    _check_differentiable(x, a, name)

    def f(xi: Tensor) -> Any:
        full = list(args)
        full[a] = xi
        return fn(*full)

    return x, f


def _one_output(out: Any, name: str) -> Tensor:
    if not isinstance(out, Tensor):
        raise ArgumentError(
            f"{name} needs a function returning one tensor, got {type(out).__name__}; return a "
            f"single tensor (stack or concatenate several outputs, or take one {name} per output)"
        )
    return out


def jacfwd(fn: Callable, argnums: int = 0) -> Callable:
    """The Jacobian by forward mode: jvp mapped (vmap) over the input's basis vectors; shape
    out.shape + in.shape."""
    _check_callable(fn, "jacfwd")
    _check_argnums_type(argnums, "jacfwd", single=True)

    def wrapped(*args: Any) -> Any:
        x, f = _one_argument(fn, args, argnums, "jacfwd")

        def push(t: Tensor) -> Tensor:
            return _one_output(jvp(f, (x,), (t,))[1], "jacfwd")

        cols = vmap(push, out_axes=-1)(eye_basis(x))  # out.shape + (x.size,)
        return xp.reshape(cols, cols.shape[:-1] + x.shape)

    return wrapped


def jacrev(fn: Callable, argnums: int = 0) -> Callable:
    """The Jacobian by reverse mode: the vjp mapped (vmap) over the output's basis vectors;
    shape out.shape + in.shape."""
    _check_callable(fn, "jacrev")
    _check_argnums_type(argnums, "jacrev", single=True)

    def wrapped(*args: Any) -> Any:
        x, f = _one_argument(fn, args, argnums, "jacrev")
        out, vjp_fn = vjp(f, x)
        _one_output(out, "jacrev")
        rows = vmap(lambda ct: vjp_fn(ct)[0])(eye_basis(out))
        return xp.reshape(rows, out.shape + x.shape)

    return wrapped


def hessian(fn: Callable, argnums: int = 0) -> Callable:
    """jacfwd(jacrev(fn))."""
    _check_callable(fn, "hessian")
    _check_argnums_type(argnums, "hessian", single=True)
    return jacfwd(jacrev(fn, argnums), argnums)
