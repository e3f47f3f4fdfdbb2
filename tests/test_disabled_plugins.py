"""A plugin that is installed but switched off (TENFERRO_DISABLE_PLUGINS blocks it, or
TENFERRO_PLUGINS leaves it out) is named, with the way to enable it, by the error of whatever
needed it: a rule (grad without the AD plugin), a backend's device, an op family's namespace or
op; and an unregistered class handed to a transformation names `register_pytree_node`."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import tenferro_ad as ad
import tenferro_runtime as tr
from tenferro_core.errors import (
    ArgumentError,
    DeviceError,
    MissingExtensionError,
    MissingKernelError,
    MissingRuleError,
)
from tenferro_runtime import Runtime, use_runtime
from tenferro_runtime import array_api as xp
from tenferro_runtime.pytree import register_pytree_node

BLOCKED = ("is installed but disabled by TENFERRO_DISABLE_PLUGINS; remove {0!r} from "
           "TENFERRO_DISABLE_PLUGINS to enable it")
UNLISTED = ("is installed but disabled: TENFERRO_PLUGINS does not list it; add {0!r} to "
            "TENFERRO_PLUGINS to enable it")


def _block(monkeypatch, names: str) -> Runtime:
    monkeypatch.setenv("TENFERRO_DISABLE_PLUGINS", names)
    monkeypatch.delenv("TENFERRO_PLUGINS", raising=False)
    return Runtime.from_entry_points()


def test_grad_without_the_ad_plugin(monkeypatch):
    with use_runtime(_block(monkeypatch, "ad")):
        x = xp.asarray([1.0, 2.0])
        with pytest.raises(MissingRuleError) as info:
            ad.grad(lambda v: xp.sum(v * v))(x)
    msg = str(info.value)
    assert isinstance(info.value, NotImplementedError)
    assert "the AD plugin 'ad' (distribution tenferro) " + BLOCKED.format("ad") in msg, msg
    assert "register one" not in msg  # the rule exists; the advice is to switch the plugin on


def test_grad_with_the_ad_plugin_not_in_the_allow_list(monkeypatch):
    monkeypatch.setenv("TENFERRO_PLUGINS", "numpy")
    monkeypatch.delenv("TENFERRO_DISABLE_PLUGINS", raising=False)
    with use_runtime(Runtime.from_entry_points()):
        with pytest.raises(MissingRuleError, match="the AD plugin 'ad' .*" + UNLISTED.format("ad")):
            ad.grad(lambda v: xp.sum(xp.sin(v)))(xp.asarray([1.0]))


def test_device_of_a_disabled_backend(monkeypatch):
    pytest.importorskip("tenferro_torch")
    rt = _block(monkeypatch, "torch")
    with pytest.raises(DeviceError) as info:
        rt.device("torch:cpu")
    assert isinstance(info.value, ValueError)
    assert "unknown backend 'torch' in device 'torch:cpu': backend plugin 'torch' (distribution " \
           "tenferro-torch) " + BLOCKED.format("torch") in str(info.value)
    with use_runtime(rt), pytest.raises(DeviceError, match="backend plugin 'torch'"):
        xp.asarray([1.0], device="torch:cpu")


@pytest.mark.parametrize("family", ["linalg", "fft"])
def test_namespace_of_a_disabled_family(monkeypatch, family):
    pytest.importorskip(f"tenferro_{family}")
    with use_runtime(_block(monkeypatch, f"tenferro-{family}")):  # by distribution name
        with pytest.raises(MissingExtensionError) as info:
            getattr(xp, family)
        assert not hasattr(xp, family)
    assert isinstance(info.value, AttributeError)
    assert f"array_api.{family} is not available: plugin {family!r} (distribution tenferro-{family}) " \
           + BLOCKED.format(family) in str(info.value)


def test_op_of_a_disabled_plugin(monkeypatch):
    """An extension op bound while its plugin is off: no silent decomposition."""
    from tenferro_linalg.plugin import tenferro_register  # noqa: F401  (the family is installed)

    rt = _block(monkeypatch, "linalg")
    from tenferro_core import define_op

    op = define_op("tenferro_linalg.not_a_real_op.v1", lambda x: (x.shape, x.dtype),
                   decomposition=lambda x: x)
    with use_runtime(rt):
        with pytest.raises(MissingKernelError, match="op 'tenferro_linalg.not_a_real_op.v1' is not "
                                                     "registered: plugin 'linalg'") as info:
            op.bind(xp.ones(2))
    assert isinstance(info.value, NotImplementedError)
    other = define_op("my_pkg.double.v1", lambda x: (x.shape, x.dtype), decomposition=lambda x: x + x)
    with use_runtime(rt):  # an unregistered op of no disabled plugin decomposes as before
        assert other.bind(xp.ones(2)).tolist() == [2.0, 2.0]


def test_missing_kernel_lists_disabled_plugins(monkeypatch):
    rt = _block(monkeypatch, "einsum")
    from tenferro_core import catalog

    err = rt.missing_kernel(catalog.add, rt.device("numpy:cpu"))
    assert isinstance(err, MissingKernelError)
    assert "installed plugins that may provide it are disabled: plugin 'einsum'" in str(err)
    assert rt.disabled_plugins("nothing-like-it") == []
    assert Runtime().disabled_plugins() == []


# ---------------------------------------------------------------- unregistered pytree classes


@dataclasses.dataclass
class Params:
    w: object
    b: object


def test_unregistered_class_names_register_pytree_node():
    p = Params(xp.asarray([1.0, 2.0]), xp.asarray(0.5))
    hint = ("register its class as a pytree node: tenferro_runtime.pytree.register_pytree_node(Params, "
            "flatten, unflatten), with flatten(obj) -> (children, aux) and unflatten(aux, children) -> obj")
    for call in (lambda: ad.grad(lambda q: xp.sum(q.w) + q.b)(p),
                 lambda: ad.jvp(lambda q: xp.sum(q.w), (p,), (p,)),
                 lambda: ad.vjp(lambda q: xp.sum(q.w), p)):
        with pytest.raises(ArgumentError) as info:
            call()
        assert isinstance(info.value, TypeError)
        assert "got Params" in str(info.value) and hint in str(info.value), str(info.value)
    with pytest.raises(ArgumentError) as info:
        ad.grad(lambda q: q)("a string")
    assert "register_pytree_node" not in str(info.value)  # builtins are no candidates


class Unhashable(Params):
    __hash__ = None


def test_compile_and_trace_name_register_pytree_node_too():
    """A compiled or traced function returning an unregistered class, or given an unhashable
    one, says how to register it (the one leaf check of graph.tensor_leaves)."""
    x = xp.asarray([1.0, 2.0])
    hint = "tenferro_runtime.pytree.register_pytree_node(Params, flatten, unflatten)"
    for call in (lambda: tr.compile(lambda v: Params(v, v))(x), lambda: tr.trace(lambda v: Params(v, v), x)):
        with pytest.raises(ArgumentError, match="returned a Params leaf") as info:
            call()
        assert hint in str(info.value) and isinstance(info.value, TypeError)
    u = Unhashable(x, x)
    for call in (lambda: tr.compile(lambda q: q.w)(u), lambda: tr.trace(lambda q: q.w, u)):
        with pytest.raises(ArgumentError, match="Unhashable") as info:
            call()
        assert "register_pytree_node(Unhashable, flatten, unflatten)" in str(info.value)


def test_registered_class_then_works():
    class Pair:
        def __init__(self, w, b):
            self.w, self.b = w, b

    register_pytree_node(Pair, lambda p: ((p.w, p.b), None), lambda aux, kids: Pair(*kids))
    p = Pair(xp.asarray([1.0, 2.0]), xp.asarray(0.5))
    g = ad.grad(lambda q: xp.sum(q.w * q.w) + q.b)(p)
    assert isinstance(g, Pair)
    np.testing.assert_array_equal(g.w.numpy(), [2.0, 4.0])
    assert float(g.b) == 1.0
    assert float(tr.compile(lambda q: xp.sum(q.w) + q.b)(p)) == 3.5
