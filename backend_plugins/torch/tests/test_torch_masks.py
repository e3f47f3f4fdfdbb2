"""Large comparisons and isnan/isinf/isfinite on torch:cpu written as int8 viewed as bool
(tenferro_torch.ops.elementwise.mask_kernel): NumPy's results on generated operands, special
values, broadcasts and transposed views, every dtype they take."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tenferro_runtime import array_api as xp
from tenferro_torch.ops.elementwise import BYTE_MASKS, mask_kernel

DEVICE = "torch:cpu"
FLOATS = ["float16", "float32", "float64"]
INTS = ["int8", "int16", "int32", "int64"]
COMPARE = {"eq": (xp.equal, np.equal), "ne": (xp.not_equal, np.not_equal),
           "lt": (xp.less, np.less), "le": (xp.less_equal, np.less_equal),
           "gt": (xp.greater, np.greater), "ge": (xp.greater_equal, np.greater_equal)}
PREDICATES = {"isnan": (xp.isnan, np.isnan), "isinf": (xp.isinf, np.isinf),
              "isfinite": (xp.isfinite, np.isfinite)}
SHAPES = [(128, 64), (BYTE_MASKS,), (3, 4096), (BYTE_MASKS - 1,), (2, 64, 65)]


def _values(rng, shape, dtype):
    if dtype in INTS:
        return rng.integers(-3, 4, shape).astype(dtype)
    special = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1.0, -1.0])
    x = np.where(rng.random(shape) < 0.3, rng.choice(special, shape), rng.integers(-2, 3, shape) * 0.5)
    return x.astype(dtype)


@st.composite
def problems(draw):
    name = draw(st.sampled_from(sorted(COMPARE) + sorted(PREDICATES)))
    dtype = draw(st.sampled_from(FLOATS if name in PREDICATES else FLOATS + INTS))
    shape = draw(st.sampled_from(SHAPES))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    a = _values(rng, shape, dtype)
    broadcast = draw(st.sampled_from(["same", "row", "scalar"]))
    b_shape = {"same": shape, "row": shape[-1:], "scalar": ()}[broadcast]
    return name, a, _values(rng, b_shape, dtype), draw(st.booleans())


def _device(a: np.ndarray, transposed: bool):
    if transposed and a.ndim == 2:  # a column-major view of the same values
        return xp.permute_dims(xp.asarray(np.ascontiguousarray(a.T), device=DEVICE), (1, 0))
    return xp.asarray(a, device=DEVICE)


@settings(max_examples=60, deadline=None)
@given(problems())
@example(("isfinite", np.array([np.inf, -np.inf, np.nan, 65504.0, -0.0] * (BYTE_MASKS // 5 + 1), np.float16),
          np.zeros((), np.float16), False))
@example(("le", np.array([np.nan, -0.0, 0.0, 1.0] * (BYTE_MASKS // 4), np.float32),
          np.array(0.0, np.float32), False))
def test_masks_equal_numpy(problem):
    name, a, b, transposed = problem
    if name in PREDICATES:
        ours, ref = PREDICATES[name]
        got, want = ours(_device(a, transposed)), ref(a)
    else:
        ours, ref = COMPARE[name]
        got, want = ours(_device(a, transposed), xp.asarray(b, device=DEVICE)), ref(a, b)
    assert got.dtype == xp.bool and got.shape == want.shape
    np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("size, taken", [(BYTE_MASKS, True), (BYTE_MASKS - 1, False)])
def test_only_large_float_and_int_results_take_the_int8_route(size, taken):
    x = xp.zeros((size,), dtype=xp.float32, device=DEVICE)
    mask = x <= 0
    assert (mask_kernel("le", (x.aval, x.aval), (mask.aval,)) is not None) == taken
    b = xp.zeros((size,), dtype=xp.bool, device=DEVICE)
    assert mask_kernel("eq", (b.aval, b.aval), (mask.aval,)) is None  # bool operands: torch's own
