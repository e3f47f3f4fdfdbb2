"""bfloat16 value tests of every core primitive's export (on torch:cpu: NumPy has no
bfloat16): per family, one model of drawn cases passes `onnx.checker` (full check) and
onnxruntime's outputs, fed and read as bfloat16 by `checking.run` (ops its CPU provider lacks
run in a float32 carrier), the reference evaluator's and the imported model's equal tenferro's
eager ones within bfloat16's precision (`testing.TOL`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_onnx_primitives import EXAMPLES, FAMILIES, _cases, _check

import tenferro_onnx as tox
import tenferro_runtime.array_api as xp
from tenferro_core import catalog
from tenferro_core import dtypes as D
from tenferro_onnx.checking import run
from tenferro_onnx.errors import CheckMismatchError
from tenferro_onnx.testing import assert_matches, assert_same_bits
from tenferro_runtime.testing.cases_structural import convert_limits_case
from tenferro_runtime.testing.conformance import SPECS, context, resolve_device, to_device

# IEEE special values are silent in onnx's reference evaluator too (as the root config has it for tenferro)
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning:onnx\\.reference")

DEV = resolve_device("torch:cpu")
CTX = context(DEV)
BF16 = D.as_dtype("bfloat16")


@pytest.mark.parametrize("family", sorted(FAMILIES))
@settings(max_examples=EXAMPLES, suppress_health_check=list(HealthCheck), deadline=None)
@given(data=st.data())
def test_family_exports_and_matches_bfloat16(family: str, data: Any) -> None:
    cases = _cases(family, BF16, data.draw, CTX, skip=("complex64", "complex128"))
    assert cases, f"no {family} primitive takes bfloat16 on torch:cpu"
    _check(cases, BF16, "onnxruntime", dev=DEV)
    _check(cases, BF16, "reference", dev=DEV)  # computes bfloat16 through ml_dtypes


def _same_bits(got: np.ndarray, want: np.ndarray, case: Any) -> None:
    assert_same_bits(got, want, f"convert({case.args[0].dtype} -> {case.params['new_dtype']})")


@settings(max_examples=EXAMPLES, suppress_health_check=list(HealthCheck), deadline=None)
@given(data=st.data())
def test_convert_into_and_out_of_bfloat16_bit_exact(data: Any) -> None:
    """convert to bfloat16 from every other real dtype (drawn values and each source's limits:
    +-max, subnormals, infinities, NaN) and from bfloat16's limits to every real dtype: the
    exported Cast gives tenferro's bits (both round to nearest even)."""
    p = catalog.BY_NAME["convert"]
    spec = SPECS["convert"]
    cases = []
    for d in CTX.dtypes:
        if d.kind == "c" or d is BF16:
            continue
        cases.append(spec.draw(data.draw, d, CTX, variant="bfloat16"))
        cases.append(convert_limits_case(d, BF16))
        cases.append(convert_limits_case(BF16, d))
    _check([("convert", p, replace(c, check=_same_bits)) for c in cases], BF16, "onnxruntime", dev=DEV)


def _fn(x: Any, y: Any) -> tuple:
    return xp.exp(x) * y, xp.sum(x, axis=-1 if x.ndim else None), xp.less(x, y)


@pytest.mark.parametrize("shape", [(), (0,), (1,), (3, 5)])
def test_check_feeds_and_reads_bfloat16(shape: tuple) -> None:
    """`check` by onnxruntime and the reference evaluator: bfloat16 inputs (0-d, 0-size
    included) and outputs beside a bool one, at bfloat16's tolerance; a model off by more than
    that raises CheckMismatchError naming the output."""
    rng = np.random.default_rng(0)
    x, y = (rng.uniform(-3, 3, shape).astype(ml_dtypes.bfloat16) for _ in range(2))
    args = [to_device(a, DEV) for a in (x, y)]
    model = tox.export(_fn, *args)
    assert [o.type.tensor_type.elem_type for o in model.graph.output] == [16, 16, 9]
    got = run(model, [x, y], "onnxruntime")
    assert [g.dtype.name for g in got] == ["bfloat16", "bfloat16", "bool"]
    assert [g.shape for g in got] == [shape, shape[:-1], shape]
    res = tox.check(model, *args, fn=_fn, rtol=2.0 ** -6, atol=1e-6)
    assert {o.engine for o in res.outputs} == {"onnxruntime", "reference"} and res.ok
    for (g, w) in zip(got, _fn(*args)):
        assert_matches(g, np.asarray(w), accumulates=True, what="bfloat16 run")
    if x.size:
        def off(a: Any, b: Any) -> tuple:
            e, s, lt = _fn(a, b)
            return e * 1.1, s, lt

        with pytest.raises(CheckMismatchError, match="exp|mul|output"):
            tox.check(model, *args, fn=off, rtol=2.0 ** -6, atol=1e-6)
