"""`checkpoint(f, policy=...)` (alias `remat`): gradients recompute `f`'s intermediates
instead of storing them.

Called eagerly with no transformation and no tape, `f` just runs. Anywhere else (a
`GradientTape`, `grad`/`vjp`/`jvp`, `compile`) `f` is traced once per signature into a graph
and bound as one `checkpoint` primitive: its forward pass keeps only its inputs, its outputs
and the values its policy names (`checkpoint_policies`), and the backward pass recomputes the
rest from those (checkpoint_rules.py). Like `compile`, tensors `f` closes over are read when it
is traced; they become operands of the primitive, so gradients reach them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from tenferro_core.errors import ArgumentError
from tenferro_runtime import tracing
from tenferro_runtime.caches import LRUCache
from tenferro_runtime.compile_keys import static_key
from tenferro_runtime.graph import trace
from tenferro_runtime.pytree import tree_flatten, tree_unflatten
from tenferro_runtime.tensor import Tensor
from tenferro_runtime.tracing import Tracer

from . import checkpoint_policies
from .checkpoint_rules import RematCallee, remat_p
from .tape import GradientTape


class Checkpointed:
    """A function whose gradient rematerializes its intermediates: call it like `fn`."""

    def __init__(self, fn: Callable, policy: Any, static_argnums: tuple, maxsize: int = 256):
        self.fn = fn
        self.policy = checkpoint_policies.resolve(policy)
        self.static_argnums = static_argnums
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn
        self._cache = LRUCache(f"checkpoint[{self.__name__}]", maxsize)

    def __repr__(self) -> str:
        return f"<checkpointed function {self.__name__}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        stack = tracing.interpreters()
        if stack is tracing.BOTTOM or not stack.traces and not any(
                isinstance(o, GradientTape) for o in stack.observers):
            return self.fn(*args, **kwargs)  # nothing will differentiate it
        callee, operands, out_tree = self._traced(args, kwargs)
        return tree_unflatten(out_tree, list(remat_p.bind(*operands, fn=callee)))

    def _traced(self, args: tuple, kwargs: dict) -> tuple:
        """(callee, its operands, the output structure), traced on a new signature."""
        for i in self.static_argnums:
            if i >= len(args):
                raise ArgumentError(
                    f"checkpoint({self.__name__}): static_argnums includes {i}, but the call passed "
                    f"{len(args)} positional argument(s); pass it positionally or fix static_argnums")
        statics = {i: args[i] for i in self.static_argnums}
        dyn = tuple(a for i, a in enumerate(args) if i not in statics)
        leaves, treedef = tree_flatten((dyn, kwargs))
        tensors = [x for x in leaves if isinstance(x, Tensor)]
        try:
            key = (treedef, tuple(x._aval if isinstance(x, Tensor) else static_key(x) for x in leaves),
                   tuple((i, static_key(v)) for i, v in statics.items()))
            hash(key)
        except TypeError:
            raise ArgumentError(
                f"checkpoint({self.__name__}): a static argument or non-tensor leaf is unhashable; "
                f"pass tensors, hashable Python values, or mark the argument with static_argnums"
            ) from None
        entry = self._cache.get(key)
        if entry is None:
            entry = self._trace(dyn, kwargs, statics, len(args))
            if entry[3]:
                self._cache.put(key, entry)
        callee, lifted, out_tree, _ = entry
        return callee, [*tensors, *lifted], out_tree

    def _trace(self, dyn: tuple, kwargs: dict, statics: dict, nargs: int) -> tuple:
        """(callee, lifted constants, output structure, cacheable): `fn` traced; the tensors it
        closes over become inputs (operands), so derivatives reach them; a traced one (a
        transformation's value) makes the entry valid for this call only."""

        def flat(dyn_args: tuple, kw: dict) -> Any:
            it = iter(dyn_args)
            full = [statics[i] if i in statics else next(it) for i in range(nargs)]
            return self.fn(*full, **kw)

        graph = trace(flat, dyn, kwargs)
        lift = [v for v, c in graph.consts.items()
                if isinstance(c, Tracer) or c._aval.dtype.kind in "fc"]
        values = [graph.consts[v] for v in lift]
        consts = {v: c for v, c in graph.consts.items() if v not in set(lift)}
        graph = graph.replace(inputs=[*graph.inputs, *lift], consts=consts)
        callee = RematCallee(graph, f"checkpoint({self.__name__})", self.policy)
        cacheable = not any(isinstance(c, Tracer) for c in values)
        return callee, values, graph.out_tree, cacheable


def checkpoint(fn: Callable | None = None, *, policy: Any = None,
               static_argnums: int | Sequence[int] = ()) -> Any:
    """`fn` whose gradient recomputes its intermediates instead of storing them.

    `policy` names what the forward pass may save: None or "nothing_saveable" (only the
    inputs), "dots_saveable" (contraction results), "everything_saveable", or a callable
    ``policy(prim, *avals, **params) -> bool`` (see `checkpoint_policies`). `static_argnums`
    name arguments passed as hashable Python values. Usable as a decorator.
    """
    if fn is None:
        return functools.partial(checkpoint, policy=policy, static_argnums=static_argnums)
    if not callable(fn):
        raise ArgumentError(
            f"checkpoint expects a function (a callable), got {type(fn).__name__}; pass the function "
            f"itself, e.g. checkpoint(f) rather than checkpoint(f(x))")
    nums = (static_argnums,) if isinstance(static_argnums, int) else static_argnums
    if not (isinstance(nums, (tuple, list)) and all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in nums)):
        raise ArgumentError(
            f"checkpoint: static_argnums must be a non-negative int or a tuple of them, got "
            f"{static_argnums!r}")
    return Checkpointed(fn, policy, tuple(sorted(set(nums))))


remat = checkpoint

__all__ = ["Checkpointed", "checkpoint", "remat"]
