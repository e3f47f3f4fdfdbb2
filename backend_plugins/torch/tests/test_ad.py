"""tenferro_ad on torch:cpu tensors: grad / vjp / jvp / GradientTape against torch.func, an
MLP 784-512-512-10 loss, and check_grads to second order (float64 and complex128)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tenferro_ad as ad
from tenferro_ad.testing import check_grads
from tenferro_runtime import array_api as xp
from tenferro_runtime import default_device

DEVICE = "torch:cpu"
RTOL, ATOL = 1e-10, 1e-12


def on(a):
    return xp.asarray(np.asarray(a), device=DEVICE)


def _close(got, want):
    assert got.device == DEVICE and isinstance(got._buf, torch.Tensor)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=RTOL, atol=ATOL)


def test_grad_of_elementwise_function():
    x0 = np.random.default_rng(0).standard_normal((3, 4))
    g = ad.grad(lambda x: xp.sum(xp.sin(x) * xp.exp(x) / (1 + x**2)))(on(x0))
    want = torch.func.grad(lambda x: (torch.sin(x) * torch.exp(x) / (1 + x**2)).sum())(torch.tensor(x0))
    _close(g, want)


def test_vjp_of_matmul_and_max():
    rng = np.random.default_rng(1)
    a0, b0, ct0 = rng.standard_normal((3, 4)), rng.standard_normal((4, 5)), rng.standard_normal(5)
    out, back = ad.vjp(lambda a, b: xp.max(a @ b, axis=0), on(a0), on(b0))
    ga, gb = back(on(ct0))
    t_out, t_back = torch.func.vjp(lambda a, b: torch.amax(a @ b, dim=0), torch.tensor(a0), torch.tensor(b0))
    want_a, want_b = t_back(torch.tensor(ct0))
    _close(out, t_out)
    _close(ga, want_a)
    _close(gb, want_b)


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")  # torch.func
def test_jvp_of_reductions():
    rng = np.random.default_rng(2)
    x0, t0 = rng.standard_normal((2, 5)), rng.standard_normal((2, 5))

    def f_tf(x):
        return xp.mean(x**3, axis=1) + xp.prod(x, axis=1) - xp.cumulative_sum(x, axis=1)[:, -1]

    def f_torch(x):
        return torch.mean(x**3, dim=1) + torch.prod(x, dim=1) - torch.cumsum(x, dim=1)[:, -1]

    out, tan = ad.jvp(f_tf, (on(x0),), (on(t0),))
    want_out, want_tan = torch.func.jvp(f_torch, (torch.tensor(x0),), (torch.tensor(t0),))
    _close(out, want_out)
    _close(tan, want_tan)


def test_gradient_tape():
    x0 = np.random.default_rng(3).standard_normal((4,))
    x = on(x0)
    with ad.GradientTape() as tape:
        tape.watch(x)
        y = xp.sum(xp.tanh(x) * x + xp.sort(x) ** 2)
    want = torch.func.grad(lambda v: (torch.tanh(v) * v + torch.sort(v).values ** 2).sum())(torch.tensor(x0))
    _close(tape.gradient(y, x), want)


# ---- an MLP 784-512-512-10 with softmax cross-entropy -------------------------------


def _mlp_tf(p, x, onehot):
    h = xp.maximum(x @ p["w1"] + p["b1"], 0.0)
    h = xp.maximum(h @ p["w2"] + p["b2"], 0.0)
    logits = h @ p["w3"] + p["b3"]
    m = xp.max(logits, axis=1, keepdims=True)
    lse = xp.squeeze(m, axis=1) + xp.log(xp.sum(xp.exp(logits - m), axis=1))
    return xp.mean(lse - xp.sum(logits * onehot, axis=1))


def _mlp_torch(p, x, labels):
    h = torch.relu(x @ p["w1"] + p["b1"])
    h = torch.relu(h @ p["w2"] + p["b2"])
    return torch.nn.functional.cross_entropy(h @ p["w3"] + p["b3"], labels)


@pytest.fixture(scope="module")
def mlp():
    rng = np.random.default_rng(4)
    sizes = (784, 512, 512, 10)
    params = {}
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:]), start=1):
        params[f"w{i}"] = rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)
        params[f"b{i}"] = rng.standard_normal(n_out) * 0.1
    x = rng.standard_normal((8, 784))
    labels = rng.integers(0, 10, size=8)
    want = torch.func.grad(_mlp_torch)({k: torch.tensor(v) for k, v in params.items()},
                                       torch.tensor(x), torch.tensor(labels))
    tf_params = {k: on(v) for k, v in params.items()}
    return tf_params, on(x), on(np.eye(10)[labels]), want


def test_mlp_traced_grad_matches_torch(mlp):
    params, x, onehot, want = mlp
    grads = ad.grad(_mlp_tf)(params, x, onehot)
    for k in params:
        _close(grads[k], want[k])


def test_mlp_tape_matches_torch(mlp):
    params, x, onehot, want = mlp
    with ad.GradientTape() as tape:
        tape.watch(params)
        loss = _mlp_tf(params, x, onehot)
    grads = tape.gradient(loss, params)
    for k in params:
        _close(grads[k], want[k])


# ---- check_grads, second order ----------------------------------------------------------


def _layer(x, w):
    return xp.tanh(x @ w) * xp.logical_not(x[:, :2] > 1.5)


def _structural(x):
    y = xp.concat([x[::-1], x * 2], axis=0)
    return xp.sum(xp.cumulative_sum(y, axis=1) * xp.flip(y, axis=1), axis=0)[1:]


def _complex(z):
    return xp.exp(z) * xp.conj(z) + xp.sum(z * z) / (1 + xp.abs(z) ** 2)


FUNCTIONS = {
    "elementwise": (lambda x: xp.sin(x) * xp.exp(-(x**2)) + xp.sqrt(1 + x**2), [(5,)]),
    "layer": (_layer, [(3, 4), (4, 2)]),
    "logsumexp": (lambda x: xp.log(xp.sum(xp.exp(x - xp.max(x))) + xp.max(x)), [(2, 3)]),
    "structural": (_structural, [(2, 3)]),
    "complex": (_complex, [(3,)]),
}


@pytest.mark.parametrize("name", FUNCTIONS)
def test_check_grads_second_order(name):
    fn, shapes = FUNCTIONS[name]
    rng = np.random.default_rng(5)
    with default_device(DEVICE):
        args = []
        for s in shapes:
            a = rng.standard_normal(s)
            args.append(xp.asarray(a + 1j * rng.standard_normal(s) if name == "complex" else a))
        assert all(a.device == DEVICE for a in args)
        assert fn(*args).device == DEVICE
        check_grads(fn, args, order=2, atol=1e-5, rtol=1e-5)
