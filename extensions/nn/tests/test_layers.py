"""Layers against torch.nn with the same weights (loaded by state-dict name, which checks that the
names are PyTorch's): values, gradients with respect to inputs and to the module, compiled
forwards, and PyTorch's default initializations."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tenferro_ad import value_and_grad
from tenferro_core.errors import ArgumentError
from tenferro_nn import Module
from tenferro_nn import layers as L
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, random

TOL = {np.float32: dict(rtol=3e-4, atol=3e-5), np.float64: dict(rtol=1e-10, atol=1e-12)}
XDT = {np.float32: xp.float32, np.float64: xp.float64}
DTYPES = st.sampled_from([np.float32, np.float64])
K = 0  # key seed counter


def key(seed=0):
    return random.key(seed)


def close(got, want, dtype, scale=1.0, msg=""):
    tol = TOL[np.dtype(dtype).type]
    got = got.numpy() if hasattr(got, "numpy") and not isinstance(got, np.ndarray) else got
    np.testing.assert_allclose(got, want, rtol=tol["rtol"] * scale, atol=tol["atol"] * scale, err_msg=msg)


def to_torch(m: Module, tm: torch.nn.Module, dtype) -> torch.nn.Module:
    """`tm` in `dtype` holding m's tensors, loaded by PyTorch's state-dict names."""
    tm = tm.double() if dtype == np.float64 else tm.float()
    sd = {k: torch.tensor(v.numpy()) for k, v in m.state_dict().items()}
    missing, unexpected = tm.load_state_dict(sd, strict=False)
    assert not unexpected, unexpected
    pytorch_only = {f"{p}.{k}".lstrip(".") for p, mod in m.named_modules()
                    for k in mod._pytorch_only_state}
    assert set(missing) <= pytorch_only, missing
    return tm


def check_module(m, tm, inputs, dtype, call=None, scale=1.0, seed=0):
    """m(*inputs) equals tm(*inputs) (tm built from m's weights), and so do the gradients of
    sum(out * ct) with respect to the floating inputs and every parameter."""
    call = call or (lambda mod, *xs: mod(*xs))
    tm = to_torch(m, tm, dtype)
    xs = [xp.asarray(a) for a in inputs]
    ts = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in inputs]
    ref = call(tm, *ts)
    ct = np.random.default_rng(seed).standard_normal(tuple(ref.shape)).astype(dtype)
    fl = [i for i, a in enumerate(inputs) if a.dtype.kind == "f"]

    def loss(mod, *fx):
        full = list(xs)
        for i, v in zip(fl, fx):
            full[i] = v
        out = call(mod, *full)
        return xp.sum(out * xp.asarray(ct)), out

    (_, out), grads = value_and_grad(loss, argnums=tuple(range(1 + len(fl))), has_aux=True)(
        m, *[xs[i] for i in fl])
    close(out, ref.detach().numpy(), dtype, scale, "output")
    tm.zero_grad(set_to_none=True)
    if ref.numel():
        (ref * torch.tensor(ct)).sum().backward()
    for i, g in zip(fl, grads[1:]):
        close(g, ts[i].grad.numpy() if ts[i].grad is not None else 0 * inputs[i], dtype, scale, f"input {i}")
    tgrads = dict(tm.named_parameters())
    for name, g in grads[0].named_parameters():
        want = tgrads[name].grad
        close(g, 0 * g.numpy() if want is None else want.numpy(), dtype, scale, f"d/d {name}")
    return tm


def rand(shape, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# ---- Linear ----------------------------------------------------------------------------------
@settings(max_examples=10)
@given(lead=st.lists(st.integers(0, 3), max_size=2), n_in=st.integers(1, 6), n_out=st.integers(1, 5),
       bias=st.booleans(), dtype=DTYPES)
def test_linear_matches_torch(lead, n_in, n_out, bias, dtype):
    m = L.Linear(n_in, n_out, bias, key=key(n_in), dtype=XDT[dtype])
    check_module(m, torch.nn.Linear(n_in, n_out, bias), [rand((*lead, n_in), dtype)], dtype)


def test_linear_default_init_and_transposed_input():
    m = L.Linear(50, 40, key=key(1))
    w, b = m.weight.numpy(), m.bias.numpy()
    assert m.weight.dtype == xp.float32 and w.shape == (40, 50) and b.shape == (40,)
    bound = 1 / math.sqrt(50)  # kaiming_uniform(a=sqrt(5)) = U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound and np.abs(b).max() <= bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.05 * bound
    x = xp.permute_dims(xp.asarray(rand((50, 3), np.float32)), (1, 0))
    close(m(x), x.numpy() @ w.T + b, np.float32)
    assert L.Linear(3, 2, bias=False, key=key()).bias is None
    assert [n for n, _ in L.Linear(3, 2, key=key()).named_parameters()] == ["weight", "bias"]
    same = L.Linear(50, 40, key=key(1))
    np.testing.assert_array_equal(same.weight.numpy(), w)


# ---- Conv2d and pooling ------------------------------------------------------------------------
@st.composite
def conv_layers(draw):
    g = draw(st.sampled_from([1, 2]))
    padding = draw(st.sampled_from([0, 1, (1, 2), "same", "valid"]))
    return dict(c=g * draw(st.integers(1, 2)), o=g * draw(st.integers(1, 2)), groups=g,
                k=draw(st.sampled_from([1, 2, 3, (3, 1)])), padding=padding,
                stride=1 if padding == "same" else draw(st.sampled_from([1, 2])),
                dilation=draw(st.sampled_from([1, 2])), bias=draw(st.booleans()),
                hw=(draw(st.integers(3, 7)), draw(st.integers(3, 7))), n=draw(st.sampled_from([0, 1, 2])),
                dtype=draw(DTYPES))


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@settings(max_examples=20)
@given(d=conv_layers())
def test_conv2d_matches_torch(d):
    kw = {k: d[k] for k in ("stride", "padding", "dilation", "groups", "bias")}
    k = (d["k"], d["k"]) if isinstance(d["k"], int) else d["k"]
    assume(d["padding"] == "same" or min(d["hw"]) + 2 >= d["dilation"] * (max(k) - 1) + 1)
    assume(d["padding"] not in (0, "valid") or min(d["hw"]) >= d["dilation"] * (max(k) - 1) + 1)
    m = L.Conv2d(d["c"], d["o"], d["k"], key=key(d["c"]), dtype=XDT[d["dtype"]], **kw)
    x = rand((d["n"], d["c"], *d["hw"]), d["dtype"])
    check_module(m, torch.nn.Conv2d(d["c"], d["o"], d["k"], **kw), [x], d["dtype"], scale=3.0)


def test_conv2d_default_init_unbatched_and_transposed_input():
    m = L.Conv2d(4, 6, 3, groups=2, key=key(2), dtype=xp.float64)
    assert m.weight.shape == (6, 2, 3, 3) and m.bias.shape == (6,)
    bound = 1 / math.sqrt(2 * 9)
    assert np.abs(m.weight.numpy()).max() <= bound and np.abs(m.bias.numpy()).max() <= bound
    tm = to_torch(m, torch.nn.Conv2d(4, 6, 3, groups=2), np.float64)
    a = rand((4, 5, 6), np.float64)
    close(m(xp.asarray(a)), tm(torch.tensor(a)).detach().numpy(), np.float64)  # (C, H, W)
    t = xp.permute_dims(xp.asarray(a.transpose(0, 2, 1).copy()), (0, 2, 1))
    close(m(t), tm(torch.tensor(a)).detach().numpy(), np.float64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pool_layers_flatten_and_activations_match_torch(dtype):
    x = rand((2, 3, 7, 6), dtype, seed=3) * 3
    cases = [
        (L.MaxPool2d(2), torch.nn.MaxPool2d(2)),
        (L.MaxPool2d(3, stride=2, padding=1, dilation=1), torch.nn.MaxPool2d(3, 2, 1)),
        (L.MaxPool2d((2, 3), stride=1, dilation=2), torch.nn.MaxPool2d((2, 3), 1, dilation=2)),
        (L.AvgPool2d(3, 2, 1), torch.nn.AvgPool2d(3, 2, 1)),
        (L.AvgPool2d(3, 2, 1, count_include_pad=False), torch.nn.AvgPool2d(3, 2, 1, count_include_pad=False)),
        (L.AvgPool2d(2), torch.nn.AvgPool2d(2)),
        (L.Flatten(), torch.nn.Flatten()),
        (L.Flatten(0, 2), torch.nn.Flatten(0, 2)),
        (L.ReLU(), torch.nn.ReLU()),
        (L.GELU(), torch.nn.GELU()),
        (L.GELU("tanh"), torch.nn.GELU("tanh")),
        (L.SiLU(), torch.nn.SiLU()),
        (L.Tanh(), torch.nn.Tanh()),
        (L.Sigmoid(), torch.nn.Sigmoid()),
        (L.Softmax(1), torch.nn.Softmax(1)),
        (L.LogSoftmax(-1), torch.nn.LogSoftmax(-1)),
    ]
    for m, tm in cases:
        check_module(m, tm, [x], dtype, scale=3.0)
        check_module(m, tm, [x[:0]], dtype)  # an empty batch


# ---- normalization -----------------------------------------------------------------------------
@pytest.mark.parametrize("kind,shape", [("1d", (6, 3)), ("1d", (4, 3, 5)), ("2d", (3, 3, 4, 5))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm_train_steps_and_eval_match_torch(kind, shape, dtype):
    cls, tcls = ((L.BatchNorm1d, torch.nn.BatchNorm1d) if kind == "1d"
                 else (L.BatchNorm2d, torch.nn.BatchNorm2d))
    m = cls(3, momentum=0.3, eps=1e-4, dtype=XDT[dtype])
    m.weight, m.bias = xp.asarray(rand(3, dtype, 1)), xp.asarray(rand(3, dtype, 2))
    tm = to_torch(m, tcls(3, momentum=0.3, eps=1e-4), dtype)
    assert [n for n, _ in m.named_buffers()] == ["running_mean", "running_var"]
    assert type(m)._pytorch_only_state == ("num_batches_tracked",)
    for step in range(3):
        x = rand(shape, dtype, 10 + step) * (step + 1) + step
        close(m(xp.asarray(x)), tm(torch.tensor(x)).detach().numpy(), dtype, 3.0, f"step {step}")
        close(m.running_mean, tm.running_mean.numpy(), dtype, msg="running_mean")
        close(m.running_var, tm.running_var.numpy(), dtype, msg="running_var (unbiased)")
    m.eval()
    tm.eval()
    x = rand(shape, dtype, 20)
    check_module(m, tm, [x], dtype, scale=3.0)  # eval: running statistics, gradients through them
    m.train()
    tm.train()
    before = m.running_mean.numpy().copy()
    check_module(m, tm, [x], dtype, scale=3.0)  # train: gradients through the batch statistics
    np.testing.assert_array_equal(m.running_mean.numpy(), before)  # grad traced a copy of the module
    empty = m(xp.asarray(x[:0]))  # an empty batch: an empty output, statistics unchanged (PyTorch)
    assert empty.shape == (0, *shape[1:])
    np.testing.assert_array_equal(m.running_mean.numpy(), before)


def test_batch_norm_compiled_and_has_aux_steps_return_updated_statistics():
    m = L.BatchNorm2d(3, dtype=xp.float64)
    tm = to_torch(m, torch.nn.BatchNorm2d(3), np.float64)
    x = rand((4, 3, 2, 2), np.float64, 5)
    tm(torch.tensor(x))

    def step(m, x):
        return m(x), m

    y, new = compile(step)(m, xp.asarray(x))
    close(new.running_mean, tm.running_mean.numpy(), np.float64)
    close(new.running_var, tm.running_var.numpy(), np.float64)
    assert float(xp.sum(m.running_mean)) == 0.0  # the compiled step left the input model alone
    (_, new2), g = value_and_grad(lambda m, x: (xp.sum(m(x) ** 2), m), has_aux=True)(m, xp.asarray(x))
    close(new2.running_var, tm.running_var.numpy(), np.float64)
    assert float(xp.sum(xp.abs(g.running_mean))) == 0.0  # buffers get no gradient in train mode
    m(xp.asarray(x))  # eager: rebinds the buffers in place of the module
    close(m.running_var, tm.running_var.numpy(), np.float64)
    assert L.BatchNorm1d(2, affine=False, track_running_stats=False).state_dict() == {}
    free = L.BatchNorm1d(3, track_running_stats=False, dtype=xp.float64).eval()
    tfree = to_torch(free, torch.nn.BatchNorm1d(3, track_running_stats=False).eval(), np.float64)
    close(free(xp.asarray(x[:, :, 0, 0])), tfree(torch.tensor(x[:, :, 0, 0])).detach().numpy(), np.float64)


@settings(max_examples=8)
@given(norm=st.sampled_from([4, (4,), (3, 4)]), affine=st.booleans(), bias=st.booleans(), dtype=DTYPES,
       n=st.sampled_from([0, 1, 2]))
def test_layer_norm_matches_torch(norm, affine, bias, dtype, n):
    m = L.LayerNorm(norm, eps=1e-4, elementwise_affine=affine, bias=bias, dtype=XDT[dtype])
    shape = (norm,) if isinstance(norm, int) else norm
    if affine:
        m.weight = xp.asarray(rand(shape, dtype, 1))
        if bias:
            m.bias = xp.asarray(rand(shape, dtype, 2))
    tm = torch.nn.LayerNorm(norm, eps=1e-4, elementwise_affine=affine, bias=bias)
    check_module(m, tm, [rand((n, 2, *shape), dtype) * 2 + 1], dtype, scale=3.0)


# ---- Embedding -------------------------------------------------------------------------------
@pytest.mark.parametrize("padding_idx", [None, 2, -1])
def test_embedding_matches_torch(padding_idx):
    m = L.Embedding(7, 3, padding_idx=padding_idx, key=key(4), dtype=xp.float64)
    tm = torch.nn.Embedding(7, 3, padding_idx=padding_idx)
    if padding_idx is not None:
        assert not m.weight.numpy()[padding_idx].any()
    idx = np.array([[0, 6, 2], [2, 2, 1]])
    check_module(m, tm, [idx], np.float64)
    w = m.weight.numpy()
    assert abs(L.Embedding(400, 50, key=key(5)).weight.numpy().std() - 1.0) < 0.02 and w.shape == (7, 3)


# ---- MultiheadAttention ------------------------------------------------------------------------
MHA = st.fixed_dictionaries(dict(
    e_h=st.sampled_from([(4, 1), (4, 2), (6, 3)]), bias=st.booleans(), batch_first=st.booleans(),
    n=st.sampled_from([None, 1, 2]), l_=st.integers(1, 4), s=st.integers(1, 4), dtype=DTYPES,
    mask=st.sampled_from([None, "bool", "float", "bool3", "causal"]), kpm=st.booleans(),
    need_weights=st.booleans(), average=st.booleans(), self_attn=st.booleans()))


@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask")
@settings(max_examples=30)
@given(d=MHA)
def test_multihead_attention_matches_torch(d):
    (e, h), n, l_, s, dtype = d["e_h"], d["n"], d["l_"], d["s"], d["dtype"]
    if d["self_attn"] or d["mask"] == "causal":
        s = l_
    m = L.MultiheadAttention(e, h, bias=d["bias"], batch_first=d["batch_first"], key=key(e), dtype=XDT[dtype])
    tm = torch.nn.MultiheadAttention(e, h, bias=d["bias"], batch_first=d["batch_first"])
    rng = np.random.default_rng(l_ * 7 + s)

    def seq(length):
        if n is None:
            return (length, e)
        return (n, length, e) if d["batch_first"] else (length, n, e)

    q = rng.standard_normal(seq(l_)).astype(dtype)
    k, v = (q, q) if d["self_attn"] else (rng.standard_normal(seq(s)).astype(dtype) for _ in range(2))
    masks, tmasks = {}, {}
    allowed = rng.random((l_, s)) < 0.7
    allowed[:, 0] = True  # no fully masked rows (PyTorch's module gives NaN there with need_weights)
    if d["mask"] in ("bool", "causal"):
        mk = ~allowed if d["mask"] == "bool" else np.triu(np.ones((l_, s), bool), 1)
        masks["attn_mask"], tmasks["attn_mask"] = xp.asarray(mk), torch.tensor(mk)
    elif d["mask"] == "float":
        mk = rng.standard_normal((l_, s)).astype(dtype)
        masks["attn_mask"], tmasks["attn_mask"] = xp.asarray(mk), torch.tensor(mk)
    elif d["mask"] == "bool3" and n is not None:
        mk = np.broadcast_to(~allowed, (n * h, l_, s)).copy()
        mk[0] = False
        masks["attn_mask"], tmasks["attn_mask"] = xp.asarray(mk), torch.tensor(mk)
    if d["kpm"] and n is not None:
        pad = np.zeros((n, s), bool)
        pad[-1, -1] = s > 1 and d["mask"] != "causal"
        masks["key_padding_mask"], tmasks["key_padding_mask"] = xp.asarray(pad), torch.tensor(pad)
    kw = dict(need_weights=d["need_weights"], average_attn_weights=d["average"])

    def call(mod, q, k, v):
        if isinstance(mod, torch.nn.Module):
            out, w = mod(q, k, v, **kw, **tmasks)
            return out if w is None else torch.cat([out.reshape(-1), w.reshape(-1)])
        out, w = mod(q, k, v, is_causal=d["mask"] == "causal", **kw, **masks)
        return out if w is None else xp.concat([xp.reshape(out, (-1,)), xp.reshape(w, (-1,))])

    check_module(m, tm, [q, k, v], dtype, call=call, scale=3.0)


def test_multihead_attention_layout_init_and_is_causal_without_mask():
    m = L.MultiheadAttention(8, 2, key=key(9), dtype=xp.float64)
    tm = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    assert list(m.state_dict()) == list(tm.state_dict())
    assert {k: tuple(v.shape) for k, v in m.state_dict().items()} == {k: tuple(v.shape) for k, v in
                                                                        tm.state_dict().items()}
    assert not m.in_proj_bias.numpy().any() and not m.out_proj.bias.numpy().any()
    bound = math.sqrt(6 / (8 + 24))  # xavier_uniform on (3E, E)
    assert np.abs(m.in_proj_weight.numpy()).max() <= bound
    assert np.abs(m.out_proj.weight.numpy()).max() <= 1 / math.sqrt(8)
    tm = to_torch(m, tm, np.float64)
    q = rand((2, 5, 8), np.float64)
    causal = torch.nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
    ref = tm(*[torch.tensor(q)] * 3, attn_mask=causal, is_causal=True, need_weights=False)[0]
    out, w = m(*[xp.asarray(q)] * 3, is_causal=True)
    assert w is None
    close(out, ref.detach().numpy(), np.float64)
    drop = L.MultiheadAttention(8, 2, dropout=0.5, key=key(9), dtype=xp.float64)
    with pytest.raises(ArgumentError, match=r"dropout_key"):
        drop(*[xp.asarray(q)] * 3)
    assert drop(*[xp.asarray(q)] * 3, dropout_key=key(1))[0].shape == (2, 5, 8)
    plain = L.MultiheadAttention(8, 2, key=key(9), dtype=xp.float64)
    np.testing.assert_array_equal(drop.eval()(*[xp.asarray(q)] * 3)[0].numpy(),
                                  plain(*[xp.asarray(q)] * 3)[0].numpy())


# ---- compiled forwards ---------------------------------------------------------------------------
def _compiled_cases():
    k = key(11)
    return [
        ("Linear", lambda: L.Linear(4, 3, key=k), (2, 4)),
        ("Conv2d", lambda: L.Conv2d(2, 4, 3, padding=1, stride=2, key=k), (2, 2, 5, 5)),
        ("BatchNorm1d", lambda: L.BatchNorm1d(4), (5, 4)),
        ("BatchNorm2d", lambda: L.BatchNorm2d(2), (3, 2, 3, 3)),
        ("LayerNorm", lambda: L.LayerNorm(4), (2, 3, 4)),
        ("MaxPool2d", lambda: L.MaxPool2d(3, 2, 1), (1, 2, 5, 5)),
        ("AvgPool2d", lambda: L.AvgPool2d(2), (1, 2, 5, 5)),
        ("Flatten", lambda: L.Flatten(), (2, 3, 4)),
        ("ReLU", L.ReLU, (2, 3)), ("GELU", L.GELU, (2, 3)), ("SiLU", L.SiLU, (2, 3)),
        ("Tanh", L.Tanh, (2, 3)),
        ("Sigmoid", L.Sigmoid, (2, 3)), ("Softmax", lambda: L.Softmax(0), (2, 3)),
        ("LogSoftmax", lambda: L.LogSoftmax(1), (2, 3)), ("Dropout", lambda: L.Dropout(0.5), (4, 5)),
        ("Sequential", lambda: L.Sequential(L.Linear(3, 4, key=k), L.Dropout(0.2), L.ReLU()), (2, 3)),
        ("MultiheadAttention", lambda: L.MultiheadAttention(4, 2, key=k), (2, 3, 4)),
        ("Embedding", lambda: L.Embedding(5, 3, padding_idx=0, key=k), (2, 3)),
    ]


@pytest.mark.parametrize("name,make,shape", _compiled_cases(), ids=[c[0] for c in _compiled_cases()])
def test_compiled_forward_equals_eager(name, make, shape):
    m = make()
    x = xp.asarray(rand(shape, np.float32))
    if name == "Embedding":
        x = xp.asarray(np.array([[0, 4, 2], [1, 1, 3]]))
    if name in ("Dropout", "Sequential"):
        def fwd(m, x, k):
            return m(x, key=k)
        args = (m, x, key(3))
    elif name == "MultiheadAttention":
        def fwd(m, x):
            return m(x, x, x, need_weights=True)
        args = (m, x)
    else:
        def fwd(m, x):
            return m(x)
        args = (m, x)
    for mode in ("train", "eval"):
        getattr(m, mode)()
        want = fwd(*args)
        got = compile(fwd)(*args)
        pairs = zip(got, want) if isinstance(got, tuple) else [(got, want)]
        for a, b in pairs:
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
