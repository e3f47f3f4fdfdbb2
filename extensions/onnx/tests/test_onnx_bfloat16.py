"""bfloat16 value tests of every core primitive's export (on torch:cpu: NumPy has no
bfloat16): per family, one model of drawn cases passes `onnx.checker` (full check) and
onnxruntime's outputs, fed and read as bfloat16 by `checking.run` (ops its CPU provider lacks
run in a float32 carrier), equal tenferro's eager ones within bfloat16's precision."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_onnx_primitives import EXAMPLES, FAMILIES, _cases, _check

from tenferro_core import dtypes as D
from tenferro_runtime.testing.conformance import context, resolve_device

DEV = resolve_device("torch:cpu")
CTX = context(DEV)
BF16 = D.as_dtype("bfloat16")


@pytest.mark.parametrize("family", sorted(FAMILIES))
@settings(max_examples=EXAMPLES, suppress_health_check=list(HealthCheck), deadline=None)
@given(data=st.data())
def test_family_exports_and_matches_bfloat16(family: str, data: Any) -> None:
    cases = _cases(family, BF16, data.draw, CTX, skip=("complex64", "complex128"))
    assert cases or family == "nullary", f"no {family} primitive takes bfloat16 on torch:cpu"
    _check(cases, BF16, "onnxruntime", dev=DEV)
