"""Derived AD rules: the generic JVP of ops declared `linear`, ops with only a `vjp` rule, and
effectful nodes in the backward pass.

The catalog's linear primitives run in a runtime whose AD plugin registers no jvp rule for
any of them, so every derivative below goes through `tenferro_ad.jvp.linear_jvp`; the FFT
ops register none in any runtime.
"""

from __future__ import annotations

import numpy as np
import pytest

import tenferro_ad as ad
import tenferro_ad.plugin as ad_plugin
from tenferro_ad.ad_util import Zero, is_zero
from tenferro_ad.testing import check_grads, tape_second_derivative
from tenferro_core import catalog
from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, MissingRuleError
from tenferro_core.extension import define_op
from tenferro_core.plugins import discover, hookimpl
from tenferro_core.primitive import Primitive
from tenferro_runtime import Runtime, lax, use_runtime
from tenferro_runtime import array_api as xp

LINEAR = {p.name for p in catalog.PRIMITIVES if p.linear}


def _runtime(*extra, ad_plugin_obj=ad_plugin):
    """Every installed plugin (so each CPU backend of the suite), tenferro_ad's rules as given,
    and `extra`."""
    plugins = [p for p in discover(block=["ad"])[0]]
    return Runtime([*plugins, ad_plugin_obj, *extra], strict=True)


class LinearJVPsRemoved:
    """tenferro_ad's rules without a jvp rule for any primitive declared linear."""

    __name__ = "linear_jvps_removed"

    @hookimpl
    def tenferro_register(self, registry):
        ad_plugin.tenferro_register(registry)
        registry.rules[:] = [r for r in registry.rules if not (r[0] == "jvp" and r[1] in LINEAR)]


@pytest.fixture(scope="module")
def generic_runtime():
    return _runtime(ad_plugin_obj=LinearJVPsRemoved())


def _t(a, dtype=None):
    return xp.asarray(np.asarray(a, dtype=dtype))


RNG = np.random.default_rng(0)
A = RNG.standard_normal((2, 3))
B = RNG.standard_normal((2, 3))
Z = A + 1j * RNG.standard_normal((2, 3))
W = B - 1j * RNG.standard_normal((2, 3))
PRED = np.array([[True, False, True], [False, False, True]])
IDX = np.array([[1], [0], [1]], dtype=np.int64)


def _i(v):
    return _t(v, np.int64)


# name: (function of the linear operands, their values); other operands are fixed
CASES = {
    "neg": (lax.neg, [Z]),
    "conj": (lax.conj, [Z]),
    "real": (lax.real, [Z]),
    "imag": (lax.imag, [Z]),
    "add": (lax.add, [Z, W]),
    "sub": (lax.sub, [A, B]),
    "div": (lambda x: lax.div(x, _t(B + 3.0)), [Z.real]),
    "select": (lambda a, b: lax.select(_t(PRED), a, b), [Z, W]),
    "reshape": (lambda x: lax.reshape(x, new_sizes=(3, 2)), [Z]),
    "transpose": (lambda x: lax.transpose(x, permutation=(1, 0)), [A]),
    "broadcast_in_dim": (lambda x: lax.broadcast_in_dim(x, shape=(4, 2, 3),
                                                         broadcast_dimensions=(1, 2)), [Z]),
    "convert": (lambda x: lax.convert(x, new_dtype=D.complex128), [A]),
    "slice": (lambda x: lax.slice(x, start_indices=(0, 1), limit_indices=(2, 3),
                                  strides=(1, 2)), [Z]),
    "dynamic_slice": (lambda x: lax.dynamic_slice(x, _i(1), _i(1), slice_sizes=(1, 2)), [A]),
    "dynamic_update_slice": (lambda x, u: lax.dynamic_update_slice(x, u, _i(0), _i(2)),
                             [Z, W[:1, :1]]),
    "pad": (lambda x, v: lax.pad(x, v, padding_config=((1, 0, 1), (0, 2, 0))), [A, np.float64(0.5)]),
    "concatenate": (lambda x, y: lax.concatenate(x, y, dimension=0), [Z, W]),
    "reverse": (lambda x: lax.reverse(x, dimensions=(1,)), [Z]),
    "gather": (lambda x: lax.gather(x, _t(IDX), axes=(0,)), [Z]),
    "scatter_add": (lambda x, u: lax.scatter_add(x, _t(IDX), u, axes=(0,)),
                    [A, RNG.standard_normal((3, 3))]),
    "copy": (lax.copy, [Z]),
    "reduce_sum": (lambda x: lax.reduce_sum(x, axes=(1,)), [Z]),
    "cumsum": (lambda x: lax.cumsum(x, axis=1, reverse=True), [A]),
}


def test_cases_cover_the_linear_catalog():
    assert set(CASES) == LINEAR
    for name in ("mul", "dot_general", "conv_general"):  # bilinear, not jointly linear
        assert not catalog.BY_NAME[name].linear


def test_linear_primitives_without_a_jvp_rule_in_the_default_runtime():
    from tenferro_runtime import default_runtime

    rt = default_runtime()
    with_rule = {n for n in LINEAR if rt.rule("jvp", catalog.BY_NAME[n]) is not None}
    assert with_rule == {"add", "sub", "div", "convert", "scatter_add"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_generic_linear_jvp_against_finite_differences(name, generic_runtime):
    fn, values = CASES[name]
    with use_runtime(generic_runtime):
        assert generic_runtime.rule("jvp", catalog.BY_NAME[name]) is None
        args = [_t(v) for v in values]
        check_grads(fn, args, order=2, what=name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_generic_linear_jvp_with_some_zero_tangents(name, generic_runtime):
    """Linear operands without a tangent enter as zeros; fixed operands as primal values."""
    fn, values = CASES[name]
    if len(values) < 2:
        return
    with use_runtime(generic_runtime):
        args = [_t(v) for v in values]
        for k in range(len(args)):
            tangents = [a if i == k else xp.zeros_like(a) for i, a in enumerate(args)]
            _, got = ad.jvp(fn, args, tangents)
            want = fn(*tangents)  # a linear map applied to the tangents
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)


def test_generic_linear_jvp_zero_tangents_stay_symbolic():
    from tenferro_ad.jvp import linear_jvp

    x = _t(A)
    out, t = linear_jvp(catalog.reverse, (x,), (Zero(x.aval),), dimensions=(0,))
    assert is_zero(t) and t.aval == out.aval


FFT_CASES = {
    "fft": (lambda x: xp.fft.fft(x, axis=1), Z),
    "ifftn": (lambda x: xp.fft.ifftn(x, norm="ortho"), Z),
    "fft_real_input": (lambda x: xp.fft.fft(x, n=4), A),
    "rfft": (lambda x: xp.fft.rfft(x), A),
    "rfftn": (lambda x: xp.fft.rfftn(x, norm="forward"), A),
    "irfft": (lambda x: xp.fft.irfft(x, n=4), Z),
    "irfftn": (lambda x: xp.fft.irfftn(x, s=(2, 5)), Z),
}


@pytest.mark.parametrize("name", sorted(FFT_CASES))
def test_fft_ops_take_the_generic_linear_jvp(name):
    from tenferro_fft._ops import OPS
    from tenferro_runtime import default_runtime

    for op in OPS:
        assert default_runtime().rule("jvp", op) is None and op.linear_in(0)
    fn, value = FFT_CASES[name]
    check_grads(fn, [_t(value)], order=2, what=name)


# ---- linear in some operands only --------------------------------------------------------

scale_p = define_op("testlin.scale.v1", lambda x, s: (x.shape, x.dtype), nin=2, linear=(0,),
                    decomposition=lambda x, s: lax.mul(x, s))


def _scale_t(ct, x, s):
    return (Zero(x.aval) if is_zero(ct) else lax.mul(ct, s), None)


class ScalePlugin:
    __name__ = "testlin"

    @hookimpl
    def tenferro_register(self, registry):
        registry.add_op(scale_p)
        registry.add_rule("transpose", scale_p, _scale_t)


def test_op_linear_in_one_operand_derives_that_jvp_only():
    with use_runtime(_runtime(ScalePlugin())):
        x, s = _t(A), _t(B)
        check_grads(lambda y: scale_p.bind(y, s), [x], order=2)
        np.testing.assert_allclose(ad.grad(lambda y: xp.sum(scale_p.bind(y, s)))(x).numpy(), B)
        with pytest.raises(MissingRuleError, match=r"testlin\.scale\.v1.*linear in operand\(s\) \[0\] only"):
            ad.grad(lambda v: xp.sum(scale_p.bind(x, v)))(s)


# ---- ops with only a vjp rule ------------------------------------------------------------

# kernels, not decompositions: a GradientTape then records the op itself
cube_p = define_op("testvjp.cube.v1", lambda x: (x.shape, x.dtype))


def _cube_vjp(primals):
    (x,) = primals
    three = lax.broadcast_in_dim(lax.full(shape=(), fill_value=3.0, dtype=x.dtype, device=x.device),
                                 shape=x.shape, broadcast_dimensions=())
    return cube_p.bind(x), lambda ct: (lax.mul(ct, lax.mul(three, lax.mul(x, x))),)


def _pair_rule(x, n):
    return (x.shape, x.dtype), (x.shape, x.dtype)


def _pair_kernel(x, n):  # numpy arrays or torch tensors
    return x * n, (x.sin() if hasattr(x, "sin") else np.sin(x))


# (x, n) -> (n * x, sin x), n an integer scalar: a multi-result op with an index-like operand
pair_p = define_op("testvjp.pair.v1", _pair_rule, nin=2, multiple_results=True)


def _pair_vjp(primals):
    x, n = primals
    nb = lax.broadcast_in_dim(lax.convert(n, new_dtype=x.dtype), shape=x.shape,
                              broadcast_dimensions=())

    def backward(cts):
        ca, cb = cts
        return (lax.add(lax.mul(ca, nb), lax.mul(cb, lax.cos(x))), None)

    return pair_p.bind(x, n), backward


class VJPOnlyPlugin:
    __name__ = "testvjp"

    @hookimpl
    def tenferro_register(self, registry):
        registry.add_op(cube_p)
        registry.add_rule("vjp", cube_p, _cube_vjp)
        registry.add_op(pair_p)
        registry.add_rule("vjp", pair_p, _pair_vjp)
        for backend in ("numpy", "torch"):
            registry.add_kernel(backend, cube_p, lambda x: x * x * x)
            registry.add_kernel(backend, pair_p, _pair_kernel)


@pytest.fixture(scope="module")
def vjp_runtime():
    return _runtime(VJPOnlyPlugin())


X = np.array([0.5, -1.25, 2.0])
WGT = np.array([1.5, 0.25, -2.0])


def _loss(x):
    return xp.sum(cube_p.bind(x) * _t(WGT))


def test_grad_vjp_and_value_and_grad_of_a_vjp_only_op(vjp_runtime):
    with use_runtime(vjp_runtime):
        assert vjp_runtime.rule("jvp", cube_p) is None
        x = _t(X)
        want = 3 * X**2 * WGT
        np.testing.assert_allclose(ad.grad(_loss)(x).numpy(), want, rtol=1e-12)
        val, g = ad.value_and_grad(_loss)(x)
        np.testing.assert_allclose(float(val), np.sum(X**3 * WGT), rtol=1e-12)
        np.testing.assert_allclose(g.numpy(), want, rtol=1e-12)
        out, back = ad.vjp(cube_p.bind, x)
        np.testing.assert_allclose(out.numpy(), X**3, rtol=1e-12)
        np.testing.assert_allclose(back(_t(WGT))[0].numpy(), want, rtol=1e-12)
        np.testing.assert_allclose(ad.jacrev(cube_p.bind)(x).numpy(), np.diag(3 * X**2), rtol=1e-12)
        check_grads(cube_p.bind, [x], order=2, modes=("rev",))


def test_second_order_through_a_vjp_only_op(vjp_runtime):
    with use_runtime(vjp_runtime):
        x = _t(X)
        gg = ad.grad(lambda y: xp.sum(ad.grad(_loss)(y)))(x)
        np.testing.assert_allclose(gg.numpy(), 6 * X * WGT, rtol=1e-12)
        third = ad.grad(lambda y: xp.sum(ad.grad(lambda z: xp.sum(ad.grad(_loss)(z)))(y)))(x)
        np.testing.assert_allclose(third.numpy(), 6 * WGT, rtol=1e-12)


def test_gradient_tape_uses_the_vjp_rule(vjp_runtime):
    with use_runtime(vjp_runtime):
        x = _t(X)
        with ad.GradientTape() as tape:
            tape.watch(x)
            y = _loss(x)
        np.testing.assert_allclose(tape.gradient(y, x).numpy(), 3 * X**2 * WGT, rtol=1e-12)
        np.testing.assert_allclose(tape_second_derivative(_loss, x).numpy(), 6 * X * WGT, rtol=1e-12)


def test_multi_result_vjp_only_op_with_an_integer_operand(vjp_runtime):
    with use_runtime(vjp_runtime):
        x, n = _t(X), _i(3)

        def f(y):
            a, b = pair_p.bind(y, n)
            return xp.sum(a * _t(WGT) + b)

        want = 3 * WGT + np.cos(X)
        np.testing.assert_allclose(ad.grad(f)(x).numpy(), want, rtol=1e-12)
        with ad.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
        np.testing.assert_allclose(tape.gradient(y, x).numpy(), want, rtol=1e-12)
        np.testing.assert_allclose(ad.grad(lambda y: xp.sum(ad.grad(f)(y)))(x).numpy(), -np.sin(X),
                                   rtol=1e-12)
        check_grads(lambda y: pair_p.bind(y, n), [x], order=2, modes=("rev",))


def test_forward_mode_of_a_vjp_only_op_is_a_missing_rule(vjp_runtime):
    with use_runtime(vjp_runtime):
        x = _t(X)
        msg = r"testvjp\.cube\.v1' has only a vjp rule.*forward mode.*add_rule\('jvp'"
        with pytest.raises(MissingRuleError, match=msg):
            ad.jvp(cube_p.bind, (x,), (x,))
        with pytest.raises(MissingRuleError, match=msg):
            ad.jacfwd(cube_p.bind)(x)
        with pytest.raises(MissingRuleError, match=r"testvjp\.pair\.v1' has only a vjp rule"):
            ad.jvp(lambda y: pair_p.bind(y, _i(2)), (x,), (x,))


def test_backward_must_return_one_cotangent_per_operand():
    bad_p = define_op("testvjp.bad.v1", lambda x: (x.shape, x.dtype), decomposition=lax.neg)

    class Plugin:
        __name__ = "testvjp_bad"

        @hookimpl
        def tenferro_register(self, registry):
            registry.add_op(bad_p)
            registry.add_rule("vjp", bad_p, lambda primals: (bad_p.bind(*primals), lambda ct: ct))

    with use_runtime(_runtime(Plugin())):
        with pytest.raises(ArgumentError, match=r"vjp rule of extension op 'testvjp\.bad\.v1'.*tuple"):
            ad.grad(lambda y: xp.sum(bad_p.bind(y)))(_t(X))


# ---- effects -------------------------------------------------------------------------------

SEEN: list = []


def _tap_t(ct, x):
    SEEN.append(is_zero(ct))
    return (Zero(x.aval) if is_zero(ct) else ct,)


# an identity with a side effect (family id, so a plugin can register it)
tap_p = Primitive("testfx.tap.v1", lambda x: (x.shape, x.dtype), linear=(0,), effects=True,
                  family=True, decomposition=lambda x: lax.copy(x))


class TapPlugin:
    __name__ = "testfx"

    @hookimpl
    def tenferro_register(self, registry):
        registry.add_op(tap_p)
        registry.add_rule("transpose", tap_p, _tap_t)
        registry.add_kernel("numpy", tap_p, lambda x: x.copy())
        registry.add_kernel("torch", tap_p, lambda x: x.clone())


def test_backward_pass_keeps_effectful_nodes_without_cotangent():
    with use_runtime(_runtime(TapPlugin())):
        x = _t(X)

        def f(y):
            tap_p.bind(y)  # result unused: no cotangent reaches it
            return xp.sum(y * y)

        SEEN.clear()
        out, back = ad.vjp(f, x)
        np.testing.assert_allclose(back(xp.ones_like(out))[0].numpy(), 2 * X, rtol=1e-12)
        assert SEEN == [True]  # transposed anyway, with a Zero cotangent
        SEEN.clear()  # eager grad runs on a tape: the op's VJP runs, with zeros
        np.testing.assert_allclose(ad.grad(f)(x).numpy(), 2 * X, rtol=1e-12)
        assert len(SEEN) == 1


def test_tape_keeps_effectful_records_without_cotangent():
    with use_runtime(_runtime(TapPlugin())):
        x = _t(X)
        SEEN.clear()
        with ad.GradientTape() as tape:
            tape.watch(x)
            tap_p.bind(x)  # result unused: no cotangent reaches it
            y = xp.sum(x * x)
        np.testing.assert_allclose(tape.gradient(y, x).numpy(), 2 * X, rtol=1e-12)
        assert len(SEEN) == 1  # its VJP was built (and run) anyway


def test_custom_vjp_backward_may_return_none_for_an_argument():
    @ad.custom_vjp
    def f(x, y):
        return x * y

    f.defvjp(lambda x, y: (x * y, y), lambda y, ct: (ct * y, None))
    x, y = _t(X), _t(WGT)
    gx, gy = ad.grad(lambda a, b: xp.sum(f(a, b)), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gx.numpy(), WGT, rtol=1e-12)
    assert not np.any(gy.numpy())
