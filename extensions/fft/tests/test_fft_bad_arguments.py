"""Bad n, s, axes and 0-d inputs raise a typed error from the shared argument checks, before
anything is allocated (on every device the suite runs on: numpy:cpu and torch:cpu)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tenferro_fft as F
from tenferro_core.errors import ArgumentError, AxisError, KernelError, ShapeError
from tenferro_runtime import array_api as xp

ONE_D = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"]
N_D = ["fftn", "ifftn", "rfftn", "irfftn"]
REAL_IN = {"rfft", "ihfft", "rfftn"}


def _x(name, shape=(3, 4)):
    dtype = np.float64 if name in REAL_IN else np.complex128
    return xp.asarray(np.ones(shape, dtype))


@given(name=st.sampled_from(ONE_D), n=st.integers(2**63, 2**80))
def test_a_huge_n_is_a_shape_error_before_any_allocation(backend_device, name, n):
    with pytest.raises(ShapeError, match="larger than any device can address") as info:
        getattr(F, name)(_x(name), n=n)
    assert isinstance(info.value, ValueError) and not isinstance(info.value, KernelError)


@given(name=st.sampled_from(N_D), big=st.integers(2**63, 2**80))
def test_a_huge_s_entry_is_a_shape_error(backend_device, name, big):
    with pytest.raises(ShapeError, match="larger than any device can address"):
        getattr(F, name)(_x(name), s=(big,))


@given(name=st.sampled_from(N_D), a=st.integers(2**32, 2**62), b=st.integers(2**32, 2**62))
def test_a_result_too_large_to_address_is_a_shape_error(backend_device, name, a, b):
    with pytest.raises(ShapeError, match=r"more than any device can address \(2\*\*63 - 1 bytes\)"):
        getattr(F, name)(_x(name), s=(a, b))


@given(name=st.sampled_from(["fftfreq", "rfftfreq"]), n=st.one_of(st.integers(2**63, 2**80),
                                                                   st.integers(2**61, 2**63 - 1)))
def test_a_huge_frequency_count_is_a_shape_error(backend_device, name, n):
    with pytest.raises(ShapeError, match="address"):
        getattr(F, name)(n)


@given(name=st.sampled_from(ONE_D), n=st.integers(-2**70, 0))
def test_n_below_one_is_a_shape_error(backend_device, name, n):
    with pytest.raises(ShapeError, match=f"n must be a positive number of points, got {n}"):
        getattr(F, name)(_x(name), n=n)


@given(name=st.sampled_from(ONE_D + ["fftfreq", "rfftfreq"]),
       n=st.one_of(st.booleans(), st.floats(allow_nan=True), st.text(max_size=2)))
def test_n_of_the_wrong_kind_is_an_argument_error(backend_device, name, n):
    call = (lambda: getattr(F, name)(n)) if name.endswith("freq") else (
        lambda: getattr(F, name)(_x(name), n=n))
    with pytest.raises(ArgumentError, match="n must be an int"):
        call()


@given(name=st.sampled_from(ONE_D), axis=st.one_of(st.integers(2, 50), st.integers(-50, -3)))
def test_an_axis_out_of_range_is_an_axis_error(backend_device, name, axis):
    with pytest.raises(AxisError, match=f"axis {axis} is out of range for a tensor of rank 2"):
        getattr(F, name)(_x(name), axis=axis)


@given(name=st.sampled_from(ONE_D), axis=st.sampled_from([True, False, 1.0, "0", None]))
def test_an_axis_of_the_wrong_kind_is_an_argument_error(backend_device, name, axis):
    with pytest.raises(ArgumentError, match="axis must be an int"):
        getattr(F, name)(_x(name), axis=axis)


@given(name=st.sampled_from(N_D), axes=st.sampled_from([(0, 0), (1, -1), (0, 1, -2)]))
def test_duplicate_axes_are_an_axis_error(backend_device, name, axes):
    with pytest.raises(AxisError, match="name an axis twice"):
        getattr(F, name)(_x(name), axes=axes)


@given(name=st.sampled_from(N_D), k=st.integers(1, 3), m=st.integers(1, 2))
def test_s_and_axes_of_different_lengths_are_a_shape_error(backend_device, name, k, m):
    if k == m:
        k += 1
    with pytest.raises(ShapeError, match="s and axes must have the same length"):
        getattr(F, name)(_x(name), s=(2,) * k, axes=(0, 1)[:m])


@given(name=st.sampled_from(N_D), bad=st.sampled_from([True, 2.0, "2", None]))
def test_s_entries_of_the_wrong_kind_are_an_argument_error(backend_device, name, bad):
    with pytest.raises(ArgumentError, match="each entry of s must be an int"):
        getattr(F, name)(_x(name), s=(2, bad))


@pytest.mark.parametrize("name", ONE_D)
def test_a_0d_input_says_it_needs_a_dimension(backend_device, name):
    with pytest.raises(AxisError, match="the input must have at least one dimension") as info:
        getattr(F, name)(_x(name, ()))
    assert "0 <= axis < 0" not in str(info.value)


@pytest.mark.parametrize("name", N_D)
def test_a_0d_input_with_axes_says_it_needs_a_dimension(backend_device, name):
    with pytest.raises(AxisError, match="the input must have at least one dimension"):
        getattr(F, name)(_x(name, ()), axes=(0,))


@pytest.mark.parametrize("name", ["rfftn", "irfftn"])
def test_a_0d_input_to_a_real_transform_says_it_needs_a_dimension(backend_device, name):
    with pytest.raises(ShapeError, match="at least one dimension"):
        getattr(F, name)(_x(name, ()))


@pytest.mark.parametrize("axes", [True, (0, False)])
def test_shift_axes_of_bool_are_an_argument_error(backend_device, axes):
    with pytest.raises(ArgumentError, match="not bool"):
        F.fftshift(_x("fft"), axes=axes)


def test_good_arguments_still_work(backend_device):
    x = np.arange(12.0).reshape(3, 4)
    np.testing.assert_allclose(np.asarray(F.fft(xp.asarray(x), n=np.int64(6), axis=np.int64(0))),
                               np.fft.fft(x, n=6, axis=0))
    np.testing.assert_allclose(np.asarray(F.rfftn(xp.asarray(x), s=(2, 6))),
                               np.fft.rfftn(x, s=(2, 6), axes=(0, 1)))
    np.testing.assert_allclose(np.asarray(F.fftfreq(np.int64(5))), np.fft.fftfreq(5))
