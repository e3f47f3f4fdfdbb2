"""Bad shapes, axes and counts are typed errors across the whole namespace (one shared check).

Shapes and int parameters must be ints (Python ints, NumPy integer scalars, `__index__`
objects): bool, float, str, NaN and inf are an ArgumentError (a TypeError), never silently
truncated. Negative sizes and sizes too large to allocate are a ShapeError (a ValueError)
raised before anything is allocated.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tenferro_core.errors import ArgumentError, AxisError, DTypeError, ShapeError
from tenferro_runtime.array_api import _args

HUGE = 2**70


class Index:
    """An object with __index__ (accepted wherever an int is)."""

    def __init__(self, v: int):
        self.v = v

    def __index__(self) -> int:
        return self.v


# values that are not ints: each must be rejected with a TypeError, never truncated
not_ints = st.one_of(
    st.booleans(),
    st.sampled_from([np.True_, np.False_, np.float64(2.0), "1", "12", b"1", "a", 1j, [1.5]]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(min_size=0, max_size=3),
)
huge_ints = st.integers(min_value=_args.MAX_ELEMENTS + 1, max_value=2**200)
negative_ints = st.integers(min_value=-(2**70), max_value=-2)


# ---------------------------------------------------------------- shapes
CREATORS = {
    "zeros": lambda xp, s: xp.zeros(s),
    "ones": lambda xp, s: xp.ones(s),
    "empty": lambda xp, s: xp.empty(s),
    "full": lambda xp, s: xp.full(s, 1.0),
    "full_int": lambda xp, s: xp.full(s, 1, dtype=xp.int8),
    "reshape": lambda xp, s: xp.reshape(xp.ones((2, 3)), s),
    "broadcast_to": lambda xp, s: xp.broadcast_to(xp.ones((1,)), s),
    "broadcast_shapes": lambda xp, s: xp.broadcast_shapes(s if isinstance(s, tuple) else (s,), (1,)),
    "tile": lambda xp, s: xp.tile(xp.ones((2,)), s),
}


@pytest.mark.parametrize("fn", CREATORS.values(), ids=CREATORS.keys())
@given(bad=not_ints, where=st.integers(0, 2))
def test_shape_entries_must_be_ints(xp, fn, bad, where):
    shape = [2, 3]
    shape.insert(where, bad)
    with pytest.raises(ArgumentError):
        fn(xp, tuple(shape))


@pytest.mark.parametrize("fn", [f for k, f in CREATORS.items() if k not in ("broadcast_shapes", "tile")],
                         ids=[k for k in CREATORS if k not in ("broadcast_shapes", "tile")])
@given(bad=not_ints)
def test_shape_must_be_int_or_tuple(xp, fn, bad):
    with pytest.raises(ArgumentError):
        fn(xp, bad)


def test_issue_examples_shapes(xp):
    with pytest.raises(ArgumentError, match="float"):
        xp.zeros((2.5,))
    with pytest.raises(ArgumentError, match="str"):
        xp.zeros("12")
    with pytest.raises(TypeError):  # also the builtin a NumPy user catches
        xp.ones((True, 2))
    for nan in (float("nan"), float("inf"), np.nan):
        with pytest.raises(ArgumentError):
            xp.zeros((nan,))


@pytest.mark.parametrize("fn", [CREATORS[k] for k in ("zeros", "full", "broadcast_to", "reshape")],
                         ids=["zeros", "full", "broadcast_to", "reshape"])
@given(bad=negative_ints)
def test_negative_sizes_are_shape_errors(xp, fn, bad):
    with pytest.raises(ShapeError):
        fn(xp, (2, bad))


@pytest.mark.parametrize("fn", CREATORS.values(), ids=CREATORS.keys())
@given(big=huge_ints, extra=st.sampled_from([(), (1,), (2, 3)]))
def test_huge_shapes_are_shape_errors(xp, fn, big, extra):
    with pytest.raises(ShapeError, match="too large"):
        fn(xp, (big,) + extra)


def test_product_too_large_is_shape_error(xp):
    # each size alone is fine; the element count (Python ints, no wraparound) is not
    with pytest.raises(ShapeError, match="too large"):
        xp.zeros((2**40, 2**40))
    with pytest.raises(ShapeError, match="too large"):  # 2**61 float64 elements: 2**64 bytes
        xp.zeros((2**61,), dtype=xp.float64)
    with pytest.raises(ValueError):
        xp.broadcast_to(xp.ones((3,)), (2**32, 2**32, 3))
    with pytest.raises(ShapeError):
        xp.zeros((2**64 + 2,))  # wraps to 2 in int64 arithmetic


@given(shape=st.lists(st.integers(0, 3), max_size=3))
def test_integer_like_shapes_are_accepted(xp, shape):
    for s in (tuple(shape), list(shape), tuple(np.int64(n) for n in shape), tuple(Index(n) for n in shape),
              tuple(np.uint8(n) for n in shape)):
        assert xp.zeros(s).shape == tuple(shape)
    assert xp.ones(np.int32(3)).shape == (3,)
    assert xp.ones(Index(2)).shape == (2,)


def test_reshape_infer_still_works(xp):
    x = xp.ones((2, 3))
    assert xp.reshape(x, (3, -1)).shape == (3, 2)
    assert xp.reshape(x, (np.int64(-1),)).shape == (6,)
    with pytest.raises(ShapeError):
        xp.reshape(x, (-1, -1))
    with pytest.raises(ShapeError):
        xp.reshape(x, (-2, 3))
    with pytest.raises(ShapeError, match="too large"):
        xp.reshape(x, (-1, HUGE))


# ---------------------------------------------------------------- axes
AXIS_FNS = {
    "sum": lambda xp, x, a: xp.sum(x, axis=a),
    "prod": lambda xp, x, a: xp.prod(x, axis=a),
    "mean": lambda xp, x, a: xp.mean(x, axis=a),
    "var": lambda xp, x, a: xp.var(x, axis=a),
    "std": lambda xp, x, a: xp.std(x, axis=a),
    "max": lambda xp, x, a: xp.max(x, axis=a),
    "min": lambda xp, x, a: xp.min(x, axis=a),
    "all": lambda xp, x, a: xp.all(x, axis=a),
    "any": lambda xp, x, a: xp.any(x, axis=a),
    "count_nonzero": lambda xp, x, a: xp.count_nonzero(x, axis=a),
    "argmax": lambda xp, x, a: xp.argmax(x, axis=a),
    "argmin": lambda xp, x, a: xp.argmin(x, axis=a),
    "cumulative_sum": lambda xp, x, a: xp.cumulative_sum(x, axis=a),
    "cumulative_prod": lambda xp, x, a: xp.cumulative_prod(x, axis=a),
    "sort": lambda xp, x, a: xp.sort(x, axis=a),
    "argsort": lambda xp, x, a: xp.argsort(x, axis=a),
    "flip": lambda xp, x, a: xp.flip(x, axis=a),
    "roll": lambda xp, x, a: xp.roll(x, 1, axis=a),
    "expand_dims": lambda xp, x, a: xp.expand_dims(x, axis=a),
    "squeeze": lambda xp, x, a: xp.squeeze(xp.ones((1, 1)), axis=a),
    "concat": lambda xp, x, a: xp.concat([x, x], axis=a),
    "stack": lambda xp, x, a: xp.stack([x, x], axis=a),
    "unstack": lambda xp, x, a: xp.unstack(x, axis=a),
    "take": lambda xp, x, a: xp.take(x, xp.asarray([0]), axis=a),
    "take_along_axis": lambda xp, x, a: xp.take_along_axis(x, xp.zeros((2, 3), dtype=xp.int64), axis=a),
    "vecdot": lambda xp, x, a: xp.vecdot(x, x, axis=a),
    "diff": lambda xp, x, a: xp.diff(x, axis=a),
    "repeat": lambda xp, x, a: xp.repeat(x, 2, axis=a),
    "moveaxis_src": lambda xp, x, a: xp.moveaxis(x, a, 0),
    "moveaxis_dst": lambda xp, x, a: xp.moveaxis(x, 0, a),
    "permute_dims": lambda xp, x, a: xp.permute_dims(x, (a, 0)),
    "tensordot": lambda xp, x, a: xp.tensordot(x, xp.ones((3, 2)), axes=a),
    "tensordot_pairs": lambda xp, x, a: xp.tensordot(x, xp.ones((3, 2)), axes=([a], [0])),
}


@pytest.mark.parametrize("fn", AXIS_FNS.values(), ids=AXIS_FNS.keys())
@given(bad=not_ints)
def test_bad_axis_is_argument_error(xp, fn, bad):
    x = xp.ones((2, 3))
    with pytest.raises(ArgumentError):
        fn(xp, x, bad)


TUPLE_AXIS_FNS = ["sum", "prod", "mean", "max", "all", "count_nonzero", "flip", "expand_dims", "squeeze"]


@pytest.mark.parametrize("name", TUPLE_AXIS_FNS)
@given(bad=not_ints)
def test_bad_axis_inside_tuple_is_argument_error(xp, name, bad):
    x = xp.ones((2, 3))
    with pytest.raises(ArgumentError):
        AXIS_FNS[name](xp, x, (0, bad))


@pytest.mark.parametrize("fn", AXIS_FNS.values(), ids=AXIS_FNS.keys())
@given(big=st.one_of(huge_ints, st.integers(max_value=-(2**63))))
def test_out_of_range_axis_is_axis_error(xp, fn, big):
    x = xp.ones((2, 3))
    with pytest.raises(AxisError):  # a ShapeError and an IndexError; never an OverflowError
        fn(xp, x, big)


def test_axis_error_is_numpys_axis_error(xp):
    """Code written against NumPy catches tenferro's AxisError as np.exceptions.AxisError."""
    assert issubclass(AxisError, np.exceptions.AxisError)
    x = xp.ones((2, 3))
    for call in (lambda: xp.sum(x, axis=2), lambda: xp.moveaxis(x, -3, 0),
                 lambda: xp.permute_dims(x, (0, 0))):
        with pytest.raises(np.exceptions.AxisError) as info:
            call()
        e = info.value
        assert isinstance(e, AxisError) and isinstance(e, ShapeError)
        assert isinstance(e, ValueError) and isinstance(e, IndexError)
        assert str(e) and e.args == (str(e),)  # the message, as before
    with pytest.raises(np.exceptions.AxisError):  # NumPy's own message for the same mistake
        np.sum(np.ones((2, 3)), axis=2)


def test_issue_examples_axes(xp):
    x = xp.asarray(np.arange(6.0).reshape(2, 3))
    with pytest.raises(TypeError):
        xp.sum(x, axis=True)
    with pytest.raises(ArgumentError):
        xp.sum(x, axis=np.True_)
    with pytest.raises(ArgumentError, match="axis"):
        xp.vecdot(x, x, axis="a")
    # integer-like axes keep working
    np.testing.assert_array_equal(xp.sum(x, axis=np.int64(1)).numpy(), [3.0, 12.0])
    np.testing.assert_array_equal(xp.sum(x, axis=Index(0)).numpy(), [3.0, 5.0, 7.0])
    np.testing.assert_array_equal(xp.vecdot(x, x, axis=np.int8(0)).numpy(), [9.0, 17.0, 29.0])


# ---------------------------------------------------------------- counts
COUNT_FNS = {
    "eye": lambda xp, n: xp.eye(n),
    "eye_cols": lambda xp, n: xp.eye(2, n),
    "linspace": lambda xp, n: xp.linspace(0, 1, n),
    "arange": lambda xp, n: xp.arange(n),
    "arange_start": lambda xp, n: xp.arange(-n, n, 1),
    "repeat": lambda xp, n: xp.repeat(xp.ones((2,)), n),
    "repeat_axis": lambda xp, n: xp.repeat(xp.ones((2, 2)), n, axis=1),
    "repeat_tensor": lambda xp, n: xp.repeat(xp.ones((2,)), xp.asarray([n // 2 + 1, n // 2 + 1],
                                                                       dtype=xp.uint64)),
    "tile": lambda xp, n: xp.tile(xp.ones((2,)), (n,)),
    "tile_2d": lambda xp, n: xp.tile(xp.ones((2,)), (n, 1)),
}


@pytest.mark.parametrize("fn", COUNT_FNS.values(), ids=COUNT_FNS.keys())
@given(n=st.integers(min_value=_args.MAX_ELEMENTS + 1, max_value=2**64 - 4))
def test_huge_counts_are_shape_errors(xp, fn, n):
    with pytest.raises(ShapeError, match="too large"):
        fn(xp, n)


@pytest.mark.parametrize("name", ["eye", "eye_cols", "linspace", "repeat", "tile"])
@given(n=huge_ints)
def test_counts_beyond_int64_are_shape_errors(xp, name, n):
    with pytest.raises(ShapeError, match="too large"):
        COUNT_FNS[name](xp, n)


@pytest.mark.parametrize("name", ["eye", "eye_cols", "linspace", "repeat", "tile"])
@given(bad=not_ints)
def test_counts_must_be_ints(xp, name, bad):
    with pytest.raises(ArgumentError):
        COUNT_FNS[name](xp, bad)


def test_issue_examples_counts(xp):
    x = xp.ones((2,))
    for call in (lambda: xp.eye(HUGE), lambda: xp.linspace(0, 1, HUGE), lambda: xp.repeat(x, HUGE),
                 lambda: xp.tile(x, (HUGE,)), lambda: xp.arange(HUGE), lambda: xp.arange(0.0, 1e30),
                 lambda: xp.arange(-1e308, 1e308), lambda: xp.eye(2**31, 2**31)):
        with pytest.raises(ShapeError, match="too large|too many"):
            call()
    with pytest.raises(ShapeError):
        xp.linspace(0, 1, -1)
    with pytest.raises(ShapeError):
        xp.eye(-3)
    assert xp.eye(np.int64(2), Index(3)).shape == (2, 3)
    assert xp.linspace(0, 1, np.int16(4)).shape == (4,)
    assert xp.repeat(x, np.int64(2)).shape == (4,)
    assert xp.tile(x, (np.int64(2), Index(1))).shape == (2, 2)


# ---------------------------------------------------------------- the shared module itself
@given(v=st.integers(min_value=-(2**80), max_value=2**80))
def test_as_int_accepts_every_int_like(v):
    assert _args.as_int("f", "n", v) == v
    assert _args.as_int("f", "n", Index(v)) == v


@given(bad=not_ints)
def test_as_int_rejects_non_ints(bad):
    with pytest.raises(ArgumentError, match="f: n must be an int"):
        _args.as_int("f", "n", bad)


@given(shape=st.lists(st.integers(0, 2**70), max_size=4))
def test_check_size_matches_python_product(shape):
    n = 1
    for s in shape:
        n *= s
    if n <= _args.MAX_ELEMENTS and all(s <= _args.MAX_ELEMENTS for s in shape):
        assert _args.check_size("f", shape) == n
    else:
        with pytest.raises(ShapeError, match="too large"):
            _args.check_size("f", shape)


@pytest.mark.parametrize("seq", [[2**70, 1], [[2**70, 1], [1, 2]], [2**70, 1.5], [-(2**64), 1]])
def test_asarray_of_ints_too_large_says_so(xp, seq):
    """A regular sequence holding an int beyond int64/uint64 is an overflow, not a 'ragged
    sequence'; into a float dtype it converts."""
    with pytest.raises(DTypeError, match=r"does not fit in int64 or uint64"):
        xp.asarray(seq)
    got = xp.asarray(seq, dtype=xp.float64).numpy()
    np.testing.assert_array_equal(got, np.array(seq, dtype=object).astype(np.float64))
