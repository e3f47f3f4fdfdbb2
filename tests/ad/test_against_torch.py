"""Gradients of composite models (float64) against ``torch.func.grad``, and bad input.

Each model is written twice, once with the Array API namespace and once with torch,
on the same seeded-random parameters and data. The traced ``tenferro_ad.grad`` and the
eager ``GradientTape`` must both give torch's gradients for every parameter (inputs
included, as parameters), batch 1 and larger. torch is a pinned test dependency and is
imported lazily (inside the helpers), so collecting this module stays cheap.

The tape also runs on a second spelling of some models (lax.reshape/lax.slice instead of
namespace reshape/indexing). In-place updates under grad/jvp/tape are checked too.

The last section feeds bad input through grad / vjp / jvp / the tape (the cases
``test_transforms.py`` does not already cover).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tenferro_ad as ad
from tenferro_core.errors import ArgumentError, DTypeError, ShapeError
from tenferro_runtime import array_api as xp
from tenferro_runtime import lax

RTOL, ATOL = 1e-10, 1e-12


def _torch():
    import torch

    return torch


# ---- the models: (tenferro fn, torch fn, inputs) ------------------------------------
#
# fn(params, data) -> scalar loss; `params` is a dict of float64 arrays (everything
# differentiated), `data` a dict of what is not (targets, labels, fixed weights).


def _relu_tf(z):
    return xp.maximum(z, 0.0)


def _lse_tf(x, axis=-1):
    """Numerically stable log-sum-exp with max/exp/log/sum (the max is not stopped)."""
    m = xp.max(x, axis=axis, keepdims=True)
    return xp.squeeze(m, axis=axis) + xp.log(xp.sum(xp.exp(x - m), axis=axis))


def mlp_tf(p, d):
    h = xp.tanh(d["x"] @ p["w1"] + p["b1"])
    out = h @ p["w2"] + p["b2"]
    return xp.mean((out - d["y"]) ** 2)


def mlp_torch(p, d):
    torch = _torch()
    h = torch.tanh(d["x"] @ p["w1"] + p["b1"])
    out = h @ p["w2"] + p["b2"]
    return torch.mean((out - d["y"]) ** 2)


def mlp_inputs(rng, batch):
    n_in, n_hid, n_out = 4, 5, 3
    params = {"w1": rng.standard_normal((n_in, n_hid)) / 2, "b1": rng.standard_normal(n_hid),
              "w2": rng.standard_normal((n_hid, n_out)) / 2, "b2": rng.standard_normal(n_out)}
    data = {"x": rng.standard_normal((batch, n_in)), "y": rng.standard_normal((batch, n_out))}
    return params, data


def xent_tf(p, d):
    logits = p["x"] @ p["w"] + p["b"]
    picked = xp.take_along_axis(logits, xp.reshape(d["labels"], (-1, 1)), axis=1)
    return xp.mean(_lse_tf(logits, axis=1) - xp.reshape(picked, (-1,)))


def xent_torch(p, d):
    torch = _torch()
    logits = p["x"] @ p["w"] + p["b"]
    return torch.nn.functional.cross_entropy(logits, d["labels"])


def xent_inputs(rng, batch):
    n_in, n_cls = 3, 4
    params = {"x": rng.standard_normal((batch, n_in)), "w": rng.standard_normal((n_in, n_cls)) * 3,
              "b": rng.standard_normal(n_cls)}
    return params, {"labels": rng.integers(0, n_cls, size=batch)}


def layernorm_tf(p, d):
    x = p["x"]
    mu = xp.mean(x, axis=-1, keepdims=True)
    var = xp.var(x, axis=-1, keepdims=True)
    y = (x - mu) / xp.sqrt(var + 1e-5) * p["w"] + p["b"]
    return xp.sum(y * d["r"])  # a random projection: sum(y) alone has zero x-gradient


def layernorm_torch(p, d):
    torch = _torch()
    x = p["x"]
    mu = torch.mean(x, dim=-1, keepdim=True)
    var = torch.var(x, dim=-1, keepdim=True, correction=0)
    y = (x - mu) / torch.sqrt(var + 1e-5) * p["w"] + p["b"]
    return torch.sum(y * d["r"])


def layernorm_inputs(rng, batch):
    n = 5
    params = {"x": rng.standard_normal((batch, 2, n)) * 2 + 1, "w": rng.standard_normal(n),
              "b": rng.standard_normal(n)}
    return params, {"r": rng.standard_normal((batch, 2, n))}


def lse_tf(p, d):
    return xp.sum(_lse_tf(p["x"], axis=-1) * d["r"])


def lse_torch(p, d):
    torch = _torch()
    return torch.sum(torch.logsumexp(p["x"], dim=-1) * d["r"])


def lse_inputs(rng, batch):
    # Large offsets: the naive log(sum(exp(x))) would overflow; the stable one must not.
    shift = rng.choice([0.0, 800.0, -800.0])
    params = {"x": rng.standard_normal((batch, 6)) * 4 + shift}
    return params, {"r": rng.standard_normal(batch)}


def resblock_tf(p, d):
    x = p["x"]
    h = _relu_tf(x @ xp.permute_dims(p["w1"], (1, 0)) + p["b1"])
    out = x + h @ xp.permute_dims(p["w2"], (1, 0))
    return xp.sum(xp.sin(out) * d["r"])


def resblock_torch(p, d):
    torch = _torch()
    x = p["x"]
    h = torch.relu(x @ p["w1"].T + p["b1"])
    out = x + h @ p["w2"].T
    return torch.sum(torch.sin(out) * d["r"])


def resblock_inputs(rng, batch):
    n, n_hid = 4, 6
    params = {"x": rng.standard_normal((batch, n)), "w1": rng.standard_normal((n_hid, n)),
              "b1": rng.standard_normal(n_hid), "w2": rng.standard_normal((n, n_hid)) / 3}
    return params, {"r": rng.standard_normal((batch, n))}


CONV = {"stride": (1, 2), "padding": (1, 0), "dilation": (1, 2), "groups": 2}


def conv_tf(p, d):
    c = CONV
    y = lax.conv_general(p["x"], p["w"], window_strides=c["stride"],
                         padding=tuple((q, q) for q in c["padding"]), rhs_dilation=c["dilation"],
                         feature_group_count=c["groups"])
    y = y + xp.reshape(p["b"], (1, -1, 1, 1))
    return xp.sum(xp.tanh(y) * d["r"])


def conv_torch(p, d):
    torch = _torch()
    c = CONV
    y = torch.nn.functional.conv2d(p["x"], p["w"], p["b"], stride=c["stride"], padding=c["padding"],
                                   dilation=c["dilation"], groups=c["groups"])
    return torch.sum(torch.tanh(y) * d["r"])


def conv_inputs(rng, batch):
    c_in, c_out, groups = 4, 6, CONV["groups"]
    params = {"x": rng.standard_normal((batch, c_in, 5, 7)),
              "w": rng.standard_normal((c_out, c_in // groups, 3, 2)) / 2,
              "b": rng.standard_normal(c_out)}
    # output spatial: (5 + 2 - 3) // 1 + 1 = 5, (7 - (2 - 1) * 2 - 1) // 2 + 1 = 3
    return params, {"r": rng.standard_normal((batch, c_out, 5, 3))}


# Spellings of the same models for the eager tape that avoid the namespace functions that
# return a fresh Tensor object without binding a primitive (reshape, squeeze, permute_dims,
# ...): the tape loses the derivative through those (see test_tape_keeps_derivative_through_*).


def _lse_keepdims_tf(x, axis=-1):
    m = xp.max(x, axis=axis, keepdims=True)
    return xp.sum(m, axis=axis) + xp.log(xp.sum(xp.exp(x - m), axis=axis))


def xent_tape_tf(p, d):
    logits = p["x"] @ p["w"] + p["b"]
    picked = xp.sum(logits * d["onehot"], axis=1)
    return xp.mean(_lse_keepdims_tf(logits, axis=1) - picked)


def xent_tape_inputs(rng, batch):
    params, data = xent_inputs(rng, batch)
    data["onehot"] = np.eye(params["w"].shape[1])[data["labels"]]
    return params, data


def lse_tape_tf(p, d):
    return xp.sum(_lse_keepdims_tf(p["x"], axis=-1) * d["r"])


def resblock_tape_tf(p, d):
    x = p["x"]
    out = x + _relu_tf(x @ p["w1"].mT + p["b1"]) @ p["w2"].mT
    return xp.sum(xp.sin(out) * d["r"])


def conv_tape_tf(p, d):
    c = CONV
    y = lax.conv_general(p["x"], p["w"], window_strides=c["stride"],
                         padding=tuple((q, q) for q in c["padding"]), rhs_dilation=c["dilation"],
                         feature_group_count=c["groups"])
    y = y + lax.broadcast_in_dim(p["b"], shape=y.shape, broadcast_dimensions=(1,))
    return xp.sum(xp.tanh(y) * d["r"])


@dataclass(frozen=True)
class Model:
    name: str
    tf: Callable
    torch: Callable
    inputs: Callable
    tape_tf: Callable | None = None  # the tape-safe spelling, where `tf` needs one
    tape_inputs: Callable | None = None


MODELS = [
    Model("mlp", mlp_tf, mlp_torch, mlp_inputs),
    Model("softmax_xent", xent_tf, xent_torch, xent_inputs, xent_tape_tf, xent_tape_inputs),
    Model("layernorm", layernorm_tf, layernorm_torch, layernorm_inputs),
    Model("logsumexp", lse_tf, lse_torch, lse_inputs, lse_tape_tf),
    Model("resblock", resblock_tf, resblock_torch, resblock_inputs, resblock_tape_tf),
    Model("conv2d", conv_tf, conv_torch, conv_inputs, conv_tape_tf),
]
MODEL_IDS = [m.name for m in MODELS]


def _to_tf(tree: dict) -> dict:
    return {k: xp.asarray(v) for k, v in tree.items()}


def _to_torch(tree: dict) -> dict:
    torch = _torch()
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in tree.items()}


def _torch_value_and_grad(model: Model, params: dict, data: dict) -> tuple[float, dict]:
    torch = _torch()
    tp, td = _to_torch(params), _to_torch(data)
    grads, value = torch.func.grad_and_value(model.torch)(tp, td)
    return float(value), {k: v.numpy() for k, v in grads.items()}


def _assert_grads(got: dict, expected: dict, how: str) -> None:
    assert set(got) == set(expected), how
    for k, e in expected.items():
        g = got[k].numpy()
        assert g.shape == e.shape and g.dtype == np.float64, (how, k, g.shape, g.dtype)
        np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL * max(1.0, np.abs(e).max()),
                                   err_msg=f"{how}: d loss / d {k}")


def _inputs(model: Model, seed: int, batch: int, tape_spelling: bool = False):
    make = (model.tape_inputs or model.inputs) if tape_spelling else model.inputs
    return make(np.random.default_rng(seed), batch)


def _check_traced(model: Model, params: dict, data: dict) -> None:
    value, expected = _torch_value_and_grad(model, params, data)
    val, g = ad.value_and_grad(model.tf)(_to_tf(params), _to_tf(data))
    assert float(val) == pytest.approx(value, rel=1e-12, abs=1e-12)
    _assert_grads(g, expected, "traced grad")


def _check_tape(model: Model, fn: Callable, params: dict, data: dict) -> None:
    value, expected = _torch_value_and_grad(model, params, data)
    tp, td = _to_tf(params), _to_tf(data)
    with ad.GradientTape() as tape:
        tape.watch(tp)
        loss = fn(tp, td)
    assert float(loss) == pytest.approx(value, rel=1e-12, abs=1e-12)
    _assert_grads(tape.gradient(loss, tp), expected, "GradientTape")


@pytest.mark.parametrize("model", MODELS, ids=MODEL_IDS)
@settings(max_examples=20)
@given(seed=st.integers(0, 2**32 - 1), batch=st.sampled_from([1, 2, 5]))
def test_traced_grad_matches_torch(model, seed, batch):
    _check_traced(model, *_inputs(model, seed, batch))


@pytest.mark.parametrize("model", MODELS, ids=MODEL_IDS)
@settings(max_examples=20)
@given(seed=st.integers(0, 2**32 - 1), batch=st.sampled_from([1, 2, 5]))
def test_tape_matches_torch(model, seed, batch):
    """The eager tape on the tape-safe spelling of each model (the same function)."""
    _check_tape(model, model.tape_tf or model.tf, *_inputs(model, seed, batch, tape_spelling=True))


@pytest.mark.parametrize("model", MODELS, ids=MODEL_IDS)
@pytest.mark.parametrize("batch", [1, 3])
def test_tape_matches_torch_natural_spelling(model, batch):
    """The eager tape on the same code the traced grad runs."""
    _check_tape(model, model.tf, *_inputs(model, 7, batch))


FRESH_OPS = {
    "reshape": lambda v: xp.reshape(v, (6,)),
    "squeeze": lambda v: xp.squeeze(lax.reshape(v, new_sizes=(1, 2, 3)), axis=0),
    "expand_dims": lambda v: xp.expand_dims(v, axis=0),
    "permute_dims": lambda v: xp.permute_dims(v, (1, 0)),
    "T": lambda v: v.T,
    "broadcast_to": lambda v: xp.broadcast_to(v, (2, 2, 3)),
    "getitem_slice": lambda v: v[:, 1:],
    "getitem_int": lambda v: v[0],
    "getitem_ellipsis": lambda v: v[...],
    "getitem_int_array": lambda v: v[xp.asarray([1, 0, 1])],
    "positive": lambda v: xp.positive(v),
}


@pytest.mark.parametrize("op", list(FRESH_OPS))
def test_tape_keeps_derivative_through_fresh_tensors(op):
    x = xp.asarray(np.arange(1.0, 7.0).reshape(2, 3))
    f = lambda v: xp.sum(FRESH_OPS[op](v) ** 2)  # noqa: E731
    with ad.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), ad.grad(f)(x).numpy())


def test_tape_through_lax_layout_primitives():
    """The same layout changes bound as primitives are recorded (the rules are fine)."""
    x = xp.asarray(np.arange(1.0, 7.0).reshape(2, 3))

    def f(v):
        r = lax.reshape(v, new_sizes=(3, 2))
        t = lax.transpose(r, permutation=(1, 0))
        b = lax.broadcast_in_dim(t, shape=(2, 2, 3), broadcast_dimensions=(1, 2))
        s = lax.slice(b, start_indices=(0, 0, 1), limit_indices=(2, 2, 3))
        return xp.sum(s * s * xp.reshape(xp.arange(8.0, dtype=xp.float64), (2, 2, 2)))

    with ad.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), ad.grad(f)(x).numpy(), rtol=1e-14)




def _inplace_add(v):
    y = v * 1.0
    y += v  # y = 2 v
    return xp.sum(y * y)  # 4 sum(v**2)


def _inplace_setitem(v):
    y = v * 1.0
    y[0] = v[1] * 3.0
    return xp.sum(y * y)  # 10 sum(v[1]**2)


@pytest.mark.parametrize("how", ["grad", "jvp", "tape"])
@pytest.mark.parametrize("fn", [_inplace_add, _inplace_setitem], ids=["iadd", "setitem"])
def test_inplace_updates_are_differentiated(fn, how):
    xn = np.arange(1.0, 7.0).reshape(2, 3)
    x = xp.asarray(xn)
    if fn is _inplace_add:
        value, grad = 4 * np.sum(xn**2), 8 * xn
    else:
        value, grad = 10 * np.sum(xn[1] ** 2), np.concatenate([0 * xn[:1], 20 * xn[1:]])
    assert float(fn(x)) == pytest.approx(value)  # eager is right
    if how == "grad":
        val, g = ad.value_and_grad(fn)(x)
    elif how == "jvp":
        val, tangent = ad.jvp(fn, (x,), (xp.ones_like(x),))
        assert float(tangent) == pytest.approx(grad.sum())
        g = xp.asarray(grad)
    else:
        with ad.GradientTape() as tape:
            tape.watch(x)
            val = fn(x)
        g = tape.gradient(val, x)
    assert float(val) == pytest.approx(value)
    np.testing.assert_allclose(g.numpy(), grad)


def test_logsumexp_gradient_is_finite_where_naive_overflows():
    x = np.array([[1000.0, 999.0, -1000.0]])
    p, d = {"x": x}, {"r": np.array([1.0])}
    g = ad.grad(lse_tf)(_to_tf(p), _to_tf(d))["x"].numpy()
    e = np.exp(x - x.max())
    np.testing.assert_allclose(g, e / e.sum(), rtol=1e-14)
    _, expected = _torch_value_and_grad(next(m for m in MODELS if m.name == "logsumexp"), p, d)
    np.testing.assert_allclose(g, expected["x"], rtol=RTOL)


@settings(max_examples=20)
@given(seed=st.integers(0, 2**32 - 1))
def test_grad_with_respect_to_several_argnums_matches_torch(seed):
    """MLP gradient split across positional arguments (argnums tuple, negative index)."""
    torch = _torch()
    rng = np.random.default_rng(seed)
    params, data = mlp_inputs(rng, 3)

    def f_tf(w1, b1, rest, x):
        return mlp_tf({"w1": w1, "b1": b1, **rest}, {"x": x, "y": xp.asarray(data["y"])})

    def f_torch(w1, b1, rest, x):
        return mlp_torch({"w1": w1, "b1": b1, **rest}, {"x": x, "y": torch.from_numpy(data["y"])})

    rest = {"w2": params["w2"], "b2": params["b2"]}
    tt = [torch.from_numpy(params["w1"]), torch.from_numpy(params["b1"]), _to_torch(rest),
          torch.from_numpy(data["x"])]
    expected = torch.func.grad(f_torch, argnums=(0, 2, 3))(*tt)
    args = [xp.asarray(params["w1"]), xp.asarray(params["b1"]), _to_tf(rest), xp.asarray(data["x"])]
    got = ad.grad(f_tf, argnums=(0, 2, -1))(*args)
    assert isinstance(got, tuple) and len(got) == 3
    np.testing.assert_allclose(got[0].numpy(), expected[0].numpy(), rtol=RTOL, atol=ATOL)
    _assert_grads(got[1], {k: v.numpy() for k, v in expected[1].items()}, "argnums 2")
    np.testing.assert_allclose(got[2].numpy(), expected[2].numpy(), rtol=RTOL, atol=ATOL)


# ---- bad input through the transforms -------------------------------------------------


def _f64(a):
    return xp.asarray(np.asarray(a, dtype=np.float64))


def test_jvp_tangent_of_wrong_shape_dtype_or_structure():
    f = lambda y: xp.sin(y)  # noqa: E731
    x = _f64([1.0, 2.0])
    with pytest.raises(ShapeError, match=r"tangent 0 must match its primal"):
        ad.jvp(f, (x,), (_f64([1.0, 2.0, 3.0]),))
    with pytest.raises(ShapeError, match=r"tangent 0 must match its primal"):
        ad.jvp(f, (x,), (_f64([[1.0, 2.0]]),))
    with pytest.raises(ShapeError, match=r"tangent 0 must match its primal"):
        ad.jvp(f, (x,), (xp.asarray([1.0, 2.0], dtype=xp.float32),))
    with pytest.raises(ShapeError, match=r"tangent 1 must match"):
        ad.jvp(lambda a, b: a * b, (x, x), (x, _f64([1.0])))
    with pytest.raises(ArgumentError, match="structure of the primals"):
        ad.jvp(lambda a, b: a * b, (x, x), (x,))
    with pytest.raises(ArgumentError, match="structure of the primals"):
        ad.jvp(lambda p: p["a"], ({"a": x},), ({"b": x},))
    _, f_jvp = ad.linearize(f, x)
    with pytest.raises(ShapeError, match="tangent 0 must match"):
        f_jvp(_f64([1.0]))
    with pytest.raises(ArgumentError, match="tangents shaped like"):
        f_jvp(x, x)


def test_argnums_negative_tuple_and_out_of_range():
    def f(a, b, c):
        return xp.sum(a * b * b * c)

    a, b, c = _f64([1.0, 2.0]), _f64([3.0, -1.0]), _f64([0.5, 2.0])
    np.testing.assert_allclose(ad.grad(f, argnums=-1)(a, b, c).numpy(), (a * b * b).numpy())
    np.testing.assert_allclose(ad.grad(f, argnums=-2)(a, b, c).numpy(), (2 * a * b * c).numpy())
    ga, gc = ad.grad(f, argnums=(0, -1))(a, b, c)
    np.testing.assert_allclose(ga.numpy(), (b * b * c).numpy())
    np.testing.assert_allclose(gc.numpy(), (a * b * b).numpy())
    (single,) = ad.grad(f, argnums=(1,))(a, b, c)  # a 1-tuple of argnums gives a 1-tuple
    np.testing.assert_allclose(single.numpy(), (2 * a * b * c).numpy())
    for bad in (3, -4, (0, 3), (-4,), "0", (0, None), (0, 1.0)):
        with pytest.raises(ArgumentError, match="argnums"):
            ad.grad(f, argnums=bad)(a, b, c)
    for transform in (ad.jacfwd, ad.jacrev, ad.hessian):
        with pytest.raises(ArgumentError, match="argnums"):
            transform(lambda y: xp.sin(y), argnums=1)(a)
    np.testing.assert_allclose(ad.jacrev(f, argnums=-1)(a, b, c).numpy(), (a * b * b).numpy())


@pytest.mark.parametrize("bad", [1.0, None])
def test_argnums_scalar_non_int_is_an_argument_error(bad):
    x = _f64([1.0, 2.0])
    with pytest.raises(ArgumentError, match="argnums"):
        ad.grad(lambda a, b: xp.sum(a * b), argnums=bad)(x, x)


def test_repeated_argnums_are_rejected_or_consistent():
    a, b = _f64([1.0, 2.0]), _f64([3.0, 4.0])
    f = lambda u, v: xp.sum(u * u * v)  # noqa: E731
    try:
        g0, g1 = ad.grad(f, argnums=(0, 0))(a, b)
    except ArgumentError:
        return
    full = (2 * a * b).numpy()
    np.testing.assert_allclose(g0.numpy(), full)
    np.testing.assert_allclose(g1.numpy(), full)


def test_has_aux_needs_a_pair():
    x = _f64([1.0, 2.0])
    for bad_out in (lambda y: xp.sum(y), lambda y: (xp.sum(y),), lambda y: (xp.sum(y), y, y),
                    lambda y: [xp.sum(y), y]):
        with pytest.raises(ArgumentError, match="pair"):
            ad.grad(bad_out, has_aux=True)(x)
        with pytest.raises(ArgumentError, match="pair"):
            ad.vjp(bad_out, x, has_aux=True)
    with pytest.raises(ShapeError, match="real scalar"):  # a pair whose output is not a scalar
        ad.grad(lambda y: (y * 2.0, xp.sum(y)), has_aux=True)(x)
    g, aux = ad.grad(lambda y: (xp.sum(y * y), {"y3": y * 3.0}), has_aux=True)(x)
    np.testing.assert_allclose(g.numpy(), [2.0, 4.0])
    np.testing.assert_allclose(aux["y3"].numpy(), [3.0, 6.0])
    out, vjp_fn, aux = ad.vjp(lambda y: (y * y, y + 1.0), x, has_aux=True)
    np.testing.assert_allclose(vjp_fn(_f64([1.0, 1.0]))[0].numpy(), [2.0, 4.0])
    np.testing.assert_allclose(aux.numpy(), [2.0, 3.0])


def test_python_numbers_as_inputs():
    assert float(ad.grad(lambda y: y * y * y)(2.0)) == pytest.approx(12.0)
    assert float(ad.grad(lambda a, b: a * xp.sin(b), argnums=1)(3.0, 0.0)) == pytest.approx(3.0)
    g = ad.grad(lambda y: xp.exp(y))(0.5)
    assert g.dtype == xp.float64 and g.shape == ()
    out, tangent = ad.jvp(lambda y: y * y, (3.0,), (1.0,))
    assert float(out) == 9.0 and float(tangent) == 6.0
    _, vjp_fn = ad.vjp(lambda y: y * 4.0, 1.5)
    assert float(vjp_fn(2.0)[0]) == 8.0
    assert float(ad.hessian(lambda y: y * y * y)(2.0)) == pytest.approx(12.0)
    with pytest.raises(DTypeError, match="floating and complex"):
        ad.grad(lambda y: y * 2.0)(3)  # a Python int is an int64 tensor
    with pytest.raises(ArgumentError, match="Tensor"):
        ad.grad(lambda y: y)("1.0")
    with pytest.raises(ShapeError, match="real scalar"):
        ad.grad(lambda z: z * z)(1.0 + 2.0j)  # complex output: use vjp


def test_tape_gradient_of_unwatched_or_unrelated_source_is_zero():
    x, y, z = _f64([1.0, 2.0]), _f64([[3.0], [4.0]]), _f64([5.0, 6.0])
    with ad.GradientTape(persistent=True) as tape:
        tape.watch(x)
        loss = xp.sum(x * x * z)  # z is used but not watched
        other = xp.sum(xp.exp(z))  # nothing watched at all
    gx, gy, gz = tape.gradient(loss, [x, y, z])
    np.testing.assert_allclose(gx.numpy(), (2 * x * z).numpy())
    for g, src in ((gy, y), (gz, z)):
        assert g.shape == src.shape and g.dtype == src.dtype
        np.testing.assert_array_equal(g.numpy(), 0.0)
    np.testing.assert_array_equal(tape.gradient(other, x).numpy(), [0.0, 0.0])
    with ad.GradientTape() as tape:
        tape.watch(x)
        unrelated = xp.sum(z * 2.0)
    np.testing.assert_array_equal(tape.gradient(unrelated, {"a": x})["a"].numpy(), [0.0, 0.0])


def test_tape_watch_rejects_integer_bool_and_non_tensors():
    with ad.GradientTape() as tape:
        for bad in (xp.asarray([1, 2]), xp.asarray([True]), [_f64([1.0]), xp.asarray([1], dtype=xp.int32)]):
            with pytest.raises(DTypeError, match="floating and complex"):
                tape.watch(bad)
        with pytest.raises(ArgumentError, match="tensors"):
            tape.watch(np.ones(2))
        x = _f64([1.0, 2.0])
        tape.watch(x)  # a failed watch leaves the tape usable
        y = xp.sum(x * x)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [2.0, 4.0])


def test_tape_output_gradients_and_bad_sources():
    x = _f64([1.0, 2.0, 3.0])
    with ad.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = x * x
    np.testing.assert_allclose(tape.gradient(y, x, output_gradients=_f64([1.0, 0.0, -1.0])).numpy(),
                               [2.0, 0.0, -6.0])
    with pytest.raises(ArgumentError, match="output_gradients"):
        tape.gradient(y, x, output_gradients=_f64([1.0, 0.0]))
    with pytest.raises(ArgumentError, match="sources must be tensors"):
        tape.gradient(y, [x, 1.0])
