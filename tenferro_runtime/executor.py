"""Executables: an optimized Graph made runnable on one device.

In order of preference: the executor `compile(f, backend=name)` named, or else one a plugin
registered as the default for the graph's device (`Registration.add_executor`: Inductor,
Triton); the device's backend running the whole graph its own way (`Backend.compile(graph,
device)`); the generic plan executor (plan.py: kernels on buffer slots, no per-op
dispatch); node by node through `bind` where no plan can be built (a graph spanning
devices, an op with only a decomposition). Each of the first two may decline with None; one
that raises is reported with a warning and the next one runs instead.
"""

from __future__ import annotations

import warnings
from typing import Any

from tenferro_core.errors import ArgumentError, ArgumentValueError

from .graph import Graph, Var, eval_graph
from .kernels import check_outputs, failed
from .plan import build_plan, wrap_outputs
from .tracing import eager_only


class BackendCompileWarning(UserWarning):
    """A backend's compile(graph, device) failed; the generic plan executor runs instead."""


class NodeByNode:
    """Runs a graph through `bind`, below any observer (the caller reports the call)."""

    __slots__ = ("graph",)
    kind = "node-by-node"

    def __init__(self, graph: Graph):
        self.graph = graph

    def run(self, args: tuple) -> list:
        with eager_only():
            return eval_graph(self.graph, *args)


class PlanExecutable:
    """The generic executor: a Plan's kernels on buffers."""

    __slots__ = ("plan",)
    kind = "plan"

    def __init__(self, plan: Any):
        self.plan = plan

    def run(self, args: tuple) -> list:
        return self.plan.run(args)

    def run_buffers(self, bufs: list) -> list:
        """Output buffers from input buffers (a loop's body run without tensor wrappers); a
        fixed output's entry is None."""
        return self.plan.run_buffers(bufs)

    def buffer_runner(self) -> Any:
        """The fastest function of input buffers to output buffers (see Plan.buffer_runner)."""
        return self.plan.buffer_runner()

    def scan_loop(self, n_consts: int, n_carry: int, reverse: bool) -> Any:
        """A scan's loop over this body, generated (Plan.scan_loop), or None."""
        return self.plan.scan_loop(n_consts, n_carry, reverse)


class BackendExecutable:
    """What an executor or a backend's compile(graph, device) returned: a function of input
    buffers giving output buffers, wrapped back into tensors of the graph's output avals.
    `kind` names who built it ("backend", or the executor's name). What the runner raises is
    a KernelError naming it; its first results (every result with kernel checks on) are
    checked against the graph's output avals, as a kernel's are."""

    __slots__ = ("fn", "wrap", "kind", "device", "who", "_avals", "_check")

    def __init__(self, fn: Any, graph: Graph, kind: str, device: Any):
        self.fn = fn
        self.kind = kind
        self.device = device
        who = f"executor {kind!r}" if kind != "backend" else f"backend {device.backend.name!r}"
        self.who = f"{who} running a graph of {len(graph.nodes)} node(s) on {device}"
        self.wrap = [(v.aval, False) if isinstance(v, Var) else (v, True) for v in graph.outputs]
        self._avals = [v.aval if isinstance(v, Var) else None for v in graph.outputs]
        self._check = True

    def run(self, args: tuple) -> list:
        return wrap_outputs(self.run_buffers([a._buf for a in args]), self.wrap)

    def scan_loop(self, n_consts: int, n_carry: int, reverse: bool) -> Any:
        """Where the runner is a plan's (an executor that built a plan with its own kernels,
        as tenferro-numba does) and its first results were checked, the plan's generated scan
        loop; else None."""
        plan = getattr(self.fn, "__self__", None)
        if self._check or not hasattr(plan, "scan_loop") or self.fn != plan.run_buffers:
            return None
        return plan.scan_loop(n_consts, n_carry, reverse)

    def run_buffers(self, bufs: list) -> list:
        """Output buffers from input buffers, checked as `run` checks them."""
        try:
            outs = self.fn(bufs)
        except Exception as exc:
            raise failed(None, self.device, exc, who=self.who)  # noqa: B904
        if self._check:
            check_outputs(self.who, self.device, self._avals, outs)
            self._check = self.device.runtime.check_kernels
        return outs


def graph_device(graph: Graph) -> Any:
    """The one device every value of `graph` lives on, or None."""
    devices = {id(v.aval.device): v.aval.device for v in graph.inputs}
    devices.update((id(v.aval.device), v.aval.device) for v in graph.consts)
    for n in graph.nodes:
        devices.update((id(v.aval.device), v.aval.device) for v in n.outputs)
    return next(iter(devices.values())) if len(devices) == 1 else None


def check_executor(runtime: Any, name: str | None) -> None:
    """Raise ArgumentError unless `name` is None, "plan" or a registered executor."""
    if name is None or name == "plan":
        return
    known = ["plan", *sorted(runtime.executors)]
    if not isinstance(name, str):
        raise ArgumentError(f"compile: backend must be an executor name (one of {known}) or "
                            f"None, got {type(name).__name__} {name!r}")
    if name not in runtime.executors:
        raise ArgumentValueError(
            f"compile: backend={name!r} is not a registered executor; the installed ones are "
            f"{known} (install the plugin that provides it, e.g. tenferro-torch for 'inductor', "
            f"or leave backend unset for the default)")


def default_executor(runtime: Any, device: Any) -> str | None:
    """The executor a plugin registered as the default for `device`'s graphs, or None."""
    for name, (_, prefixes, _) in sorted(runtime.executors.items()):
        if any(device.name.startswith(p) for p in prefixes):
            return name
    return None


def chosen_executor(device: Any, executor: str | None) -> str | None:
    """The registered executor that runs a graph on `device`: the one `compile(...,
    backend=)` named, else the device's default; None for the plan executor."""
    if device is None or executor == "plan":
        return None
    return executor if executor is not None else default_executor(device.runtime, device)


def decomposed_for(graph: Graph, executor: str | None) -> frozenset:
    """The primitive categories whose extension-op decompositions are inlined in `graph`
    before the passes: those the executor that will run it registered (`add_executor`'s
    `decompose`); empty for the plan executor."""
    device = graph_device(graph)
    name = chosen_executor(device, executor)
    return device.runtime.executor_decompose.get(name, frozenset()) if name is not None else frozenset()


def _try(build: Any, graph: Graph, device: Any, who: str) -> Any:
    try:
        return build(graph, device)
    except Exception as exc:
        warnings.warn(
            f"{who} could not compile a graph of {len(graph.nodes)} node(s) on {device} "
            f"({type(exc).__name__}: {exc}); running it with the generic plan executor",
            BackendCompileWarning, stacklevel=4)
        return None


def build_executable(graph: Graph, executor: str | None = None) -> Any:
    """The best executable for an optimized graph (see the module docstring); `executor`
    names the one `compile(..., backend=)` asked for ("plan": the generic one)."""
    device = graph_device(graph)
    if device is not None and executor != "plan":
        runtime = device.runtime
        name = chosen_executor(device, executor)
        if name is not None:
            check_executor(runtime, name)
            fn = _try(runtime.executors[name][0], graph, device, f"executor {name!r}")
            if fn is not None:
                return BackendExecutable(fn, graph, name, device)
        compile_ = getattr(device.backend, "compile", None)
        if compile_ is not None and executor is None:
            fn = _try(compile_, graph, device, f"backend {device.backend.name!r}")
            if fn is not None:
                return BackendExecutable(fn, graph, "backend", device)
    plan = build_plan(graph)
    if plan is not None:
        return PlanExecutable(plan)
    return NodeByNode(graph)


__all__ = ["BackendCompileWarning", "BackendExecutable", "NodeByNode", "PlanExecutable",
           "build_executable", "check_executor", "chosen_executor", "decomposed_for", "default_executor",
           "graph_device"]
