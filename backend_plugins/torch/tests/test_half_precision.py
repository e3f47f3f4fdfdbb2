"""float16 and bfloat16 values.

bfloat16 (left out of the kit's value test, see test_conformance.py): every primitive that
takes it is drawn with the kit's own cases and layouts, and checked against the kit's
references run on the same values in float32 (exact for bfloat16), rounded to bfloat16,
with the kit's bfloat16 tolerance. Conversions to bfloat16 from every other dtype too.

Both half types: composite namespace functions (mean, var, softmax, matmul, ...) against
torch computing the same thing on the same tensor.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tenferro_core import catalog
from tenferro_core import dtypes as D
from tenferro_runtime import array_api as xp
from tenferro_runtime.testing.cases import rule_accepts
from tenferro_runtime.testing.conformance import SPECS, context, host_of, present, resolve_device
from tenferro_runtime.testing.reference import REFERENCE
from tenferro_runtime.testing.strategies import layouts
from tenferro_runtime.testing.tolerance import assert_close, assert_identical

DEVICE = "torch:cpu"
BF16 = D.bfloat16
CTX = context(resolve_device(DEVICE))
TAKES_BF16 = [p.name for p in catalog.PRIMITIVES if rule_accepts(p, SPECS[p.name], BF16, CTX)]
OTHERS = [d.name for d in CTX.dtypes if d is not BF16]


def _as_f32(value: Any) -> Any:
    if isinstance(value, np.ndarray) and value.dtype == BF16.numpy:
        return value.astype(np.float32)
    return D.float32 if value is BF16 else value


def _run(prim_name: str, dtype: D.DType, data: Any, variant: str | None = None) -> None:
    prim, spec = catalog.BY_NAME[prim_name], SPECS[prim_name]
    case = spec.draw(data.draw, dtype, CTX, **({} if variant is None else {"variant": variant}))
    tensors, views = [], []
    for host in case.args:
        t, view = present(host, data.draw(layouts(host.shape)), resolve_device(DEVICE))
        tensors.append(t)
        views.append(view)
    out = prim.bind(*tensors, **case.params)
    avals = tuple(t.aval for t in tensors)
    params = prim.check_params(case.params, avals)
    (aval,) = prim.abstract_eval(avals, params)
    if prim_name == "bitcast_convert":  # moves bits only: the kit's reference takes bfloat16
        expected = REFERENCE[prim_name](*views, **params)
    else:
        with np.errstate(all="ignore"):  # inf - inf in the scatter_add reference
            expected = REFERENCE[prim_name](*[_as_f32(v) for v in views],
                                            **{k: _as_f32(v) for k, v in params.items()})
        expected = expected.astype(aval.dtype.numpy)
    actual = host_of(out)
    assert (actual.shape, actual.dtype) == (aval.shape, aval.dtype.numpy)
    if case.check is not None:
        case.check(actual, expected, case)
    elif case.exact:
        assert_identical(actual, expected, prim_name)
    else:
        assert_close(actual, expected, aval.dtype, mult=case.mult, bound=case.bound, what=prim_name)
    for t, host in zip(tensors, case.args):
        assert_identical(host_of(t), host, f"{prim_name} modified its operand")


@pytest.mark.parametrize("prim_name", TAKES_BF16)
@settings(max_examples=8)
@given(data=st.data())
def test_bfloat16_matches_float32_reference(prim_name, data):
    spec = SPECS[prim_name]
    variant = data.draw(st.sampled_from(spec.variants(BF16, CTX))) if spec.variants else None
    _run(prim_name, BF16, data, variant)


@pytest.mark.parametrize("source", OTHERS)
@settings(max_examples=8)
@given(data=st.data())
def test_convert_to_bfloat16(source, data):
    _run("convert", D.as_dtype(source), data, "bfloat16")


# ---- composites against torch ----------------------------------------------------------

COMPOSITES = {
    "mean": (lambda x: xp.mean(x, axis=1), lambda x: torch.mean(x, dim=1)),
    "var": (lambda x: xp.var(x, axis=0), lambda x: torch.var(x, dim=0, correction=0)),
    "softmax": (lambda x: xp.exp(x - xp.max(x, axis=1, keepdims=True))
                / xp.sum(xp.exp(x - xp.max(x, axis=1, keepdims=True)), axis=1, keepdims=True),
                lambda x: torch.softmax(x, dim=1)),
    "matmul": (lambda x: x @ x.mT, lambda x: x @ x.T),
    "tanh-sqrt": (lambda x: xp.tanh(x) * 2 + xp.sqrt(xp.abs(x)),
                  lambda x: torch.tanh(x) * 2 + torch.sqrt(x.abs())),
    "cumsum-sort": (lambda x: xp.cumulative_sum(xp.sort(x, axis=1), axis=1),
                    lambda x: torch.cumsum(torch.sort(x, dim=1).values, dim=1)),
    "where-clip": (lambda x: xp.where(x > 0, xp.clip(x, 0.25, 1.5), -x),
                   lambda x: torch.where(x > 0, torch.clamp(x, 0.25, 1.5), -x)),
}
TOL = {torch.float16: (1e-2, 1e-2), torch.bfloat16: (5e-2, 5e-2)}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("name", COMPOSITES)
def test_half_precision_composites_match_torch(name, dtype):
    f_tf, f_torch = COMPOSITES[name]
    src = torch.from_numpy(np.random.default_rng(6).uniform(-2, 2, (4, 6))).to(dtype)
    got = f_tf(xp.from_dlpack(src, device=DEVICE))
    want = f_torch(src)
    assert got._buf.dtype is dtype and tuple(got.shape) == tuple(want.shape)
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(got._buf.float(), want.float(), rtol=rtol, atol=atol)


_BITS = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
         torch.float64: torch.int64}


def _signed_nans(dtype: torch.dtype) -> torch.Tensor:
    """[-nan, 1.5, -0.0, inf, +nan] in `dtype`, the NaNs' sign bits set on the bits."""
    x = torch.tensor([float("nan"), 1.5, -0.0, float("inf"), float("nan")], dtype=torch.float64).to(dtype)
    bits = x.view(_BITS[dtype]).clone()
    info = torch.iinfo(bits.dtype)
    bits[0] |= info.min
    bits[4] &= info.max
    return bits.view(dtype)


@pytest.mark.parametrize("src", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("dst", [D.float16, D.bfloat16, D.float32, D.float64])
def test_conversions_keep_a_nans_sign(src, dst):
    """torch's casts from float16 and to bfloat16 lose a NaN's sign bit (float16 -nan to float32
    is +nan, float32 +nan to bfloat16 -nan); convert keeps the source's, which copysign reads
    (a hypothesis draw: copysign(bfloat16 0, float16 -nan) was +0 on torch:cpu)."""
    x = _signed_nans(src)
    got = xp.astype(xp.asarray(x), dst).numpy()
    bits = got.view(np.int16 if got.itemsize == 2 else np.int32 if got.itemsize == 4 else np.int64)
    assert (bits < 0).tolist() == [True, False, True, False, False]
    assert np.isnan(got.astype(np.float64)).tolist() == [True, False, False, False, True]


def test_copysign_reads_a_float16_nans_sign_through_promotion():
    zero = xp.astype(xp.asarray(np.float32(0.0), device=DEVICE), xp.bfloat16)
    nan = xp.asarray(-np.array(np.nan, dtype=np.float16), device=DEVICE)
    got = xp.copysign(zero, nan)
    assert got.dtype == xp.float32 and np.signbit(got.numpy())
