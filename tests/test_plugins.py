"""Plugin discovery, isolation of broken plugins, allow/block lists, duplicates, entry-point
clashes, registration kinds nothing consumes, CLI."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import tenferro_numpy.plugin as numpy_plugin
from plugin_fixtures import BackendPlugin, TwinBackend, hook_plugin, install_fake_dists, make_dist
from tenferro_core import catalog, define_op, hookimpl
from tenferro_core.errors import ArgumentError, MissingExtensionError, MissingKernelError, PluginError
from tenferro_core.plugins import RULE_KINDS, Registration
from tenferro_runtime import Runtime, lax, use_runtime
from tenferro_runtime.array_api import asarray

FAKES = {"fake_broken_import", "fake_hook_raises", "fake_invalid", "fake_good"}


@pytest.fixture
def fake_dists(tmp_path, monkeypatch):
    old = list(sys.path)
    install_fake_dists(tmp_path)
    yield tmp_path
    sys.path[:] = old
    for mod in [m for m in sys.modules if m.startswith("tf_fake_")]:
        del sys.modules[mod]


def _report(rt, name):
    return next(r for r in rt.reports if r.name == name)


def test_explicit_plugin_list_builds_runtime():
    rt = Runtime([numpy_plugin])
    assert set(rt.backends) == {"numpy"}
    dev = rt.device("numpy:cpu")
    assert dev.name == "numpy:cpu" and dev.backend.name == "numpy"
    # every core primitive, plus the fused-group kernel (tenferro_numpy.fusion)
    assert catalog.add in dev.kernels and len(dev.kernels) == len(catalog.PRIMITIVES) + 1
    assert rt.reports[0].ok and rt.reports[0].registered


def test_broken_plugins_are_reported_and_the_rest_load(fake_dists):
    rt = Runtime.from_entry_points()
    assert "numpy" in rt.backends
    assert "tf_fake_good.double.v1" in rt.ops
    broken = _report(rt, "fake_broken_import")
    assert broken.distribution == "fake-broken-import" and broken.version == "0.3.1"
    assert "ModuleNotFoundError" in broken.error and "no_such_module_anywhere" in broken.error
    raises = _report(rt, "fake_hook_raises")
    assert "RuntimeError: boom inside the hook" in raises.error and raises.traceback
    invalid = _report(rt, "fake_invalid")
    assert "PluginError" in invalid.error and "lacks" in invalid.error
    assert _report(rt, "fake_good").ok
    assert _report(rt, "numpy").ok


def test_strict_runtime_raises_on_the_first_failure(fake_dists):
    with pytest.raises(PluginError, match="fake_broken_import|no_such_module"):
        Runtime.from_entry_points(strict=True)


def test_allow_list_env(fake_dists, monkeypatch):
    monkeypatch.setenv("TENFERRO_PLUGINS", "numpy,fake-good")
    rt = Runtime.from_entry_points()
    assert "numpy" in rt.backends and "tf_fake_good.double.v1" in rt.ops
    assert all(r.disabled for r in rt.reports if r.name in FAKES - {"fake_good"})
    assert not any(r.error for r in rt.reports)


def test_block_list_env(fake_dists, monkeypatch):
    monkeypatch.setenv("TENFERRO_DISABLE_PLUGINS", "fake_good,fake_broken_import")
    rt = Runtime.from_entry_points()
    assert "tf_fake_good.double.v1" not in rt.ops
    assert _report(rt, "fake_good").disabled and _report(rt, "fake_broken_import").disabled
    assert _report(rt, "fake_hook_raises").error  # not blocked, still reported


def test_allow_and_block_arguments_override_env(fake_dists, monkeypatch):
    monkeypatch.setenv("TENFERRO_PLUGINS", "nothing")
    rt = Runtime.from_entry_points(allow=["numpy"], block=[])
    assert set(rt.backends) == {"numpy"}


def test_duplicate_backend_names_both_sources():
    rt = Runtime([numpy_plugin, BackendPlugin(TwinBackend(name="numpy"))])
    bad = rt.reports[1]
    assert "registered twice" in bad.error and "numpy" in bad.error and "plugin_numpy" in bad.error
    assert rt.backends["numpy"][0].__class__.__name__ == "NumpyBackend"


def test_duplicate_family_ids():
    op = define_op("dup.op.v1", lambda x: (x.shape, x.dtype))

    class P:
        __name__ = "first"

        @hookimpl
        def tenferro_register(self, registry):
            registry.add_op(op)

    class Q(P):
        __name__ = "second"

    rt = Runtime([P(), Q()])
    assert rt.reports[0].ok
    assert "dup.op.v1" in rt.reports[1].error and "first" in rt.reports[1].error
    assert "second" in rt.reports[1].error


def test_failed_plugin_leaves_no_partial_registration():
    class Half:
        __name__ = "half"

        @hookimpl
        def tenferro_register(self, registry):
            registry.add_backend(TwinBackend("halfway"))
            raise ValueError("after registering a backend")

    rt = Runtime([numpy_plugin, Half()])
    assert "halfway" not in rt.backends and "ValueError" in rt.reports[1].error


def test_kernel_priority_is_explicit():
    def fast_add(x, y):
        return np.add(x, y) * 0 + 42

    class Override:
        __name__ = "override"

        @hookimpl
        def tenferro_register(self, registry):
            registry.add_kernel("numpy", "add", fast_add, priority=5)

    class Clash:
        __name__ = "clash"

        @hookimpl
        def tenferro_register(self, registry):
            registry.add_kernel("numpy", "add", fast_add, priority=5)

    rt = Runtime([numpy_plugin, Override(), Clash()])
    assert rt.reports[1].ok and "priority 5" in rt.reports[2].error
    with use_runtime(rt):
        x = asarray([1.0, 2.0])
        assert np.all(lax.add(x, x).numpy() == 42)


def test_plugin_without_hook_is_an_error():
    rt = Runtime([numpy_plugin, os])
    assert "implements no 'tenferro_register' hook" in rt.reports[1].error


def test_missing_kernel_names_backend_and_alternatives():
    rt = Runtime([numpy_plugin, BackendPlugin(TwinBackend("partial", only={"add", "full"}))])
    with use_runtime(rt):
        x = asarray([1.0, -2.0], device="partial:cpu")
        assert lax.add(x, x).numpy().tolist() == [2.0, -4.0]
        with pytest.raises(MissingKernelError) as err:
            lax.neg(x)
    msg = str(err.value)
    assert "'neg'" in msg and "'partial'" in msg and "numpy" in msg and "to_device" in msg


def test_extension_op_decomposes_where_no_kernel(fake_dists):
    rt = Runtime.from_entry_points(allow=["numpy", "fake_good"])
    op = rt.ops["tf_fake_good.double.v1"]
    with use_runtime(rt):
        x = asarray([1.0, 2.5])
        assert op.bind(x).numpy().tolist() == [2.0, 5.0]
        with pytest.raises(ArgumentError, match="expected 1 tensor operand"):
            op.bind(asarray([[1.0, 2.0]]), asarray([1.0]))


def test_missing_linalg_and_fft_name_the_package():
    from tenferro_runtime import array_api as xp

    with use_runtime(Runtime([numpy_plugin])):
        assert not hasattr(xp, "linalg")
        with pytest.raises(MissingExtensionError, match="tenferro-linalg"):
            xp.linalg  # noqa: B018
        with pytest.raises(AttributeError, match="tenferro-fft"):
            xp.fft  # noqa: B018


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full_env, check=False)


def test_import_is_cheap_no_heavy_dependencies():
    code = (
        "import sys, tenferro_runtime\n"
        "rt = tenferro_runtime.default_runtime(); rt.device('numpy:cpu')\n"
        "heavy = [m for m in ('torch', 'jax', 'triton', 'scipy', 'tenferro_numpy.kernels')"
        " if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = _run(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() in ("[]", "['tenferro_numpy.kernels']")
    assert "scipy" not in out.stdout and "torch" not in out.stdout


def test_cli_lists_plugins_and_failures(fake_dists):
    env = {"PYTHONPATH": os.pathsep.join([str(fake_dists), *sys.path])}
    out = subprocess.run([sys.executable, "-m", "tenferro_runtime", "plugins"], capture_output=True,
                         text=True, env={**os.environ, **env}, check=False)
    assert out.returncode == 1  # failures make the listing exit non-zero
    text = out.stdout
    assert "numpy" in text and "tenferro-numpy 0.1.0" in text and "kernels" in text
    assert "fake_broken_import" in text and "FAILED" in text and "no_such_module_anywhere" in text
    assert "tf_fake_good.double.v1" in text
    assert "devices: numpy:cpu" in text


# ---- registration kinds nothing consumes are errors --------------------------------------------


def test_unconsumed_rule_kind_is_an_error_naming_the_supported_ones():
    assert RULE_KINDS == ("jvp", "transpose", "vjp", "batch", "cost")
    with pytest.raises(PluginError, match=r"'layout'.*not supported.*jvp, transpose, vjp, batch, cost"):
        Registration("direct").add_rule("layout", "add", lambda *a: None)
    rt = Runtime([numpy_plugin, hook_plugin("layouter", lambda r: r.add_rule("layout", "add", len))])
    assert "not supported" in rt.reports[1].error and not any(k == "layout" for k, _ in rt.rules)


def test_batch_rules_are_accepted():
    rt = Runtime([numpy_plugin, hook_plugin("batcher", lambda r: r.add_rule("batch", catalog.add, len))])
    assert rt.reports[1].ok and rt.rule("batch", catalog.add) is len


def test_cost_rules_are_accepted():
    rt = Runtime([numpy_plugin, hook_plugin("coster", lambda r: r.add_rule("cost", catalog.add, len))])
    assert rt.reports[1].ok and rt.rule("cost", catalog.add) is len


class _Meter:
    name, source, update_period, priority = "fake", "rapl", 0.001, 10

    def covers(self, device):
        return True

    def probe(self):
        from tenferro_core.energy import MeterStatus

        return MeterStatus(self.name, self.source, True)

    def read(self, device):
        from tenferro_core.energy import Reading

        return Reading(1.0, 0.0, self.source)


def test_meters_register_and_bad_ones_are_refused():
    meter = _Meter()
    rt = Runtime([numpy_plugin, hook_plugin("extra", lambda r: r.add_meter("fake", meter))])
    assert rt.reports[1].ok and rt.meters == {"fake": meter} and "meter fake" in rt.reports[1].registered
    for bad, why in ((object(), "expected a tenferro_core.energy.Meter"), ("x", "expected a tenferro_core")):
        rt = Runtime([numpy_plugin, hook_plugin("extra", lambda r, b=bad: r.add_meter("m", b))])
        assert "PluginError" in rt.reports[1].error and why in rt.reports[1].error and not rt.meters
    wrong = _Meter()
    wrong.source = "guess"
    rt = Runtime([numpy_plugin, hook_plugin("extra", lambda r: r.add_meter("m", wrong))])
    assert "source must be one of" in rt.reports[1].error
    rt = Runtime([numpy_plugin, hook_plugin("a", lambda r: r.add_meter("m", meter)),
                  hook_plugin("b", lambda r: r.add_meter("m", meter))])
    assert rt.reports[1].ok and "registered twice" in rt.reports[2].error


def test_passes_register_with_a_position_and_clashes_are_reported():
    def fn(graph):
        return graph

    rt = Runtime([numpy_plugin, hook_plugin("p1", lambda r: r.add_pass("mine", fn, position=150)),
                  hook_plugin("p2", lambda r: r.add_pass("mine", fn, position=160))])
    assert rt.reports[1].ok and rt.passes["mine"][:2] == (fn, 150.0)
    assert "registered twice" in rt.reports[2].error
    assert "pass mine (position 150)" in rt.reports[1].registered


@pytest.mark.parametrize("call, what", [
    (lambda r: r.add_pass("bad name", len, position=1), "identifier"),
    (lambda r: r.add_pass("p", 3, position=1), "graph -> graph"),
    (lambda r: r.add_pass("p", len, position="first"), "position must be a number"),
    (lambda r: r.add_pass("p", len, position=True), "position must be a number"),
    (lambda r: r.add_pass("p", len), "position"),
])
def test_bad_pass_registrations_are_refused(call, what):
    rt = Runtime([numpy_plugin, hook_plugin("extra", call)])
    assert what in rt.reports[1].error and not rt.passes


class CompilingBackend(TwinBackend):
    compile = 3  # not a method


def test_a_backend_compile_that_is_not_callable_is_refused():
    plugin = hook_plugin("compiling", lambda r: r.add_backend(CompilingBackend("compiling")))
    rt = Runtime([numpy_plugin, plugin])
    assert "compile must be a method" in rt.reports[1].error and "compiling" not in rt.backends


# ---- entry-point name clashes ------------------------------------------------------------------

EVIL = "raise RuntimeError('a clashing plugin must not even be imported')\n"
FANCY = """
    from tenferro_core.plugins import hookimpl

    @hookimpl
    def tenferro_register(registry):
        pass
"""


@pytest.fixture
def clashing_dists(tmp_path):
    """'numpy' again (distribution evil-numpy), and 'fancy' from two third-party distributions."""
    old = list(sys.path)
    make_dist(tmp_path, "evil-numpy", {"numpy": "tf_fake_evil"}, {"tf_fake_evil": EVIL})
    make_dist(tmp_path, "b-fancy", {"fancy": "tf_fake_fancy_b"}, {"tf_fake_fancy_b": FANCY})
    make_dist(tmp_path, "a-fancy", {"fancy": "tf_fake_fancy_a"}, {"tf_fake_fancy_a": FANCY})
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path[:] = old
    for mod in [m for m in sys.modules if m.startswith("tf_fake_")]:
        del sys.modules[mod]


def test_entry_point_clash_is_a_conflict_never_a_replacement(clashing_dists):
    rt = Runtime.from_entry_points()
    assert type(rt.backends["numpy"][0]).__name__ == "NumpyBackend"
    assert "tf_fake_evil" not in sys.modules
    numpy_reports = [r for r in rt.reports if r.name == "numpy"]
    assert {r.distribution for r in numpy_reports} == {"tenferro-numpy", "evil-numpy"}
    bad = next(r for r in numpy_reports if r.distribution == "evil-numpy")
    assert "conflict" in bad.error and "'tenferro-numpy'" in bad.error and "'evil-numpy'" in bad.error
    assert next(r for r in numpy_reports if r.distribution == "tenferro-numpy").ok
    # neither owns the name 'fancy': the first by distribution name loads, the other is reported
    fancy = {r.distribution: r for r in rt.reports if r.name == "fancy"}
    assert fancy["a-fancy"].ok and "conflict" in fancy["b-fancy"].error
    assert "'a-fancy'" in fancy["b-fancy"].error and "tf_fake_fancy_b" not in sys.modules
    with pytest.raises(PluginError, match="conflict"):
        Runtime.from_entry_points(strict=True)


def test_blocking_one_distribution_resolves_the_clash(clashing_dists):
    rt = Runtime.from_entry_points(block=["evil-numpy", "a-fancy"])
    assert not any(r.error for r in rt.reports)
    assert {r.distribution for r in rt.reports if r.name == "fancy" and r.ok} == {"b-fancy"}


def test_same_distribution_seen_twice_is_one_entry_point(monkeypatch):
    from importlib import metadata

    from tenferro_core import plugins

    real = metadata.entry_points(group="tenferro")
    numpy_ep = next(ep for ep in real if ep.name == "numpy")
    monkeypatch.setattr(plugins.metadata, "entry_points", lambda group: [numpy_ep, numpy_ep])
    found, reports = plugins.discover()
    assert [p.name for p in found] == ["numpy"] and reports == []


def test_cli_exits_non_zero_on_a_conflict_and_still_lists(clashing_dists):
    env = {"PYTHONPATH": os.pathsep.join([str(clashing_dists), *sys.path])}
    out = subprocess.run([sys.executable, "-m", "tenferro_runtime", "plugins"], capture_output=True,
                         text=True, env={**os.environ, **env}, check=False)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "evil-numpy" in out.stdout and "conflict" in out.stdout and "tenferro-numpy" in out.stdout
    assert "devices: numpy:cpu" in out.stdout and "failed or conflict" in out.stderr


@pytest.mark.parametrize("kind, register, label", [
    ("meter", lambda r: r.add_meter("m", _Meter()), "meter 'm'"),
    ("pass", lambda r: r.add_pass("mine", lambda g: g, position=150), "pass 'mine'"),
    ("executor", lambda r: r.add_executor("ex", lambda g, d: None), "executor 'ex'"),
    ("rule", lambda r: r.add_rule("jvp", "exp", lambda *a, **k: None), "jvp rule for 'exp'"),
    ("op", lambda r: r.add_op(define_op("dup.op.v1", lambda x: (x.shape, x.dtype))), "op 'dup.op.v1'"),
])
def test_a_duplicate_registration_of_any_kind_names_both_sources(kind, register, label):
    """Every kind of named registration is checked by one table: the second plugin's report
    names the thing and both plugins, and the first one's registration stays whole."""
    rt = Runtime([numpy_plugin, hook_plugin("first", register), hook_plugin("second", register)])
    assert rt.reports[1].ok, rt.reports[1].error
    error = rt.reports[2].error
    assert f"{label} is registered twice: by first and by second" in error, error
