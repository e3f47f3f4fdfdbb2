"""A tenferro Graph as a `torch.fx.GraphModule` (the Inductor executor's front half).

Graph inputs become placeholders, constants module buffers (read with ``get_attr``), and
every node one ``call_function`` of the backend's raw torch kernel for its signature with
the node's params bound (dynamo traces through those Python kernels); `fused` and `call`
nodes are inlined, an extension op without a torch kernel has its decomposition traced and
inlined. A node that cannot be lowered (an op with effects, a decomposition that does not
trace, a dtype Inductor does not compile) calls a `torch.compiler.disable`d function running
the plan's kernel for it, and is logged. Importing this module imports torch.
"""

from __future__ import annotations

import logging
import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from tenferro_core.errors import TenferroError

log = logging.getLogger("tenferro_torch.inductor")
_MAX_DEPTH = 8  # decompositions inlined inside decompositions


@dataclass
class Lowered:
    """The module (None when the graph computes nothing), where each graph output comes
    from (``("fx", i)``, ``("in", i)``, ``("const", buffer)``, ``("none", None)``), and what
    the lowering did."""

    module: Any
    sources: list
    n_lowered: int = 0
    n_consts: int = 0
    fallbacks: list = field(default_factory=list)  # (primitive name, site, reason)


class _DeviceRef:
    """What the creation kernels (full, iota) read of a device: its torch id (a plain object
    dynamo reads as a constant, unlike the runtime's Device)."""

    __slots__ = ("id",)

    def __init__(self, device_id: str):
        self.id = device_id


def _bound(fn: Any, params: dict, name: str) -> Any:
    """`fn` with the node's params bound as keyword arguments (fx then holds only tensors)."""
    if params:
        def kernel(*bufs: Any) -> Any:
            return fn(*bufs, **params)
    else:
        def kernel(*bufs: Any) -> Any:
            return fn(*bufs)
    kernel.__name__ = kernel.__qualname__ = f"tf_{name}".replace(".", "_")
    return kernel


def _fallback(fn: Any, params: dict, prim: Any, device: Any) -> Any:
    """The plan's kernel for one node, run outside the compiled graph (dynamo does not trace
    it); a failure is the runtime's typed KernelError, as in the plan."""
    from tenferro_runtime.eager import kernel_error

    @torch.compiler.disable
    def fallback(*bufs: Any) -> Any:
        try:
            return fn(*bufs, **params)
        except TenferroError:
            raise
        except Exception as exc:
            raise kernel_error(prim, device, exc) from exc

    fallback.__name__ = fallback.__qualname__ = f"tf_fallback_{prim.name}".replace(".", "_")
    return fallback


def _unsupported_dtype(avals: list) -> str | None:
    """Why Inductor cannot compile values of these avals, or None."""
    del avals
    return None


class _Lowerer:
    def __init__(self, device: Any):
        self.device = device
        self.g = torch.fx.Graph()
        self.root = torch.nn.Module()
        self.consts: dict[int, Any] = {}  # id(buffer) -> its get_attr node
        self.keep: list = []  # the constant buffers (their ids stay unique)
        self.out = Lowered(None, [])

    def const(self, buf: Any) -> Any:
        node = self.consts.get(id(buf))
        if node is None:
            name = f"c{len(self.consts)}"
            self.root.register_buffer(name, buf)
            node = self.consts[id(buf)] = self.g.get_attr(name)
            self.keep.append(buf)
            self.out.n_consts += 1
        return node

    def graph(self, graph: Any, env: dict, depth: int) -> None:
        for v, t in graph.consts.items():
            env[v] = self.const(t._buf)
        for node in graph.nodes:
            self.node(node, env, depth)

    def node(self, node: Any, env: dict, depth: int) -> None:
        from tenferro_runtime.graph_prims import call_p, fused_p

        prim = node.prim
        if prim is fused_p or prim is call_p:
            inner = prim.graph_of(node.params)
            self.inline(inner, node, env, depth)
            return
        args = tuple(env[v] for v in node.inputs)
        reason = self.why_not(node)
        if reason is None:
            fn = self.kernel(node)
            if fn is None:
                reason = self.decompose(node, env, depth)
                if reason is None:
                    return
        if reason is not None:
            target = self.fallback(node, reason)
        else:
            target = _bound(fn, self.params(node), prim.name)
            self.out.n_lowered += 1
        res = self.g.call_function(target, args)
        if prim.multiple_results:
            for i, v in enumerate(node.outputs):
                env[v] = self.g.call_function(operator.getitem, (res, i))
        else:
            env[node.outputs[0]] = res

    def inline(self, inner: Any, node: Any, env: dict, depth: int) -> None:
        from tenferro_runtime.graph import Var

        sub = dict(zip(inner.inputs, [env[v] for v in node.inputs]))
        self.graph(inner, sub, depth)
        for v, o in zip(node.outputs, inner.outputs):
            env[v] = sub[o] if isinstance(o, Var) else self.const(o._buf)

    def why_not(self, node: Any) -> str | None:
        if node.prim.effects:
            return "it has effects (it runs as it would in the plan, outside the compiled graph)"
        return _unsupported_dtype([v.aval for v in [*node.inputs, *node.outputs]])

    def params(self, node: Any) -> dict:
        params = dict(node.params)
        dev = params.get("device")
        if dev is not None and hasattr(dev, "backend"):
            params["device"] = _DeviceRef(dev.id)
        return params

    def kernel(self, node: Any) -> Any:
        """The raw torch kernel for the node's signature (no checking wrapper), or None."""
        device, prim = self.device, node.prim
        fn = device.kernels.get(prim)
        if fn is None:
            return None
        if device.specialize is not None:
            fn = device.specialize(prim.name, fn, tuple(v.aval for v in node.inputs),
                                   tuple(v.aval for v in node.outputs))
        return fn

    def decompose(self, node: Any, env: dict, depth: int) -> str | None:
        """Inline the node's decomposition traced to a graph; why not, where it cannot be."""
        prim = node.prim
        if prim.decomposition is None:
            return "it has neither a torch kernel nor a decomposition"
        if depth >= _MAX_DEPTH:
            return f"its decomposition nests deeper than {_MAX_DEPTH} levels"
        from tenferro_runtime.graph import trace

        params = node.params
        try:
            inner = trace(lambda *xs: prim.decomposition(*xs, **params),
                          *[v.aval for v in node.inputs])
        except TenferroError as exc:
            return (f"it has no torch kernel and its decomposition does not trace "
                    f"({type(exc).__name__}: {exc})")
        if len(inner.outputs) != len(node.outputs) or any(
                getattr(o, "aval", None) != v.aval for o, v in zip(inner.outputs, node.outputs)):
            return "it has no torch kernel and its traced decomposition's outputs differ from the op's"
        log.info("inductor: %s at %s has no torch kernel; its decomposition (%d node(s)) is "
                 "lowered in its place", prim.name, node.site, len(inner.nodes))
        self.inline(inner, node, env, depth + 1)
        return None

    def fallback(self, node: Any, reason: str) -> Any:
        from tenferro_runtime.eager import params_key
        from tenferro_runtime.plan import _decomposed

        prim, device = node.prim, self.device
        in_avals = tuple(v.aval for v in node.inputs)
        if prim.params:
            fn = device.dispatch(prim, in_avals, *params_key(prim, node.params))[0]
        else:
            fn = device.dispatch(prim, *in_avals)[0]
        if fn is None:
            fn = _decomposed(prim, in_avals)
        log.info("inductor: %s at %s falls back to the plan's kernel (not compiled): %s",
                 prim.name, node.site, reason)
        self.out.fallbacks.append((prim.name, node.site, reason))
        return _fallback(fn, dict(node.params), prim, device)


def lower(graph: Any, device: Any) -> Lowered:
    """`graph` (its inputs, constants and nodes all on `device`) as a GraphModule of its
    node results, and where each graph output comes from."""
    from tenferro_runtime.graph import Var

    lw = _Lowerer(device)
    env: dict = {v: lw.g.placeholder(f"x{i}") for i, v in enumerate(graph.inputs)}
    inputs = {v: i for i, v in enumerate(graph.inputs)}
    lw.graph(graph, env, 0)
    results: list = []
    sources: list = []
    for o in graph.outputs:
        if not isinstance(o, Var):
            sources.append(("none", None))
        elif o in inputs:
            sources.append(("in", inputs[o]))
        elif o in graph.consts:
            sources.append(("const", graph.consts[o]._buf))
        else:
            node = env[o]
            if node.op == "get_attr":  # a constant reached through an inlined graph
                sources.append(("const", getattr(lw.root, node.target)))
            elif node.op == "placeholder":
                sources.append(("in", int(node.target[1:])))
            else:
                sources.append(("fx", len(results)))
                results.append(node)
    lw.out.sources = sources
    if results:
        lw.g.output(tuple(results))
        lw.out.module = torch.fx.GraphModule(lw.root, lw.g, "tenferro_graph")
    return lw.out


__all__ = ["Lowered", "lower"]
