"""`compile(fn)`: trace once per signature, optimize with the pass pipeline, replay a plan.

A signature is the pytree structure of the arguments, each tensor leaf's aval (shape,
dtype, device), and the static values: arguments named in `static_argnums` /
`static_argnames` and every leaf that is not a tensor (Python numbers, strings, None).
Each compiled function keeps a bounded LRU cache of its signatures; every miss logs why
(logger ``tenferro_runtime.compile``: which argument changed from what to what), and
past `recompile_warning` misses a `RecompileWarning` is issued once.

A call binds one `call` node (graph_prims.call_p) with a `Callee`: the traced graph,
which transformations read (tenferro_ad derives its JVP and transpose from it), and its
optimized executable, built on first run. At the bottom of the interpreter stack the
compiled function runs the executable directly.
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections import namedtuple
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tenferro_core.errors import ArgumentError, ConcretizationError, EnergyBudgetExceeded

from .caches import LRUCache
from .compile_keys import NotPlain, argnames, argnums, count, key_walk, parameters, static_key
from .donation import DonatedTensor, FailedDonationTensor, invalidate
from .executor import build_executable, decomposed_for
from .graph import Graph, GraphTrace, tensor_leaves, trace
from .graph_prims import call_p
from .passes.inline import inline_decompositions
from .pipeline import PassSpec, optimize
from .pytree import tree_flatten, tree_unflatten, unflattener, unregistered_hint
from .recompile import RecompileWarning, describe, difference, log, summary
from .tensor import Tensor
from .tracing import BOTTOM, ask, interpreters, notify

CacheInfo = namedtuple("CacheInfo", ["hits", "misses", "maxsize", "currsize"])


def _run_observed(stack: Any, callee: Callee) -> list:
    """A compiled call with no tensor arguments in a context with observers: run now, and
    asked and told as `bind` asks and tells them of any op (energy, budgets)."""
    params = {"fn": callee}
    ask(stack, call_p, (), params)
    outs = callee.run(())
    notify(stack, call_p, (), params, tuple(outs))  # call is a multiple-results primitive
    return outs


class Callee:
    """What a `call` node runs: the traced graph and, built on first run, its optimized
    graph and executable. `derived` caches the graphs transformations make from it."""

    __slots__ = ("graph", "name", "passes", "donated", "executor", "_optimized", "_exe", "_derived",
                 "_lock", "__weakref__")

    def __init__(self, graph: Graph, name: str = "fn", passes: PassSpec = None,
                 donated: tuple = (), executor: str | None = None):
        self.graph = graph
        self.name = name
        self.passes = passes
        self.donated = donated
        self.executor = executor  # compile(..., backend=): None for the default
        self._optimized: Graph | None = None
        self._exe: Any = None
        self._derived: dict = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<compiled {self.name}: {len(self.graph.nodes)} node(s)>"

    def optimized(self) -> Graph:
        """The graph after the pass pipeline (built once)."""
        if self._optimized is None:
            graph = self.graph.replace(meta={**self.graph.meta, "donated": self.donated})
            cats = decomposed_for(graph, self.executor)
            if cats:
                graph = inline_decompositions(graph, cats)
            self._optimized = optimize(graph, graph.runtime, self.passes)
        return self._optimized

    def executable(self) -> Any:
        if self._exe is None:
            self._exe = build_executable(self.optimized(), self.executor)
        return self._exe

    def run(self, args: Sequence[Tensor]) -> list:
        """The graph's outputs on concrete input tensors, by the executable."""
        exe = self._exe
        if exe is None:
            exe = self.executable()
        return exe.run(args)

    def derived(self, key: Any, build: Callable[[], Any]) -> Any:
        """`build()`, cached under `key` (the JVP and transpose callees tenferro_ad makes)."""
        hit = self._derived.get(key)
        if hit is None:
            hit = build()
            with self._lock:
                hit = self._derived.setdefault(key, hit)
        return hit


class CompileTrace(GraphTrace):
    """The trace `compile` records with: a value needed concretely is an error naming the
    static arguments as the fix."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.fn_name = name
        self.label = f"compile({name})"

    def concrete(self, tracer: Any) -> Any:
        raise ConcretizationError(
            f"compile({self.fn_name}): a traced value ({tracer._aval.str_short()}) was used where a "
            f"concrete Python value is needed (Python control flow such as `if x > 0`, bool(), "
            f"float(), int(), .item() or a data-dependent shape); compiled functions are traced "
            f"once per signature, so make the argument it comes from static with static_argnums= "
            f"or static_argnames=, or compute without Python control flow (xp.where, lax.select)"
        )


class Compiled:
    """A function compiled by `compile`: call it like the original."""

    def __init__(self, fn: Callable, static_argnums: Any, static_argnames: Any, donate_argnums: Any,
                 passes: PassSpec, maxsize: int, recompile_warning: int, backend: str | None = None):
        if not callable(fn):
            raise ArgumentError(f"compile expects a callable, got {type(fn).__name__}")
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn
        self._params = parameters(fn)
        self.static_argnums = argnums(static_argnums, "static_argnums")
        self.static_argnames = argnames(static_argnames)
        self.donate_argnums = argnums(donate_argnums, "donate_argnums")
        self._link_static_names()
        both = set(self.static_argnums) & set(self.donate_argnums)
        if both:
            raise ArgumentError(
                f"compile({self.__name__}): argument(s) {sorted(both)} are both static and donated; "
                f"a static argument is a Python value with no buffer to donate: drop one")
        if passes is not None or backend is not None:
            from .executor import check_executor
            from .pipeline import select
            from .runtime import default_runtime

            select(default_runtime(), passes)  # a misspelled name fails here, not at first call
            check_executor(default_runtime(), backend)
        self.passes = passes
        self.backend = backend
        self._cache = LRUCache(f"compile[{self.__name__}]", count(maxsize, "maxsize", 1))
        self.recompile_warning = count(recompile_warning, "recompile_warning", 0)
        self._traces = 0
        self._warned = False
        self._last: list | None = None  # the argument descriptions of the last trace
        self._lock = threading.Lock()

    def _link_static_names(self) -> None:
        """static_argnames name positional parameters too, and static_argnums name keywords
        (as in JAX), where the function's signature says which is which."""
        names = [p.name for p in self._params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        nums = set(self.static_argnums)
        for n in self.static_argnames:
            if n in names:
                nums.add(names.index(n))
        known = {p.name for p in self._params}
        var_kw = any(p.kind is p.VAR_KEYWORD for p in self._params)
        for n in self.static_argnames:
            if self._params and n not in known and not var_kw:
                raise ArgumentError(
                    f"compile({self.__name__}): static_argnames names {n!r}, which is not a parameter "
                    f"of the function; its parameters are {sorted(known)}")
        self.static_argnums = tuple(sorted(nums))
        self.static_argnames = tuple(sorted(set(self.static_argnames) | {
            names[i] for i in nums if i < len(names)}))

    # ---- signatures -------------------------------------------------------------
    def _split(self, args: tuple, kwargs: dict) -> tuple[tuple, tuple, dict]:
        """(static values key, dynamic positional args, dynamic keyword args)."""
        n = len(args)
        for i in (*self.static_argnums, *self.donate_argnums):
            if i >= n and not (i < len(self._positional()) and self._positional()[i] in kwargs):
                which = "static_argnums" if i in self.static_argnums else "donate_argnums"
                raise ArgumentError(
                    f"compile({self.__name__}): {which} includes {i}, but the call passed {n} "
                    f"positional argument(s); pass that argument positionally or fix {which}")
        statics = []
        dyn_args = []
        for i, a in enumerate(args):
            if i in self.static_argnums:
                statics.append((i, a))
            else:
                dyn_args.append(a)
        dyn_kwargs = {}
        for k, v in kwargs.items():
            if k in self.static_argnames:
                statics.append((k, v))
            else:
                dyn_kwargs[k] = v
        for where, v in statics:
            try:
                hash(v)
            except TypeError:
                raise ArgumentError(
                    f"compile({self.__name__}): static argument {self._label(where)} must be hashable "
                    f"(it is part of the cache key), got an unhashable {type(v).__name__}; pass a "
                    f"tuple instead of a list, or make it a dynamic (tensor) argument") from None
        key = tuple((w, static_key(v)) for w, v in statics)
        return key, tuple(dyn_args), dyn_kwargs

    def _positional(self) -> list[str]:
        return [p.name for p in self._params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]

    def _label(self, where: Any) -> str:
        if isinstance(where, str):
            return repr(where)
        names = self._positional()
        return f"{where} ({names[where]!r})" if where < len(names) else str(where)

    def _signature(self, args: tuple, kwargs: dict) -> tuple:
        """(cache key, tensor leaves, everything needed to rebuild the arguments)."""
        if kwargs or self.static_argnums or self.donate_argnums:
            statics, dyn_args, dyn_kwargs = self._split(args, kwargs)
        else:  # the common call: positional pytrees of tensors
            statics, dyn_args, dyn_kwargs = (), args, kwargs
        leaves, treedef = tree_flatten((dyn_args, dyn_kwargs))
        try:  # every leaf a tensor (or tracer): one pass
            parts = [x._aval for x in leaves]
            tensors = leaves
        except AttributeError:
            parts, tensors = self._mixed_leaves(leaves)
        return (treedef, tuple(parts), statics), tensors, (leaves, treedef, args, kwargs)

    def _mixed_leaves(self, leaves: list) -> tuple[list, list]:
        """Key parts and tensors of leaves that are not all tensors: NumPy arrays become
        tensors, other leaves are static values (hashable)."""
        parts, tensors = [], []
        for i, x in enumerate(leaves):
            if isinstance(x, Tensor):
                parts.append(x._aval)
                tensors.append(x)
            elif isinstance(x, np.ndarray):
                from .array_api import asarray

                t = leaves[i] = asarray(x)
                parts.append(t._aval)
                tensors.append(t)
            else:
                try:
                    hash(x)
                except TypeError:
                    raise ArgumentError(
                        f"compile({self.__name__}): an argument leaf of type {type(x).__name__} is "
                        f"neither a tensor nor a hashable Python value; pass tensors, or mark the "
                        f"argument static; {unregistered_hint(x)}") from None
                parts.append(static_key(x))
        return parts, tensors

    # ---- calls ------------------------------------------------------------------
    def _key(self, args: tuple, kwargs: dict) -> tuple[Any, list]:
        """(cache key, tensor leaves) of a call."""
        if not (kwargs or self.static_argnums or self.donate_argnums):
            parts: list = []
            tensors: list = []
            try:  # the common call: containers of tensors, keyed in one walk
                key_walk(args, parts, tensors)
                return tuple(parts), tensors
            except NotPlain:
                pass
        key, tensors, _ = self._signature(args, kwargs)
        return key, tensors

    def _entry(self, key: Any, args: tuple, kwargs: dict) -> tuple:
        """The cached (callee, output rebuilder) for `key`, traced on a miss."""
        entry = self._cache.get(key)
        if entry is None:
            self._cache.misses += 1
            _, tensors, rebuild = self._signature(args, kwargs)
            entry = self._compile(key, tensors, rebuild)
        else:
            self._cache.hits += 1
        return entry

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        key, tensors = self._key(args, kwargs)
        callee, rebuild_out, donated = self._entry(key, args, kwargs)
        try:
            stack = interpreters()
            if stack is BOTTOM:  # concrete values only
                outs = callee.run(tensors)
            elif tensors:
                outs = call_p.bind(*tensors, fn=callee)
            else:  # nothing to trace: run now, observed as bind would observe it
                outs = _run_observed(stack, callee)
        except EnergyBudgetExceeded:  # refused before it ran: every tensor is whole
            raise
        except BaseException:
            if donated:  # a donated buffer may hold part of the results now
                invalidate([tensors[k] for k in donated], (), FailedDonationTensor)
            raise
        if donated:
            invalidate([tensors[k] for k in donated], outs, DonatedTensor)
        return rebuild_out(outs)


    def _compile(self, key: tuple, tensors: list, rebuild: tuple) -> tuple:
        leaves, treedef, args, kwargs = rebuild
        self._log_reason(args, kwargs)
        positions = [i for i, x in enumerate(leaves) if isinstance(x, Tensor)]
        statics = {w: v for w, v in ((i, args[i]) for i in self.static_argnums if i < len(args))}
        statics.update((k, v) for k, v in kwargs.items() if k in self.static_argnames)
        out_tree: list = []

        def flat(*tracers: Any) -> list:
            full = list(leaves)
            for pos, t in zip(positions, tracers):
                full[pos] = t
            dyn_args, dyn_kwargs = tree_unflatten(treedef, full)
            it = iter(dyn_args)
            call_args = [statics[i] if i in statics else next(it) for i in range(len(args))]
            call_kwargs = {**dyn_kwargs, **{k: v for k, v in statics.items() if isinstance(k, str)}}
            out = self.fn(*call_args, **call_kwargs)
            out_leaves, td = tensor_leaves(out, f"compile({self.__name__})")
            out_tree.append(td)
            return out_leaves

        graph = trace(flat, *[t._aval for t in tensors], graph_trace=CompileTrace(self.__name__))
        donated = tuple(sorted({j for i in self.donate_argnums for j in self._leaf_indices(
            i, args, positions, leaves, treedef)}))
        callee = Callee(graph, self.__name__, self.passes, donated, self.backend)
        entry = (callee, unflattener(out_tree[0]), self._donated_positions(args, positions))
        self._cache.put(key, entry)
        return entry

    def _donated_positions(self, args: tuple, positions: list) -> tuple[int, ...]:
        """Indices (among the tensor inputs) of the tensors the donated arguments hold, by
        where their leaves sit in the flattened call (every call of this signature has the same
        layout), so a call invalidates them without flattening its arguments again."""
        if not self.donate_argnums:
            return ()
        spans, start = [], 0
        for i, a in enumerate(args):
            if i in self.static_argnums:
                continue
            n = len(tree_flatten(a)[0])
            if i in self.donate_argnums:
                spans.append((start, start + n))
            start += n
        return tuple(k for k, pos in enumerate(positions) if any(lo <= pos < hi for lo, hi in spans))

    def _leaf_indices(self, argnum: int, args: tuple, positions: list, leaves: list, treedef: Any) -> list:
        """Indices (among the tensor inputs of the graph) of the tensors of positional argument
        `argnum`."""
        if argnum >= len(args):
            return []
        ids = {id(t) for t in tree_flatten(args[argnum])[0]}
        return [k for k, pos in enumerate(positions) if id(leaves[pos]) in ids]

    def _log_reason(self, args: tuple, kwargs: dict) -> None:
        desc = describe(self._positional(), args, kwargs, self.static_argnums, self.static_argnames)
        with self._lock:
            last, self._last = self._last, desc
            self._traces += 1
            n = self._traces
        if last is None:
            log.debug("compile(%s): first trace, for %s", self.__name__, summary(desc))
            return
        reason = difference(last, desc)
        log.info("compile(%s): recompiling (trace %d): %s", self.__name__, n, reason)
        if n > self.recompile_warning and not self._warned:
            self._warned = True
            warnings.warn(
                f"compile({self.__name__}) has been traced {n} times (last change: {reason}); each "
                f"new signature traces and optimizes again. Keep shapes, dtypes and static values "
                f"fixed, pass changing Python numbers as tensors, or raise recompile_warning",
                RecompileWarning, stacklevel=3)

    # ---- introspection ----------------------------------------------------------
    def lower(self, *args: Any, **kwargs: Any) -> Graph:
        """The optimized Graph this function runs for these arguments (printable, with the
        call sites of the user's code)."""
        key, _ = self._key(args, kwargs)
        entry = self._cache.get(key)
        if entry is None:
            entry = self._entry(key, args, kwargs)
        return entry[0].optimized()

    def cache_info(self) -> CacheInfo:
        c = self._cache
        return CacheInfo(c.hits, c.misses, c.maxsize, len(c))

    def cache_clear(self) -> None:
        self._cache.clear()

    def __repr__(self) -> str:
        return f"<compiled function {self.__name__}>"

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        """``@compile`` on a method: `obj` becomes argument 0 of the one shared compiled
        function (a pytree argument, or static with static_argnums=(0,))."""
        if obj is None:
            return self
        return BoundCompiled(self, obj)


class BoundCompiled:
    """A compiled method bound to an instance: calls pass the instance as argument 0, so
    the signature cache (shared by all instances) traces once per instance signature."""

    __slots__ = ("__func__", "__self__")

    def __init__(self, compiled: Compiled, obj: Any):
        self.__func__, self.__self__ = compiled, obj
        if 0 not in compiled.static_argnums:
            _check_self(compiled, obj)

    @property
    def __name__(self) -> str:
        return self.__func__.__name__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__func__(self.__self__, *args, **kwargs)

    def lower(self, *args: Any, **kwargs: Any) -> Graph:
        return self.__func__.lower(self.__self__, *args, **kwargs)

    def cache_info(self) -> CacheInfo:
        return self.__func__.cache_info()

    def __repr__(self) -> str:
        return f"<bound compiled method {self.__name__} of {type(self.__self__).__name__}>"


def _check_self(compiled: Compiled, obj: Any) -> None:
    """A dynamic `self` must be a pytree node or hashable (then it is static, by value)."""
    from .pytree import _NODES

    if type(obj) in _NODES or isinstance(obj, (Tensor, tuple, list, dict)):
        return
    try:
        hash(obj)
    except TypeError:
        raise ArgumentError(
            f"compile({compiled.__name__}): the method's instance (a {type(obj).__name__}) is neither "
            f"a registered pytree nor hashable; register its class with "
            f"tenferro_runtime.pytree.register_pytree_node (its tensors become inputs), or give it "
            f"__hash__/__eq__ and pass static_argnums=(0,) (it is then part of the cache key)"
        ) from None


def compile(fn: Callable | None = None, *, static_argnums: int | Sequence[int] = (),
            static_argnames: str | Sequence[str] = (), donate_argnums: int | Sequence[int] = (),
            passes: PassSpec = None, maxsize: int = 4096, recompile_warning: int = 16,
            backend: str | None = None) -> Any:
    """`fn` traced once per signature, optimized by the pass pipeline and replayed.

    Arguments are pytrees of tensors; `static_argnums` / `static_argnames` name arguments
    passed as Python values (hashable; part of the cache key). Non-tensor leaves are static
    too. `donate_argnums` names arguments whose buffers the function may reuse for its
    results: the donated tensors are unusable afterwards. `passes` (or $TENFERRO_PASSES)
    selects compiler passes by name, for debugging. `backend` names the executor that runs
    the optimized graph: "plan" (the generic plan replay), "inductor" (tenferro-torch:
    torch.fx + torch.compile), "triton" (tenferro-triton), or None for the device's default.
    Usable as a decorator, with or without arguments.
    """
    if fn is None:
        return functools.partial(compile, static_argnums=static_argnums, static_argnames=static_argnames,
                                 donate_argnums=donate_argnums, passes=passes, maxsize=maxsize,
                                 recompile_warning=recompile_warning, backend=backend)
    return Compiled(fn, static_argnums, static_argnames, donate_argnums, passes, maxsize,
                    recompile_warning, backend)


__all__ = ["BoundCompiled", "CacheInfo", "Callee", "CompileTrace", "Compiled", "DonatedTensor",
           "FailedDonationTensor", "RecompileWarning", "compile"]
