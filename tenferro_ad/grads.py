"""grad and value_and_grad.

Under a transformation (grad of grad, a trace, `compile`) the gradient is `vjp`: the JVP
trace linearized and transposed, so it nests with everything. Called eagerly (nothing on
the interpreter stack but observers that take whole graphs, such as energy meters), the
function runs once on plain tensors under a `GradientTape` watching fresh aliases of the
differentiated arguments: the forward pass is the eager ops themselves, and a loop that
takes the gradient of the same computation again replays the tape's cached backward graph
as one plan, instead of tracing the JVP, the linear graph and its transpose on every call.
Both routes apply the same rules (custom_jvp/custom_vjp functions included).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tenferro_core.errors import ArgumentError, MissingRuleError, ShapeError
from tenferro_runtime import array_api as xp
from tenferro_runtime import tracing
from tenferro_runtime.pytree import tree_flatten, tree_unflatten
from tenferro_runtime.tensor import Tensor

from .ad_util import Zero
from .api import _argnums, _as_tensor, _check_argnums_type, _check_callable, _check_differentiable, vjp
from .jvp import jvp_rule
from .tape import GradientTape


def value_and_grad(fn: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable:
    """A function returning (fn(*args), gradient of fn with respect to args[argnums])."""
    return _value_and_grad(fn, argnums, has_aux, "value_and_grad")


def grad(fn: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable:
    """The gradient of a real-scalar function with respect to args[argnums]."""
    vg = _value_and_grad(fn, argnums, has_aux, "grad")

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        out, g = vg(*args, **kwargs)
        return (g, out[1]) if has_aux else g

    return wrapped


def _value_and_grad(fn: Callable, argnums: Any, has_aux: bool, name: str) -> Callable:
    _check_callable(fn, name)
    _check_argnums_type(argnums, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        nums = _argnums(argnums, len(args), name)
        flat = [_check_differentiable(args[a], a, name) for a in nums]
        stack = tracing.interpreters()
        if stack is tracing.BOTTOM or stack.graphs:
            out, aux, g = _by_tape(fn, args, kwargs, nums, flat, has_aux)
        else:
            out, aux, g = _by_vjp(fn, args, kwargs, nums, has_aux)
        g = g[0] if isinstance(argnums, int) else g
        return ((out, aux) if has_aux else out), g

    return wrapped


def _by_vjp(fn: Callable, args: tuple, kwargs: dict, nums: tuple, has_aux: bool) -> tuple:
    def partial(*diff: Any) -> Any:
        full = list(args)
        for a, d in zip(nums, diff):
            full[a] = d
        return fn(*full, **kwargs)

    res = vjp(partial, *[args[a] for a in nums], has_aux=has_aux)
    out, vjp_fn = res[0], res[1]
    _check_scalar(out)
    return out, (res[2] if has_aux else None), vjp_fn(xp.ones_like(out))


def _by_tape(fn: Callable, args: tuple, kwargs: dict, nums: tuple, flat: list,
             has_aux: bool) -> tuple:
    """fn run eagerly under a tape; `flat`: each differentiated argument's tensors and
    structure. The tape knows tensors by identity, so it watches new tensor objects holding
    the arguments' buffers: the same tensor closed over by fn, or passed as two arguments, is
    then a constant or two sources, as under `vjp`."""
    full = list(args)
    trees, sources = [], []
    for a, (leaves, tree) in zip(nums, flat):
        fresh = [_alias(t) for t in leaves]
        full[a] = tree_unflatten(tree, fresh)
        trees.append((tree, len(fresh)))
        sources += fresh
    tape = GradientTape()
    with tape:
        tape.watch(sources)
        res = fn(*full, **kwargs)
    aux = None
    if has_aux:
        if not (isinstance(res, tuple) and len(res) == 2):
            raise ArgumentError("with has_aux=True the function must return a pair (output, aux)")
        res, aux = res
    leaves, tree = tree_flatten(res)
    out = tree_unflatten(tree, [_as_tensor(o, "an output of the differentiated function")
                                for o in leaves])
    _check_scalar(out)
    try:
        flat = tape.gradient(out, sources)
    except MissingRuleError as err:
        raise _first_missing_rule(tape) or err from None
    grads, i = [], 0
    for tree, n in trees:
        grads.append(tree_unflatten(tree, flat[i:i + n]))
        i += n
    return out, aux, tuple(grads)


def _first_missing_rule(tape: GradientTape) -> MissingRuleError | None:
    """The error `vjp` gives where the backward walk found a rule missing: the one for the
    first recorded op, in forward order, with no rule for the tangents it would get."""
    live = tape._live
    for prim, args, _, outs in tape._records:
        if not prim.differentiable or not any(id(o) in live for o in outs):
            continue  # as JVPTrace.process (floor), or no float output (a comparison)
        tangents = tuple([a if id(a) in live else Zero(a._aval) for a in args])
        try:
            jvp_rule(prim, tangents, args[0]._aval.device.runtime)
        except MissingRuleError as err:
            return err
    return None


def _alias(t: Tensor) -> Tensor:
    return Tensor._new(t._buf, t._aval)


def _check_scalar(out: Any) -> None:
    if not isinstance(out, Tensor) or out.shape != () or out.dtype.kind not in "f":
        got = f"{out.dtype}{list(out.shape)}" if isinstance(out, Tensor) else type(out).__name__
        raise ShapeError(
            f"grad needs a function returning a real scalar (0-d floating tensor), got {got}; "
            f"reduce it (e.g. sum) or use vjp/jacrev"
        )
