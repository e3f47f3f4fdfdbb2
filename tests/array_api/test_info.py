"""The inspection namespace and the completeness of the Array API 2025.12 surface."""

from __future__ import annotations

import pytest
from device_support import current

import tenferro_runtime as tr
from tenferro_core import dtypes as D
from tenferro_core.errors import DeviceError

STANDARD_NAMES = """
abs acos acosh add asin asinh atan atan2 atanh bitwise_and bitwise_left_shift bitwise_invert
bitwise_or bitwise_right_shift bitwise_xor ceil clip conj copysign cos cosh divide equal exp expm1
floor floor_divide greater greater_equal hypot imag isfinite isinf isnan less less_equal log log1p
log2 log10 logaddexp logical_and logical_not logical_or logical_xor maximum minimum multiply
negative nextafter not_equal positive pow real reciprocal remainder round sign signbit sin sinh
square sqrt subtract tan tanh trunc
arange asarray empty empty_like eye from_dlpack full full_like linspace meshgrid ones ones_like
tril triu zeros zeros_like
astype can_cast finfo iinfo isdtype result_type
take take_along_axis matmul matrix_transpose tensordot vecdot
broadcast_arrays broadcast_to concat expand_dims flip moveaxis permute_dims repeat reshape roll
squeeze stack tile unstack
argmax argmin count_nonzero nonzero searchsorted where
unique_all unique_counts unique_inverse unique_values argsort sort
cumulative_prod cumulative_sum max mean min prod std sum var all any diff
e inf nan newaxis pi
bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float32 float64 complex64 complex128
__array_namespace_info__ __array_api_version__
""".split()

TENSOR_MEMBERS = """
__abs__ __add__ __and__ __array_namespace__ __bool__ __complex__ __dlpack__ __dlpack_device__
__eq__ __float__ __floordiv__ __ge__ __getitem__ __gt__ __index__ __int__ __invert__ __le__
__lshift__ __lt__ __matmul__ __mod__ __mul__ __ne__ __neg__ __or__ __pos__ __pow__ __rshift__
__setitem__ __sub__ __truediv__ __xor__ __radd__ __rsub__ __rmul__ __rtruediv__ __rfloordiv__
__rmod__ __rpow__ __rmatmul__ __rand__ __ror__ __rxor__ __rlshift__ __rrshift__
__iadd__ __isub__ __imul__ __itruediv__ __ifloordiv__ __imod__ __ipow__ __imatmul__ __iand__
__ior__ __ixor__ __ilshift__ __irshift__ to_device dtype device mT ndim shape size T
""".split()


def test_namespace_has_every_standard_name(xp):
    assert [n for n in STANDARD_NAMES if not hasattr(xp, n)] == []
    assert xp.__array_api_version__ == "2025.12"


def test_tensor_has_every_standard_member(xp):
    from tenferro_runtime import Tensor

    assert [m for m in TENSOR_MEMBERS if not hasattr(Tensor, m)] == []
    x = xp.asarray([[1.0]])
    assert x.__array_namespace__() is xp and x.__array_namespace__(api_version="2025.12") is xp
    with pytest.raises(ValueError, match="2024.12"):
        x.__array_namespace__(api_version="1999.01")


def test_info_capabilities_and_defaults(xp):
    info = xp.__array_namespace_info__()
    caps = info.capabilities()
    assert caps["boolean indexing"] is True and caps["data-dependent shapes"] is True
    assert info.default_device() == current()
    assert {"numpy:cpu", current()} <= {str(d) for d in info.devices()}
    assert info.default_dtypes() == {"real floating": xp.float64, "complex floating": xp.complex128,
                                     "integral": xp.int64, "indexing": xp.int64}


@pytest.mark.parametrize("kind", [None, "bool", "signed integer", "unsigned integer", "integral",
                                  "real floating", "complex floating", "numeric",
                                  ("bool", "complex floating")])
def test_info_dtypes_by_kind(xp, kind):
    got = xp.__array_namespace_info__().dtypes(device=current(), kind=kind)
    holds = tr.default_runtime().default_device().supports
    want = {d.name: d for d in D.ALL_DTYPES  # the standard's dtypes only (float16 and bfloat16 are extras)
            if d not in (D.bfloat16, D.float16) and holds(d) and (kind is None or xp.isdtype(d, kind))}
    assert got == want
    assert xp.__array_namespace_info__().dtypes(kind=kind) == want  # the default device's


def test_info_rejects_unknown_devices(xp):
    with pytest.raises(DeviceError):
        xp.__array_namespace_info__().dtypes(device="nowhere:0")
