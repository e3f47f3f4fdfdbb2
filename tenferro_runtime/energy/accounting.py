"""Energy accounting: `EnergyMonitor` windows and `measure()` blocks, per op, per compiled
call, per optimizer step and per process. DESIGN.md section 8.

A monitor is an `Observer` on its context's interpreter stack (per thread and asyncio task,
like a gradient tape). Per eager op it does one dict lookup and a few adds: the op's cost
(`op_cost` FLOPs and bytes, and the estimate's joules for them from the device profile) is
cached per (primitive, operand avals, params) and the window counts applications per cost.
A compiled call is one `call` op, costed once per callee from its optimized graph's nodes and
recorded per op category of that graph ("train_step: contraction", ...), so reports show
what a compiled step's energy went to. An op run by its
decomposition is not counted (its parts are); ops on tracers are not work and are skipped.

Meters (`meters_for`) are read at a window's start for every device accounting has seen on
the runtime (a device new in the window: at its first op, noted) and at its end for each
device its ops ran on; the best meter that read twice gives the device's joules (a failing
or garbage meter is noted and the next tried, the estimate last; a window shorter than a
meter's update period is labelled approximate). Those joules are shared among the window's
ops by their estimated joules, so per-op numbers add up exactly to the device's total. CPU
devices read through one RAPL package counter share its delta, split by cost. The estimate
meter is charged with the ops the outermost monitor of a context counted, in batches (at
window starts and ends and budget reads). Nested windows form a tree (both count the inner
ops); outermost windows add up into `process_region()`.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

from tenferro_core.energy import EstimatedTelemetry, MeterError, MeterWarning
from tenferro_core.errors import ArgumentError, TenferroError

from .. import tracing
from ..cost import op_cost
from ..graph_prims import call_p
from ..tensor import Tensor
from ..tracing import Tracer
from .meters import checked, meters_for
from .records import DeviceEnergy, OpEnergy, Region

COST_CACHE_SIZE = 4096  # op costs per runtime (and per monitor tree, before it is cleared)
_DEFAULT = EstimatedTelemetry()  # J/FLOP and J/byte when a device's estimate has no profile


class _Cost:
    """One application of an op on a device: FLOPs, bytes, the estimate's joules for them and
    the estimate meter to charge (None: nothing to charge)."""

    __slots__ = ("name", "category", "device", "flops", "bytes", "joules", "charge", "parts", "jf", "jb")

    def __init__(self, name: str, category: str, device: Any, flops: int, nbytes: int,
                 parts: tuple = ()):
        self.name, self.category, self.device, self.flops, self.bytes = name, category, device, flops, nbytes
        self.parts = parts  # a compiled call's (category, flops, bytes) per op category of its graph
        self.charge = None
        jf, jb = _DEFAULT.joules_per_flop, _DEFAULT.joules_per_byte
        try:
            est = meters_for(device.runtime, device)[-1]
            self.charge = getattr(est, "charge", None)
            prof = est.profile(device)
            jf, jb = float(prof.joules_per_flop), float(prof.joules_per_byte)
        except Exception:  # no profile: the core defaults weigh the ops
            pass
        self.jf, self.jb = jf, jb
        joules = flops * jf + nbytes * jb
        self.joules = joules if math.isfinite(joules) and joules >= 0 else 0.0


_SKIP = _Cost.__new__(_Cost)  # an op run by its decomposition: its parts are counted instead


def _call_cost(callee: Any, device: Any) -> _Cost:
    """A compiled call's cost, with its split by the op categories of its optimized graph (a
    fused group counts as the categories of its ops), so reports show what the energy went to."""
    by_cat: dict[str, list[int]] = {}
    try:
        _graph_parts(callee.optimized(), device.runtime, by_cat)
    except Exception:  # an extension op without a cost rule: the call weighs nothing
        by_cat = {}
    flops = sum(f for f, _ in by_cat.values())
    nbytes = sum(b for _, b in by_cat.values())
    parts = tuple((cat, f, b) for cat, (f, b) in sorted(by_cat.items()))
    return _Cost(callee.name, "call", device, flops, nbytes, parts)


def _graph_ops(graph: Any) -> Iterator[Any]:
    """The nodes a graph runs, those of fused groups and nested calls (`graph_of`) inlined."""
    for n in graph.nodes:
        inner = getattr(n.prim, "graph_of", None)
        if inner is not None:
            yield from _graph_ops(inner(n.params))
        else:
            yield n


def _graph_parts(graph: Any, runtime: Any, by_cat: dict[str, list[int]]) -> None:
    for n in _graph_ops(graph):
        f, b = op_cost(runtime, n.prim, [v.aval for v in n.inputs], [v.aval for v in n.outputs], n.params)
        acc = by_cat.setdefault(n.prim.category or "extension", [0, 0])
        acc[0] += f
        acc[1] += b


def _op_cost(prim: Any, avals: tuple, params: dict, out_avals: list, device: Any) -> _Cost:
    try:
        flops, nbytes = op_cost(device.runtime, prim, avals, out_avals, params)
    except Exception:  # no cost rule: counted, with no weight
        flops = nbytes = 0
    return _Cost(prim.name, prim.category or "extension", device, flops, nbytes)


def op_key(prim: Any, avals: tuple, params: dict) -> Any:
    """The cache key of one op's cost: (primitive, operand avals, params items)."""
    return (prim, avals, tuple(params.items())) if params else (prim, *avals)


def graph_costs(graph: Any, device: Any) -> tuple:
    """The costs of the ops a graph's eager evaluation runs on `device` (a tape's VJP graph
    replayed as one plan), the same cached costs as those ops run one by one, so reports
    read alike; cached per graph."""
    runtime = device.runtime
    return runtime.caches.get("energy graph costs", COST_CACHE_SIZE).get_or_build(
        graph, _graph_costs, graph, device, runtime.caches.get("energy op costs", COST_CACHE_SIZE))


def _graph_costs(graph: Any, device: Any, cache: Any) -> tuple:
    out = []
    for n in _graph_ops(graph):
        avals = tuple([v.aval for v in n.inputs])
        out_avals = [v.aval for v in n.outputs]
        try:
            key = op_key(n.prim, avals, n.params)
            out.append(cache.get_or_build(key, _op_cost, n.prim, avals, n.params, out_avals, device))
        except TypeError:  # unhashable params
            out.append(_op_cost(n.prim, avals, n.params, out_avals, device))
    return tuple(out)


def cost_of(prim: Any, args: tuple, params: dict, out: Any = None, key: Any = None) -> _Cost:
    """The cached cost of `prim` on concrete `args` (`out`: its result, for the output avals)."""
    if prim is call_p:
        callee = params["fn"]
        device = (args[0] if args else out[0])._aval.device  # no arguments: where it computed
        return callee.derived("energy cost", lambda: _call_cost(callee, device))
    avals = tuple([a._aval for a in args])
    device = avals[0].device if avals else params.get("device")
    runtime = getattr(device, "runtime", None)
    if runtime is None:
        return _SKIP
    if prim not in device.kernels and prim.decomposition is not None:
        return _SKIP
    outs = out if type(out) is tuple else (out,)
    out_avals = [o._aval for o in outs]
    if key is None:
        return _op_cost(prim, avals, params, out_avals, device)
    return runtime.caches.get("energy op costs", COST_CACHE_SIZE).get_or_build(
        key, _op_cost, prim, avals, params, out_avals, device)


def _start(device: Any) -> list:
    """[(meter, its Reading or why it failed)] for every meter of `device`, best first."""
    try:
        meters = meters_for(device.runtime, device)
    except Exception as exc:
        return [(None, f"meters_for failed: {type(exc).__name__}: {exc}")]
    out: list = []
    for m in meters:
        try:
            out.append((m, checked(m, device, None)))
        except MeterError as exc:  # `checked` turns every failure of a meter into one
            out.append((m, str(exc)))
    return out


def _fell_back(device: Any, failed: list[str], used: str) -> None:
    """Warn (a `MeterWarning`, once per message under the default filter) that `device`'s
    `failed` meters were passed over for `used`; the region's note keeps each reason."""
    warnings.warn(f"energy accounting of {device}: meter(s) {', '.join(map(repr, failed))} failed or "
                  f"returned an impossible reading; fell back to {used} (the region's note says why)",
                  MeterWarning, stacklevel=2)


def _read(device: Any, starts: list) -> tuple[DeviceEnergy | None, Any]:
    """(energy of `device` since `starts` from the best meter that reads twice, that meter);
    (None, None) when none does. A meter passed over is noted and warned about (a
    `MeterWarning`). Never raises, unless warnings are made errors."""
    notes: list[str] = []
    failed: list[str] = []
    for m, start in starts:
        name = getattr(m, "name", "?")
        if isinstance(start, str):
            notes.append(f"{name} unusable: {start}")
            failed.append(name)
            continue
        try:
            end = checked(m, device, start)
        except MeterError as exc:
            notes.append(f"{name} failed: {exc}")
            failed.append(name)
            continue
        if failed:
            _fell_back(device, failed, repr(name))
        fell_back = bool(notes)
        approx = bool(start.approximate or end.approximate)
        window, period = end.time - start.time, getattr(m, "update_period", 0.0)
        if not approx and window < period:
            approx = True
            notes.append(f"window {window * 1e3:.3g} ms is shorter than {name}'s update period "
                         f"{period * 1e3:.3g} ms")
        if fell_back:
            notes.append(f"fell back to {name}")
        note = "; ".join([end.note] * bool(end.note) + notes)
        return DeviceEnergy(str(device), end.joules - start.joules, end.source, name, approx, note), m
    if failed:
        _fell_back(device, failed, "the cost model's estimate of the window's ops")
    return None, None


def split(total: float, weights: list[float]) -> list[float]:
    """`total` (>= 0) shared in proportion to `weights` (equally when they are all 0), so that
    the shares add up to `total` exactly, in any order: each is a multiple of ``ulp(total)``
    (so every partial sum is exact) and the largest takes the remainder."""
    n = len(weights)
    if n == 0:
        return []
    wsum = math.fsum(weights)
    if not wsum > 0:
        weights, wsum = [1.0] * n, float(n)
    if not total > 0:
        return [0.0] * n
    g = math.ulp(total)
    out = [round(total * w / wsum / g) * g for w in weights]
    k = max(range(n), key=weights.__getitem__)
    out[k] = 0.0
    out[k] = total - math.fsum(out)
    return out


def _join(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def _seen(runtime: Any) -> Any:
    return runtime.caches.get("energy devices", 64)


class EnergyMonitor(tracing.Observer):
    """One accounted window, opened with `begin()` and closed with `end()` (or `with`), in this
    thread or asyncio task only: it sees the ops its context runs. Windows nest (an inner one
    becomes a child of the innermost open one). Reusable once closed; `region` is the last
    window's `Region`, filled at `end()`. `runtime`: whose meters read the devices used before
    (default: the current runtime)."""

    def __init__(self, label: str = "region", kind: str = "region", *, runtime: Any = None):
        if not isinstance(label, str) or not isinstance(kind, str):
            raise ArgumentError(f"EnergyMonitor: label and kind must be strings, got {label!r}, {kind!r}")
        self.label, self.kind, self.runtime = label, kind, check_runtime("EnergyMonitor", runtime)
        self.region: Region | None = None
        self.estimated = 0.0  # the estimate's joules of the ops counted in the open window
        self._token: Any = None
        self._counts: dict[_Cost, int] = {}

    # ---- windows ----------------------------------------------------------------------------
    def begin(self) -> Region:
        """Open a window here; returns its Region (filled at `end`)."""
        if self._token is not None:
            raise TenferroError(f"EnergyMonitor {self.label!r} is already open; end() it first or use "
                                f"another monitor for a nested window")
        parent = innermost()
        self._parent = parent
        self._root = self if parent is None else parent._root
        self._costs: dict = {} if parent is None else parent._costs
        self._counts = {}
        self._charged: dict[_Cost, int] = {}
        self.estimated = 0.0
        if self.runtime is not None:
            rt = self.runtime
        elif parent is not None:
            rt = parent._rt
        else:
            from ..runtime import default_runtime

            rt = default_runtime()
        self._rt = rt
        self._root._flush()
        devices = list(_seen(rt).values())
        if not devices:
            with contextlib.suppress(Exception):
                devices = [rt.default_device()]
        self._starts = {d: _start(d) for d in devices}
        self._late: set = set()
        self.region = Region(self.label, self.kind, start=time.perf_counter())
        self._token = tracing.push_observer(self)
        return self.region

    def end(self) -> Region:
        """Close the window (in the context that opened it) and return its filled Region."""
        if self._token is None:
            raise TenferroError(f"EnergyMonitor {self.label!r} is not open; begin() it first")
        tracing.pop(self._token)
        self._token = None
        region = self.region
        region.end = time.perf_counter()
        self._root._flush()
        region.devices, shares = self._energies(final=True)
        region.ops = shares
        if self._parent is not None:
            self._parent.region.children.append(region)
        else:
            _PROCESS.add(region)
        return region

    def __enter__(self) -> EnergyMonitor:
        self.begin()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.end()

    @property
    def open(self) -> bool:
        return self._token is not None

    def check(self, where: str, extra: float = 0.0) -> None:
        """Raise `EnergyBudgetExceeded` if this window has a budget it crossed (or would cross
        with `extra` joules more); a plain monitor has none."""

    # ---- ops --------------------------------------------------------------------------------
    def observe(self, prim: Any, args: tuple, params: dict, out: Any) -> None:
        if type(out) is not Tensor:
            first = out[0] if type(out) is tuple and out else out
            if isinstance(first, Tracer):
                return
        try:
            if params:
                key: Any = (prim, tuple([a._aval for a in args]), tuple(params.items()))
            elif len(args) == 2:
                key = (prim, args[0]._aval, args[1]._aval)
            else:
                key = (prim, *[a._aval for a in args])  # op_key, inlined
            c = self._costs.get(key)
        except (TypeError, AttributeError):  # unhashable params: costed without the cache
            key = c = None
        if c is None:
            c = self._miss(key, prim, args, params, out)
        if c is _SKIP:
            return
        counts = self._counts
        n = counts.get(c)
        counts[c] = (self._first(c) if n is None else n) + 1
        self.estimated += c.joules

    def observe_graph(self, graph: Any, args: tuple, outs: list) -> None:
        """A graph evaluated eagerly as one plan replay: each of its ops counted as if it had
        run alone."""
        try:
            device = args[0]._aval.device if args else outs[0]._aval.device
            costs = graph_costs(graph, device)
        except Exception:  # accounting never breaks the measured program
            return
        counts = self._counts
        joules = 0.0
        for c in costs:
            n = counts.get(c)
            counts[c] = (self._first(c) if n is None else n) + 1
            joules += c.joules
        self.estimated += joules

    def _miss(self, key: Any, prim: Any, args: tuple, params: dict, out: Any) -> _Cost:
        try:
            c = cost_of(prim, args, params, out, key)
        except Exception:  # accounting never breaks the measured program
            return _SKIP
        if key is not None:
            if len(self._costs) >= COST_CACHE_SIZE:
                self._costs.clear()
            self._costs[key] = c
        return c

    def _first(self, c: _Cost) -> int:
        """A cost first seen in this window: read its device's meters if not read yet."""
        dev = c.device
        seen = _seen(dev.runtime)
        if dev not in seen:
            seen.put(dev, dev)
        if dev not in self._starts:
            self._starts[dev] = _start(dev)
            self._late.add(dev)
        return 0

    def _flush(self) -> None:
        """Charge the estimate meters with the ops this (outermost) window counted since the
        last flush."""
        todo: dict[Any, list] = {}
        charged = self._charged
        for c, n in list(self._counts.items()):
            d = n - charged.get(c, 0)
            if d > 0 and c.charge is not None:
                charged[c] = n
                acc = todo.setdefault(c.device, [c.charge, 0, 0])
                acc[1] += d * c.flops
                acc[2] += d * c.bytes
        for dev, (charge, flops, nbytes) in todo.items():
            with contextlib.suppress(Exception):  # a broken estimate is noted at its read
                charge(dev, flops, nbytes)

    # ---- results ----------------------------------------------------------------------------
    def _energies(self, final: bool) -> tuple[dict[str, DeviceEnergy], dict]:
        """(per device energy, per (op name, device) OpEnergy with its share) of the window so
        far; `final` also computes the shares."""
        ops: dict[tuple[str, str], OpEnergy] = {}
        weights: dict[tuple[str, str], float] = {}
        by_dev: dict[Any, list] = {}
        for c, n in list(self._counts.items()):
            for name, cat, flops, nbytes in ([(f"{c.name}: {cat}", cat, f, b) for cat, f, b in c.parts]
                                             or [(c.name, c.category, c.flops, c.bytes)]):
                k = (name, str(c.device))
                op = ops.get(k)
                if op is None:
                    op = ops[k] = OpEnergy(name, cat, k[1])
                    weights[k] = 0.0
                    by_dev.setdefault(c.device, []).append(k)
                op.count += n
                op.flops += n * flops
                op.bytes += n * nbytes
                weights[k] += n * (flops * c.jf + nbytes * c.jb if c.parts else c.joules)
        devices = list(by_dev) or list(self._starts)[:1]
        out: dict[str, DeviceEnergy] = {}
        groups: dict[int, list] = {}
        for dev in devices:
            est = math.fsum(weights[k] for k in by_dev.get(dev, ()))
            de, meter = _read(dev, self._starts.get(dev, []))
            if de is None:
                de = DeviceEnergy(str(dev), est, "estimate", "cost model", True,
                                  "no meter could be read: the cost model's estimate of the ops")
                if self._starts.get(dev):
                    de.note += " (" + "; ".join(f"{getattr(m, 'name', '?')}: {r}" for m, r in
                                               self._starts[dev] if isinstance(r, str)) + ")"
            elif de.source == "rapl":  # one package counter for every CPU device
                groups.setdefault(id(meter), []).append((dev, est))
            if dev in self._late:
                de.note = _join(de.note, "window starts after its first op")
            out[str(dev)] = de
        for members in groups.values():  # one counter read through several devices: split it
            if len(members) > 1:
                total = out[str(members[0][0])].joules
                names = ", ".join(str(d) for d, _ in members)
                for (dev, _), j in zip(members, split(total, [e for _, e in members])):
                    out[str(dev)].joules = j
                    out[str(dev)].note = _join(out[str(dev)].note, f"one counter for {names}: split by cost")
        if final:
            for dev, keys in by_dev.items():
                for k, j in zip(keys, split(out[str(dev)].joules, [weights[k] for k in keys])):
                    ops[k].joules = j
        return out, ops


def check_runtime(owner: str, runtime: Any) -> Any:
    """`runtime` if it is None or a `tenferro_runtime.Runtime`; else an ArgumentError (a
    TypeError), raised where it is given rather than when the window opens."""
    if runtime is None:
        return None
    from ..runtime import Runtime

    if not isinstance(runtime, Runtime):
        raise ArgumentError(f"{owner}: runtime must be a tenferro_runtime.Runtime (whose meters read "
                            f"the devices) or None for the current one, got {type(runtime).__name__} "
                            f"{runtime!r:.60}")
    return runtime


def innermost() -> EnergyMonitor | None:
    """The innermost open monitor of this thread or asyncio task, or None."""
    for o in reversed(tracing.observers()):
        if isinstance(o, EnergyMonitor):
            return o
    return None


@contextlib.contextmanager
def measure(label: str = "region", kind: str = "region", *, runtime: Any = None) -> Iterator[Region]:
    """Account the block's ops and energy; yields its `Region`, filled when the block exits.
    `kind`: "region", "epoch", "step", ... (for reports)."""
    monitor = EnergyMonitor(label, kind, runtime=runtime)
    region = monitor.begin()
    try:
        yield region
    finally:
        monitor.end()


class _Process:
    """The process's total: every outermost window added up (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.region = Region("process", "process")
        self._by_source: dict[str, dict[str, float]] = {}

    def add(self, r: Region) -> None:
        with self._lock:
            p = self.region
            p.start = r.start if not p.start else min(p.start, r.start)
            p.end = max(p.end, r.end)
            for name, d in r.devices.items():
                srcs = self._by_source.setdefault(name, {})
                srcs[d.source] = srcs.get(d.source, 0.0) + d.joules
                have = p.devices.get(name)
                if have is None:
                    p.devices[name] = DeviceEnergy(name, d.joules, d.source, d.meter, d.approximate)
                    continue
                have.joules += d.joules
                have.approximate = have.approximate or d.approximate
                if len(srcs) > 1:
                    have.source = max(srcs, key=srcs.__getitem__)
                    have.approximate = True
                    have.note = "sums windows read by " + ", ".join(f"{s} ({j:.4g} J)"
                                                                    for s, j in srcs.items())
            for k, op in r.ops.items():
                have = p.ops.setdefault(k, OpEnergy(op.name, op.category, op.device))
                for f in ("count", "flops", "bytes", "joules"):
                    setattr(have, f, getattr(have, f) + getattr(op, f))

    def snapshot(self, reset: bool) -> Region:
        with self._lock:
            p = self.region
            out = Region(p.label, p.kind, p.start, p.end,
                         {k: DeviceEnergy(**vars(d)) for k, d in p.devices.items()},
                         {k: OpEnergy(**vars(o)) for k, o in p.ops.items()})
            if reset:
                self.region = Region("process", "process")
                self._by_source = {}
            return out


_PROCESS = _Process()


def process_region(reset: bool = False) -> Region:
    """A copy of the process's total: every outermost monitored window of every thread added
    up (its start and end span the first and last of them). `reset` starts it over."""
    return _PROCESS.snapshot(reset)


__all__ = ["EnergyMonitor", "cost_of", "innermost", "measure", "process_region", "split"]
