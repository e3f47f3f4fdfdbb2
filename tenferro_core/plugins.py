"""Plugin hooks and entry-point discovery (group ``tenferro``).

A plugin is a module (or object) with a `tenferro_register(registry)` hook
implementation. Each plugin registers into its own staged `Registration`; the
runtime commits it only when the whole hook succeeded and validated, so one
broken plugin never leaves half its entries behind nor stops the others.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import pluggy

from .backend import REQUIRED_BACKEND_ATTRS, Kernel
from .errors import PluginError
from .primitive import Primitive

GROUP = "tenferro"
hookspec = pluggy.HookspecMarker(GROUP)
hookimpl = pluggy.HookimplMarker(GROUP)

RULE_KINDS = ("jvp", "transpose", "vjp", "batch")


class HookSpecs:
    """The hooks a tenferro plugin may implement."""

    @hookspec
    def tenferro_register(self, registry: Registration) -> None:
        """Register backends, ops, kernels, AD rules, passes and energy meters."""


@dataclass
class Registration:
    """What one plugin registered, staged until the runtime commits it."""

    source: str
    backends: list[tuple[Any, int]] = field(default_factory=list)
    ops: list[Primitive] = field(default_factory=list)
    kernels: list[tuple[str, str, Kernel, int]] = field(default_factory=list)
    rules: list[tuple[str, str, Callable[..., Any]]] = field(default_factory=list)
    passes: list[tuple[str, Callable[..., Any]]] = field(default_factory=list)
    meters: list[tuple[str, Any]] = field(default_factory=list)
    namespaces: list[tuple[str, Any]] = field(default_factory=list)

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
        """Register an AD (or batching) rule of `kind` in RULE_KINDS for an op."""
        name = op.name if isinstance(op, Primitive) else op
        if kind not in RULE_KINDS or not callable(fn):
            raise self._bad(f"add_rule expects kind in {RULE_KINDS} and a callable, got {kind!r}, {fn!r}")
        self.rules.append((kind, name, fn))

    def add_pass(self, name: str, fn: Callable[..., Any]) -> None:
        self.passes.append((name, fn))

    def add_meter(self, name: str, meter: Any) -> None:
        self.meters.append((name, meter))

    def add_namespace(self, name: str, module: Any) -> None:
        """Expose `module` as ``array_api.<name>`` (the standard's linalg / fft extensions)."""
        if not name.isidentifier():
            raise self._bad(f"namespace name must be an identifier, got {name!r}")
        self.namespaces.append((name, module))

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
        out += [f"pass {n}" for n, _ in self.passes] + [f"meter {n}" for n, _ in self.meters]
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


def discover(
    allow: Iterable[str] | None = None, block: Iterable[str] | None = None
) -> tuple[list[Plugin], list[PluginReport]]:
    """Load entry points of group ``tenferro``; failures come back as reports.

    `allow`/`block` default to the comma-separated env vars TENFERRO_PLUGINS and
    TENFERRO_DISABLE_PLUGINS; names match the entry-point or distribution name.
    """
    allow_set = set(allow) if allow is not None else _names("TENFERRO_PLUGINS")
    block_set = set(block) if block is not None else _names("TENFERRO_DISABLE_PLUGINS")
    plugins, reports = [], []
    eps = sorted(metadata.entry_points(group=GROUP), key=lambda e: e.name)
    seen: set[str] = set()
    for ep in eps:
        dist = ep.dist.name if ep.dist is not None else None
        version = ep.dist.version if ep.dist is not None else None
        if ep.name in seen:
            continue
        seen.add(ep.name)
        names = {ep.name, dist}
        if (allow_set is not None and not names & allow_set) or (block_set and names & block_set):
            allowed = allow_set is None or bool(names & allow_set)
            why = "in TENFERRO_DISABLE_PLUGINS" if allowed else "not in TENFERRO_PLUGINS"
            reports.append(PluginReport(ep.name, dist, version, ep.value, disabled=True, error=None,
                                        registered=[f"disabled ({why})"]))
            continue
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
