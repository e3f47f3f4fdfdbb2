"""Sequential (PyTorch's state-dict keys, indexing, key splitting), Dropout, a small CNN against
its PyTorch twin, and input errors that name the layer's path."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tenferro_ad import GradientTape, grad, value_and_grad
from tenferro_core.errors import ArgumentError, DTypeError, ShapeError, TenferroIndexError
from tenferro_nn import layers as L
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, random


def _cnn(k, dtype=xp.float64):
    ks = random.split(k, 3)
    return L.Sequential(
        L.Conv2d(3, 4, 3, padding=1, key=ks[0], dtype=dtype), L.BatchNorm2d(4, dtype=dtype), L.ReLU(),
        L.MaxPool2d(2), L.Flatten(), L.Dropout(0.25), L.Linear(4 * 3 * 3, 8, key=ks[1], dtype=dtype),
        L.GELU(),
        L.Dropout(0.5), L.Linear(8, 5, key=ks[2], dtype=dtype), L.LogSoftmax(-1))


def _torch_cnn():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Dropout(0.25), torch.nn.Linear(36, 8), torch.nn.GELU(),
        torch.nn.Dropout(0.5), torch.nn.Linear(8, 5), torch.nn.LogSoftmax(-1)).double()


def test_sequential_state_dict_keys_are_pytorchs_and_load_both_ways():
    m, tm = _cnn(random.key(0)), _torch_cnn()
    pytorch_only = [k for k in tm.state_dict() if k.endswith("num_batches_tracked")]
    assert list(m.state_dict()) == [k for k in tm.state_dict() if k not in pytorch_only]
    assert pytorch_only == ["1.num_batches_tracked"]
    sd = {k: v.numpy() for k, v in tm.state_dict().items()}
    m.load_state_dict(sd)  # PyTorch -> tenferro, its batch counter accepted and ignored
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), sd[k], err_msg=k)
    x = np.random.default_rng(0).standard_normal((2, 3, 6, 6))
    m.eval()
    tm.eval()
    with torch.no_grad():
        ref = tm(torch.tensor(x)).numpy()
    np.testing.assert_allclose(m(xp.asarray(x)).numpy(), ref, rtol=1e-10, atol=1e-12)


def test_sequential_train_step_gradients_match_torch_without_dropout():
    m, tm = _cnn(random.key(1)), _torch_cnn()
    m[5].p = m[8].p = 0.0
    tm[5].p = tm[8].p = 0.0
    tm.load_state_dict({k: torch.tensor(v.numpy()) for k, v in m.state_dict().items()}, strict=False)
    x = np.random.default_rng(1).standard_normal((3, 3, 6, 6))
    (val, new), g = value_and_grad(lambda m, x: (-xp.sum(m(x)[:, 0]), m), has_aux=True)(m, xp.asarray(x))
    out = -tm(torch.tensor(x))[:, 0].sum()
    out.backward()
    assert abs(float(val) - out.item()) < 1e-10
    tgrads = dict(tm.named_parameters())
    assert [n for n, _ in g.named_parameters()] == list(tgrads)
    for n, t in g.named_parameters():
        np.testing.assert_allclose(t.numpy(), tgrads[n].grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=n)
    np.testing.assert_allclose(new[1].running_var.numpy(), tm[1].running_var.numpy(), rtol=1e-12)


def test_gradient_tape_agrees_with_grad():
    m = _cnn(random.key(2)).eval()
    x = xp.asarray(np.random.default_rng(2).standard_normal((2, 3, 6, 6)))
    g = grad(lambda m: xp.sum(m(x)[:, 1]))(m)
    with GradientTape() as tape:
        tape.watch(m.parameters())
        value = xp.sum(m(x)[:, 1])
    for (name, a), b in zip(g.named_parameters(), tape.gradient(value, m.parameters())):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-13, err_msg=name)


def test_sequential_indexing_len_iteration_and_names():
    a, b, c = L.ReLU(), L.Tanh(), L.Flatten()
    s = L.Sequential(a, b, c)
    assert len(s) == 3 and list(s) == [a, b, c] and s[0] is a and s[-1] is c
    sub = s[1:]
    assert isinstance(sub, L.Sequential) and list(sub) == [b, c]
    assert [n for n, _ in sub.named_modules()][1:] == ["1", "2"]  # the names are kept
    named = L.Sequential(OrderedDict(enc=L.Linear(2, 3, key=random.key(0)), act=L.ReLU()))
    assert list(named.state_dict()) == ["enc.weight", "enc.bias"] and named[0] is named.enc
    with pytest.raises(TenferroIndexError, match="out of range for 3 layers"):
        s[3]
    with pytest.raises(ArgumentError, match="not a Module"):
        L.Sequential(L.ReLU(), np.tanh)
    assert repr(s).startswith("Sequential(\n  (0): ReLU()")


@settings(max_examples=5)
@given(seed=st.integers(0, 2 ** 31))
def test_sequential_splits_its_key_among_dropouts(seed):
    s = L.Sequential(L.Dropout(0.5), L.Linear(6, 6, bias=False, key=random.key(0)), L.Dropout(0.5))
    s[1].weight = xp.eye(6, dtype=xp.float32)
    x = xp.ones((4, 6), dtype=xp.float32)
    k = random.key(seed)
    y = s(x, key=k).numpy()
    np.testing.assert_array_equal(s(x, key=k).numpy(), y)  # the same key, the same masks
    k0, k1 = random.split(k, 2)
    mask0 = s[0](x, key=k0).numpy() != 0
    mask1 = s[2](x, key=k1).numpy() != 0
    np.testing.assert_array_equal(y != 0, mask0 & mask1)  # each Dropout got its own key
    assert set(np.unique(y).tolist()) <= {0.0, 4.0}
    np.testing.assert_array_equal(compile(lambda s, x, k: s(x, key=k))(s, x, k).numpy(), y)
    s.eval()
    assert s(x) is not None and np.array_equal(s(x).numpy(), x.numpy())


def test_dropout_layer_modes_and_gradient():
    d = L.Dropout(0.2)
    x = xp.ones((50, 40))
    with pytest.raises(ArgumentError, match=r"^Dropout: dropout in training mode needs a random key"):
        d(x)
    y = d(x, key=random.key(2))
    assert abs((y.numpy() != 0).mean() - 0.8) < 0.03
    g = grad(lambda x: xp.sum(d(x, key=random.key(2))))(x)
    np.testing.assert_array_equal(g.numpy(), y.numpy())
    assert d.eval()(x) is x and L.Dropout(0.0)(x) is x
    with pytest.raises(ArgumentError, match="probability"):
        L.Dropout(-0.1)


def test_errors_name_the_layer_path_and_expected_shape():
    m = _cnn(random.key(3))
    x = xp.asarray(np.zeros((2, 3, 6, 6)))
    with pytest.raises(ShapeError, match=r"^layer '0' \(Conv2d\) of Sequential: expected input of shape "
                                         r"\(N, 3, H, W\) or \(3, H, W\), got \[2, 5, 6, 6\]"):
        m(xp.zeros((2, 5, 6, 6), dtype=xp.float64))
    with pytest.raises(DTypeError, match=r"^layer '0' \(Conv2d\) of Sequential: input is float32 but the "
                                         r"layer's parameters are float64"):
        m(xp.zeros((2, 3, 6, 6), dtype=xp.float32))
    with pytest.raises(ArgumentError, match=r"^layer '5' \(Dropout\) of Sequential: .*needs a random key"):
        m(x)
    with pytest.raises(ShapeError, match=r"^layer '6' \(Linear\) of Sequential: expected input of shape "
                                         r"\(\*, 36\), got \[2, 64\]"):
        m(xp.zeros((2, 3, 8, 8), dtype=xp.float64), key=random.key(0))
    with pytest.raises(ShapeError, match=r"^layer '3' \(MaxPool2d\) of Sequential: max_pool2d: the input "
                                         r"\[2, 4, 1, 1\] is smaller than the window"):
        m(xp.zeros((2, 3, 1, 1), dtype=xp.float64))
    nested = L.Sequential(L.Sequential(L.Linear(2, 2, key=random.key(0))), L.BatchNorm1d(3))
    with pytest.raises(ShapeError, match=r"^layer '1' \(BatchNorm1d\) of Sequential: expected input of shape "
                                         r"\(N, 3\) or \(N, 3, L\), got \[4, 2\]"):
        nested(xp.zeros((4, 2), dtype=xp.float32))
    with pytest.raises(ShapeError, match=r"^layer '0.0' \(Linear\) of Sequential"):
        nested(xp.zeros((4, 3), dtype=xp.float32))
    emb = L.Sequential(L.Embedding(5, 2, key=random.key(0)))
    with pytest.raises(TenferroIndexError, match=r"^layer '0' \(Embedding\) of Sequential: .*index 5 is "
                                                 r"out of range for 5 embeddings"):
        emb(xp.asarray([[1, 5]]))
    with pytest.raises(DTypeError, match=r"^layer '0' \(Embedding\) of Sequential: expected integer indices"):
        emb(xp.asarray([1.0]))
    with pytest.raises(ShapeError, match=r"^LayerNorm: expected input of shape \(\*, 3, 4\), got \[3, 3\]"):
        L.LayerNorm((3, 4))(xp.zeros((3, 3)))
    mha = L.MultiheadAttention(4, 2, key=random.key(0), dtype=xp.float64)
    with pytest.raises(ShapeError, match=r"^MultiheadAttention: expected input of shape \(N, L, E\) or "
                                         r"\(L, E\) with E = 4 \(key\)"):
        mha(xp.zeros((2, 3, 4)), xp.zeros((2, 3, 5)), xp.zeros((2, 3, 4)))
    with pytest.raises(ShapeError, match=r"^MultiheadAttention: attn_mask must have shape"):
        mha(*[xp.zeros((2, 3, 4))] * 3, attn_mask=xp.zeros((2, 2), dtype=xp.bool))
    with pytest.raises(DTypeError, match=r"^ReLU: expected a real floating input"):
        L.ReLU()(xp.asarray([1, 2]))
    with pytest.raises(ArgumentError, match=r"expected a tenferro Tensor input"):
        L.Flatten()([1.0, 2.0])


def test_constructor_argument_errors():
    k = random.key(0)
    with pytest.raises(ArgumentError, match="divisible by groups"):
        L.Conv2d(3, 4, 3, groups=2, key=k)
    with pytest.raises(ArgumentError, match="padding_mode"):
        L.Conv2d(2, 2, 3, padding_mode="reflect", key=k)
    with pytest.raises(ArgumentError, match="'same' is not supported for strided"):
        L.Conv2d(2, 2, 3, stride=2, padding="same", key=k)
    with pytest.raises(ArgumentError, match="embed_dim .* divisible by num_heads"):
        L.MultiheadAttention(6, 4, key=k)
    with pytest.raises(ArgumentError, match="momentum=None is not supported"):
        L.BatchNorm1d(3, momentum=None)
    with pytest.raises(ArgumentError, match="padding_idx"):
        L.Embedding(3, 2, padding_idx=3, key=k)
    with pytest.raises(ArgumentError, match="key must be a random key"):
        L.Linear(2, 2, key=None)
    with pytest.raises(DTypeError, match="real floating dtype"):
        L.Linear(2, 2, key=k, dtype=xp.int32)
    with pytest.raises(ArgumentError, match="approximate"):
        L.GELU("fast")
