"""tenferro_runtime.random: Threefry known answers, bits against a NumPy reference, bit identity
across backends and across eager / trace / compile / grad, statistics with fixed keys, edge
shapes, reparameterized gradients and typed errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats as st
from hypothesis import given, settings
from hypothesis import strategies as hs

import tenferro_ad as ad
import tenferro_runtime as tr
from tenferro_core.errors import ArgumentError, DTypeError, ShapeError
from tenferro_runtime import array_api as xp
from tenferro_runtime import random as R

DEVICES = [d for d in ("numpy:cpu", "torch:cpu") if d.partition(":")[0] in tr.default_runtime().backends]
M32 = 0xFFFFFFFF


# ---------------------------------------------------------------- references in plain Python / NumPy


def threefry_py(k0: int, k1: int, c0: int, c1: int) -> tuple[int, int]:
    """Threefry-2x32-20 on Python ints, from the Random123 specification."""
    rot = (13, 15, 26, 6, 17, 29, 16, 24)
    ks = (k0, k1, k0 ^ k1 ^ 0x1BD11BDA)
    x0, x1 = (c0 + ks[0]) & M32, (c1 + ks[1]) & M32
    for i in range(5):
        for r in rot[4 * (i % 2): 4 * (i % 2) + 4]:
            x0 = (x0 + x1) & M32
            x1 = (((x1 << r) | (x1 >> (32 - r))) & M32) ^ x0
        x0 = (x0 + ks[(i + 1) % 3]) & M32
        x1 = (x1 + ks[(i + 2) % 3] + i + 1) & M32
    return x0, x1


def threefry_np(k0: int, k1: int, c0: np.ndarray, c1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same on uint64 arrays (words masked to 32 bits)."""
    out = [threefry_py(k0, k1, int(a), int(b)) for a, b in zip(c0, c1)]
    return (np.array([o[0] for o in out], dtype=np.uint64), np.array([o[1] for o in out], dtype=np.uint64))


def ref_words(seed: int, n: int) -> np.ndarray:
    """The words a sampler draws from key(seed): both words of blocks 0..ceil(n/2)-1."""
    s = seed % 2**64
    m = (n + 1) // 2
    y0, y1 = threefry_np(s >> 32, s & M32, np.zeros(m, np.uint64), np.arange(m, dtype=np.uint64))
    return np.concatenate([y0, y1])[:n]


def bits_of(a: np.ndarray) -> np.ndarray:
    """Bit patterns, so -0.0 / NaN payloads count as differences."""
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" or a.dtype.name == "bfloat16" else a


def same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(bits_of(a), bits_of(b))


# ---------------------------------------------------------------- Threefry and keys


KAT = [  # Random123 kat_vectors, threefry2x32 20 rounds: (counter, key, result)
    ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
    ((M32, M32), (M32, M32), (0x1CB996FC, 0xBB002BE7)),
    ((0x243F6A88, 0x85A308D3), (0x13198A2E, 0x03707344), (0xC4923A9C, 0x483DF7A0)),
]


@pytest.mark.parametrize("ctr, key, want", KAT)
def test_threefry_python_reference_matches_random123(ctr, key, want):
    assert threefry_py(*key, *ctr) == want


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("ctr, key, want", KAT)
def test_threefry_known_answers(device, ctr, key, want):
    def i32(w):
        return xp.asarray(np.array([w], np.uint32).view(np.int32), device=device)

    y0, y1 = R.threefry2x32(*(i32(w) for w in key + ctr))
    got = tuple(int(np.asarray(y).view(np.uint32)[0]) for y in (y0, y1))
    assert got == want


@pytest.mark.parametrize("device", DEVICES)
def test_key_layout_split_and_fold_in(device):
    k = R.key(0, device=device)
    assert k.dtype == xp.int64 and k.shape == (2,) and k.device == device
    assert np.asarray(R.key(-1)).tolist() == [M32, M32]
    assert np.asarray(R.key(2**40 + 7)).tolist() == [2**8, 7]
    ks = R.split(k, 3)
    assert ks.shape == (3, 2) and ks.dtype == xp.int64 and ks.device == device
    assert np.asarray(ks[0]).tolist() == [0x6B200159, 0x99BA4EFE]  # block 0 under key (0, 0)
    k1, k2 = R.split(k)  # tensors iterate along axis 0
    assert same_bits(k1, ks[0]) and same_bits(k2, ks[1])
    for i in range(3):
        assert same_bits(R.fold_in(k, i), ks[i])  # split(k, n)[i] is fold_in(k, i)
    assert np.asarray(R.fold_in(k, 2**33 + 5)).tolist() == list(threefry_py(0, 0, 2, 5))
    assert np.asarray(R.fold_in(k, -1)).tolist() == list(threefry_py(0, 0, M32, M32))
    # deterministic, and distinct streams
    assert same_bits(R.split(R.key(5, device=device), 4), R.split(R.key(5, device=device), 4))
    draws = [np.asarray(R.uniform(kk, (8,))) for kk in (k, k1, k2, R.fold_in(k, 7), R.key(1, device=device))]
    assert len({d.tobytes() for d in draws}) == len(draws)
    assert R.split(k, 0).shape == (0, 2)


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=30)
@given(seed=hs.integers(-(2**63), 2**64 - 1), n=hs.integers(0, 40), data=hs.integers(-(2**63), 2**63 - 1))
def test_words_and_fold_in_match_reference(device, seed, n, data):
    k = R.key(seed, device=device)
    w = ref_words(seed, n)
    want = ((w >> np.uint64(9)) | np.uint64(0x3F800000)).astype(np.uint32).view(np.float32) - np.float32(1)
    assert same_bits(R.uniform(k, (n,), xp.float32), want)
    s = seed % 2**64
    d = data % 2**64
    ref = list(threefry_py(s >> 32, s & M32, d >> 32, d & M32))
    assert np.asarray(R.fold_in(k, data)).tolist() == ref
    assert np.asarray(R.fold_in(k, xp.asarray(data, device=device))).tolist() == ref
    assert same_bits(R.key(xp.asarray(data, device=device)), R.key(data, device=device))


# ---------------------------------------------------------------- samplers for the identity tests


def _samplers(device: str) -> dict:
    def t(v, dtype=xp.float32):
        return xp.asarray(v, dtype=dtype, device=device)

    s = {}
    for dt in (xp.float16, xp.float32, xp.float64):
        s[f"uniform-{dt}"] = lambda k, dt=dt: R.uniform(k, (64, 3), dt)
        s[f"normal-{dt}"] = lambda k, dt=dt: R.normal(k, (257,), dt)
        s[f"truncated_normal-{dt}"] = lambda k, dt=dt: R.truncated_normal(k, -0.5, 2.0, (65,), dt)
    s.update({
        "uniform-bounds": lambda k: R.uniform(k, (3, 33), xp.float32, -2.5, 4.0),
        "uniform-tensor-bounds": lambda k: R.uniform(k, (4, 3), xp.float64, t([0.0, 1.0, -5.0], xp.float64),
                                                     7.0),
        "truncated_normal-tail": lambda k: R.truncated_normal(k, t([4.0, -9.0]), t([math.inf, -8.0]),
                                                              (50, 2)),
        "truncated_normal-wide": lambda k: R.truncated_normal(k, -math.inf, math.inf, (40,), xp.float64),
        "bernoulli": lambda k: R.bernoulli(k, 0.3, (100,)),
        "bernoulli-tensor": lambda k: R.bernoulli(k, t([0.0, 0.5, 0.99, 1.0]), (25, 4)),
        "randint": lambda k: R.randint(k, (100,), -3, 17),
        "randint-int8": lambda k: R.randint(k, (100,), -128, 128, xp.int8),
        "randint-int32": lambda k: R.randint(k, (100,), -(2**31), 2**31 - 1, xp.int32),
        "randint-2^40": lambda k: R.randint(k, (100,), 5, 3 * 2**40),
        "randint-full": lambda k: R.randint(k, (100,), -(2**63), 2**63 - 1),
        "permutation": lambda k: R.permutation(k, 50),
        "permutation-tensor": lambda k: R.permutation(k, t(np.arange(12.0).reshape(3, 4)), axis=1),
        "categorical": lambda k: R.categorical(k, t([[0.0, 1.0, -1.0], [2.0, -math.inf, 0.5]]), shape=(7, 2)),
        "categorical-f64": lambda k: R.categorical(k, t([0.1, 0.2, 0.7], xp.float64), shape=(30,)),
        "choice": lambda k: R.choice(k, 10, (5, 2)),
        "choice-p": lambda k: R.choice(k, t(np.arange(8.0)), (20,), p=t([1, 0, 2, 3, 0, 1, 1, 2])),
        "choice-noreplace": lambda k: R.choice(k, 30, (10,), replace=False),
        "choice-noreplace-p": lambda k: R.choice(k, 6, (4,), replace=False,
                                                 p=t([0.1, 0, 0.3, 0.2, 0.3, 0.1])),
    })
    if device.startswith("torch"):
        s["uniform-bfloat16"] = lambda k: R.uniform(k, (64,), xp.bfloat16)
        s["normal-bfloat16"] = lambda k: R.normal(k, (64,), xp.bfloat16)
    return s


NAMES = sorted(_samplers("torch:cpu"))
D_BF16 = np.dtype(xp.bfloat16.numpy)


def _host(x) -> np.ndarray:
    a = np.asarray(x)
    return a.astype(np.float32) if a.dtype.name == "bfloat16" else a


@pytest.mark.skipif(len(DEVICES) < 2, reason="needs tenferro-torch")
@pytest.mark.parametrize("name", NAMES)
def test_bit_identical_across_backends(name):
    if "bfloat16" in name:  # numpy:cpu has no bfloat16: compare with its float32 numbers
        got = _host(_samplers("torch:cpu")[name](R.key(3, device="torch:cpu")))
        if name.startswith("uniform"):  # the top 7 of the 23 mantissa bits
            want = np.floor(np.asarray(R.uniform(R.key(3), (64,), xp.float32)) * 128) / 128
        else:  # float32 normals rounded to bfloat16
            want = np.asarray(R.normal(R.key(3), (64,), xp.float32)).astype(D_BF16).astype(np.float32)
        assert same_bits(got, want.astype(np.float32))
        return
    ref = _samplers("numpy:cpu")[name](R.key(3))
    got = _samplers("torch:cpu")[name](R.key(3, device="torch:cpu"))
    assert got.device == "torch:cpu"
    assert same_bits(got, ref), f"{name}: numpy:cpu and torch:cpu differ"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", NAMES)
def test_bit_identical_eager_trace_compile(device, name):
    samplers = _samplers(device)
    if name not in samplers:
        pytest.skip("bfloat16 is a torch dtype")
    f = samplers[name]
    k = R.key(11, device=device)
    eager = f(k)
    assert eager.device == device
    compiled = tr.compile(f)
    assert same_bits(compiled(k), eager)
    assert same_bits(compiled(R.fold_in(k, 1)), f(R.fold_in(k, 1)))  # the key is an argument
    assert same_bits(tr.eval_graph(tr.trace(f, k), k)[0], eager)
    closed = tr.compile(lambda: f(k))  # a closed-over key is a constant; folding keeps the bits
    assert same_bits(closed(), eager)


@pytest.mark.parametrize("device", DEVICES)
def test_identical_inside_grad_and_compiled_grad(device):
    k = R.key(4, device=device)
    lo = xp.asarray(-1.0, dtype=xp.float64, device=device)

    def f(lo, k):
        x = R.uniform(k, (50,), xp.float64, lo, 2.0) + R.truncated_normal(k, lo, 1.5, (50,), xp.float64)
        return xp.sum(x), (x, R.categorical(k, xp.zeros((4,), device=device), shape=(50,)))

    (val, (x, z)), _ = ad.value_and_grad(f, has_aux=True)(lo, k)
    _, (x0, z0) = f(lo, k)
    assert same_bits(x, x0) and same_bits(z, z0)
    g1 = ad.grad(f, has_aux=True)(lo, k)[0]
    g2 = tr.compile(ad.grad(f, has_aux=True))(lo, k)[0]
    g3 = ad.grad(tr.compile(f), has_aux=True)(lo, k)[0]
    assert same_bits(g1, g2) and np.allclose(np.asarray(g1), np.asarray(g3), rtol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_traced_keys_seeds_and_steps(device):
    @tr.compile
    def step(k, i):
        k = R.fold_in(k, i)
        a, b = R.split(k)
        return R.normal(a, (4,)), b

    k = R.key(0, device=device)
    for i in range(3):
        z, b = step(k, xp.asarray(i, device=device))
        a, b0 = R.split(R.fold_in(k, i))
        assert same_bits(z, R.normal(a, (4,))) and same_bits(b, b0)
    seeded = tr.compile(lambda s: R.uniform(R.key(s), (3,)))
    assert same_bits(seeded(xp.asarray(9, device=device)), R.uniform(R.key(9, device=device), (3,)))


def test_reusing_a_key_repeats_the_numbers():
    k = R.key(123)
    assert same_bits(R.normal(k, (10,)), R.normal(k, (10,)))
    assert not same_bits(R.normal(k, (10,)), R.normal(R.split(k)[0], (10,)))


# ---------------------------------------------------------------- statistics (fixed keys)

N = 100_000


@pytest.mark.parametrize("dt", [xp.float16, xp.float32, xp.float64])
def test_uniform_statistics(dt):
    u = np.asarray(R.uniform(R.key(1), (N,), dt)).astype(np.float64)
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 5 * math.sqrt(1 / 12 / N) and abs(u.var() - 1 / 12) < 2e-3
    assert st.kstest(u, "uniform").pvalue > 1e-3
    v = np.asarray(R.uniform(R.key(2), (N,), dt, -2.0, 3.0)).astype(np.float64)
    assert v.min() >= -2.0 and v.max() < 3.0
    assert st.kstest(v, st.uniform(-2.0, 5.0).cdf).pvalue > 1e-3


def test_uniform_stays_below_maxval():
    # bounds where minval + u * span rounds up to maxval for the top u
    v = np.asarray(R.uniform(R.key(0), (20000,), xp.float32, 1.0, 1.0000001))
    assert v.min() >= 1.0 and v.max() < np.float32(1.0000001)


@pytest.mark.parametrize("dt", [xp.float16, xp.float32, xp.float64])
def test_normal_statistics(dt):
    z = np.asarray(R.normal(R.key(7), (N,), dt)).astype(np.float64)
    assert np.all(np.isfinite(z))
    assert abs(z.mean()) < 5 / math.sqrt(N) and abs(z.var() - 1.0) < 0.02
    assert st.kstest(z, "norm").pvalue > 1e-3
    assert abs(st.skew(z)) < 0.05 and abs(st.kurtosis(z)) < 0.1


@pytest.mark.parametrize("lo, hi, dt", [
    (-1.0, 2.0, xp.float32), (0.5, 3.0, xp.float32), (5.0, 6.0, xp.float32), (-math.inf, -3.0, xp.float32),
    (-2.0, math.inf, xp.float64), (7.0, 8.5, xp.float64), (-0.1, 0.1, xp.float64),
])
def test_truncated_normal_statistics(lo, hi, dt):
    x = np.asarray(R.truncated_normal(R.key(5), lo, hi, (N,), dt)).astype(np.float64)
    assert x.min() >= lo and x.max() <= hi
    ref = st.truncnorm(lo, hi)
    assert st.kstest(x, ref.cdf).pvalue > 1e-3
    assert abs(x.mean() - ref.mean()) < 5 * ref.std() / math.sqrt(N)


def test_randint_statistics():
    x = np.asarray(R.randint(R.key(9), (N,), -3, 7))
    assert x.dtype == np.int64 and x.min() == -3 and x.max() == 6
    assert st.chisquare(np.bincount(x + 3, minlength=10)).pvalue > 1e-3
    for lo, hi, dt in [(-(2**31), 2**31, xp.int64), (0, 3 * 2**40, xp.int64), (-(2**63), 2**63 - 1, xp.int64),
                       (0, 256, xp.uint8), (-100, 100, xp.int16)]:
        y = np.asarray(R.randint(R.key(10), (20000,), lo, hi, dt))
        assert y.dtype == np.dtype(dt.numpy) and int(y.min()) >= lo and int(y.max()) < hi
        frac = (y.astype(np.float64) - lo) / (float(hi) - lo)
        assert st.kstest(frac, "uniform").pvalue > 1e-3, (lo, hi)


@pytest.mark.parametrize("seed, lo, hi", [(1, 0, 10), (2, -(2**63), 2**63 - 1), (3, 5, 5 + 3 * 2**40),
                                          (4, 0, 2**32 - 5), (5, 3, 2**63 + 2**62 + 3), (6, 0, 2**62)])
def test_randint_is_64_bits_mod_span(seed, lo, hi):
    dt = xp.uint64 if hi > 2**63 else xp.int64
    got = np.asarray(R.randint(R.key(seed), (33,), lo, hi, dt)).astype(object)
    s = seed % 2**64
    y0, y1 = threefry_np(s >> 32, s & M32, np.zeros(33, np.uint64), np.arange(33, dtype=np.uint64))
    want = [lo + ((int(a) << 32 | int(b)) % (hi - lo)) for a, b in zip(y0, y1)]
    assert [int(v) for v in got] == want


def test_bernoulli_statistics():
    b = np.asarray(R.bernoulli(R.key(3), 0.3, (N,)))
    assert b.dtype == np.bool_ and abs(b.mean() - 0.3) < 5 * math.sqrt(0.21 / N)
    p = xp.asarray([0.0, 0.25, 1.0])
    c = np.asarray(R.bernoulli(R.key(4), p, (20000, 3)))
    assert not c[:, 0].any() and c[:, 2].all() and abs(c[:, 1].mean() - 0.25) < 0.02
    assert R.bernoulli(R.key(4), p).shape == (3,) and R.bernoulli(R.key(4)).shape == ()


def test_categorical_frequencies_match_softmax():
    logits = np.array([[0.5, -1.0, 2.0, 0.0, -math.inf], [3.0, 3.0, 0.0, -2.0, 1.0]], np.float32)
    x = np.asarray(R.categorical(R.key(8), xp.asarray(logits), shape=(20000, 2)))
    assert x.shape == (20000, 2) and x.dtype == np.int64
    for row in range(2):
        prob = np.exp(logits[row].astype(np.float64) - logits[row].max())
        prob /= prob.sum()
        counts = np.bincount(x[:, row], minlength=5)
        keep = prob > 0
        assert counts[~keep].sum() == 0
        assert st.chisquare(counts[keep], 20000 * prob[keep]).pvalue > 1e-3
    # axis=0 and the default shape
    y = R.categorical(R.key(8), xp.asarray(logits.T.copy()), axis=0)
    assert y.shape == (2,)


def test_choice_statistics():
    p = np.array([0.1, 0.0, 0.4, 0.2, 0.3])
    x = np.asarray(R.choice(R.key(6), 5, (50000,), p=xp.asarray(p * 7)))  # weights need not sum to 1
    counts = np.bincount(x, minlength=5)
    assert counts[1] == 0 and st.chisquare(counts[p > 0], 50000 * p[p > 0]).pvalue > 1e-3
    y = np.asarray(R.choice(R.key(6), 10, (40000,)))
    assert st.chisquare(np.bincount(y, minlength=10)).pvalue > 1e-3
    z = np.asarray(R.choice(R.key(6), 1000, (1000,), replace=False))
    assert sorted(z.tolist()) == list(range(1000))
    w = np.asarray(R.choice(R.key(6), 5, (3,), replace=False, p=xp.asarray(p)))
    assert len(set(w.tolist())) == 3 and 1 not in w
    firsts = np.array([int(np.asarray(R.choice(R.fold_in(R.key(6), i), 5, (1,), replace=False,
                                                     p=xp.asarray(p)))[0]) for i in range(300)])
    assert st.chisquare(np.bincount(firsts, minlength=5)[p > 0], 300 * p[p > 0]).pvalue > 1e-3


def test_permutation_statistics_and_sharing():
    n = 20000
    perm = np.asarray(R.permutation(R.key(2), n))
    assert perm.dtype == np.int64 and sorted(perm.tolist()) == list(range(n))
    assert st.kstest(perm[:2000] / n, "uniform").pvalue > 1e-3  # values at the first positions
    inv = np.argsort(perm)
    assert st.kstest(inv[:2000] / n, "uniform").pvalue > 1e-3  # positions of the first values
    assert abs(np.corrcoef(np.arange(n), perm)[0, 1]) < 0.05
    a = xp.asarray(np.arange(n, dtype=np.float32) * 2)
    b = xp.asarray(np.arange(2 * n, dtype=np.int32).reshape(2, n))
    pa, pb = R.permutation(R.key(2), a), R.permutation(R.key(2), b, axis=1)
    assert np.array_equal(np.asarray(pa), perm * 2) and np.array_equal(np.asarray(pb)[0], perm)


# ---------------------------------------------------------------- shapes and dtypes


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(), (0,), (3, 0), (1,), (1, 1), [2, 3]])
def test_edge_shapes(device, shape):
    k = R.key(0, device=device)
    want = tuple(shape)
    cases = [
        (R.uniform(k, shape), xp.float64), (R.normal(k, shape, xp.float32), xp.float32),
        (R.truncated_normal(k, -1.0, 1.0, shape), xp.float64), (R.bernoulli(k, 0.5, shape), xp.bool),
        (R.randint(k, shape, 0, 5, xp.int32), xp.int32), (R.choice(k, 4, shape), xp.int64),
        (R.categorical(k, xp.zeros((3,), device=device), shape=shape), xp.int64),
    ]
    for out, dt in cases:
        assert out.shape == want and out.dtype == dt and out.device == device
    if math.prod(want) <= 4:
        assert R.choice(k, 4, shape, replace=False).shape == want
    assert same_bits(tr.compile(lambda k: R.normal(k, shape))(k), R.normal(k, shape))
    assert R.permutation(k, 0).shape == (0,)
    assert np.asarray(R.permutation(k, 1)).tolist() == [0]
    assert R.choice(k, xp.zeros((2, 5, 3), device=device), (4, 2), axis=1).shape == (2, 4, 2, 3)


@pytest.mark.parametrize("device", DEVICES)
def test_float_dtypes_per_device(device):
    k = R.key(0, device=device)
    for dt, want in ((xp.float16, xp.float16), (xp.float32, xp.float32), (xp.float64, xp.float64),
                     ("float32", xp.float32), (np.float16, xp.float16)):
        assert R.uniform(k, (3,), dt).dtype == want and R.normal(k, (3,), dt).dtype == want
        assert R.normal(k, (3,), dt).device == device
    if device.startswith("torch"):
        assert R.truncated_normal(k, -1.0, 1.0, (4,), xp.bfloat16).dtype == xp.bfloat16
    else:
        with pytest.raises(DTypeError, match="does not support bfloat16"):
            R.uniform(k, (3,), xp.bfloat16)


# ---------------------------------------------------------------- gradients


def test_gradients_through_reparameterized_samples():
    k = R.key(1)
    mu = xp.asarray(0.5)
    assert float(ad.grad(lambda mu: xp.sum(mu + R.normal(k, (7,), xp.float64)))(mu)) == 7.0
    z = R.normal(k, (7,), xp.float64)
    g = ad.grad(lambda s: xp.sum(s * R.normal(k, (7,), xp.float64)))(xp.asarray(2.0))
    assert np.isclose(float(g), float(xp.sum(z)))
    lo, hi = xp.asarray(-1.0), xp.asarray(3.0)
    u = np.asarray(R.uniform(k, (9,), xp.float64))
    glo, ghi = ad.grad(lambda a, b: xp.sum(R.uniform(k, (9,), xp.float64, a, b)), argnums=(0, 1))(lo, hi)
    assert np.isclose(float(glo), np.sum(1 - u)) and np.isclose(float(ghi), np.sum(u))


def test_truncated_normal_gradient_matches_finite_differences():
    from tenferro_ad.testing import check_grads

    k = R.key(2)

    def f(a, b):
        return R.truncated_normal(k, a, b, (6,), xp.float64)

    for a, b in [(-1.0, 2.0), (0.3, 1.1), (-3.0, -2.0), (2.5, 4.0)]:
        check_grads(f, (xp.asarray(a), xp.asarray(b)), eps=1e-6, atol=1e-6, rtol=1e-5)
    # analytic check: x = ndtri(F(a) + u (F(b) - F(a))) so dx/db = u phi(b) / phi(x)
    a, b = xp.asarray(-0.5), xp.asarray(1.0)
    x = np.asarray(f(a, b))
    u = (st.norm.cdf(x) - st.norm.cdf(-0.5)) / (st.norm.cdf(1.0) - st.norm.cdf(-0.5))
    jb = ad.jacfwd(f, argnums=1)(a, b)
    assert np.allclose(np.asarray(jb), u * st.norm.pdf(1.0) / st.norm.pdf(x), rtol=1e-6)


def test_elementary_functions_are_accurate():
    from tenferro_runtime.random import _math

    x = np.concatenate([np.logspace(-300, 0, 2000), np.linspace(1e-3, 30, 500)])
    assert np.allclose(np.asarray(_math.log(xp.asarray(x))), np.log(x), rtol=4e-16, atol=0)
    e = -np.linspace(0, 700, 3001)
    assert np.allclose(np.asarray(_math.exp(xp.asarray(e))), np.exp(e), rtol=4e-16, atol=0)
    p = np.concatenate([np.linspace(0, 1, 2001)[1:-1], np.logspace(-300, -2, 300)])
    assert np.allclose(np.asarray(_math.ndtri(xp.asarray(p))), st.norm.ppf(p), rtol=2e-15, atol=1e-15)
    t = np.linspace(-37, 8, 3001)
    assert np.allclose(np.asarray(_math.ndtr(xp.asarray(t))), st.norm.cdf(t), rtol=1e-14, atol=0)
    g = ad.grad(lambda v: xp.sum(_math.log(v) + _math.exp(-v)))(xp.asarray([0.3, 2.0, 7.5]))
    assert np.allclose(np.asarray(g), 1 / np.array([0.3, 2.0, 7.5]) - np.exp(-np.array([0.3, 2.0, 7.5])))


# ---------------------------------------------------------------- bad input


def test_bad_keys_are_typed_errors():
    for bad, err, text in [
        ([0, 0], ArgumentError, "got list"),
        (xp.asarray([0.0, 1.0]), DTypeError, "got dtype float64"),
        (xp.asarray([0, 1], dtype=xp.int32), DTypeError, "got dtype int32"),
        (xp.asarray([0, 1, 2]), ShapeError, r"got \(3,\)"),
        (R.split(R.key(0), 2), ShapeError, r"index a batch of keys"),
    ]:
        with pytest.raises(err, match=text) as info:
            R.normal(bad, (2,))
        assert "random.key(seed)" in str(info.value)
    with pytest.raises(ArgumentError, match="seed must be an int, got float"):
        R.key(1.5)
    with pytest.raises(ArgumentError, match="got bool"):
        R.key(True)
    with pytest.raises(ArgumentError, match=r"\[-2\*\*63, 2\*\*64\)"):
        R.key(2**64)
    with pytest.raises(DTypeError, match="0-d integer tensor"):
        R.key(xp.asarray(1.0))
    with pytest.raises(ShapeError, match="non-negative"):
        R.split(R.key(0), -1)
    with pytest.raises(ArgumentError, match="data must be an int"):
        R.fold_in(R.key(0), 0.5)


@pytest.mark.parametrize("shape, err", [
    ((-1,), ShapeError), ((2, -3), ShapeError), ((True, 2), ArgumentError), ((2.0,), ArgumentError),
    ("3", ArgumentError), (2.0, ArgumentError), (None, ArgumentError),
])
def test_bad_shapes(shape, err):
    with pytest.raises(err, match="shape"):
        R.uniform(R.key(0), shape)
    with pytest.raises(err, match="shape"):
        R.randint(R.key(0), shape, 0, 3)


def test_bad_parameters():
    k = R.key(0)
    cases = [
        (lambda: R.uniform(k, (2,), xp.int32), DTypeError, "real floating dtype.*randint"),
        (lambda: R.normal(k, (2,), xp.bool), DTypeError, "real floating dtype"),
        (lambda: R.normal(k, (2,), xp.complex64), DTypeError, "real floating dtype"),
        (lambda: R.randint(k, (2,), 0, 5, xp.float32), DTypeError, "integer dtype.*uniform"),
        (lambda: R.uniform(k, (2,), xp.float32, 1.0, 1.0), ArgumentError, "minval must be less than maxval"),
        (lambda: R.uniform(k, (2,), xp.float32, 0.0, math.inf), ArgumentError, "must be finite"),
        (lambda: R.uniform(k, (2,), xp.float32, xp.zeros((3,)), 1.0), ShapeError, "do not broadcast"),
        (lambda: R.truncated_normal(k, 1.0, -1.0, (2,)), ArgumentError, "lower must be less than upper"),
        (lambda: R.randint(k, (2,), 5, 5), ArgumentError, r"less than maxval.*\[minval, maxval\)"),
        (lambda: R.randint(k, (2,), 0, 300, xp.uint8), ArgumentError, "does not fit uint8"),
        (lambda: R.randint(k, (2,), 0.0, 3), ArgumentError, "minval must be a Python int"),
        (lambda: R.bernoulli(k, 1.5), ArgumentError, r"probability in \[0, 1\]"),
        (lambda: R.bernoulli(k, -0.1), ArgumentError, r"probability in \[0, 1\]"),
        (lambda: R.bernoulli(k, xp.asarray([0.5, 2.0])), ArgumentError, r"probability in \[0, 1\]"),
        (lambda: R.bernoulli(k, xp.asarray([1, 0])), DTypeError, "floating"),
        (lambda: R.bernoulli(k, "0.5"), ArgumentError, "real number"),
        (lambda: R.choice(k, 3, (4,), replace=False), ArgumentError, "cannot take 4 samples without"),
        (lambda: R.choice(k, 3, (2,), p=xp.asarray([0.5, -0.1, 0.6])), ArgumentError, "non-negative"),
        (lambda: R.choice(k, 3, (2,), p=xp.asarray([0.5, 0.5])), ShapeError, r"shape \(3,\)"),
        (lambda: R.choice(k, 0, (2,)), ShapeError, "empty population"),
        (lambda: R.choice(k, -2, (2,)), ShapeError, "non-negative"),
        (lambda: R.categorical(k, xp.asarray([1, 2])), DTypeError, "real floating"),
        (lambda: R.categorical(k, xp.asarray(1.0)), ShapeError, "class axis"),
        (lambda: R.categorical(k, xp.zeros((2, 3)), shape=(4,)), ShapeError, "batch shape"),
        (lambda: R.permutation(k, xp.asarray(3)), ShapeError, "at least one axis"),
        (lambda: R.permutation(k, 2.5), ArgumentError, "int or a Tensor"),
    ]
    for fn, err, text in cases:
        with pytest.raises(err, match=text):
            fn()
    assert issubclass(ShapeError, ValueError) and issubclass(DTypeError, TypeError)


@pytest.mark.skipif(len(DEVICES) < 2, reason="needs tenferro-torch")
def test_mixing_devices_is_a_device_error():
    from tenferro_core.errors import DeviceError

    k = R.key(0, device="torch:cpu")
    with pytest.raises(DeviceError, match="to_device"):
        R.uniform(k, (2,), xp.float32, xp.zeros(()), 1.0)
    with pytest.raises(DeviceError, match="to_device"):
        R.permutation(k, xp.zeros((3,)))
    with pytest.raises(DeviceError, match="seed tensor is on numpy:cpu"):
        R.key(xp.asarray(1), device="torch:cpu")
