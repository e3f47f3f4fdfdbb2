"""The default floating dtype, a setting of the Runtime (`default_float_dtype=`, else the
environment variable TENFERRO_DEFAULT_FLOAT, else float64 as NumPy): Python floats and float
lists, creation functions and random floats without a dtype, integer-to-float promotion and
Python floats with integer tensors all follow it; explicit dtypes and NumPy data keep theirs."""

from __future__ import annotations

import numpy as np
import pytest

import tenferro_runtime as tr
from tenferro_core.errors import DTypeError
from tenferro_runtime import Runtime, use_runtime
from tenferro_runtime import array_api as xp
from tenferro_runtime import random as R

DEVICES = ["numpy:cpu", "torch:cpu"]


def _device(name: str) -> str:
    if name.startswith("torch"):
        pytest.importorskip("tenferro_torch")
    return name


def _results(device: str) -> dict:
    """What a user types first, without dtypes, and the dtype each gave."""
    i = xp.asarray([1, 2], device=device)
    k = R.key(0, device=device)
    made = {
        "asarray(1.5)": xp.asarray(1.5, device=device),
        "asarray([1.0, 2])": xp.asarray([1.0, 2], device=device),
        "asarray([[0.5]])": xp.asarray([[0.5]], device=device),
        "ones": xp.ones(2, device=device), "zeros": xp.zeros(2, device=device),
        "empty": xp.empty(2, device=device), "full": xp.full(2, 0.5, device=device),
        "arange": xp.arange(0.0, 1.0, 0.5, device=device), "linspace": xp.linspace(0, 1, 3, device=device),
        "eye": xp.eye(2, device=device), "int + 0.5": i + 0.5, "0.5 * int": 0.5 * i, "int / int": i / i,
        "sqrt(int)": xp.sqrt(i), "uniform": R.uniform(k, (2,)), "normal": R.normal(k, (2,)),
        "truncated_normal": R.truncated_normal(k, -1.0, 1.0, (2,)),
    }
    return {name: t.dtype for name, t in made.items()}


@pytest.mark.parametrize("device", DEVICES)
def test_float64_by_default_as_numpy(device):
    rt = Runtime.from_entry_points()
    assert rt.default_float_dtype is xp.float64
    with use_runtime(rt):
        assert set(_results(_device(device)).values()) == {xp.float64}
        assert xp.asarray(1j, device=device).dtype is xp.complex128
        assert xp.result_type(xp.int32, 1.5) is xp.float64
        assert xp.__array_namespace_info__().default_dtypes()["real floating"] is xp.float64


@pytest.mark.parametrize("spelling", ["float32", np.float32, np.dtype("float32"), xp.float32])
@pytest.mark.parametrize("device", DEVICES)
def test_float32_runtime(device, spelling):
    rt = Runtime.from_entry_points(default_float_dtype=spelling)
    assert rt.default_float_dtype is xp.float32
    with use_runtime(rt):
        dev = _device(device)
        got = _results(dev)
        assert set(got.values()) == {xp.float32}, got
        assert xp.asarray(1j, device=dev).dtype is xp.complex64
        assert (xp.asarray([1, 2], device=dev) + 1j).dtype is xp.complex64
        assert xp.result_type(xp.int32, 1.5) is xp.float32 and xp.result_type(xp.int8, 1j) is xp.complex64
        assert xp.linspace(0, 1j, 2, device=dev).dtype is xp.complex64
        assert xp.__array_namespace_info__().default_dtypes(device=dev) == {
            "real floating": xp.float32, "complex floating": xp.complex64, "integral": xp.int64,
            "indexing": xp.int64}
        # values are the float64 ones rounded once
        np.testing.assert_array_equal(xp.asarray([0.1, 1 / 3], device=dev).numpy(),
                                      np.array([0.1, 1 / 3], dtype=np.float32))
        np.testing.assert_array_equal(xp.linspace(0, 1, 7, device=dev).numpy(),
                                      np.linspace(0, 1, 7).astype(np.float32))
        # explicit dtypes, NumPy data, tensors and integers keep theirs
        assert xp.ones(2, dtype=xp.float64, device=dev).dtype is xp.float64
        assert xp.asarray(np.ones(2), device=dev).dtype is xp.float64
        assert xp.asarray(np.float64(2.0), device=dev).dtype is xp.float64
        assert xp.asarray([1, 2], device=dev).dtype is xp.int64
        assert xp.asarray([xp.ones(2, dtype=xp.float64, device=dev)], device=dev).dtype is xp.float64
        assert (xp.ones(2, dtype=xp.float64, device=dev) * 0.5).dtype is xp.float64
        assert R.uniform(R.key(0, device=dev), (2,), xp.float64).dtype is xp.float64


def test_environment_variable(monkeypatch):
    monkeypatch.setenv("TENFERRO_DEFAULT_FLOAT", "float32")
    rt = Runtime.from_entry_points()
    assert rt.default_float_dtype is xp.float32
    assert Runtime.from_entry_points(default_float_dtype="float64").default_float_dtype is xp.float64
    with use_runtime(rt):
        assert xp.asarray([1.5]).dtype is xp.float32
    monkeypatch.setenv("TENFERRO_DEFAULT_FLOAT", "float64")
    assert Runtime().default_float_dtype is xp.float64


@pytest.mark.parametrize("bad", ["float16", "bfloat16", "int32", "complex64", "bool", "double-ish", 3, None])
def test_invalid_values_name_the_variable(monkeypatch, bad):
    if bad is None:
        monkeypatch.setenv("TENFERRO_DEFAULT_FLOAT", "")  # empty: unset, the default
        assert Runtime().default_float_dtype is xp.float64
        return
    with pytest.raises(DTypeError, match=r"default_float_dtype=\.\.\.\) must be float32 or float64") as info:
        Runtime(default_float_dtype=bad)
    assert isinstance(info.value, TypeError) and repr(bad) in str(info.value)
    monkeypatch.setenv("TENFERRO_DEFAULT_FLOAT", str(bad))
    with pytest.raises(DTypeError, match="environment variable TENFERRO_DEFAULT_FLOAT must be float32 or "
                                         "float64") as info:
        Runtime.from_entry_points()
    assert isinstance(info.value, TypeError) and repr(str(bad)) in str(info.value)


def test_read_only_after_build():
    rt = Runtime()
    with pytest.raises(AttributeError):
        rt.default_float_dtype = xp.float32


def test_compiled_and_traced_functions_follow_it():
    with use_runtime(Runtime.from_entry_points(default_float_dtype="float32")):
        f = tr.compile(lambda i: i * 0.5 + xp.ones(2))
        assert f(xp.asarray([1, 2])).dtype is xp.float32
