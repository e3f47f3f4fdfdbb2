"""Bad input to the control-flow API: typed errors naming what was expected and given, raised
before anything runs."""

from __future__ import annotations

import pytest

from tenferro_core.errors import ArgumentError, DTypeError, ShapeError
from tenferro_runtime import array_api as xp
from tenferro_runtime import lax

X = xp.asarray([1.0, 2.0])


def spy():
    ran = []

    def body(*a):
        ran.append(1)
        return a[-1]

    return ran, body


def test_cond_branches_with_different_avals_name_both():
    with pytest.raises(ShapeError, match=r"true_fun and false_fun differ.*float64\[2\].*float64\[\]"):
        lax.cond(True, lambda x: x, lambda x: xp.sum(x), X)
    with pytest.raises(DTypeError, match=r"false_fun returns \['float64\[2\]'\] and true_fun returns "
                                         r"\['float32\[2\]'\]"):
        lax.cond(True, lambda x: xp.astype(x, xp.float32), lambda x: x, X)
    with pytest.raises(ArgumentError, match="different structures"):
        lax.cond(True, lambda x: (x, x), lambda x: x, X)
    with pytest.raises(ShapeError, match=r"branches\[2\]"):
        lax.switch(0, [lambda x: x, lambda x: x, lambda x: x[0]], X)


def test_bad_predicates_and_indices():
    ran, body = spy()
    with pytest.raises(ShapeError, match=r"predicate must be a scalar, got float64\[2\]|bool\[2\]"):
        lax.cond(X > 0, body, body, X)
    with pytest.raises(DTypeError, match=r"predicate must be a boolean scalar, got float64\[\]"):
        lax.cond(xp.asarray(1.0), body, body, X)
    with pytest.raises(DTypeError, match="index must be an integer scalar"):
        lax.switch(xp.asarray(1.0), [body], X)
    with pytest.raises(DTypeError, match=r"cond_fun must return a boolean scalar, got float64\[\]"):
        lax.while_loop(lambda c: xp.sum(c), body, X)
    with pytest.raises(ShapeError, match="cond_fun must return a boolean scalar"):
        lax.while_loop(lambda c: c > 0, body, X)
    with pytest.raises(ArgumentError, match="must be a function"):
        lax.cond(True, 3, body, X)
    with pytest.raises(ArgumentError, match="non-empty sequence"):
        lax.switch(0, [], X)
    assert not ran  # nothing ran: the checks come before any body is called


def test_loop_bodies_that_change_the_carry_name_the_leaf_and_both_avals():
    with pytest.raises(ShapeError, match=r"carry: leaf \[1\]\['w'\] is float64\[\], expected float64\[2\]"):
        lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, {"w": xp.sum(c[1]["w"])}), (0, {"w": X}))
    with pytest.raises(DTypeError, match=r"fori_loop: body_fun changed the carry: leaf \(the value "
                                         r"itself\) is float64\[\], expected int64\[\]"):
        lax.fori_loop(0, 3, lambda i, c: c * 0.5, 1)
    with pytest.raises(DTypeError, match=r"leaf \(the value itself\) is float32\[2\], expected float64\[2\]"):
        lax.scan(lambda c, x: (xp.astype(c, xp.float32), x), X, X)
    with pytest.raises(ArgumentError, match="structure"):
        lax.scan(lambda c, x: ((c, c), x), X, X)
    with pytest.raises(ArgumentError, match=r"pair \(carry, y\)"):
        lax.scan(lambda c, x: c, X, X)


def test_bad_scan_arguments():
    ran, body = spy()
    with pytest.raises(ShapeError, match=r"different leading sizes \(\['a'\]: 2, \['b'\]: 3\)"):
        lax.scan(body, X, {"a": X, "b": xp.ones(3)})
    with pytest.raises(ShapeError, match="length=3 but xs have leading size 2"):
        lax.scan(body, X, X, length=3)
    with pytest.raises(ArgumentError, match="pass length="):
        lax.scan(body, X, None)
    with pytest.raises(ShapeError, match="is a scalar"):
        lax.scan(body, X, xp.asarray(1.0))
    with pytest.raises(ArgumentError, match="unroll"):
        lax.scan(body, X, X, unroll=0)
    with pytest.raises(ArgumentError, match="tensors or Python numbers"):
        lax.scan(body, "carry", X)
    assert not ran
