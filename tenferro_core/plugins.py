"""Plugin hooks and entry-point discovery (group ``tenferro``).

A plugin is a module (or object) with a `tenferro_register(registry)` hook
implementation. Each plugin registers into its own staged `Registration`; the
runtime commits it only when the whole hook succeeded and validated, so one
broken plugin never leaves half its entries behind nor stops the others.
"""

from __future__ import annotations

import os
import re
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import pluggy

from .backend import REQUIRED_BACKEND_ATTRS, Kernel
from .errors import PluginError
from .primitive import CATEGORIES, Primitive

GROUP = "tenferro"
hookspec = pluggy.HookspecMarker(GROUP)
hookimpl = pluggy.HookimplMarker(GROUP)

# rule kinds a plugin may register: jvp, transpose and vjp (read by tenferro_ad; an op with only
# a vjp rule differentiates in reverse mode), batch (read by tenferro_ad's vmap), cost (read by
# tenferro_runtime.cost)
RULE_KINDS = ("jvp", "transpose", "vjp", "batch", "cost")


class HookSpecs:
    """The hooks a tenferro plugin may implement."""

    @hookspec
    def tenferro_register(self, registry: Registration) -> None:
        """Register backends, ops, kernels, AD and cost rules and array_api namespaces."""


@dataclass
class Registration:
    """What one plugin registered, staged until the runtime commits it.

    Only what the runtime consumes is accepted: a registration nothing would use (a rule
    kind outside RULE_KINDS, an object that is no `Meter`) is a PluginError, never stored and
    ignored.
    """

    source: str
    backends: list[tuple[Any, int]] = field(default_factory=list)
    ops: list[Primitive] = field(default_factory=list)
    kernels: list[tuple[str, str, Kernel, int]] = field(default_factory=list)
    rules: list[tuple[str, str, Callable[..., Any]]] = field(default_factory=list)
    passes: list[tuple[str, Callable[..., Any], float]] = field(default_factory=list)
    meters: list[tuple[str, Any]] = field(default_factory=list)
    executors: list[tuple[str, Callable[..., Any], tuple[str, ...]]] = field(default_factory=list)
    executor_decompose: dict[str, frozenset[str]] = field(default_factory=dict)
    namespaces: list[tuple[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def _bad(self, msg: str) -> PluginError:
        return PluginError(f"plugin {self.source!r}: {msg}")

    def add_backend(self, backend: Any, *, priority: int | None = None) -> None:
        """Register a Backend; `priority` (default: backend.priority) orders default devices."""
        missing = [a for a in REQUIRED_BACKEND_ATTRS if not hasattr(backend, a)]
        if missing:
            raise self._bad(
                f"add_backend expects an object implementing tenferro_core.backend.Backend; "
                f"{type(backend).__name__} lacks {missing}"
            )
        if not isinstance(backend.name, str) or not backend.name or ":" in backend.name:
            raise self._bad(f"backend name must be a non-empty string without ':', got {backend.name!r}")
        compile_ = getattr(backend, "compile", None)
        if compile_ is not None and not callable(compile_):
            raise self._bad(
                f"backend {backend.name!r}: compile must be a method compile(graph, device) "
                f"returning an executable or None, got {type(compile_).__name__}"
            )
        prio = getattr(backend, "priority", 0) if priority is None else priority
        self.backends.append((backend, int(prio)))

    def add_op(self, op: Primitive) -> None:
        """Register an extension op (a Primitive with a family id)."""
        if not isinstance(op, Primitive) or not op.family:
            raise self._bad(
                f"add_op expects an op made with tenferro_core.extension.define_op, got {op!r}"
            )
        self.ops.append(op)

    def add_kernel(self, backend: str, op: str | Primitive, fn: Kernel, *, priority: int = 0) -> None:
        """Register a kernel for an op on a backend; higher priority wins a conflict."""
        name = op.name if isinstance(op, Primitive) else op
        if not isinstance(backend, str) or not isinstance(name, str) or not callable(fn):
            raise self._bad(
                f"add_kernel expects (backend name, op name or Primitive, callable), "
                f"got ({backend!r}, {op!r}, {fn!r})"
            )
        self.kernels.append((backend, name, fn, priority))

    def add_kernels(self, backend: str, table: Mapping[str, Kernel], *, priority: int = 0) -> None:
        for name, fn in table.items():
            self.add_kernel(backend, name, fn, priority=priority)

    def add_rule(self, kind: str, op: str | Primitive, fn: Callable[..., Any]) -> None:
        """Register a rule of `kind` (one of RULE_KINDS: AD rules, or a cost rule) for an op."""
        name = op.name if isinstance(op, Primitive) else op
        if kind not in RULE_KINDS:
            raise self._bad(
                f"rule kind {kind!r} (for {name!r}) is not supported by this version of tenferro: "
                f"nothing would use it; supported kinds: {', '.join(RULE_KINDS)}"
            )
        if not isinstance(name, str) or not callable(fn):
            raise self._bad(
                f"add_rule expects (kind, op name or Primitive, callable), got ({kind!r}, {op!r}, {fn!r})"
            )
        self.rules.append((kind, name, fn))

    def add_pass(self, name: str, fn: Callable[..., Any], *, position: float) -> None:
        """Register a compiler pass: `fn(graph) -> graph`, run by `compile` in ascending
        `position` (the built-in passes sit at 100, 200, ... 900; see docs/architecture.md)."""
        if not isinstance(name, str) or not name.isidentifier():
            raise self._bad(f"add_pass expects a pass name that is an identifier, got {name!r}")
        if not callable(fn):
            raise self._bad(f"add_pass({name!r}): expected a function graph -> graph, got {fn!r}")
        if isinstance(position, bool) or not isinstance(position, (int, float)) or position != position:
            raise self._bad(
                f"add_pass({name!r}): position must be a number (the built-in passes sit at "
                f"100, 200, ... 900), got {position!r}"
            )
        self.passes.append((name, fn, float(position)))

    def add_executor(self, name: str, fn: Callable[..., Any], *, default_for: tuple[str, ...] = (),
                     decompose: tuple[str, ...] = ()) -> None:
        """Register a graph executor: `fn(graph, device)` returns a function from the input
        buffers of a whole optimized graph to its output buffers, or None to decline (the
        generic plan executor runs instead). `compile(f, backend=name)` selects it;
        `default_for` names device prefixes (``"torch:cuda"``) whose graphs it runs when
        `compile` names no backend. `decompose` names primitive categories: in the graphs it
        runs, an extension op whose decomposition holds only primitives of those categories
        is replaced by that decomposition before the passes (an executor that generates
        code from core primitives fuses them instead of calling an opaque kernel)."""
        if not isinstance(name, str) or not name.isidentifier() or name == "plan":
            raise self._bad(f"add_executor expects an executor name that is an identifier other "
                            f"than 'plan' (the built-in one), got {name!r}")
        if not callable(fn):
            raise self._bad(f"add_executor({name!r}): expected a function (graph, device) -> "
                            f"runner or None, got {fn!r}")
        prefixes = (default_for,) if isinstance(default_for, str) else default_for
        if not isinstance(prefixes, (tuple, list)) or not all(
                isinstance(x, str) and x for x in prefixes):
            raise self._bad(f"add_executor({name!r}): default_for must be device-name prefixes "
                            f"such as ('torch:cuda',), got {default_for!r}")
        cats = (decompose,) if isinstance(decompose, str) else decompose
        if not isinstance(cats, (tuple, list, set, frozenset)) or not set(cats) <= set(CATEGORIES):
            raise self._bad(f"add_executor({name!r}): decompose must be primitive categories from "
                            f"{CATEGORIES}, got {decompose!r}")
        self.executors.append((name, fn, tuple(prefixes)))
        if cats:
            self.executor_decompose[name] = frozenset(cats)

    def add_meter(self, name: str, meter: Any) -> None:
        """Register an energy meter (`tenferro_core.energy.Meter`): energy accounting reads
        the available meter of highest priority covering each device, else the estimate."""
        from .energy import SOURCES, Meter

        if not isinstance(name, str) or not name.isidentifier():
            raise self._bad(f"add_meter expects a meter name that is an identifier, got {name!r}")
        if not isinstance(meter, Meter):
            raise self._bad(
                f"add_meter({name!r}): expected a tenferro_core.energy.Meter (name, source, "
                f"update_period, priority, covers, probe, read), got {type(meter).__name__}")
        if meter.source not in SOURCES:
            raise self._bad(f"add_meter({name!r}): source must be one of {SOURCES}, got {meter.source!r}")
        self.meters.append((name, meter))

    def add_namespace(self, name: str, module: Any) -> None:
        """Expose `module` as ``array_api.<name>`` (the standard's linalg / fft extensions)."""
        if not name.isidentifier():
            raise self._bad(f"namespace name must be an identifier, got {name!r}")
        self.namespaces.append((name, module))

    def add_note(self, text: str) -> None:
        """A line for `python -m tenferro_runtime plugins` (something the plugin skipped, and why)."""
        if not isinstance(text, str) or not text.strip():
            raise self._bad(f"add_note expects a non-empty string, got {text!r}")
        self.notes.append(text.strip())

    def summary(self) -> list[str]:
        out = [f"backend {b.name} (priority {p}, {len(b.kernels())} kernels)" for b, p in self.backends]
        out += [f"op {op.name}" for op in self.ops]
        by_backend: dict[str, int] = {}
        for b, *_ in self.kernels:
            by_backend[b] = by_backend.get(b, 0) + 1
        out += [f"{n} kernel(s) for backend {b}" for b, n in by_backend.items()]
        if self.rules:
            out.append(f"{len(self.rules)} rule(s)")
        out += [f"namespace array_api.{n}" for n, _ in self.namespaces]
        out += [f"pass {n} (position {p:g})" for n, _, p in self.passes]
        out += [f"meter {n}" for n, _ in self.meters]
        out += [f"executor {n}" for n, _, _ in self.executors]
        out += [f"note: {n}" for n in self.notes]
        return out


@dataclass
class PluginReport:
    """One plugin's outcome: what it registered, or why it failed."""

    name: str
    distribution: str | None = None
    version: str | None = None
    module: str | None = None
    registered: list[str] = field(default_factory=list)
    error: str | None = None
    traceback: str | None = None
    disabled: bool = False
    disabled_by: str | None = None  # TENFERRO_DISABLE_PLUGINS (blocked) or TENFERRO_PLUGINS (not listed)

    @property
    def ok(self) -> bool:
        return self.error is None and not self.disabled


@dataclass
class Plugin:
    """A plugin object to load, with where it came from."""

    name: str
    obj: Any
    distribution: str | None = None
    version: str | None = None


def _names(var: str) -> set[str] | None:
    raw = os.environ.get(var)
    if raw is None:
        return None
    return {n.strip() for n in raw.split(",") if n.strip()}


def _dist_key(name: str | None) -> str:
    """A distribution name normalized as PEP 503 does (``Tenferro_NumPy`` -> ``tenferro-numpy``)."""
    return "" if name is None else re.sub(r"[-_.]+", "-", name).lower()


def _dist(ep: Any) -> tuple[str | None, str | None]:
    """(distribution name, version) of an entry point; Nones when it has no distribution."""
    return (ep.dist.name, ep.dist.version) if ep.dist is not None else (None, None)


def _prefer(name: str, eps: list[Any]) -> Any:
    """Of entry points sharing `name`, the one to load: a distribution named after it
    (``<name>`` or ``tenferro-<name>``) or the core distribution ``tenferro``, else the
    first by distribution name."""
    own = {_dist_key(name), f"tenferro-{_dist_key(name)}", "tenferro"}
    return next((ep for ep in eps if _dist_key(_dist(ep)[0]) in own), eps[0])


def discover(
    allow: Iterable[str] | None = None, block: Iterable[str] | None = None
) -> tuple[list[Plugin], list[PluginReport]]:
    """Load entry points of group ``tenferro``; failures come back as reports.

    `allow`/`block` default to the comma-separated env vars TENFERRO_PLUGINS and
    TENFERRO_DISABLE_PLUGINS; names match the entry-point or distribution name.

    Entry points of two distributions under one name are a conflict, never a silent
    replacement: one of them loads (a distribution named ``<name>`` or ``tenferro-<name>``,
    or the core ``tenferro``, else the first by distribution name) and every other one is a
    report whose error names both distributions. Blocking all but one of them by
    distribution name resolves the conflict. One distribution seen twice (on two sys.path
    entries) is one entry point.
    """
    allow_set = set(allow) if allow is not None else _names("TENFERRO_PLUGINS")
    block_set = set(block) if block is not None else _names("TENFERRO_DISABLE_PLUGINS")
    plugins, reports = [], []
    by_name: dict[str, list[Any]] = {}
    for ep in sorted(metadata.entry_points(group=GROUP),
                     key=lambda e: (e.name, _dist_key(_dist(e)[0]), e.value)):
        same = by_name.setdefault(ep.name, [])
        key = (_dist_key(_dist(ep)[0]), ep.value)
        if all((_dist_key(_dist(o)[0]), o.value) != key for o in same):
            same.append(ep)
    for name, group in by_name.items():
        enabled = []
        for ep in group:
            dist, version = _dist(ep)
            names = {ep.name, dist}
            if (allow_set is not None and not names & allow_set) or (block_set and names & block_set):
                allowed = allow_set is None or bool(names & allow_set)
                why = "in TENFERRO_DISABLE_PLUGINS" if allowed else "not in TENFERRO_PLUGINS"
                reports.append(PluginReport(ep.name, dist, version, ep.value, disabled=True, error=None,
                                            registered=[f"disabled ({why})"], disabled_by=why.split()[-1]))
            else:
                enabled.append(ep)
        if not enabled:
            continue
        ep = _prefer(name, enabled)
        dist, version = _dist(ep)
        for other in (o for o in enabled if o is not ep):
            odist, oversion = _dist(other)
            reports.append(PluginReport(other.name, odist, oversion, other.value, error=(
                f"entry-point name conflict: {name!r} is registered by distribution "
                f"{odist or '(none)'!r} ({other.value}) and by {dist or '(none)'!r} ({ep.value}); "
                f"{dist or '(none)'!r} was loaded, this one was not. Uninstall one of them, or "
                f"block one with TENFERRO_DISABLE_PLUGINS=<distribution name>"
            )))
        try:
            obj = ep.load()
        except Exception as exc:  # a broken plugin must not stop the others
            reports.append(
                PluginReport(
                    ep.name, dist, version, ep.value,
                    error=f"import of {ep.value!r} failed: {type(exc).__name__}: {exc}",
                    traceback=traceback.format_exc(),
                )
            )
            continue
        plugins.append(Plugin(ep.name, obj, dist, version))
    return plugins, reports


def make_plugin_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(GROUP)
    pm.add_hookspecs(HookSpecs)
    return pm
