"""Array API 2025.12 additions and the hardening of what NumPy/PyTorch users reach for first:
isin, broadcast_shapes, tuple results, asarray edge cases, info dtypes, zero-size masks,
item/tolist/format, and pickling (tensors on every protocol; tracers refused)."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from device_support import current
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tenferro_runtime as tr
from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, DTypeError, ShapeError, TenferroError


# ---- 1. the 2025.12 surface ------------------------------------------------------------
def test_version_and_new_names(xp):
    assert xp.__array_api_version__ == "2025.12"
    x = xp.asarray([1.0])
    assert x.__array_namespace__(api_version="2025.12") is xp
    assert callable(xp.isin) and callable(xp.broadcast_shapes)


def test_tuples_where_the_standard_asks(xp):
    a, b = xp.asarray([1, 2]), xp.asarray([3, 4, 5])
    assert type(xp.meshgrid(a, b)) is tuple and xp.meshgrid() == ()
    assert type(xp.broadcast_arrays(a, xp.asarray([[1], [2]]))) is tuple
    assert xp.broadcast_arrays() == ()
    devs = xp.__array_namespace_info__().devices()
    assert type(devs) is tuple and "numpy:cpu" in [str(d) for d in devs]


shapes = st.lists(st.integers(0, 3), min_size=0, max_size=4).map(tuple)


@given(st.lists(shapes, min_size=0, max_size=4))
def test_broadcast_shapes_matches_numpy(xp, shps):
    try:
        want = np.broadcast_shapes(*shps)
    except ValueError:
        with pytest.raises(ShapeError) as err:
            xp.broadcast_shapes(*shps)
        assert isinstance(err.value, ValueError)
        return
    got = xp.broadcast_shapes(*shps)
    assert type(got) is tuple and got == want


def test_broadcast_shapes_arguments(xp):
    assert xp.broadcast_shapes() == ()
    assert xp.broadcast_shapes([2, 1], (3,)) == (2, 3)
    with pytest.raises(ArgumentError):
        xp.broadcast_shapes(xp.asarray([2, 3]))
    with pytest.raises(ArgumentError):
        xp.broadcast_shapes(3)
    with pytest.raises(ShapeError):
        xp.broadcast_shapes((-1,))


@given(hnp.arrays(np.int64, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
                  elements=st.integers(-5, 5)),
       hnp.arrays(np.int64, hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=5),
                  elements=st.integers(-5, 5)),
       st.booleans())
def test_isin_integers_match_numpy(xp, a, b, invert):
    got = xp.isin(xp.asarray(a), xp.asarray(b), invert=invert)
    assert got.dtype is xp.bool and got.shape == a.shape
    np.testing.assert_array_equal(got.numpy(), np.isin(a, b, invert=invert))


@given(hnp.arrays(np.float64, st.integers(0, 6),
                  elements=st.sampled_from([0.0, -0.0, 1.5, np.nan, np.inf, -np.inf, 2.0])),
       hnp.arrays(np.float64, st.integers(0, 6),
                  elements=st.sampled_from([0.0, -0.0, 1.5, np.nan, np.inf, 3.0])))
def test_isin_floats_match_numpy(xp, a, b):
    np.testing.assert_array_equal(xp.isin(xp.asarray(a), xp.asarray(b)).numpy(), np.isin(a, b))


def test_isin_scalars_promotion_and_complex(xp):
    b = xp.asarray([2, 3], dtype=xp.int8)
    r = xp.isin(3, b)
    assert r.shape == () and bool(r)
    assert xp.isin(xp.asarray([1, 3]), 3).numpy().tolist() == [False, True]
    assert xp.isin(xp.asarray([1.0, 2.5]), b).numpy().tolist() == [False, False]
    c = xp.asarray([1 + 1j, 2 + 0j, 3j])
    assert xp.isin(c, xp.asarray([2.0, 3j])).numpy().tolist() == [False, True, True]
    assert xp.isin(c, xp.asarray([2.0]), invert=True).numpy().tolist() == [True, False, True]
    with pytest.raises(ArgumentError):
        xp.isin(1, 2)
    with pytest.raises(ArgumentError):
        xp.isin(b, b, invert=1)


# ---- 2. asarray: empty sequences, byte order ---------------------------------------------
@pytest.mark.parametrize("dtype", ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                                   "uint32", "uint64", "float32", "float64", "complex64"])
@pytest.mark.parametrize("data", [[], [[]], [[], []]])
def test_asarray_empty_sequence_any_dtype(xp, dtype, data):
    device = tr.default_runtime().default_device()
    if not device.supports(getattr(xp, dtype)):
        pytest.skip(f"{device} has no {dtype}")
    t = xp.asarray(data, dtype=getattr(xp, dtype))
    assert t.dtype is getattr(xp, dtype) and t.shape == np.asarray(data).shape


def test_asarray_python_ints_beyond_int64(xp):
    t = xp.asarray([0, 2**64 - 1], dtype=xp.uint64)
    assert t.dtype is xp.uint64 and t.tolist() == [0, 2**64 - 1]
    assert xp.asarray([[-(2**63)], [5]], dtype=xp.int64).tolist() == [[-(2**63)], [5]]
    for data, dtype in [([-1, 2**64 - 1], xp.uint64), ([-1, 2**63], xp.int64), ([0, 256], xp.uint8)]:
        with pytest.raises(DTypeError, match="do not fit"):
            xp.asarray(data, dtype=dtype)


def test_asarray_numpy_ulonglong_and_uint64_extremes(xp):
    """np.ulonglong (equal to np.uint64 but another type on Linux, also what NumPy makes of
    Python ints beyond int64) and 2**64 - 1 are uint64 on every device, as in NumPy."""
    for host in (np.array([1, 2], dtype=np.ulonglong), np.array([0, 2**64 - 1], dtype=np.ulonglong),
                 np.ulonglong(2**64 - 1), np.array([-3, 4], dtype=np.longlong)):
        t = xp.asarray(host)
        expected = np.asarray(host)
        assert t.dtype.numpy == expected.dtype and t.tolist() == expected.tolist()
        assert (t + t).tolist() == (expected + expected).tolist()
    for obj in (2**64 - 1, [2**64 - 1], [[0], [2**64 - 1]]):
        t = xp.asarray(obj, dtype=xp.uint64)
        assert t.dtype is xp.uint64 and t.tolist() == np.asarray(obj, dtype=np.uint64).tolist()
    assert xp.asarray(2**64 - 1).dtype is xp.uint64  # NumPy's choice too
    here = xp.asarray(0).device
    other = "numpy:cpu" if str(here) != "numpy:cpu" else "torch:cpu"
    moved = xp.asarray(np.array([7, 2**64 - 1], dtype=np.ulonglong)).to_device(other)
    assert moved.tolist() == [7, 2**64 - 1] and moved.to_device(here).tolist() == [7, 2**64 - 1]


@pytest.mark.parametrize(("value", "dtype"), [
    (300, "int8"), (-129, "int8"), (-1, "uint8"), (2**63, "int64"), (-(2**63) - 1, "int64"),
    (2**64, "uint64"), (2**64, "int64"), (-(2**64), "uint64"),
])
def test_asarray_int_out_of_range_scalar_and_list_alike(xp, value, dtype):
    """A Python int beyond the dtype is refused the same way alone or in a sequence: one
    DTypeError, one message (NumPy refuses both too, with OverflowError)."""
    for obj in (value, [value]):
        with pytest.raises(OverflowError):
            np.asarray(obj, dtype=dtype)
    messages = []
    for obj in (value, [value], [[value]]):
        with pytest.raises(DTypeError, match=rf"values in \[{value}, {value}\] do not fit {dtype}") as info:
            xp.asarray(obj, dtype=getattr(xp, dtype))
        messages.append(str(info.value))
    assert len(set(messages)) == 1, messages


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1, 2**70])
def test_asarray_int_beyond_every_int_dtype_scalar_and_list_alike(xp, value):
    """Without a dtype, an int no integer dtype holds is one DTypeError for a scalar and a list;
    into a float dtype it converts, alone or in a list."""
    messages = []
    for obj in (value, [value], [1, value]):
        with pytest.raises(DTypeError, match=f"Python int {value} does not fit in int64 or uint64") as info:
            xp.asarray(obj)
        messages.append(str(info.value))
    assert len(set(messages)) == 1, messages
    assert xp.asarray(value, dtype=xp.float64).tolist() == float(value)
    assert xp.asarray([value], dtype=xp.float64).tolist() == [float(value)]


def test_asarray_nonempty_still_refuses_lossy(xp):
    with pytest.raises(DTypeError):
        xp.asarray([1.5], dtype=xp.uint8)
    with pytest.raises(DTypeError):
        xp.asarray([1.0], dtype=xp.bool)


@pytest.mark.parametrize("npdtype", [">f4", ">f8", ">i2", ">i4", ">i8", ">u2", ">u8", ">c8", ">c16",
                                     "<f4", "=i4"])
def test_asarray_non_native_byte_order(xp, npdtype):
    host = (np.arange(6).reshape(2, 3) - 2).astype(npdtype) if "u" not in npdtype else \
        np.arange(6).reshape(2, 3).astype(npdtype)
    device = tr.default_runtime().default_device()
    if not device.supports(D.from_numpy(np.dtype(npdtype).newbyteorder("="))):
        pytest.skip(f"{device} has no {npdtype}")
    t = xp.asarray(host)
    assert t.dtype.name == np.dtype(npdtype).newbyteorder("=").name
    np.testing.assert_array_equal(t.numpy(), host)
    if "c" in npdtype:  # a lossy conversion is refused, as for Python data
        with pytest.raises(DTypeError, match="imaginary part"):
            xp.asarray(host, dtype=xp.float64)
    else:
        t2 = xp.asarray(host, dtype=xp.float64)
        np.testing.assert_array_equal(t2.numpy(), host.astype(np.float64))
    t3 = xp.asarray([host[0], host[1]])
    np.testing.assert_array_equal(t3.numpy(), host)
    np.testing.assert_array_equal(xp.asarray(np.eye(2, dtype=">f4")).numpy(), np.eye(2))
    assert xp.asarray(np.eye(2, dtype=">f4")).dtype is xp.float32


def test_asarray_non_native_copy_false_refused(xp):
    with pytest.raises(ArgumentError):
        xp.asarray(np.eye(2, dtype=">f4"), copy=False)


# ---- 3. info dtypes: standard names only ----------------------------------------------
STANDARD = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
            "float32", "float64", "complex64", "complex128"}


@pytest.mark.parametrize("kind", [None, "bool", "signed integer", "unsigned integer", "integral",
                                  "real floating", "complex floating", "numeric",
                                  ("bool", "real floating")])
def test_info_dtypes_standard_only(xp, kind):
    dev = current()
    info = xp.__array_namespace_info__()
    got = info.dtypes(device=dev, kind=kind)
    assert set(got) <= STANDARD and "float16" not in got and "bfloat16" not in got
    supported = tr.default_runtime().device(dev).supports
    want = {n for n in STANDARD
            if supported(getattr(xp, n)) and (kind is None or xp.isdtype(getattr(xp, n), kind))}
    assert set(got) == want
    assert all(d.name == n for n, d in got.items())
    assert set(info.default_dtypes(device=dev).values()) <= set(info.dtypes(device=dev).values())
    assert xp.float16 is D.float16 and xp.bfloat16 is D.bfloat16  # extras stay reachable


# ---- 4. boolean masks with a zero-size dimension -------------------------------------
@pytest.mark.parametrize("xshape,mshape,lead", [
    ((0,), (0,), 0), ((2, 0), (2, 0), 0), ((0, 3), (0, 3), 0), ((2, 0, 3), (2, 0), 0),
    ((2, 0, 3), (0,), 1), ((3, 0), (0,), 1), ((0, 2, 2), (0, 2), 0),
    # a mask axis of size 0 matches an axis of any size (the standard's rule, NumPy's too)
    ((0, 1), (0, 0), 0), ((2, 5), (2, 0), 0), ((2, 5), (0, 5), 0), ((2, 5), (0, 0), 0),
    ((2, 5, 3), (2, 0), 0), ((3,), (0,), 0), ((1, 1), (1, 0), 0), ((2, 3, 4), (0, 4), 1),
])
def test_zero_size_masks(xp, xshape, mshape, lead):
    host = np.arange(int(np.prod(xshape)), dtype=np.float64).reshape(xshape)
    mask = np.zeros(mshape, dtype=bool)
    key_np = (slice(None),) * lead + (mask,)
    x = xp.asarray(host)
    for m in (xp.asarray(mask), mask):
        key = (slice(None),) * lead + (m,)
        got = x[key]
        assert got.shape == host[key_np].shape
        y = xp.asarray(host)
        y[key] = 1.0
        np.testing.assert_array_equal(y.numpy(), host)
    if lead == 0:
        y = xp.asarray(host)
        y[xp.asarray(mask)] = xp.zeros(host[key_np].shape)
        np.testing.assert_array_equal(y.numpy(), host)


def test_zero_size_mask_example(xp):
    """x[zeros((0, 0), bool)] on a (0, 1) array has shape (0,), as NumPy gives."""
    x = xp.zeros((0, 1))
    assert x[xp.zeros((0, 0), dtype=xp.bool)].shape == (0,) == np.zeros((0, 1))[np.zeros((0, 0), bool)].shape


@pytest.mark.parametrize("xshape,mshape", [((0,), (1,)), ((3,), (2,)), ((3, 0), (3, 1)), ((0, 2), (0, 3))])
def test_mask_sizes_neither_equal_nor_zero(xp, xshape, mshape):
    """Any other size is an IndexError (a TenferroIndexError), as in NumPy."""
    from tenferro_core.errors import TenferroIndexError

    mask = np.zeros(mshape, dtype=bool)
    with pytest.raises(IndexError):
        np.zeros(xshape)[mask]
    x = xp.zeros(xshape)
    for m in (xp.asarray(mask), mask):
        with pytest.raises(TenferroIndexError, match="equal the axis' size or be 0"):
            x[m]
        with pytest.raises(TenferroIndexError, match="equal the axis' size or be 0"):
            x[m] = 1.0


# ---- 5. item, tolist, format ---------------------------------------------------------
def test_item_and_tolist(xp):
    for value, dtype, typ in [(2.5, xp.float32, float), (3, xp.int16, int), (True, xp.bool, bool),
                              (1 + 2j, xp.complex64, complex), (7, xp.uint8, int)]:
        t = xp.asarray(value, dtype=dtype)
        assert type(t.item()) is typ and t.item() == value
        assert type(xp.reshape(t, (1, 1)).item()) is typ
        assert type(t.tolist()) is typ
    x = xp.asarray([[1, 2], [3, 4]])
    assert x.tolist() == [[1, 2], [3, 4]] and type(x.tolist()[0][0]) is int
    assert xp.zeros((2, 0)).tolist() == [[], []]
    with pytest.raises(ShapeError, match="exactly one element"):
        x.item()
    with pytest.raises(ShapeError):
        xp.zeros((0,)).item()


def test_numpy_views_are_read_only_so_tensors_stay_immutable(xp):
    x = xp.asarray(np.arange(3.0))
    view = x.numpy()
    with pytest.raises(ValueError, match="read-only"):
        view[0] = 100.0
    mine = np.array(x)  # a copy the user owns
    mine[0] = 100.0
    np.testing.assert_array_equal(x.numpy(), [0.0, 1.0, 2.0])
    assert np.asarray(x, dtype=np.float32).flags.writeable  # a conversion is a new array


@pytest.mark.devices("torch:cpu")  # numpy:cpu holds no bfloat16
def test_item_bfloat16_on_torch(xp):
    t = xp.asarray([1.5, -2.0], dtype=xp.bfloat16)
    assert type(t[0].item()) is float and t[0].item() == 1.5
    assert t.tolist() == [1.5, -2.0] and all(type(v) is float for v in t.tolist())


@given(st.floats(allow_nan=True, allow_infinity=True, width=64),
       st.sampled_from([".4f", "e", ".3g", "10.2f", "+.1e", "", ">12", "%"]))
def test_format_0d_like_python_scalar(xp, v, spec):
    t = xp.asarray(v)
    assert f"{t:{spec}}" == (format(v, spec) if spec else str(np.float64(v)))


def test_format(xp):
    loss = xp.asarray(0.123456, dtype=xp.float32)
    assert f"{loss:.4f}" == "0.1235"
    assert f"{xp.asarray(7):>4d}" == "   7" and f"{xp.asarray(True)}" == "True"
    assert f"{xp.asarray(1 + 2j):.1f}" == "1.0+2.0j"
    x = xp.asarray([1.0, 2.0])
    assert f"{x}" == str(x)
    with pytest.raises(TypeError, match="0-d"):
        f"{x:.4f}"
    with pytest.raises(TypeError):
        f"{xp.asarray([1.0]):.2f}"


# ---- 6. pickling ---------------------------------------------------------------------
def _bits(t):
    return np.ascontiguousarray(t.numpy()).tobytes()


def _check_roundtrip(xp, t, protocol):
    for r in (pickle.loads(pickle.dumps(t, protocol=protocol)), copy.deepcopy(t), copy.copy(t)):
        assert type(r) is type(t) and r.dtype is t.dtype and r.shape == t.shape
        assert str(r.device) == str(t.device)
        assert _bits(r) == _bits(t)


SPECIAL = [0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, np.nan, 1e-30, 65504.0]


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickle_every_dtype_every_protocol(xp, protocol):
    dtypes = [d for d in D.ALL_DTYPES if tr.default_runtime().default_device().supports(d)]
    if current().startswith("torch"):
        assert D.bfloat16 in dtypes
    for d in dtypes:
        if d.kind == "b":
            t = xp.asarray([[True, False], [False, True]])
        elif d.kind in "iu":
            info = np.iinfo(d.numpy)
            t = xp.asarray([info.min, 0, 1, info.max], dtype=d)
        elif d.kind == "f":
            t = xp.asarray(SPECIAL, dtype=xp.float64)
            t = xp.astype(t, d)
        else:
            t = xp.asarray([complex(a, b) for a, b in zip(SPECIAL, SPECIAL[::-1])], dtype=d)
        _check_roundtrip(xp, t, protocol)
        _check_roundtrip(xp, xp.asarray(t[0]), protocol)  # 0-d
        _check_roundtrip(xp, xp.zeros((0, 3), dtype=d), protocol)


@given(hnp.arrays(hnp.floating_dtypes(sizes=(32, 64)), hnp.array_shapes(min_dims=0, max_dims=3, max_side=3)),
       st.integers(0, pickle.HIGHEST_PROTOCOL))
def test_pickle_float_bits_exact(xp, host, protocol):
    t = xp.asarray(host)
    r = pickle.loads(pickle.dumps(t, protocol=protocol))
    native = host.astype(host.dtype.newbyteorder("="))  # asarray takes any byte order
    assert _bits(r) == np.ascontiguousarray(native).tobytes() and r.shape == host.shape


def test_pickle_tensor_inside_container(xp):
    obj = {"w": xp.asarray([1.0, 2.0]), "b": [xp.asarray(3)]}
    r = pickle.loads(pickle.dumps(obj, protocol=0))
    assert r["w"].tolist() == [1.0, 2.0] and r["b"][0].item() == 3


def test_pickle_tracer_inside_grad_refused(xp):
    ad = pytest.importorskip("tenferro_ad")
    seen = []

    def f(x):
        try:
            pickle.dumps(x)
        except TenferroError as e:
            seen.append(str(e))
        return xp.sum(x * x)

    x = xp.asarray([1.0, 2.0])
    out, back = ad.vjp(f, x)  # traced (eager grad runs f on plain tensors, which pickle)
    assert back(xp.ones_like(out))[0].tolist() == [2.0, 4.0]
    assert seen and "return" in seen[0]


def test_pickle_tracer_inside_trace_refused(xp):
    from tenferro_runtime.graph import trace

    def f(x):
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            with pytest.raises(TenferroError, match="return the values"):
                pickle.dumps(x, protocol=protocol)
        return x + 1

    trace(f, xp.asarray([1.0, 2.0]))
