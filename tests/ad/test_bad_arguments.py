"""Bad arguments to the transformations, the tape, `trace` and einsum are typed errors naming
what was expected, what was given and what to do, raised before anything runs; Jacobians of
0-size inputs and outputs keep the dtype (and device) of a non-empty one."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tenferro_ad as ad
from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, DTypeError, TenferroError
from tenferro_einsum import einsum, einsum_path
from tenferro_runtime import array_api as xp
from tenferro_runtime import trace

TRANSFORMS = {
    "grad": lambda f: ad.grad(f),
    "value_and_grad": lambda f: ad.value_and_grad(f),
    "jacrev": lambda f: ad.jacrev(f),
    "jacfwd": lambda f: ad.jacfwd(f),
    "hessian": lambda f: ad.hessian(f),
    "jvp": lambda f: ad.jvp(f, (xp.ones(2),), (xp.ones(2),)),
    "vjp": lambda f: ad.vjp(f, xp.ones(2)),
    "linearize": lambda f: ad.linearize(f, xp.ones(2)),
    "trace": lambda f: trace(f, xp.ones(2)),
}
NOT_CALLABLE = st.one_of(st.integers(), st.floats(allow_nan=False), st.text(max_size=5), st.none(),
                         st.lists(st.integers(), max_size=2))


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
@settings(max_examples=15, deadline=None)
@given(bad=NOT_CALLABLE)
def test_a_non_callable_is_rejected_when_wrapping(name, bad):
    with pytest.raises(ArgumentError, match=rf"{name} expects a function \(a callable\).*got "):
        TRANSFORMS[name](bad)


def test_a_tensor_passed_as_the_function_is_rejected_at_grad():
    x = xp.ones(3)
    with pytest.raises(ArgumentError, match=r"grad\(f\) rather than grad\(f\(x\)\)"):
        ad.grad(xp.sum(x))


@pytest.mark.parametrize("name", ["jacfwd", "jacrev", "hessian"])
def test_jacobians_take_one_argnum_and_say_so_when_wrapping(name):
    with pytest.raises(ArgumentError, match="argnums must be one int"):
        getattr(ad, name)(xp.sin, argnums=(0, 1))


@pytest.mark.parametrize("argnums", ["0", 1.0, (), (0, "1"), None, True])
def test_grad_argnums_type_is_checked_when_wrapping(argnums):
    with pytest.raises(ArgumentError, match="argnums must be an int or a non-empty tuple of ints"):
        ad.grad(xp.sum, argnums=argnums)


@pytest.mark.parametrize("name", ["jacfwd", "jacrev"])
def test_jacobian_of_a_non_tensor_output_names_the_fix(name):
    with pytest.raises(ArgumentError, match="returning one tensor"):
        getattr(ad, name)(lambda x: (x, x))(xp.ones(2))


# ---- GradientTape.gradient ------------------------------------------------------------------

def _tape():
    x = xp.asarray([1.0, 2.0, 3.0])
    tape = ad.GradientTape()
    with tape:
        tape.watch(x)
        y = x * x
    return tape, x, y


@pytest.mark.parametrize("bad,err,match", [
    ("abc", ArgumentError, "output_gradients entries must be tensors"),
    (3.0, ArgumentError, "output_gradients entries must be tensors"),
    ([xp.ones(3), xp.ones(3)], ArgumentError, "structure of target"),
    (np.ones(3), ArgumentError, "output_gradients entries must be tensors"),
    (xp.ones(2), ArgumentError, "has shape"),
    (xp.ones(3, dtype=D.float32), DTypeError, "astype"),
])
def test_bad_output_gradients_are_typed_errors_and_leave_the_tape_usable(bad, err, match):
    tape, x, y = _tape()
    with pytest.raises(err, match=match):
        tape.gradient(y, x, output_gradients=bad)
    # nothing ran and nothing was spent: the one gradient of the tape is still there
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [2.0, 4.0, 6.0])


@pytest.mark.parametrize("target,sources,match", [
    ("y", 3, "sources must be tensors"),
    (5.0, "x", "target must be a tensor"),
])
def test_bad_target_or_sources_leave_the_tape_usable(target, sources, match):
    tape, x, y = _tape()
    env = {"x": x, "y": y}
    with pytest.raises(ArgumentError, match=match):
        tape.gradient(env.get(target, target), env.get(sources, sources))
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [2.0, 4.0, 6.0])


# ---- trace ----------------------------------------------------------------------------------

def test_trace_converts_numpy_examples_to_inputs_and_keeps_numbers_static():
    g = trace(lambda x: x * 2.0, np.ones(3))
    assert len(g.inputs) == 1 and g.inputs[0].aval.shape == (3,)
    g = trace(lambda x, n: x * n, xp.ones(3), 3)
    assert len(g.inputs) == 1  # the number is static: baked in, no input


@pytest.mark.parametrize("fn,examples,match", [
    (lambda x: x * 2, (3,), "returned a int leaf.*asarray"),
    (lambda x: x, ({1, 2},), "example leaf 0 of type set"),
])
def test_trace_bad_examples_and_outputs_are_typed_errors(fn, examples, match):
    with pytest.raises(ArgumentError, match=match):
        trace(fn, *examples)


# ---- einsum ---------------------------------------------------------------------------------

@settings(max_examples=30, deadline=None)
@given(bad=st.one_of(st.integers(), st.floats(allow_nan=False), st.none(), st.binary(max_size=3)))
def test_non_string_subscripts_name_the_subscripts_argument(bad):
    a = xp.ones((2, 2))
    for fn in (einsum, einsum_path):
        with pytest.raises(ArgumentError, match="subscripts argument .* must be a string"):
            fn(bad, 1.5, a)
        with pytest.raises(ArgumentError, match="subscripts argument .* must be a string"):
            fn(bad, a, a)


@pytest.mark.parametrize("bad", [None, "abc", object(), {1: 2}])
def test_bad_operands_name_the_operand(bad):
    with pytest.raises(TenferroError, match="operand 1"):
        einsum("ij,jk", xp.ones((2, 2)), bad)


# ---- Jacobians of 0-size inputs and outputs keep the dtype -------------------------------------

FLOATS = [D.float16, D.float32, D.float64, D.complex64, D.complex128]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("shape", [(0,), (2, 0), (0, 3)])
def test_jacobians_of_empty_inputs_keep_the_dtype(dtype, shape):
    x = xp.ones(shape, dtype=dtype)
    for jac in (ad.jacfwd, ad.jacrev):
        j = jac(lambda v: v * 2)(x)
        assert j.dtype is dtype and j.shape == shape + shape and j.device == x.device
    if dtype.kind == "f":
        h = ad.hessian(lambda v: xp.sum(v * v))(x)
        assert h.dtype is dtype and h.shape == shape + shape and h.device == x.device


@pytest.mark.parametrize("dtype", [D.float32, D.float64, D.complex64], ids=str)
def test_jacobians_of_empty_outputs_keep_the_dtype(dtype):
    x = xp.ones((3,), dtype=dtype)
    for jac in (ad.jacfwd, ad.jacrev):
        j = jac(lambda v: v[:0])(x)
        assert j.dtype is dtype and j.shape == (0, 3)
