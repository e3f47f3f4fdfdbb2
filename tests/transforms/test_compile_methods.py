"""`@compile` on methods: bound through the descriptor protocol, `self` a pytree argument
(registered classes, tenferro_nn modules) or static (static_argnums=(0,), or any hashable
unregistered instance); one trace per instance signature."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenferro_ad import grad
from tenferro_core.errors import ArgumentError
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, random
from tenferro_runtime.compiled import BoundCompiled, Compiled
from tenferro_runtime.pytree import register_pytree_node

tenferro_nn = pytest.importorskip("tenferro_nn")


class Affine:
    """A registered pytree: `w` and `b` are leaves, `name` is static."""

    def __init__(self, w, b, name="a"):
        self.w, self.b, self.name = w, b, name

    @compile
    def apply(self, x):
        return x * self.w + self.b


register_pytree_node(Affine, lambda a: ((a.w, a.b), a.name), lambda name, kids: Affine(*kids, name))


class Scaler:
    """A plain (unregistered, hashable by identity) class, static by static_argnums=(0,)."""

    def __init__(self, k: float):
        self.k = k

    @compile(static_argnums=(0,))
    def scale(self, x):
        return x * self.k

    @compile
    def implicit(self, x):  # unregistered and hashable: static too, keyed by identity
        return x + self.k


class Unhashable:
    __hash__ = None

    @compile
    def f(self, x):
        return x


class Net(tenferro_nn.Module):
    def __init__(self, key):
        super().__init__()
        self.lin = tenferro_nn.Linear(3, 2, key=key, dtype=xp.float64)

    @compile
    def forward(self, x):
        return xp.tanh(self.lin(x))


def arr(values):
    return xp.asarray(np.asarray(values, dtype=np.float64))


@settings(max_examples=20, deadline=None)
@given(st.lists(st.floats(-3, 3), min_size=3, max_size=3), st.floats(-2, 2), st.floats(-2, 2))
def test_pytree_self_matches_the_plain_method(xs, w, b):
    a = Affine(arr(w), arr(b))
    x = arr(xs)
    np.testing.assert_allclose(a.apply(x).numpy(), np.asarray(xs) * w + b)


def test_descriptor_protocol():
    assert isinstance(Affine.apply, Compiled)
    a = Affine(arr(1.0), arr(2.0))
    bound = a.apply
    assert isinstance(bound, BoundCompiled) and bound.__self__ is a and bound.__func__ is Affine.apply
    assert "apply" in repr(bound) and bound.__name__ == "apply"
    np.testing.assert_allclose(Affine.apply(a, arr([1.0])).numpy(), [3.0])  # unbound call


def test_one_trace_per_instance_signature():
    Affine.apply.cache_clear()
    a1, a2 = Affine(arr(1.0), arr(2.0)), Affine(arr(3.0), arr(4.0))
    x = arr([1.0, 2.0])
    np.testing.assert_allclose(a1.apply(x).numpy(), [3.0, 4.0])
    np.testing.assert_allclose(a2.apply(x).numpy(), [7.0, 10.0])  # same signature: no retrace
    assert a1.apply.cache_info().misses == 1
    a3 = Affine(arr(1.0), arr(2.0), name="other")  # static aux data differs: a new trace
    a3.apply(x)
    a1.apply(arr([[1.0]]))  # new shape: a new trace
    assert Affine.apply.cache_info().misses == 3
    a1.w = arr(10.0)  # a leaf: the new value is read, not a stale constant
    np.testing.assert_allclose(a1.apply(x).numpy(), [12.0, 22.0])
    assert Affine.apply.cache_info().misses == 3


def test_static_self_is_part_of_the_key():
    Scaler.scale.cache_clear()
    s1, s2 = Scaler(2.0), Scaler(3.0)
    x = arr([1.0, 2.0])
    np.testing.assert_allclose(s1.scale(x).numpy(), [2.0, 4.0])
    np.testing.assert_allclose(s2.scale(x).numpy(), [3.0, 6.0])
    s1.scale(x)
    assert Scaler.scale.cache_info().misses == 2
    np.testing.assert_allclose(s2.implicit(x).numpy(), [4.0, 5.0])
    assert "mul" in str(s1.scale.lower(x))


def test_unhashable_unregistered_self_is_a_typed_error():
    with pytest.raises(ArgumentError, match="register_pytree_node.*static_argnums=\\(0,\\)"):
        Unhashable().f(arr([1.0]))


def test_module_method_compiles_and_differentiates():
    key = random.key(0)
    net, other = Net(key), Net(key)
    Net.forward.cache_clear()
    x = arr([[0.1, -0.2, 0.3], [1.0, 0.5, -0.5]])
    want = np.tanh(x.numpy() @ net.lin.weight.numpy().T + net.lin.bias.numpy())
    np.testing.assert_allclose(net(x).numpy(), want, rtol=1e-12)
    other(x)
    assert Net.forward.cache_info().misses == 1  # both instances: one signature

    def loss(m, x):
        return xp.sum(m(x) ** 2)

    g = grad(loss)(net, x)
    eps = 1e-6
    w = net.lin.weight.numpy().copy()
    fd = np.zeros_like(w)
    for i in np.ndindex(*w.shape):
        for s in (1, -1):
            w2 = w.copy()
            w2[i] += s * eps
            fd[i] += s * np.sum(np.tanh(x.numpy() @ w2.T + net.lin.bias.numpy()) ** 2) / (2 * eps)
    np.testing.assert_allclose(g.lin.weight.numpy(), fd, rtol=1e-6, atol=1e-8)
    gc = compile(grad(loss))(net, x)
    np.testing.assert_allclose(gc.lin.weight.numpy(), g.lin.weight.numpy(), rtol=1e-12)
