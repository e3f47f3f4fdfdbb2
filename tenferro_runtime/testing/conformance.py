"""The backend conformance suite: every core primitive on one device, against NumPy.

A backend package runs it by subclassing `BackendConformance` in one of its
test modules and naming the device::

    from tenferro_runtime.testing.conformance import BackendConformance

    class TestMyBackendConformance(BackendConformance):
        device = "mybackend:gpu0"        # a device name or a tenferro_runtime Device

The device is resolved through `tenferro_runtime.default_runtime()` when
pytest collects the class, so tests are parametrized by exactly the dtypes it
supports (``test_matches_reference[add-float32]``). What is checked:

* every primitive of `tenferro_core.catalog.PRIMITIVES` has a case and a
  reference (a new primitive without one fails `test_catalog_is_covered`);
* for each primitive and each device dtype its shape rule accepts, results on
  hypothesis-drawn inputs (0-d, 0-size, size-1 axes, non-contiguous views made
  with the backend's own transpose / strided slice / reverse) match
  `tenferro_runtime.testing.reference` with dtype-aware tolerances, the result
  buffer's shape and dtype match the primitive's abstract_eval, and inputs are
  left unchanged;
* draws that once failed (`REGRESSIONS`) are replayed on every run, as `@example`s;
* convert, from every dtype of the device to every one, on the values at the source
  dtype's limits (min, max, 0, -0.0, +-inf, NaN, the smallest subnormal, ...),
  deterministically (`test_convert_limits`);
* dtypes the rule rejects, and the bad inputs of `error_cases`, raise the
  typed errors (DTypeError, ShapeError, ArgumentError, DeviceError), leaving
  inputs and the runtime's caches as they were;
* host transfer round-trips every dtype, and the telemetry follows the
  energy contract.

Examples per (primitive, dtype) are a third of the active hypothesis profile's
`max_examples` (at least 4), since the dtypes multiply the tests.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tenferro_core import catalog
from tenferro_core import dtypes as D
from tenferro_core.energy import EnergyTelemetry
from tenferro_core.errors import ArgumentError, DeviceError, DTypeError
from tenferro_core.plugins import hookimpl
from tenferro_core.primitive import REQUIRED

from .cases import Case, Ctx, rule_accepts
from .cases_elementwise import ELEMENTWISE_SPECS
from .cases_reductions import REDUCTION_SPECS
from .cases_structural import STRUCTURAL_SPECS, convert_limits_case
from .error_cases import GENERIC_ONLY, ErrorCase, error_cases
from .reference import REFERENCE
from .strategies import CONTIGUOUS, Layout, arrays, layouts, shapes
from .tolerance import assert_close, assert_identical

SPECS = {**ELEMENTWISE_SPECS, **STRUCTURAL_SPECS, **REDUCTION_SPECS}

REGRESSIONS: dict[tuple[str, str, str | None], tuple[Any, ...]] = {
    # the reference turned the uint64 as Python ints (an object array) into bfloat16 through
    # ml_dtypes, which refuses ints beyond int64: TypeError (CI, torch:cpu, 1 draw in ~1000)
    ("convert", "uint64", "bfloat16"): (
        lambda: Case((np.array(18446744073709551614, dtype=np.uint64),), {"new_dtype": D.bfloat16}),),
    # the reference's np.power took its square root for the 0-d exponent 0.5: NaN for -inf,
    # where C's pow (and both backends) give +inf (thorough run, torch:cpu)
    **{("pow", name, None): (
        lambda t=t: Case((np.array(-np.inf, dtype=t), np.array(0.5, dtype=t)), {}),
        lambda t=t: Case((np.array(-0.0, dtype=t), np.array(0.5, dtype=t)), {}),)
       for name, t in (("float16", np.float16), ("float32", np.float32), ("float64", np.float64))},
}
"""Draws that once failed, per (primitive, dtype, variant): functions returning their `Case`.
`test_matches_reference` replays them, contiguous, on every run (its `@example(data=PINNED)`)
wherever the device has the dtypes."""


class _Pinned:
    """`test_matches_reference`'s `@example` value for `data`: run the `REGRESSIONS`."""

    def __repr__(self) -> str:
        return "PINNED"


PINNED = _Pinned()

_EXAMPLES = max(4, settings().max_examples // 3)
_HEALTH = [HealthCheck.too_slow, HealthCheck.differing_executors, HealthCheck.filter_too_much]


def resolve_device(spec: Any) -> Any:
    """A tenferro_runtime Device from a name (or a Device, returned as is)."""
    from tenferro_runtime import Device, default_runtime

    return spec if isinstance(spec, Device) else default_runtime().device(spec)


def context(device: Any) -> Ctx:
    ordered = tuple(d for d in D.ALL_DTYPES if d in device.dtypes)
    return Ctx(dtypes=ordered, device=device)


def to_device(host: np.ndarray, device: Any) -> Any:
    """A tensor on `device` with the values and shape of a host array."""
    from tenferro_runtime import lax
    from tenferro_runtime.array_api import asarray

    t = asarray(host, device=device)
    if t.shape != host.shape:  # asarray is checked on its own in test_host_roundtrip
        t = lax.reshape(t, new_sizes=host.shape)
    return t


def present(host: np.ndarray, layout: Layout, device: Any) -> tuple[Any, np.ndarray]:
    """(tensor, NumPy view) holding `host` in `layout`, built with the backend's own ops."""
    from tenferro_runtime import lax

    big = layout.embed(host)
    t = to_device(big, device)
    if layout.kind == "transposed":
        t = lax.transpose(t, permutation=layout.perm)
    elif layout.kind == "reversed":
        t = lax.reverse(t, dimensions=layout.dims)
    elif layout.kind == "strided":
        sl = layout.slices(host.shape)
        t = lax.slice(t, start_indices=tuple(s.start for s in sl),
                      limit_indices=tuple(s.stop for s in sl), strides=tuple(s.step for s in sl))
    return t, layout.view(big, host.shape)


def host_of(t: Any) -> np.ndarray:
    return np.asarray(t.device.backend.to_host(t._buf))


class _Twin:
    """The backend under test registered under another name: a second, distinct device."""

    def __init__(self, backend: Any):
        self._backend = backend
        self.name = f"{backend.name}_twin"
        self.priority = -1

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._backend, attr)

    @hookimpl
    def tenferro_register(self, registry: Any) -> None:
        registry.add_backend(self)


def other_device(device: Any) -> Any:
    """Another device of the backend, else the same backend renamed in a second Runtime."""
    from tenferro_runtime import Runtime

    for did in device.backend.devices():
        if did != device.id:
            return device.runtime.device(f"{device.backend.name}:{did}")
    twin = _Twin(device.backend)
    return Runtime([twin]).device(f"{twin.name}:{device.id}")


def cache_sizes(runtime: Any) -> dict[str, int]:
    """Entries per runtime cache (a failed op must not add any). The graph-data cache is left
    out: its size is the number of live graphs with derived data, which the garbage collector
    may lower during any call (a red CI at random in test_rejects_dtype[asin-uint64])."""
    graph_data = runtime.caches.graph_data.name
    return {name: s.size for name, s in runtime.caches.stats().items() if name != graph_data}


def _variants(prim_name: str, dtype: D.DType, ctx: Ctx) -> tuple[Any, ...]:
    spec = SPECS[prim_name]
    return (None,) if spec.variants is None else spec.variants(dtype, ctx)


def probe_tensors(prim_name: str, ctx: Ctx, dtype: D.DType | None = None) -> tuple[list[Any], dict[str, Any]]:
    """Zero tensors and params of the primitive's probe signature (default: its first valid dtype)."""
    spec = SPECS[prim_name]
    if dtype is None:
        prim = catalog.BY_NAME[prim_name]
        dtype = next(d for d in ctx.dtypes if rule_accepts(prim, spec, d, ctx))
    avals, params = spec.probe(dtype, ctx)
    return [to_device(np.zeros(a.shape, a.dtype.numpy), ctx.device) for a in avals], params


def expect_failure(device: Any, error: type[Exception], tensors: list[Any], call: Any) -> None:
    """`call()` raises `error` and leaves the tensors and the runtime's caches unchanged."""
    before = [(t.aval, host_of(t).copy()) for t in tensors]
    sizes = cache_sizes(device.runtime)
    with pytest.raises(error):
        call()
    assert cache_sizes(device.runtime) == sizes, "a failed op changed the runtime's caches"
    for t, (aval, values) in zip(tensors, before):
        assert t.aval == aval
        assert_identical(host_of(t), values, "an operand of the failed op")


def _parametrize(metafunc: Any, ctx: Ctx, only: Collection[str] | None = None,
                 value_dtypes_exclude: Collection[str] = ()) -> None:
    """Parametrize a suite test by the primitives, dtypes, params or error cases it takes.

    Primitives without a spec are left out here; `test_catalog_is_covered` names them.
    `only` restricts the value tests to the primitives a backend implements;
    `value_dtypes_exclude` drops dtypes from them (see BackendConformance).
    """
    names = metafunc.fixturenames
    covered = [p for p in catalog.PRIMITIVES if p.name in SPECS]
    if "variant" in names:
        valued = [p for p in covered if only is None or p.name in only]
        dtypes = [d for d in ctx.dtypes if d.name not in value_dtypes_exclude]
        params = [(p.name, d.name, v) for p in valued for d in dtypes
                  if rule_accepts(p, SPECS[p.name], d, ctx) for v in _variants(p.name, d, ctx)]
        ids = [f"{p}-{d}" + (f"-to-{v}" if v else "") for p, d, v in params]
        metafunc.parametrize(("prim_name", "dtype_name", "variant"), params, ids=ids)
    elif "target_name" in names:  # convert at the limits: every pair of the device's dtypes
        pairs = [] if only is not None and "convert" not in only else [
            (s.name, t.name) for s in ctx.dtypes for t in ctx.dtypes]
        metafunc.parametrize(("dtype_name", "target_name"), pairs, ids=[f"{s}-to-{t}" for s, t in pairs])
    elif "dtype_name" in names and "prim_name" in names:
        pairs = [(p.name, d.name) for p in covered for d in ctx.dtypes
                 if not rule_accepts(p, SPECS[p.name], d, ctx)]
        metafunc.parametrize(("prim_name", "dtype_name"), pairs, ids=[f"{p}-{d}" for p, d in pairs])
    elif "dtype_name" in names:
        metafunc.parametrize("dtype_name", [d.name for d in ctx.dtypes])
    elif "required_param" in names:
        pairs = [(p.name, k) for p in covered for k, (_, default) in p.params.items()
                 if default is REQUIRED and k != "device"]
        metafunc.parametrize(("prim_name", "required_param"), pairs, ids=[f"{p}-{k}" for p, k in pairs])
    elif "prim_name" in names:
        prims = [p.name for p in covered]
        if "two_devices" in metafunc.function.__name__:
            prims = [p for p in prims if len(SPECS[p].probe(ctx.index_dtype, ctx)[0]) >= 2]
        metafunc.parametrize("prim_name", prims)
    elif "error_case" in names:
        cases = error_cases(ctx)
        metafunc.parametrize("error_case", cases, ids=[c.id for c in cases])


class BackendConformance:
    """Subclass as ``Test...`` and set `device` to run the suite on that device.

    `primitives` (default: all) names the primitives the backend implements: the value and
    kernel-table tests cover those, every other test all primitives (bad input is refused
    before any kernel is looked up). `value_dtypes_exclude` names dtypes the NumPy
    references cannot compute in (bfloat16: ml_dtypes' arrays have dtype kind 'V'); test
    those values another way. It leaves out `test_convert_limits`, whose reference takes
    every dtype (bfloat16 included, both ways).
    """

    device: Any = None
    primitives: Collection[str] | None = None
    value_dtypes_exclude: Collection[str] = ()

    # ---- collection ----------------------------------------------------
    def pytest_generate_tests(self, metafunc: Any) -> None:
        cls = type(self)
        if cls.device is None:
            raise pytest.UsageError(f"{cls.__name__}: set the class attribute 'device'")
        _parametrize(metafunc, context(resolve_device(cls.device)), cls.primitives, cls.value_dtypes_exclude)

    @property
    def dev(self) -> Any:
        return resolve_device(type(self).device)

    @pytest.fixture(autouse=True)
    def _kernel_checks(self) -> None:
        """Every kernel result is compared with the abstract eval (buffer type, shape, dtype)."""
        runtime = self.dev.runtime
        if not runtime.check_kernels:
            runtime.set_check_kernels(True)

    # ---- coverage --------------------------------------------------------
    def test_catalog_is_covered(self) -> None:
        names = {p.name for p in catalog.PRIMITIVES}
        assert not names - set(SPECS), f"primitives without a conformance case: {sorted(names - set(SPECS))}"
        assert not names - set(REFERENCE), f"primitives without a reference: {sorted(names - set(REFERENCE))}"
        with_errors = {c.prim for c in error_cases(context(self.dev))} | GENERIC_ONLY
        assert not names - with_errors, f"primitives without error cases: {sorted(names - with_errors)}"

    def test_backend_has_every_kernel(self) -> None:
        only = type(self).primitives
        missing = [p.name for p in catalog.PRIMITIVES
                   if p not in self.dev.kernels and (only is None or p.name in only)]
        assert not missing, f"{self.dev} has no kernel for {missing}"

    # ---- values ----------------------------------------------------------
    @settings(max_examples=_EXAMPLES, suppress_health_check=_HEALTH)
    @example(data=PINNED)
    @given(data=st.data())
    def test_matches_reference(self, prim_name: str, dtype_name: str, variant: str | None,
                               data: Any) -> None:
        if data is PINNED:
            for make in REGRESSIONS.get((prim_name, dtype_name, variant), ()):
                case = make()
                self.check_case(prim_name, case, [CONTIGUOUS] * len(case.args))
            return
        extra = {} if variant is None else {"variant": variant}
        case = SPECS[prim_name].draw(data.draw, D.as_dtype(dtype_name), context(self.dev), **extra)
        presented = [data.draw(layouts(host.shape), label=f"layout of operand {i}")
                     for i, host in enumerate(case.args)]
        self.check_case(prim_name, case, presented)

    def test_convert_limits(self, dtype_name: str, target_name: str) -> None:
        """convert, deterministically, on the values at the source dtype's limits (min, max,
        0, -0.0, +-inf, NaN, the smallest subnormal and normal, ...; into an integer dtype
        those whose truncation fits), contiguous and reversed: within the tolerance, and
        exact where the value is one of the target's."""
        case = convert_limits_case(D.as_dtype(dtype_name), D.as_dtype(target_name))
        for layout in (CONTIGUOUS, Layout("reversed", dims=(0,))):
            self.check_case("convert", case, [layout])

    def check_case(self, prim_name: str, case: Case, presented: list[Layout]) -> None:
        """Run one case, each operand in its layout, against the reference (see the module)."""
        prim, dev = catalog.BY_NAME[prim_name], self.dev
        tensors, views = [], []
        for host, layout in zip(case.args, presented):
            t, view = present(host, layout, dev)
            tensors.append(t)
            views.append(view)
        avals = tuple(t.aval for t in tensors)
        params = prim.check_params(case.params, avals)
        expected = REFERENCE[prim_name](*views, **params)
        (aval,) = prim.abstract_eval(avals, params)
        assert expected.shape == aval.shape and D.from_numpy(expected.dtype) is aval.dtype, (
            f"kit bug: reference gives {expected.dtype}{list(expected.shape)}, rule {aval}")

        out = prim.bind(*tensors, **case.params)

        shape, dtype = dev.backend.describe(out._buf)
        assert (tuple(shape), dtype) == (aval.shape, aval.dtype), (
            f"{prim_name}: the kernel returned {dtype}{list(shape)}, abstract_eval says {aval}")
        dev.backend.dlpack_device(out._buf)  # every result is a proper buffer (not a scalar)
        actual = host_of(out)
        assert actual.shape == aval.shape and D.from_numpy(actual.dtype) is aval.dtype
        what = f"{prim_name}({', '.join(v.dtype.name + str(list(v.shape)) for v in views)})"
        if case.check is not None:
            case.check(actual, expected, case)
        elif case.exact:
            assert_identical(actual, expected, what)
        else:
            assert_close(actual, expected, aval.dtype, mult=case.mult, bound=case.bound, what=what)
        for t, host in zip(tensors, case.args):
            assert_identical(host_of(t), host, f"{prim_name} modified its operand")

    # ---- errors ----------------------------------------------------------
    def test_rejects_dtype(self, prim_name: str, dtype_name: str) -> None:
        ctx = context(self.dev)
        tensors, params = probe_tensors(prim_name, ctx, D.as_dtype(dtype_name))
        prim = catalog.BY_NAME[prim_name]
        expect_failure(self.dev, DTypeError, tensors, lambda: prim.bind(*tensors, **params))

    def test_bad_input(self, error_case: ErrorCase) -> None:
        tensors = [to_device(np.zeros(s, D.as_dtype(d).numpy), self.dev) for s, d in error_case.operands]
        prim = catalog.BY_NAME[error_case.prim]
        params = dict(error_case.params)
        if prim.nin == 0:
            params["device"] = self.dev
        expect_failure(self.dev, error_case.error, tensors, lambda: prim.bind(*tensors, **params))

    def test_non_tensor_operand(self, prim_name: str) -> None:
        ctx = context(self.dev)
        tensors, params = probe_tensors(prim_name, ctx)
        prim = catalog.BY_NAME[prim_name]
        args = [host_of(t) for t in tensors[:1]] + tensors[1:] if tensors else [1.0]
        expect_failure(self.dev, ArgumentError, tensors[1:], lambda: prim.bind(*args, **params))

    def test_unknown_param(self, prim_name: str) -> None:
        ctx = context(self.dev)
        tensors, params = probe_tensors(prim_name, ctx)
        prim = catalog.BY_NAME[prim_name]
        expect_failure(self.dev, ArgumentError, tensors,
                       lambda: prim.bind(*tensors, no_such_param=1, **params))

    def test_missing_param(self, prim_name: str, required_param: str) -> None:
        ctx = context(self.dev)
        tensors, params = probe_tensors(prim_name, ctx)
        params.pop(required_param)
        prim = catalog.BY_NAME[prim_name]
        expect_failure(self.dev, ArgumentError, tensors, lambda: prim.bind(*tensors, **params))

    def test_two_devices(self, prim_name: str) -> None:
        ctx = context(self.dev)
        tensors, params = probe_tensors(prim_name, ctx)
        foreign = other_device(self.dev)
        moved = tensors[:-1] + [to_device(host_of(tensors[-1]), foreign)]
        prim = catalog.BY_NAME[prim_name]
        expect_failure(self.dev, DeviceError, moved, lambda: prim.bind(*moved, **params))

    # ---- transfer and telemetry -----------------------------------------
    @settings(max_examples=_EXAMPLES, suppress_health_check=_HEALTH)
    @given(data=st.data())
    def test_host_roundtrip(self, dtype_name: str, data: Any) -> None:
        from tenferro_runtime.array_api import asarray

        dtype = D.as_dtype(dtype_name)
        host = data.draw(arrays(dtype, data.draw(shapes())))
        layout = data.draw(layouts(host.shape))
        src = layout.view(layout.embed(host), host.shape)  # contiguous or a strided NumPy view
        t = asarray(src, device=self.dev)
        assert (t.shape, t.dtype) == (host.shape, dtype)
        assert_identical(host_of(t), host, "asarray then to_host")
        shape, described = self.dev.backend.describe(t._buf)
        assert (tuple(shape), described) == (host.shape, dtype)

    def test_optional_methods_contract(self) -> None:
        """Each optional attribute the runtime looks up (`OPTIONAL_BACKEND_ATTRS`) that the
        backend has keeps its contract; a backend has no attribute the runtime reads that
        the contract does not list."""
        from tenferro_core.backend import OPTIONAL_BACKEND_ATTRS
        from tenferro_runtime.array_api import asarray

        backend, dev = self.dev.backend, self.dev
        t = asarray(np.arange(4.0, dtype=np.float32), device=dev) if D.float32 in dev.dtypes else \
            asarray(np.arange(4), device=dev)
        has = {a for a in OPTIONAL_BACKEND_ATTRS if getattr(backend, a, None) is not None}
        if "priority" in has:
            assert isinstance(backend.priority, int) and not isinstance(backend.priority, bool)
        if "claims" in has:
            assert backend.claims(t._buf) == dev.id, "claims() must name the device of its own buffers"
            assert backend.claims(object()) is None
        if "specialize" in has:
            kernel = dev.kernels[catalog.neg]
            assert callable(backend.specialize("neg", kernel, (t.aval,), (t.aval,)))
        if "out_kernel" in has:
            for prim, fn in dev.kernels.items():
                form = backend.out_kernel(prim.name, fn)
                assert form is None or callable(form), f"out_kernel({prim.name!r}) is {form!r}"
        if "donatable" in has:
            assert backend.donatable(t._buf, 0) in (True, False)
        if "fresh_results" in has:
            for prim, fn in dev.kernels.items():
                fresh = backend.fresh_results(prim.name, fn)
                assert fresh in (True, False), f"fresh_results({prim.name!r}) is {fresh!r}"
        for shape in ((3, 2), (4,), (1, 0, 2)):  # rows of matrices, of scalars, of empty arrays
            if "unstack" in has:
                want = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
                buf = asarray(want, device=dev)._buf if D.float32 in dev.dtypes else None
                if buf is not None:
                    rows = backend.unstack(buf)
                    assert len(rows) == shape[0]
                    for row, w in zip(rows, want):
                        assert tuple(backend.describe(row)[0]) == w.shape
                        np.testing.assert_array_equal(backend.to_host(row), w)
                    if "stack" in has:
                        np.testing.assert_array_equal(backend.to_host(backend.stack(rows)), want)
        if "preferred_conv_layout" in has:
            assert backend.preferred_conv_layout in ("channels_first", "channels_last")
        if "device_name" in has:
            name = backend.device_name(dev.id)
            assert name is None or (isinstance(name, str) and name)
        if "compile" in has:
            assert callable(backend.compile)
        if "set_threads" in has:  # the runtime's own setting again: changes nothing
            assert backend.set_threads(dev.runtime.threads) is None

    def test_telemetry_contract(self) -> None:
        tel = self.dev.backend.telemetry(self.dev.id)
        assert isinstance(tel, EnergyTelemetry)
        assert isinstance(tel.measured, bool) and isinstance(tel.source, str) and tel.source
        assert float(tel.energy_consumed_joules()) >= 0.0
        power, temperature = tel.power_draw_watts(), tel.temperature_celsius()
        assert power is None or float(power) >= 0.0
        assert temperature is None or isinstance(float(temperature), float)
        tel.reset_counters()
        assert float(tel.energy_consumed_joules()) >= 0.0
