"""Data-type functions: astype (between every dtype the device holds, bfloat16 on
torch:cpu), can_cast, finfo, iinfo, isdtype, result_type."""

from __future__ import annotations

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from device_support import has, on_device
from hypothesis import given
from hypothesis import strategies as st

import promotion_reference as promotion
from tenferro_core.errors import ArgumentError, DTypeError

UNSIGNED, FLOATS, COMPLEX = promotion.UNSIGNED, promotion.FLOATS, promotion.COMPLEX
SIGNED, ALL, promoted = promotion.SIGNED, promotion.ALL, promotion.promoted


def _safe_values(src: str, dst: str) -> np.ndarray:
    """Values exactly representable in both dtypes (so NumPy's cast is defined)."""
    vals = [0, 1, 2, 100]
    if src not in UNSIGNED and dst not in UNSIGNED and "bool" not in (src, dst):
        vals += [-1, -100]
    if "bool" in (src, dst):
        vals = [0, 1, 1, 0]
    out = np.array(vals).astype(src)
    if src in COMPLEX:
        out = out + np.array(0j, dtype=src)
    return out


@pytest.mark.parametrize("src", ALL + ["bfloat16"])
def test_astype_all_pairs(xp, src):
    for dst in on_device(ALL + ["bfloat16"]):
        x = _safe_values(src, dst)
        t = xp.asarray(x)
        if src in COMPLEX and dst not in COMPLEX:
            with pytest.raises(DTypeError, match="real"):
                xp.astype(t, getattr(xp, dst))
            continue
        got = xp.astype(t, getattr(xp, dst))
        assert got.dtype == getattr(xp, dst)
        np.testing.assert_array_equal(got.numpy(), x.astype(dst))


@given(x=hnp.arrays(np.float64, hnp.array_shapes(min_dims=0, max_dims=2, min_side=0),
                    elements=st.floats(-1e4, 1e4)),
       dst=st.sampled_from(["float16", "float32", "int16", "int64", "complex64"]))
def test_astype_matches_numpy(xp, x, dst):
    with np.errstate(all="ignore"):
        want = x.astype(dst)
    got = xp.astype(xp.asarray(x), getattr(xp, dst))
    np.testing.assert_array_equal(got.numpy(), want)


def test_astype_copy_and_device(xp):
    t = xp.asarray([1.0, 2.0])
    assert xp.astype(t, xp.float64, copy=False) is t
    c = xp.astype(t, xp.float64)
    assert c is not t and c.numpy().tolist() == [1.0, 2.0]
    t += 1
    assert c.numpy().tolist() == [1.0, 2.0]
    moved = xp.astype(t, "float32", device="numpy:cpu")
    assert moved.dtype == xp.float32 and str(moved.device) == "numpy:cpu"
    if has("bfloat16"):
        assert xp.astype(t, xp.bfloat16).numpy().astype(np.float64).tolist() == [2.0, 3.0]
    else:
        with pytest.raises(DTypeError):
            xp.astype(t, xp.bfloat16)  # the numpy backend has no bfloat16
    with pytest.raises(DTypeError):
        xp.astype(t, "float128")
    with pytest.raises(ArgumentError):
        xp.astype([1.0], xp.float32)
    with pytest.raises(ArgumentError):
        xp.astype(t, xp.float32, copy=None)


def test_can_cast_table(xp):
    for a in ALL:
        for b in ALL:
            want = promoted(a, b) == b
            assert xp.can_cast(getattr(xp, a), getattr(xp, b)) is want, (a, b)
    assert xp.can_cast(xp.asarray([1], dtype=xp.int8), xp.int16)
    assert not xp.can_cast(xp.asarray([1.0]), xp.int64)
    with pytest.raises(DTypeError):
        xp.can_cast(1.5, xp.float32)


@pytest.mark.parametrize("name", FLOATS + COMPLEX)
def test_finfo(xp, name):
    ref = np.finfo(name)
    fi = xp.finfo(getattr(xp, name))
    assert fi.bits == ref.bits and type(fi.bits) is int
    for field in ("eps", "max", "min", "smallest_normal"):
        assert getattr(fi, field) == float(getattr(ref, field)) and type(getattr(fi, field)) is float
    real = {"complex64": "float32", "complex128": "float64"}.get(name, name)
    assert fi.dtype == getattr(xp, real)
    assert xp.finfo(xp.asarray(np.zeros(1, dtype=name))) == fi


def test_finfo_bfloat16(xp):
    fi = xp.finfo(xp.bfloat16)
    assert (fi.bits, fi.eps, fi.smallest_normal) == (16, 2.0**-7, 2.0**-126)
    assert fi.max == 3.3895313892515355e38 == -fi.min
    assert fi.dtype == xp.bfloat16


def test_finfo_iinfo_reject_other_kinds(xp):
    for d in SIGNED + UNSIGNED + ["bool"]:
        with pytest.raises(DTypeError, match="iinfo|floating"):
            xp.finfo(getattr(xp, d))
    for d in FLOATS + COMPLEX + ["bool"]:
        with pytest.raises(DTypeError):
            xp.iinfo(getattr(xp, d))
    with pytest.raises(DTypeError):
        xp.finfo("nope")


@pytest.mark.parametrize("name", SIGNED + UNSIGNED)
def test_iinfo(xp, name):
    ref = np.iinfo(name)
    ii = xp.iinfo(getattr(xp, name))
    assert (ii.bits, ii.max, ii.min) == (ref.bits, int(ref.max), int(ref.min))
    assert type(ii.max) is int and ii.dtype == getattr(xp, name)
    assert xp.iinfo(xp.asarray(np.zeros(1, dtype=name))) == ii


KINDS = {
    "bool": {"bool"}, "signed integer": set(SIGNED), "unsigned integer": set(UNSIGNED),
    "integral": set(SIGNED + UNSIGNED), "real floating": set(FLOATS) | {"bfloat16"},
    "complex floating": set(COMPLEX),
    "numeric": set(SIGNED + UNSIGNED + FLOATS + COMPLEX) | {"bfloat16"},
}


def test_isdtype(xp):
    for name in ALL + ["bfloat16"]:
        d = getattr(xp, name)
        for kind, members in KINDS.items():
            assert xp.isdtype(d, kind) is (name in members), (name, kind)
        assert xp.isdtype(d, d)
        assert xp.isdtype(d, ("bool", "numeric"))
        assert xp.isdtype(d, (xp.int8, "complex floating")) is (name in ("int8",) + tuple(COMPLEX))
    with pytest.raises(DTypeError):
        xp.isdtype(xp.float32, "floating")
    with pytest.raises(DTypeError):
        xp.isdtype("float32", "numeric")


def test_result_type_dtypes_and_tensors(xp):
    for a in ALL:
        for b in ALL:
            want = promoted(a, b)
            if want is None:
                with pytest.raises(DTypeError):
                    xp.result_type(getattr(xp, a), getattr(xp, b))
                continue
            assert xp.result_type(getattr(xp, a), getattr(xp, b)) == getattr(xp, want)
            assert xp.result_type(xp.asarray(np.zeros(1, a)), getattr(xp, b)) == getattr(xp, want)
    assert xp.result_type(xp.int8, xp.uint8, xp.float16) == xp.float16
    assert xp.result_type(xp.int8) == xp.int8


@pytest.mark.parametrize("dtype,scalar,want", [
    ("int8", 1, "int8"), ("int8", 1.0, "float64"), ("int8", 1j, "complex128"), ("int8", True, "int8"),
    ("uint16", 7, "uint16"), ("bool", True, "bool"), ("bool", 3, "int64"), ("bool", 2.5, "float64"),
    ("float32", 1, "float32"), ("float32", 1.0, "float32"), ("float32", 1j, "complex64"),
    ("float16", 1j, "complex64"), ("float64", 1j, "complex128"), ("complex64", 1.0, "complex64"),
])
def test_result_type_python_scalars(xp, dtype, scalar, want):
    assert xp.result_type(getattr(xp, dtype), scalar) == getattr(xp, want)
    assert xp.result_type(scalar, xp.asarray(np.zeros(2, dtype))) == getattr(xp, want)


def test_result_type_errors(xp):
    with pytest.raises(DTypeError):
        xp.result_type()
    with pytest.raises(DTypeError):
        xp.result_type(1, 2.0)
    with pytest.raises(DTypeError):
        xp.result_type(xp.float32, [1, 2])
