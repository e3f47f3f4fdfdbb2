"""Module: parameters and buffers by attribute path (tied weights once), state dicts, modes,
and modules passing through grad, compile and GradientTape."""

from __future__ import annotations

import numpy as np
import pytest

from tenferro_ad import GradientTape, grad
from tenferro_core.errors import ArgumentError, DTypeError, ShapeError
from tenferro_nn import Module, StateDictError, trainable_mask
from tenferro_nn.module import check_input
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile
from tenferro_runtime.pytree import tree_flatten, tree_leaves


class Affine(Module):
    def __init__(self, n_in, n_out, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.weight = xp.asarray(rng.standard_normal((n_out, n_in)))
        self.bias = xp.asarray(rng.standard_normal(n_out))
        self.n_in = n_in

    def forward(self, x):
        check_input(self, x, f"(..., {self.n_in})", sizes={-1: self.n_in}, like=self.weight)
        return x @ self.weight.mT + self.bias


class Net(Module):
    """Nested modules in an attribute, a list and a dict; a buffer; a tied weight."""

    def __init__(self):
        super().__init__()
        self.inp = Affine(3, 4, 1)
        self.blocks = [Affine(4, 4, 2), Affine(4, 4, 3)]
        self.heads = {"a": Affine(4, 2, 4)}
        self.tied = self.blocks[0].weight
        self.register_buffer("count", xp.asarray(0.0))
        self.scale = 2.0

    def forward(self, x):
        h = self.inp(x)
        for b in self.blocks:
            h = xp.tanh(b(h))
        return self.heads["a"](h) * self.scale + xp.sum(self.tied) * 0.1


def _x(n=5):
    return xp.asarray(np.random.default_rng(9).standard_normal((n, 3)))


def test_parameters_and_buffers_by_path_tied_once():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["inp.weight", "inp.bias", "blocks.0.weight", "blocks.0.bias", "blocks.1.weight",
                     "blocks.1.bias", "heads.a.weight", "heads.a.bias"]
    assert [n for n, _ in net.named_buffers()] == ["count"]
    sd = net.state_dict()
    assert list(sd) == names[:6] + ["heads.a.weight", "heads.a.bias", "tied", "count"]
    assert sd["tied"] is sd["blocks.0.weight"]
    assert [p for p, _ in net.named_modules()] == ["", "inp", "blocks.0", "blocks.1", "heads.a"]
    leaves = tree_leaves(net)
    assert len(leaves) == 9  # 8 parameters + the buffer; the tied weight once
    mask = trainable_mask(net)
    assert sum(mask) == 8 and [m for m, t in zip(mask, leaves) if t is net.count] == [False]


def test_flatten_round_trip_keeps_ties_and_statics():
    net = Net()
    leaves, td = tree_flatten(net)
    from tenferro_runtime.pytree import tree_unflatten

    back = tree_unflatten(td, leaves)
    assert type(back) is Net and back.scale == 2.0 and back.tied is back.blocks[0].weight
    assert back(_x()).numpy().tolist() == net(_x()).numpy().tolist()
    assert tree_flatten(Net())[1] == td  # same architecture, same structure
    net.eval()
    assert tree_flatten(net)[1] != td  # the mode is static


def test_unflatten_builders_read_statics_from_each_structure():
    """Structures equal as keys but not in their statics (-0.0 == 0.0, True == 1 as dict keys)
    share a generated builder, which takes every static from the structure it is given; an
    unhashable static (a list of lists) still builds."""
    from tenferro_runtime.pytree import tree_unflatten

    class Holder(Module):
        def __init__(self, eps, keys, extra):
            super().__init__()
            self.eps, self.table, self.extra = eps, dict.fromkeys(keys, xp.asarray(1.0)), extra
            self.pair = (xp.asarray(2.0), [xp.asarray(3.0), 4])

    for eps, keys in ((0.0, (1,)), (-0.0, (True,)), (-0.0, (1,)), (0.0, (True,))):
        for extra in (None, [[1]], ()):
            m = Holder(eps, keys, extra)
            leaves, td = tree_flatten(m)
            back = tree_unflatten(td, leaves)
            assert np.signbit(back.eps) == np.signbit(eps) and list(back.table) == list(keys)
            assert type(next(iter(back.table))) is type(keys[0]) and back.extra == extra
            assert back.pair[0] is m.pair[0] and back.pair[1][0] is m.pair[1][0] and back.pair[1][1] == 4
            assert back.table[keys[0]] is m.table[keys[0]] and back.training is True


def test_grad_returns_a_model_shaped_gradient_matching_the_tape():
    net, x = Net(), _x()

    def loss(m, x):
        return xp.sum(m(x) ** 2)

    g = grad(loss)(net, x)
    assert type(g) is Net and g.tied is g.blocks[0].weight  # one gradient for the tied weight
    with GradientTape() as tape:
        tape.watch(net.parameters())
        value = loss(net, x)
    tg = tape.gradient(value, net.parameters())
    for (name, _), a, b in zip(net.named_parameters(), g.parameters(), tg):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, err_msg=name)
    eps = 1e-6  # the tied weight's gradient counts both uses
    w = net.blocks[0].weight.numpy().copy()
    w[0, 0] += eps
    net2 = Net()
    net2.blocks[0].weight = net2.tied = xp.asarray(w)
    fd = (float(loss(net2, x)) - float(loss(net, x))) / eps
    assert abs(fd - float(g.tied[0, 0])) < 1e-3 * max(1.0, abs(fd))


def test_compile_takes_modules_and_caches_by_structure():
    net, x = Net(), _x()
    fwd = compile(lambda m, x: m(x))
    np.testing.assert_allclose(fwd(net, x).numpy(), net(x).numpy(), rtol=1e-12)
    fwd(Net(), x)
    assert fwd.cache_info().hits == 1
    net.eval()
    fwd(net, x)
    assert fwd.cache_info().misses == 2

    def step(m, x):  # returns an updated model: the tie survives
        g = grad(lambda m: xp.sum(m(x)))(m)
        return _sgd(m, g)

    new = compile(step)(Net(), x)
    assert new.tied is new.blocks[0].weight
    ref = step(Net(), x)
    for a, b in zip(new.parameters(), ref.parameters()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)


def _sgd(m, g):
    from tenferro_runtime.pytree import tree_map

    return tree_map(lambda p, d: p - 0.1 * d, m, g)


def test_load_state_dict_in_place_and_strict_errors():
    net, other = Net(), Net()
    for p in other.parameters():
        p[...] = p * 3
    held = net.blocks[0].weight
    net.load_state_dict({k: v.numpy() for k, v in other.state_dict().items()})
    assert net.blocks[0].weight is held and net.tied is held  # in place: ties and references kept
    np.testing.assert_array_equal(held.numpy(), other.blocks[0].weight.numpy())
    before = {k: v.numpy().copy() for k, v in net.state_dict().items()}
    sd = other.state_dict()
    with pytest.raises(StateDictError, match=r"missing key\(s\) \['count'\]"):
        net.load_state_dict({k: v for k, v in sd.items() if k != "count"})
    with pytest.raises(StateDictError, match=r"unexpected key\(s\) \['extra'\]"):
        net.load_state_dict({**sd, "extra": sd["count"]})
    with pytest.raises(StateDictError, match=r"'inp.bias' has shape \[5\]"):
        net.load_state_dict({**sd, "inp.bias": np.zeros(5)})
    with pytest.raises(StateDictError, match=r"'inp.bias' is float32"):
        net.load_state_dict({**sd, "inp.bias": np.zeros(4, np.float32)})
    with pytest.raises(StateDictError, match="holds a str"):
        net.load_state_dict({**sd, "inp.bias": "x"})
    with pytest.raises(ArgumentError, match="expected a mapping"):
        net.load_state_dict([1])
    assert all(np.array_equal(before[k], v.numpy()) for k, v in net.state_dict().items())
    res = net.load_state_dict({"inp.bias": np.zeros(4), "zzz": np.zeros(1)}, strict=False)
    assert res.unexpected_keys == ["zzz"] and "count" in res.missing_keys
    assert net.inp.bias.numpy().tolist() == [0.0] * 4


def test_pytorch_only_state_keys_are_accepted_and_ignored():
    class Counted(Affine):
        _pytorch_only_state = ("num_batches_tracked",)

    class Outer(Module):
        def __init__(self):
            super().__init__()
            self.bn = Counted(3, 3)

    m = Outer()
    sd = {**m.state_dict(), "bn.num_batches_tracked": np.int64(4)}
    assert m.load_state_dict(sd) == ([], [])
    with pytest.raises(StateDictError, match=r"unexpected key\(s\) \['num_batches_tracked'\]"):
        m.load_state_dict({**m.state_dict(), "num_batches_tracked": np.int64(4)})


def test_modes_and_conversions():
    net = Net()
    assert net.eval() is net and not any(m.training for m in net.modules())
    net.train()
    assert all(m.training for m in net.modules())
    low = net.astype(xp.float32)
    assert {p.dtype for p in low.parameters()} == {xp.float32} and low.tied is low.blocks[0].weight
    assert net.inp.weight.dtype == xp.float64  # a copy


def test_bad_input_names_the_layer_path():
    net = Net()
    with pytest.raises(ShapeError, match=r"^Affine: expected input of shape \(\.\.\., 3\), got \[5, 4\]"):
        net.inp(xp.zeros((5, 4), dtype=xp.float64))
    with pytest.raises(ShapeError, match=r"layer 'inp' \(Affine\) of Net: expected input of shape"):
        net(xp.zeros((5, 4), dtype=xp.float64))
    net.blocks[1].n_in = 7
    with pytest.raises(ShapeError, match=r"layer 'blocks.1' \(Affine\) of Net"):
        net(_x())
    with pytest.raises(DTypeError, match="input is float32 but the layer's parameters are float64"):
        Net()(xp.zeros((5, 3), dtype=xp.float32))
    with pytest.raises(ArgumentError, match="expected a tenferro Tensor input"):
        Net()([[1.0, 2.0, 3.0]])
    with pytest.raises(ArgumentError, match="register_buffer"):
        Net().register_buffer("b", np.zeros(2))


def test_repr_lists_children():
    text = repr(Net())
    assert text.startswith("Net(\n  (inp): Affine()") and "(heads.a): Affine()" in text


def test_leaf_names_follow_flatten_order_ties_first_path_private_none():
    from tenferro_nn.module import leaf_names

    net = Net()
    net._hidden = xp.asarray([1.0])
    names = leaf_names(net)
    assert len(names) == len(tree_leaves(net)) == 10
    assert names[:2] == ["inp.weight", "inp.bias"] and names.count("blocks.0.weight") == 1
    assert "tied" not in names and names[-1] is None  # the tie under its first path; private: none
