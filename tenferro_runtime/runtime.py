"""The Runtime: an explicit snapshot of what the plugins registered.

Backends, ops, kernels, AD rules, passes, meters and caches live here and
nowhere else. `default_runtime()` builds one lazily from the entry points;
tests and users build their own from an explicit plugin list.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
import traceback
from collections.abc import Iterable, Iterator
from typing import Any

from tenferro_core import catalog
from tenferro_core.dtypes import DType
from tenferro_core.errors import DeviceError, DTypeError, MissingKernelError, PluginError
from tenferro_core.plugins import Plugin, PluginReport, Registration, discover, make_plugin_manager
from tenferro_core.primitive import Primitive

from . import control_flow_prims, graph_prims
from .caches import Caches
from .heap import keep_freed_memory
from .threads import apply_threads, resolve_threads


class Device(str):
    """A device of one backend in one runtime, named ``"<backend>:<id>"``.

    It is its name (a str subclass: cheap to hash and compare, so it can sit in
    cache keys) and holds the precomputed kernel table {Primitive: kernel} used by
    eager dispatch.
    """

    def __new__(cls, runtime: Runtime, backend: Any, device_id: str, kernels: dict,
                dtypes: frozenset) -> Device:
        self = super().__new__(cls, f"{backend.name}:{device_id}")
        self.runtime = runtime
        self.backend = backend
        self.id = device_id
        self.kernels = kernels
        self.dtypes = dtypes
        self.specialize = getattr(backend, "specialize", None)
        # a specialize(..., params=) also sees the call's canonical params (numpy's `fused`)
        self.specialize_params = self.specialize is not None and _takes(self.specialize, "params")
        # (prim, *avals) or (prim, avals, *eager.params_key(...)) -> eager.prepare's entry
        self.dispatch_cache = runtime.caches.memo(f"dispatch[{backend.name}:{device_id}]",
                                                  runtime.dispatch_cache_size, self._prepare,
                                                  on_clear=_clear_fronts)
        self.dispatch = self.dispatch_cache.get
        # (type, Python scalar, aval, namespace function) -> a dense constant buffer (x * 0.5)
        self.constant_cache = runtime.caches.memo(f"constants[{backend.name}:{device_id}]", 256,
                                                  _build_constant)
        self.constant = self.constant_cache.get
        return self

    def kernel_for(self, prim: Primitive, avals: tuple, out_avals: tuple, params: dict) -> Any:
        """This device's kernel for one call signature (the backend's `specialize` applied to
        its registered one), or None where the op has none here (its decomposition runs). A
        registered kernel with a ``choose_kernel(device, avals, out_avals, params)`` attribute
        picks the kernel for the signature (None: the next kernel by priority runs); dispatch
        memoizes the choice, so it costs nothing per call."""
        fn = self.kernels.get(prim)
        choose = getattr(fn, "choose_kernel", None)
        if choose is not None:  # a kernel that picks per signature, here, once (tenferro-forge's)
            fn = choose(self, avals, out_avals, params) or self.runtime.kernel_below(
                self.backend.name, prim.name, fn)
        if fn is None or self.specialize is None:
            return fn
        if self.specialize_params:
            return self.specialize(prim.name, fn, avals, out_avals, params=params)
        return self.specialize(prim.name, fn, avals, out_avals)

    def _prepare(self, prim: Primitive, *key: Any) -> tuple:
        from .eager import prepare

        if prim.family and prim.name not in self.runtime.ops:  # an op of a disabled plugin?
            off = self.runtime.disabled_plugins(prim.name.split(".")[0])
            if off:
                raise MissingKernelError(f"op {prim.name!r} is not registered: {'; '.join(off)}")

        if prim.params:
            return prepare(prim, key[0], dict(key[1]), self)
        return prepare(prim, key, {}, self)

    @property
    def name(self) -> str:
        return str.__str__(self)

    def __repr__(self) -> str:
        return f"Device({self.name!r})"

    def __str__(self) -> str:
        return self.name

    def __reduce__(self):
        return (_device_by_name, (self.name,))

    def supports(self, dtype: DType) -> bool:
        return dtype in self.dtypes


_UNIQUE: dict[str, tuple[Any, Any]] = {
    "backend": (lambda reg: [b.name for b, _ in reg.backends], lambda n: f"backend {n!r}"),
    "op": (lambda reg: [op.name for op in reg.ops], lambda n: f"op {n!r}"),
    "rule": (lambda reg: [(k, n) for k, n, _ in reg.rules], lambda kn: f"{kn[0]} rule for {kn[1]!r}"),
    "namespace": (lambda reg: [n for n, _ in reg.namespaces], lambda n: f"namespace array_api.{n}"),
    "meter": (lambda reg: [n for n, _ in reg.meters], lambda n: f"meter {n!r}"),
    "pass": (lambda reg: [n for n, _, _ in reg.passes], lambda n: f"pass {n!r}"),
    "executor": (lambda reg: [n for n, _, _ in reg.executors], lambda n: f"executor {n!r}"),
}
"""What a plugin registers under a name no other registration may take: kind -> (the names
a Registration holds of that kind, how an error names one). `Runtime._commit` checks them all
in one loop; a duplicate names both sources. (Kernels may repeat at another priority.)"""


def _takes(fn: Any, name: str) -> bool:
    import inspect

    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _build_constant(vtype: type, value: Any, aval: Any, name: str) -> Any:
    from .array_api._helpers import constant_buffer  # the namespace sits above the runtime

    return constant_buffer(name, value, aval)


_DEFAULT_FLOATS = ("float32", "float64")


def _default_float(value: Any) -> DType:
    """`Runtime(default_float_dtype=)`, else $TENFERRO_DEFAULT_FLOAT, else float64; DTypeError
    (a TypeError) naming the argument or the variable for anything but float32 or float64."""
    from tenferro_core import dtypes as D

    where = "Runtime(default_float_dtype=...)"
    if value is None:
        value = os.environ.get("TENFERRO_DEFAULT_FLOAT") or "float64"
        where = "the environment variable TENFERRO_DEFAULT_FLOAT"
    try:
        d = D.as_dtype(value)
    except DTypeError:
        d = None
    if d is None or d.name not in _DEFAULT_FLOATS:
        raise DTypeError(
            f"{where} must be float32 or float64 (the real floating dtypes every backend holds), "
            f"got {value!r}; set it to 'float32' (models) or 'float64' (NumPy's default)")
    return d


def _package_of(obj: Any) -> str:
    """The top-level package a plugin object (module, class or instance) comes from."""
    mod = obj.__name__ if isinstance(obj, type(os)) else getattr(obj, "__module__", None)
    mod = mod or type(obj).__module__
    return mod.split(".")[0]


def _device_by_name(name: str) -> Device:
    return default_runtime().device(name)


class Runtime:
    """Backends, ops, kernels and rules from an explicit list of plugins.

    `plugins` holds modules/objects implementing `tenferro_register`, or
    `tenferro_core.plugins.Plugin` records. `strict=True` raises the first
    plugin failure instead of reporting it. `check_kernels` (default: the
    environment variable ``TENFERRO_CHECK_KERNELS=1``) compares every kernel's
    result with the op's abstract eval. `dispatch_cache_size` bounds each device's
    dispatch cache (signatures seen by eager dispatch). `default_float_dtype` (float32 or
    float64; default: the environment variable ``TENFERRO_DEFAULT_FLOAT``, else float64 as
    NumPy) is the dtype of Python floats and of creation functions and random floats without
    a dtype. `threads` (a positive int; default: the environment variable ``TENFERRO_THREADS``,
    else the CPUs this process may use, see `tenferro_runtime.threads`) is how many threads
    each backend's kernels may use; it is handed to a backend's ``set_threads`` when this
    runtime first makes one of its devices (thread pools are process-wide: the runtime that
    applied last wins). The first runtime keeps freed memory in the process heap (glibc;
    `tenferro_runtime.heap`, ``TENFERRO_HEAP=system`` to leave malloc alone).
    """

    def __init__(self, plugins: Iterable[Any] = (), *, reports: Iterable[PluginReport] = (),
                 strict: bool = False, check_kernels: bool | None = None,
                 dispatch_cache_size: int = 8192, default_float_dtype: Any = None,
                 threads: int | None = None):
        self._default_float = _default_float(default_float_dtype)
        keep_freed_memory()  # process-wide, once (tenferro_runtime.heap)
        self._threads, self.threads_source = resolve_threads(threads)
        self._threads_applied: set[str] = set()  # backends this runtime gave its threads
        if check_kernels is None:
            check_kernels = os.environ.get("TENFERRO_CHECK_KERNELS", "") not in ("", "0")
        self.check_kernels = bool(check_kernels)
        self.dispatch_cache_size = dispatch_cache_size
        self.plugin_packages: frozenset[str] = frozenset()
        self._site_memo: dict | None = None  # graph.user_site's {code object: file name or None}
        self._lock = threading.RLock()
        self.reports: list[PluginReport] = list(reports)
        self.backends: dict[str, tuple[Any, int, str]] = {}
        self.ops: dict[str, Primitive] = {**catalog.BY_NAME, **graph_prims.BY_NAME,
                                          **control_flow_prims.BY_NAME}
        # (kind, name) -> who registered it, for every kind in _UNIQUE (duplicates name both)
        self._sources: dict[tuple[str, Any], str] = {("op", n): "tenferro_core" for n in self.ops}
        self.kernels: dict[tuple[str, str], tuple[Any, int, str]] = {}
        # every registered (fn, priority, source) per key, winners and losers (`kernel_below`)
        self.all_kernels: dict[tuple[str, str], list[tuple[Any, int, str]]] = {}
        self.rules: dict[tuple[str, str], Any] = {}
        self.passes: dict[str, tuple[Any, float, str]] = {}  # name -> (fn, position, source)
        self.meters: dict[str, Any] = {}
        # name -> (fn(graph, device), device prefixes it is the default for, source)
        self.executors: dict[str, tuple[Any, tuple[str, ...], str]] = {}
        self.executor_decompose: dict[str, frozenset[str]] = {}  # name -> categories (add_executor)
        self.namespaces: dict[str, Any] = {}
        self.caches = Caches()
        self._devices: dict[str, Device] = {}
        self._pm = make_plugin_manager()
        for p in plugins:
            if not isinstance(p, Plugin):
                p = Plugin(getattr(p, "__name__", type(p).__name__), p)
            self._load(p, strict)

    @classmethod
    def from_entry_points(cls, allow: Iterable[str] | None = None,
                          block: Iterable[str] | None = None, strict: bool = False,
                          **options: Any) -> Runtime:
        """Discover plugins of entry-point group ``tenferro`` (honouring the allow/block lists);
        `options` are the constructor's keywords (``default_float_dtype=float32``, ...)."""
        plugins, reports = discover(allow, block)
        if strict and any(r.error for r in reports):
            raise PluginError(next(r.error for r in reports if r.error))
        return cls(plugins, reports=reports, strict=strict, **options)

    @property
    def default_float_dtype(self) -> DType:
        """The dtype of Python floats, float lists, and creation functions and random floats
        without a dtype (float32 or float64; fixed when the runtime is built)."""
        return self._default_float

    @property
    def threads(self) -> int:
        """How many threads each backend's kernels may use (fixed when the runtime is built;
        `threads_source` says whether it came from the argument, ``TENFERRO_THREADS`` or the
        default)."""
        return self._threads

    def apply_threads(self, backends: Iterable[str] | None = None) -> list[str]:
        """Hand `threads` to each installed backend (or those named) that has the optional
        ``set_threads`` now, rather than when its first device is made (a benchmark that times
        PyTorch itself calls this first); the names of the backends it reached."""
        with self._lock:
            done = []
            for name in sorted(self.backends) if backends is None else backends:
                if name in self.backends and apply_threads(self.backends[name][0], self._threads):
                    self._threads_applied.add(name)
                    done.append(name)
            return done

    # ---- loading -------------------------------------------------------
    def _load(self, plugin: Plugin, strict: bool) -> None:
        report = PluginReport(plugin.name, plugin.distribution, plugin.version,
                              getattr(plugin.obj, "__name__", None))
        self.reports.append(report)
        reg = Registration(plugin.name if not plugin.distribution else
                           f"{plugin.name} ({plugin.distribution})")
        try:
            self._pm.register(plugin.obj, name=f"{plugin.name}#{len(self.reports)}")
            impls = [i for i in self._pm.hook.tenferro_register.get_hookimpls() if i.plugin is plugin.obj]
            if not impls:
                raise PluginError(
                    f"plugin {plugin.name!r} implements no 'tenferro_register' hook; decorate a "
                    f"function with tenferro_core.hookimpl"
                )
            for impl in impls:
                impl.function(registry=reg)
            self._commit(reg)
            self.plugin_packages |= {_package_of(plugin.obj)}
            self._site_memo = None
        except Exception as exc:  # a broken plugin must not stop the others
            with contextlib.suppress(Exception):
                self._pm.unregister(plugin.obj)
            report.error = f"{type(exc).__name__}: {exc}"
            report.traceback = traceback.format_exc()
            if strict:
                raise PluginError(f"plugin {plugin.name!r} failed: {report.error}") from exc
            return
        report.registered = reg.summary()

    def _commit(self, reg: Registration) -> None:
        """Validate a plugin's registration against what is loaded, then apply it whole."""
        src = reg.source
        staged_sources: dict[tuple[str, Any], str] = {}
        for kind, (names_of, label) in _UNIQUE.items():
            for name in names_of(reg):
                other = self._sources.get((kind, name)) or staged_sources.get((kind, name))
                if other is not None:
                    raise PluginError(f"{label(name)} is registered twice: by {other} and by {src}")
                staged_sources[(kind, name)] = src
        kernels: list[tuple[str, str, Any, int]] = list(reg.kernels)
        for b, _ in reg.backends:
            kernels = [(b.name, n, fn, -1) for n, fn in b.kernels().items()] + kernels
        staged: dict[tuple[str, str], tuple[Any, int, str]] = {}
        for backend, name, fn, prio in kernels:
            key = (backend, name)
            prev = staged.get(key) or self.kernels.get(key)
            if prev is not None and prev[1] == prio:
                raise PluginError(
                    f"kernel for {name!r} on backend {backend!r} is registered twice at priority "
                    f"{prio}: by {prev[2]} and by {src}; give one a higher priority"
                )
            if prev is None or prio > prev[1]:
                staged[key] = (fn, prio, src)
        # all checks passed: apply
        for b, prio in reg.backends:
            self.backends[b.name] = (b, prio, src)
        for op in reg.ops:
            self.ops[op.name] = op
        self.kernels.update(staged)
        for backend, name, fn, prio in kernels:
            self.all_kernels.setdefault((backend, name), []).append((fn, prio, src))
        for kind, name, fn in reg.rules:
            self.rules[(kind, name)] = fn
        self._sources.update(staged_sources)
        for n, fn, position in reg.passes:
            self.passes[n] = (fn, position, src)
        self.meters.update(reg.meters)
        for n, fn, prefixes in reg.executors:
            self.executors[n] = (fn, prefixes, src)
        self.executor_decompose.update(reg.executor_decompose)
        self.namespaces.update(reg.namespaces)
        self._devices.clear()
        _clear_fronts()

    # ---- devices -------------------------------------------------------
    def set_check_kernels(self, on: bool) -> None:
        """Turn kernel result checks on or off (clears the dispatch caches that hold kernels)."""
        with self._lock:
            self.check_kernels = bool(on)
            for dev in set(self._devices.values()):
                dev.dispatch_cache.clear()

    def device(self, spec: str | Device | None = None) -> Device:
        """The Device for ``"<backend>:<id>"`` (None: the default device)."""
        dev = self._devices.get(spec) if type(spec) is str else None
        if dev is not None:
            return dev
        with self._lock:
            return self._device(spec)

    def _device(self, spec: str | Device | None) -> Device:
        if spec is None:
            return self.default_device()
        if isinstance(spec, Device):
            if spec.runtime is not self:
                return self.device(spec.name)
            return spec
        if not isinstance(spec, str):
            raise DeviceError(
                f"expected a device name like 'numpy:cpu' or a Device, got {type(spec).__name__} {spec!r}"
            )
        dev = self._devices.get(spec)
        if dev is not None:
            return dev
        backend_name, _, device_id = spec.partition(":")
        entry = self.backends.get(backend_name)
        off = [] if entry is not None else self.disabled_plugins(
            backend_name, f"tenferro-{backend_name}", f"tenferro_{backend_name}", label="backend plugin")
        if off:
            raise DeviceError(f"unknown backend {backend_name!r} in device {spec!r}: {'; '.join(off)}")
        if entry is None:
            raise DeviceError(
                f"unknown backend {backend_name!r} in device {spec!r}; installed backends: "
                f"{sorted(self.backends) or 'none'}; install its plugin or pick one of "
                f"{self.device_names()}"
            )
        backend = entry[0]
        ids = tuple(backend.devices())
        if not device_id and ids:
            device_id = ids[0]
        if device_id not in ids:
            raise DeviceError(
                f"backend {backend_name!r} has no device {device_id!r} on this machine; it has "
                f"{list(ids)}: use one of {[f'{backend_name}:{i}' for i in ids]} (or list every "
                f"device with `python -m tenferro_runtime plugins`)"
            )
        dev = self._devices.get(f"{backend_name}:{device_id}")
        if dev is not None:
            self._devices[spec] = dev
            return dev
        table = {}
        for (bname, opname), (fn, _, _) in self.kernels.items():
            if bname == backend_name and opname in self.ops:
                table[self.ops[opname]] = fn
        if backend_name not in self._threads_applied:  # the backend's first device here
            apply_threads(backend, self._threads)
            self._threads_applied.add(backend_name)
        dev = Device(self, backend, device_id, table, frozenset(backend.supported_dtypes(device_id)))
        self._devices[spec] = self._devices[dev.name] = dev
        return dev

    def device_names(self) -> list[str]:
        """Every device of every backend (asks each backend which devices it has)."""
        out = []
        for name, (b, _, _) in sorted(self.backends.items(), key=lambda kv: -kv[1][1]):
            try:
                out += [f"{name}:{d}" for d in b.devices()]
            except Exception:  # a backend whose library is broken lists no devices
                continue
        return out

    def device_of(self, obj: Any) -> Device | None:
        """The device whose backend claims `obj` as one of its native buffers (optional
        ``claims(obj) -> device id | None`` of a backend); None when no backend does."""
        for name, (b, _, _) in sorted(self.backends.items(), key=lambda kv: -kv[1][1]):
            claims = getattr(b, "claims", None)
            device_id = claims(obj) if claims is not None else None
            if device_id is not None:
                return self.device(f"{name}:{device_id}")
        return None

    def default_device(self) -> Device:
        """The context override, else $TENFERRO_DEVICE, else numpy:cpu, else the top-priority backend."""
        spec = _DEFAULT_DEVICE.get() or os.environ.get("TENFERRO_DEVICE")
        if spec:
            return self.device(spec)
        if "numpy" in self.backends:
            return self.device("numpy:cpu")
        if not self.backends:
            raise DeviceError(
                "no backend is installed; install tenferro-numpy (pip install backend_plugins/numpy)"
            )
        best = max(self.backends.items(), key=lambda kv: kv[1][1])[0]
        return self.device(best)

    # ---- lookups -------------------------------------------------------
    def missing_kernel(self, prim: Primitive, device: Device) -> MissingKernelError:
        have = sorted({b for (b, n) in self.kernels if n == prim.name})
        off = self.disabled_plugins()
        return MissingKernelError(
            f"backend {device.backend.name!r} has no kernel for {prim.name!r}; backends that have "
            f"it: {have or 'none'}; move the tensors with .to_device() to one of those, or install "
            f"a plugin that registers a kernel for {prim.name!r} on {device.backend.name!r}"
            + (f" (installed plugins that may provide it are disabled: {'; '.join(off)})" if off else "")
        )

    def disabled_plugins(self, *names: str, label: str = "plugin") -> list[str]:
        """For each installed plugin that TENFERRO_DISABLE_PLUGINS blocks, or TENFERRO_PLUGINS
        leaves out, matching one of `names` (entry-point, distribution or top-level package
        names; none given: every one), a sentence saying so and how to enable it."""
        out = []
        for r in self.reports:
            package = (r.module or "").split(".")[0].split(":")[0]
            if not r.disabled or (names and not {r.name, r.distribution, package} & set(names)):
                continue
            who = f"{label} {r.name!r}" + (f" (distribution {r.distribution})" if r.distribution else "")
            if r.disabled_by == "TENFERRO_PLUGINS":
                out.append(f"{who} is installed but disabled: TENFERRO_PLUGINS does not list it; add "
                           f"{r.name!r} to TENFERRO_PLUGINS to enable it")
            else:
                out.append(f"{who} is installed but disabled by TENFERRO_DISABLE_PLUGINS; remove "
                           f"{r.name!r} from TENFERRO_DISABLE_PLUGINS to enable it")
        return out

    def kernel_below(self, backend: str, name: str, fn: Any) -> Any:
        """The highest-priority kernel registered for op `name` on `backend` other than `fn`
        (what a kernel with ``choose_kernel`` falls back to for a signature it declines)."""
        rest = [e for e in self.all_kernels.get((backend, name), ()) if e[0] is not fn]
        return max(rest, key=lambda e: e[1])[0] if rest else None

    def rule(self, kind: str, op: Primitive) -> Any:
        return self.rules.get((kind, op.name))


_DEFAULT_RUNTIME: list[Runtime] = []
_DEFAULT_LOCK = threading.Lock()
_RUNTIME_OVERRIDE: contextvars.ContextVar[Runtime | None] = contextvars.ContextVar(
    "tenferro_runtime", default=None
)
_DEFAULT_DEVICE: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "tenferro_device", default=None
)


def default_runtime() -> Runtime:
    """The runtime built from entry points on first use (or the one `use_runtime` set)."""
    rt = _RUNTIME_OVERRIDE.get()
    if rt is not None:
        return rt
    if not _DEFAULT_RUNTIME:
        with _DEFAULT_LOCK:  # built once, even when many threads make their first tensor at once
            if not _DEFAULT_RUNTIME:
                _DEFAULT_RUNTIME.append(Runtime.from_entry_points())
    return _DEFAULT_RUNTIME[0]


def reset_default_runtime() -> None:
    """Forget the lazily built default runtime (re-discovers plugins on next use)."""
    with _DEFAULT_LOCK:
        _DEFAULT_RUNTIME.clear()


@contextlib.contextmanager
def use_runtime(rt: Runtime) -> Iterator[Runtime]:
    """Make `rt` the runtime that creation functions use inside the block."""
    token = _RUNTIME_OVERRIDE.set(rt)
    try:
        yield rt
    finally:
        _RUNTIME_OVERRIDE.reset(token)


@contextlib.contextmanager
def default_device(spec: str | Device) -> Iterator[Device]:
    """Make `spec` the default device inside the block."""
    dev = default_runtime().device(spec)
    token = _DEFAULT_DEVICE.set(dev.name)
    try:
        yield dev
    finally:
        _DEFAULT_DEVICE.reset(token)


def _clear_fronts() -> None:
    """Empty the eager fast paths' tables, whose kernels come from the dispatch memos."""
    from .fast_paths import clear_fronts

    clear_fronts()
