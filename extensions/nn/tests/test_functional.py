"""tenferro_nn.functional against torch.nn.functional (values and gradients, float32 and
float64), erf against scipy, second derivatives by finite differences, and the gradient of an
embedding lookup being a scatter-add."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special
import torch
import torch.nn.functional as TF
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tenferro_ad import grad, vjp
from tenferro_ad.testing import check_grads
from tenferro_core.errors import ArgumentError, AxisError, DTypeError, ShapeError, TenferroIndexError
from tenferro_nn import functional as F
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, random, trace

TOL = {np.float32: dict(rtol=3e-4, atol=3e-5), np.float64: dict(rtol=1e-10, atol=1e-12)}
DTYPES = st.sampled_from([np.float32, np.float64])


def close(got, want, dtype, scale=1.0):
    tol = TOL[np.dtype(dtype).type]
    np.testing.assert_allclose(np.asarray(got.numpy() if hasattr(got, "numpy") else got), want,
                               rtol=tol["rtol"] * scale, atol=tol["atol"] * scale)


def rand(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def against_torch(f, f_ref, arrays, dtype, diff=None, seed=0, scale=1.0):
    """f(*tensors) equals f_ref(*torch tensors), and so do the VJPs of a random cotangent with
    respect to the arrays whose positions are in `diff` (default: all)."""
    diff = range(len(arrays)) if diff is None else diff
    xs = [xp.asarray(a) for a in arrays]
    ts = [torch.tensor(a, requires_grad=i in diff) for i, a in enumerate(arrays)]
    ref = f_ref(*ts)

    def part(*d):
        full = list(xs)
        for i, v in zip(diff, d):
            full[i] = v
        return f(*full)

    out, pullback = vjp(part, *[xs[i] for i in diff])
    close(out, ref.detach().numpy(), dtype, scale)
    ct = np.random.default_rng(seed).standard_normal(ref.shape).astype(dtype)
    grads = pullback(xp.asarray(ct))
    if ref.numel():
        ref.backward(torch.tensor(ct))
    for i, g in zip(diff, grads):
        want = ts[i].grad.numpy() if ts[i].grad is not None else np.zeros_like(arrays[i])
        close(g, want, dtype, scale)


# ---- erf and activations -------------------------------------------------------------------
def test_erf_is_within_an_ulp_of_scipy_in_float64():
    x = np.concatenate([np.linspace(-7, 7, 4001), [0.0, -0.0, 1e-300, -1e-12, 0.5, 0.999999, 1.0,
                                                     1.000001, 7.99999, 8.0, 8.00001, 27.0, 40.0, 1e300]])
    got = F.erf(xp.asarray(x)).numpy()
    ref = scipy.special.erf(x)
    ulps = np.abs(got - ref) / np.spacing(np.maximum(np.abs(ref), 1e-300))
    assert ulps.max() <= 1.0
    x32 = x[np.abs(x) < 1e30].astype(np.float32)
    ref32 = scipy.special.erf(x32.astype(np.float64)).astype(np.float32)
    got32 = F.erf(xp.asarray(x32)).numpy()
    assert got32.dtype == np.float32
    assert (np.abs(got32 - ref32) / np.spacing(np.maximum(np.abs(ref32), np.float32(1e-30)))).max() <= 3
    special = F.erf(xp.asarray([np.inf, -np.inf, np.nan])).numpy()
    assert special[:2].tolist() == [1.0, -1.0] and np.isnan(special[2])


def test_erf_derivative_is_exact_and_half_precision_works():
    x = np.linspace(-4, 4, 41)
    g = grad(lambda t: xp.sum(F.erf(t)))(xp.asarray(x))
    np.testing.assert_allclose(g.numpy(), 2 / np.sqrt(np.pi) * np.exp(-x * x), rtol=1e-14, atol=1e-300)
    h = F.erf(xp.asarray(np.array([0.5, -2.0], np.float16)))
    assert h.dtype == xp.float16
    np.testing.assert_allclose(h.numpy().astype(np.float64), scipy.special.erf([0.5, -2.0]), rtol=1e-3)


ACTIVATIONS = [
    ("relu", F.relu, torch.relu),
    ("gelu", F.gelu, TF.gelu),
    ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), lambda x: TF.gelu(x, approximate="tanh")),
    ("silu", F.silu, TF.silu),
    ("sigmoid", F.sigmoid, torch.sigmoid),
    ("tanh", F.tanh, torch.tanh),
    ("softmax0", lambda x: F.softmax(x, 0), lambda x: torch.softmax(x, 0)),
    ("softmax-1", F.softmax, lambda x: torch.softmax(x, -1)),
    ("log_softmax1", lambda x: F.log_softmax(x, 1), lambda x: torch.log_softmax(x, 1)),
    ("log_softmax-1", F.log_softmax, lambda x: torch.log_softmax(x, -1)),
]


@pytest.mark.parametrize("name,f,ref", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
@settings(max_examples=8)
@given(shape=st.lists(st.integers(1, 5), min_size=2, max_size=3), dtype=DTYPES,
       scale=st.sampled_from([1.0, 30.0]))
def test_activations_match_torch(name, f, ref, shape, dtype, scale):
    x = rand(np.random.default_rng(len(shape)), shape, dtype) * dtype(scale)
    against_torch(f, ref, [x], dtype)


def test_activations_edge_values():
    x = np.array([-np.inf, -1e4, -0.0, 0.0, 1e-30, 1e4, np.inf, np.nan])
    for f, ref in [(F.relu, torch.relu), (F.gelu, TF.gelu), (F.silu, TF.silu), (F.sigmoid, torch.sigmoid)]:
        np.testing.assert_allclose(f(xp.asarray(x)).numpy(), ref(torch.tensor(x)).numpy(), rtol=1e-12)
    g = grad(lambda t: xp.sum(F.relu(t)))(xp.asarray(np.array([-1.0, 0.0, 2.0])))
    assert g.numpy().tolist() == [0.0, 0.0, 1.0]  # relu'(0) = 0, as PyTorch
    big = np.array([[1000.0, 0.0, -1000.0], [-np.inf, 0.0, -np.inf]])
    np.testing.assert_allclose(F.log_softmax(xp.asarray(big)).numpy(),
                               torch.log_softmax(torch.tensor(big), -1))
    np.testing.assert_allclose(F.softmax(xp.asarray(big)).numpy(), torch.softmax(torch.tensor(big), -1))
    assert np.isnan(F.softmax(xp.asarray([-np.inf, -np.inf])).numpy()).all()  # as PyTorch
    assert F.softmax(xp.zeros((0, 3))).shape == (0, 3)
    with pytest.raises(ArgumentError, match="approximate"):
        F.gelu(xp.zeros(2), approximate="fast")
    with pytest.raises(AxisError, match="dim 2 is out of range"):
        F.softmax(xp.zeros((2, 2)), dim=2)
    with pytest.raises(DTypeError, match="real floating"):
        F.gelu(xp.asarray([1, 2]))


def test_second_derivatives_by_finite_differences():
    rng = np.random.default_rng(3)
    x = xp.asarray(rng.standard_normal((2, 3)) * 1.5)
    kw = dict(order=2, eps=1e-5, atol=1e-6, rtol=1e-5)
    check_grads(F.erf, (x,), what="erf", **kw)
    check_grads(F.gelu, (x,), what="gelu", **kw)
    check_grads(lambda t: F.log_softmax(t, 0), (x,), what="log_softmax", **kw)
    w, b = xp.asarray(rng.standard_normal(3)), xp.asarray(rng.standard_normal(3))
    check_grads(lambda t, w, b: F.layer_norm(t, 3, w, b), (x, w, b), what="layer_norm", **kw)


# ---- dropout ---------------------------------------------------------------------------------
def test_dropout_mask_scaling_and_determinism():
    x = xp.ones((200, 50))
    k = random.key(7)
    y = F.dropout(x, 0.3, key=k).numpy()
    kept = y != 0
    assert set(np.unique(y).round(6)) <= {0.0, round(1 / 0.7, 6)}
    assert abs(kept.mean() - 0.7) < 0.02
    np.testing.assert_array_equal(F.dropout(x, 0.3, key=k).numpy(), y)  # same key, same mask
    assert (F.dropout(x, 0.3, key=random.key(8)).numpy() != y).any()
    assert F.dropout(x, 0.3, key=k, training=False) is x and F.dropout(x, 0.0, key=k) is x
    assert not F.dropout(x, 1.0, key=k).numpy().any()
    g = grad(lambda t: xp.sum(F.dropout(t, 0.3, key=k) * 2.0))(x)  # the gradient is the mask / (1-p)
    np.testing.assert_allclose(g.numpy(), 2 * y, rtol=1e-6)
    step = compile(lambda t, key: F.dropout(t, 0.3, key=key))
    np.testing.assert_array_equal(step(x, k).numpy(), y)
    with pytest.raises(ArgumentError, match="needs a random key"):
        F.dropout(x, 0.5)
    with pytest.raises(ArgumentError, match="probability"):
        F.dropout(x, 1.5, key=k)


# ---- linear and convolution ------------------------------------------------------------------
@settings(max_examples=10)
@given(lead=st.lists(st.integers(0, 3), max_size=2), n_in=st.integers(1, 5), n_out=st.integers(1, 4),
       bias=st.booleans(), dtype=DTYPES)
def test_linear_matches_torch(lead, n_in, n_out, bias, dtype):
    rng = np.random.default_rng(n_in * 7 + n_out)
    arrays = [rand(rng, (*lead, n_in), dtype), rand(rng, (n_out, n_in), dtype)]
    if bias:
        arrays.append(rand(rng, (n_out,), dtype))
    against_torch(F.linear, TF.linear, arrays, dtype)


def test_linear_on_a_transposed_input():
    rng = np.random.default_rng(1)
    a, w = rng.standard_normal((4, 3)), rng.standard_normal((2, 4))
    xt = xp.permute_dims(xp.asarray(a), (1, 0))  # (3, 4), not contiguous in memory order
    np.testing.assert_allclose(F.linear(xt, xp.asarray(w)).numpy(), a.T @ w.T, rtol=1e-12)


@st.composite
def conv_cases(draw):
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    c, o = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dil = draw(st.sampled_from([1, (1, 2), 2]))
    padding = draw(st.sampled_from([0, 1, (2, 0), "valid", "same"]))
    stride = 1 if padding == "same" else draw(st.sampled_from([1, 2, (1, 3)]))
    hw = (draw(st.integers(1, 7)), draw(st.integers(1, 7)))
    n = draw(st.sampled_from([0, 1, 2]))
    return dict(n=n, c=c, o=o, k=k, hw=hw, stride=stride, padding=padding, dilation=dil, groups=groups,
                bias=draw(st.booleans()), dtype=draw(DTYPES), unbatched=draw(st.booleans()) and n == 1)


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@settings(max_examples=50)
@given(case=conv_cases())
def test_conv2d_matches_torch(case):
    d, dtype = case, case["dtype"]
    dil = (d["dilation"],) * 2 if isinstance(d["dilation"], int) else d["dilation"]
    pad = d["padding"]
    pads = (0, 0) if pad in ("valid", "same") else (pad, pad) if isinstance(pad, int) else pad
    for ax in range(2):
        assume(pad == "same" or d["hw"][ax] + 2 * pads[ax] >= dil[ax] * (d["k"][ax] - 1) + 1)
    rng = np.random.default_rng(sum(d["hw"]) + d["c"])
    shape = (d["c"], *d["hw"]) if d["unbatched"] else (d["n"], d["c"], *d["hw"])
    arrays = [rand(rng, shape, dtype), rand(rng, (d["o"], d["c"] // d["groups"], *d["k"]), dtype)]
    if d["bias"]:
        arrays.append(rand(rng, (d["o"],), dtype))
    kw = dict(stride=d["stride"], padding=pad, dilation=d["dilation"], groups=d["groups"])

    def f(x, w, b=None):
        return F.conv2d(x, w, b, **kw)

    def ref(x, w, b=None):
        return TF.conv2d(x, w, b, **kw)

    against_torch(f, ref, arrays, dtype, scale=3.0)


def test_conv2d_on_a_transposed_input_and_errors():
    rng = np.random.default_rng(2)
    a, w = rng.standard_normal((2, 3, 5, 4)), rng.standard_normal((4, 3, 3, 3))
    xt = xp.permute_dims(xp.asarray(a.transpose(0, 1, 3, 2).copy()), (0, 1, 3, 2))
    np.testing.assert_allclose(F.conv2d(xt, xp.asarray(w), padding=1).numpy(),
                               TF.conv2d(torch.tensor(a), torch.tensor(w), padding=1).numpy(), rtol=1e-12)
    x = xp.asarray(a)
    with pytest.raises(ShapeError, match="input has 3 channels"):
        F.conv2d(x, xp.asarray(rng.standard_normal((4, 2, 3, 3))))
    with pytest.raises(ShapeError, match="smaller than the dilated kernel"):
        F.conv2d(x, xp.asarray(w), dilation=3)
    with pytest.raises(ArgumentError, match="'same' is not supported for strided"):
        F.conv2d(x, xp.asarray(w), stride=2, padding="same")
    with pytest.raises(ArgumentError, match="stride must be an int >= 1"):
        F.conv2d(x, xp.asarray(w), stride=0)
    with pytest.raises(DTypeError, match="weight is float32"):
        F.conv2d(x, xp.asarray(w.astype(np.float32)))
    with pytest.raises(ShapeError, match="4-d"):
        F.conv2d(xp.asarray(a[0, 0]), xp.asarray(w))


# ---- pooling ---------------------------------------------------------------------------------
@st.composite
def pool_cases(draw):
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = draw(st.sampled_from([None, 1, 2, (1, 2), k]))
    padding = (draw(st.integers(0, k[0] // 2)), draw(st.integers(0, k[1] // 2)))
    hw = (draw(st.integers(k[0], 8)), draw(st.integers(k[1], 8)))
    return dict(k=k, stride=stride, padding=padding, hw=hw, n=draw(st.sampled_from([0, 1, 2])),
                dtype=draw(DTYPES), dilation=draw(st.sampled_from([1, 1, 2])))


@settings(max_examples=40)
@given(case=pool_cases())
def test_pools_match_torch(case):
    d, dtype = case, case["dtype"]
    x = rand(np.random.default_rng(sum(d["hw"])), (d["n"], 3, *d["hw"]), dtype)
    pool = dict(kernel_size=d["k"], stride=d["stride"], padding=d["padding"])
    against_torch(lambda t: F.avg_pool2d(t, **pool), lambda t: TF.avg_pool2d(t, **pool), [x], dtype)
    against_torch(lambda t: F.avg_pool2d(t, count_include_pad=False, **pool),
                  lambda t: TF.avg_pool2d(t, count_include_pad=False, **pool), [x], dtype)
    dil = d["dilation"]
    assume(all(n + 2 * p >= dil * (k - 1) + 1 for n, p, k in zip(d["hw"], d["padding"], d["k"])))
    against_torch(lambda t: F.max_pool2d(t, dilation=dil, **pool),
                  lambda t: TF.max_pool2d(t, dilation=dil, **pool), [x], dtype)


def test_pool_fast_path_odd_sizes_unbatched_and_errors():
    x = np.random.default_rng(4).standard_normal((3, 7, 5))  # unbatched, sizes not multiples of 2
    for f, ref in [(F.max_pool2d, TF.max_pool2d), (F.avg_pool2d, TF.avg_pool2d)]:
        against_torch(lambda t, f=f: f(t, 2), lambda t, ref=ref: ref(t, 2), [x], np.float64)
    g = trace(lambda t: F.max_pool2d(t, 2), xp.asarray(x))
    assert "reduce_max" in str(g)  # stride == kernel, no padding: reshape + reduce
    with pytest.raises(ArgumentError, match="at most half of kernel_size"):
        F.max_pool2d(xp.asarray(x), 2, padding=2)
    with pytest.raises(ShapeError, match="smaller than the window"):
        F.avg_pool2d(xp.asarray(x), (8, 1))


# ---- normalization ---------------------------------------------------------------------------
@settings(max_examples=10)
@given(lead=st.lists(st.integers(1, 4), min_size=0, max_size=2), norm=st.lists(st.integers(1, 4), min_size=1,
       max_size=2), affine=st.booleans(), dtype=DTYPES)
def test_layer_norm_matches_torch(lead, norm, affine, dtype):
    rng = np.random.default_rng(len(lead) + 3 * len(norm))
    arrays = [rand(rng, (*lead, *norm), dtype) * 3 + 1]
    if affine:
        arrays += [rand(rng, norm, dtype), rand(rng, norm, dtype)]
    # normalizing over one element: x - mean is 0, the input gradient cancels to 0 up to
    # rounding times 1/sqrt(eps) = 316, which float32 shows
    scale = 3.0 * (30.0 if math.prod(norm) == 1 else 1.0)
    against_torch(lambda x, *wb: F.layer_norm(x, norm, *wb, eps=1e-5),
                  lambda x, *wb: TF.layer_norm(x, norm, *wb, eps=1e-5), arrays, dtype, scale=scale)


@pytest.mark.parametrize("shape", [(5, 3), (4, 3, 6), (2, 3, 4, 5)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm_matches_torch(shape, dtype):
    rng = np.random.default_rng(len(shape))
    x, w, b = rand(rng, shape, dtype) * 2 + 1, rand(rng, (3,), dtype), rand(rng, (3,), dtype)
    rm, rv = rand(rng, (3,), dtype), np.abs(rand(rng, (3,), dtype)) + 0.5
    for training in (True, False):
        y, nm, nv = F.batch_norm(*map(xp.asarray, (x, rm, rv, w, b)), training=training, momentum=0.2)
        trm, trv = torch.tensor(rm), torch.tensor(rv)
        ref = TF.batch_norm(torch.tensor(x), trm, trv, torch.tensor(w), torch.tensor(b), training, 0.2)
        close(y, ref.numpy(), dtype, 3.0)
        close(nm, trm.numpy(), dtype)
        close(nv, trv.numpy(), dtype)
        def f(x, w, b, t=training):
            return F.batch_norm(x, xp.asarray(rm), xp.asarray(rv), w, b, t)[0]

        def ref(x, w, b, t=training):
            return TF.batch_norm(x, torch.tensor(rm), torch.tensor(rv), w, b, t)

        against_torch(f, ref, [x, w, b], dtype, scale=3.0)
    with pytest.raises(ShapeError, match="more than 1 value per channel"):
        one = x[(slice(0, 1), slice(None)) + (slice(0, 1),) * (len(shape) - 2)]  # one value per channel
        F.batch_norm(xp.asarray(one), None, None, training=True)


# ---- embedding and attention -----------------------------------------------------------------
def test_embedding_matches_torch_and_padding_row_gets_no_gradient():
    rng = np.random.default_rng(5)
    w = rand(rng, (6, 3), np.float64)
    idx = np.array([[0, 5, 2], [2, 2, 1]])
    against_torch(lambda w: F.embedding(xp.asarray(idx), w), lambda w: TF.embedding(torch.tensor(idx), w),
                  [w], np.float64)
    against_torch(lambda w: F.embedding(xp.asarray(idx), w, padding_idx=2),
                  lambda w: TF.embedding(torch.tensor(idx), w, padding_idx=2), [w], np.float64)
    assert F.embedding(xp.asarray(np.zeros((0,), np.int64)), xp.asarray(w)).shape == (0, 3)
    with pytest.raises(TenferroIndexError, match="index 6 is out of range for 6"):
        F.embedding(xp.asarray([1, 6]), xp.asarray(w))
    with pytest.raises(TenferroIndexError, match="index -1"):
        F.embedding(xp.asarray([-1]), xp.asarray(w))
    with pytest.raises(DTypeError, match="integer dtype"):
        F.embedding(xp.asarray([1.0]), xp.asarray(w))


def test_embedding_gradient_is_a_scatter_add():
    w = xp.asarray(np.random.default_rng(6).standard_normal((10, 4)))
    idx = xp.asarray(np.array([[1, 3], [3, 9]]))
    g = trace(lambda w, i: grad(lambda w: xp.sum(F.embedding(i, w) ** 2))(w), w, idx)
    prims = [node.prim.name for node in g.nodes]
    assert "scatter_add" in prims and "dot_general" not in prims, prims


ATTN = st.fixed_dictionaries(dict(batch=st.sampled_from([(), (1,), (2, 3)]), l_=st.integers(1, 4),
                                  s=st.integers(1, 5), e=st.integers(1, 4), ev=st.integers(1, 3),
                                  mask=st.sampled_from([None, "bool", "float", "causal"]), dtype=DTYPES))


@settings(max_examples=30)
@given(case=ATTN)
def test_scaled_dot_product_attention_matches_torch(case):
    d, dtype = case, case["dtype"]
    rng = np.random.default_rng(d["l_"] * 10 + d["s"])
    q, k, v = (rand(rng, (*d["batch"], n, e), dtype) for n, e in ((d["l_"], d["e"]), (d["s"], d["e"]),
                                                                   (d["s"], d["ev"])))
    mask, kw = None, {}
    if d["mask"] == "bool":
        mask = rng.random((d["l_"], d["s"])) < 0.7
    elif d["mask"] == "float":
        mask = rand(rng, (d["l_"], d["s"]), dtype)
    elif d["mask"] == "causal":
        kw = dict(is_causal=True)

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, None if mask is None else xp.asarray(mask), **kw)

    def ref(q, k, v):
        return TF.scaled_dot_product_attention(q, k, v, None if mask is None else torch.tensor(mask), **kw)

    against_torch(f, ref, [q, k, v], dtype, scale=3.0)


def test_attention_fully_masked_rows_are_zero_and_errors():
    rng = np.random.default_rng(8)
    q, k, v = (xp.asarray(rand(rng, (2, 3, 4), np.float64)) for _ in range(3))
    mask = np.ones((3, 3), bool)
    mask[1] = False
    out = F.scaled_dot_product_attention(q, k, v, xp.asarray(mask))
    assert not out.numpy()[:, 1].any() and np.isfinite(out.numpy()).all()
    g = grad(lambda q: xp.sum(F.scaled_dot_product_attention(q, k, v, xp.asarray(mask))))(q)
    assert np.isfinite(g.numpy()).all()
    with pytest.raises(ArgumentError, match="not both"):
        F.scaled_dot_product_attention(q, k, v, xp.asarray(mask), is_causal=True)
    with pytest.raises(ShapeError, match="expected query"):
        F.scaled_dot_product_attention(q, xp.zeros((2, 3, 5), dtype=xp.float64), v)
    with pytest.raises(DTypeError, match="attn_mask must be bool"):
        F.scaled_dot_product_attention(q, k, v, xp.zeros((3, 3), dtype=xp.float32))
    p = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5, dropout_key=random.key(1))
    assert p.shape == (2, 3, 4)
    with pytest.raises(ArgumentError, match="random key"):
        F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)


def test_flatten_and_compiled_functional_ops():
    x = xp.asarray(np.arange(24.0).reshape(2, 3, 4))
    assert F.flatten(x).shape == (24,) and F.flatten(x, 1).shape == (2, 12)
    assert F.flatten(x, 0, 1).shape == (6, 4)
    assert F.flatten(x, -1).shape == (2, 3, 4) and F.flatten(xp.asarray(1.0)).shape == (1,)
    with pytest.raises(ArgumentError, match="must not come after"):
        F.flatten(x, 2, 1)
    img = xp.asarray(np.random.default_rng(9).standard_normal((2, 3, 6, 6)))
    w = xp.asarray(np.random.default_rng(10).standard_normal((4, 3, 3, 3)))

    def net(img, w):
        h = F.gelu(F.conv2d(img, w, padding="same"))
        h = F.max_pool2d(h, 3, stride=2, padding=1) + F.avg_pool2d(h, 3, stride=2, padding=1)
        h = F.layer_norm(F.flatten(h, 1), 36)
        return F.log_softmax(h) + F.softmax(F.silu(h), 0)

    np.testing.assert_allclose(compile(net)(img, w).numpy(), net(img, w).numpy(), rtol=1e-12, atol=1e-12)
    gc = compile(grad(lambda w: xp.sum(net(img, w) ** 2)))(w)
    np.testing.assert_allclose(gc.numpy(), grad(lambda w: xp.sum(net(img, w) ** 2))(w).numpy(), rtol=1e-9)
    assert math.isfinite(float(xp.sum(gc)))
