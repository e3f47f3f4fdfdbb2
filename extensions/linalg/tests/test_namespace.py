"""The installed package is `array_api.linalg`, and it holds the whole Array API 2024.12
linalg extension (plus tenferro's extras)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import tenferro_linalg
from tenferro_runtime import array_api as xp

STANDARD = (
    "cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "matmul", "matrix_norm",
    "matrix_power", "matrix_rank", "matrix_transpose", "outer", "pinv", "qr", "slogdet", "solve", "svd",
    "svdvals", "tensordot", "trace", "vecdot", "vector_norm",
)


def test_array_api_linalg_is_the_package():
    assert xp.linalg is tenferro_linalg


@pytest.mark.parametrize("name", STANDARD)
def test_every_standard_name_is_reachable_and_callable(name):
    fn = getattr(xp.linalg, name)
    assert callable(fn) and name in tenferro_linalg.__all__


@pytest.mark.parametrize("name", ["solve", "lstsq", "inv", "det", "slogdet", "pinv", "matrix_rank",
                                  "matrix_power", "cross", "diagonal", "outer", "trace", "matrix_norm",
                                  "vector_norm"])
def test_signatures_follow_the_standard(name):
    """x (and x1, x2) positional-only, options keyword-only."""
    params = inspect.signature(getattr(xp.linalg, name)).parameters.values()
    for p in params:
        if p.default is inspect.Parameter.empty:
            assert p.kind is inspect.Parameter.POSITIONAL_ONLY, (name, p.name)
        else:
            assert p.kind is inspect.Parameter.KEYWORD_ONLY, (name, p.name)


def test_a_standard_call_through_the_namespace():
    x = xp.asarray(np.array([[2.0, 1.0], [1.0, 3.0]]))
    np.testing.assert_allclose(xp.linalg.det(x).numpy(), 5.0)
    np.testing.assert_allclose(xp.linalg.vector_norm(x, axis=-1).numpy(), [np.sqrt(5), np.sqrt(10)])
