"""Every core primitive exports: for each family of primitives and each dtype ONNX Runtime
computes in, one model holds a drawn case (edge shapes: 0-size, 0-d, 1-size) of every primitive
of the family; it passes `onnx.checker` (full check), and onnxruntime's outputs equal tenferro's
eager ones (the reference evaluator's where onnxruntime 1.32 has no kernel: float64 inverse
trigonometry and Conv)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tenferro_onnx as tox
from tenferro_core import catalog
from tenferro_core import dtypes as D
from tenferro_onnx.checking import run
from tenferro_onnx.testing import assert_matches, assert_same_bits
from tenferro_runtime.runtime import default_device
from tenferro_runtime.testing.cases import rule_accepts
from tenferro_runtime.testing.conformance import SPECS, context, resolve_device, to_device

DEV = resolve_device("numpy:cpu")
CTX = context(DEV)
DTYPES = [d for d in CTX.dtypes if d.name not in ("bfloat16", "complex64", "complex128")]
FAMILIES = {
    "unary": [p for p in catalog.PRIMITIVES if p.category == "elementwise" and p.nin == 1
              and p.name not in ("convert", "bitcast_convert")],
    "binary": [p for p in catalog.PRIMITIVES if p.category == "elementwise" and p.nin in (2, 3)],
    "nullary": [p for p in catalog.PRIMITIVES if p.nin == 0],
    "convert": [catalog.BY_NAME["convert"]],
    "structural": [p for p in catalog.PRIMITIVES if p.category in ("structural", "broadcast", "indexing")],
    "reduction": [p for p in catalog.PRIMITIVES if p.category == "reduction"],
    "contraction": [p for p in catalog.PRIMITIVES if p.category == "contraction"],
}
# onnxruntime 1.32 has no float64 kernel for these (KNOWN_GAPS): the reference evaluator runs them
ORT_GAPS = {("asin", "float64"), ("acos", "float64"), ("atan", "float64"), ("asinh", "float64"),
            ("acosh", "float64"), ("atanh", "float64"), ("atan2", "float64"), ("conv_general", "float64")}
EXAMPLES = max(3, settings().max_examples // 8)
IMPORT_BACK = True  # the exported model imported back must give tenferro's results too
OPSETS = {"unary": 18, "structural": 18, "reduction": 18}  # the minimum opset, on a few families


def test_families_cover_the_catalog() -> None:
    covered = {p.name for ps in FAMILIES.values() for p in ps} | {"bitcast_convert"}
    assert covered == {p.name for p in catalog.PRIMITIVES}


def _cases(family: str, dtype: Any, draw: Any, ctx: Any = CTX,
           skip: tuple = ("bfloat16", "complex64", "complex128")) -> list[tuple[str, Any, Any]]:
    """A drawn case of each primitive of `family` the context's device takes for `dtype`
    (variants naming a dtype in `skip` left out)."""
    out = []
    for p in FAMILIES[family]:
        spec = SPECS[p.name]
        if not rule_accepts(p, spec, dtype, ctx):
            continue
        variants = spec.variants(dtype, ctx) if spec.variants else (None,)
        for v in variants:
            if v in skip:
                continue
            case = spec.draw(draw, dtype, ctx, **({} if v is None else {"variant": v}))
            out.append((p.name, p, case))
    return out


def _check(cases: list, dtype: Any, engine: str, opset: int | None = None, dev: Any = DEV) -> None:
    """One model of all `cases`: full check, then `engine`'s (and import_model's) outputs
    against tenferro's eager ones on `dev`."""
    if not cases:
        return
    args = [to_device(a, dev) for _, _, c in cases for a in c.args]

    def fn(*xs: Any) -> tuple:
        outs, k = [], 0
        for _, p, c in cases:
            n = len(c.args)
            outs.append(p.bind(*xs[k:k + n], **c.params))
            k += n
        return tuple(outs)

    want = [np.asarray(o) for o in fn(*args)]
    for k, (name, p, c) in enumerate(cases):
        if name == "pow" and c.args[0].ndim == 0:
            # NumPy's 0-d float power gives pow(-inf, 0.5) = nan (C and docs/primitives.md: inf), and
            # the numpy backend inherits it for 0-d operands; the 1-element arrays give the spec's value
            one = p.bind(*[to_device(a.reshape(1), dev) for a in c.args], **c.params)
            want[k] = np.asarray(one).reshape(())
    model = tox.export(fn, *args, opset=opset)
    onnx.checker.check_model(model, full_check=True)
    got = run(model, [np.asarray(a) for _, _, c in cases for a in c.args], engine)
    if IMPORT_BACK:
        with default_device(dev):  # a model without inputs runs on the default device
            back = tox.import_model(model)(*args)
        _compare(cases, dtype, list(back) if len(want) > 1 else [back], want, "import_model")
    _compare(cases, dtype, got, want, engine)


def _compare(cases: list, dtype: Any, got: list, want: list, engine: str) -> None:
    for (name, p, case), g, w in zip(cases, got, want):
        what = f"{name}[{dtype}] by {engine}, params {case.params}, shapes {[a.shape for a in case.args]}"
        if case.check is not None:
            case.check(np.asarray(g), w, case)
        elif case.exact:
            assert_same_bits(g, w, what)
        else:
            assert_matches(g, w, accumulates=p.category in ("reduction", "contraction"), mult=case.mult,
                           bound=case.bound, what=what)


@pytest.mark.parametrize("dtype_name", [d.name for d in DTYPES])
@pytest.mark.parametrize("family", sorted(FAMILIES))
@settings(max_examples=EXAMPLES, suppress_health_check=list(HealthCheck), deadline=None)
@given(data=st.data())
def test_family_exports_and_matches(family: str, dtype_name: str, data: Any) -> None:
    dtype = D.as_dtype(dtype_name)
    cases = _cases(family, dtype, data.draw)
    _check([c for c in cases if (c[0], dtype_name) not in ORT_GAPS], dtype, "onnxruntime")
    if family in OPSETS and dtype_name in ("float32", "int32", "bool"):
        _check([c for c in cases if (c[0], dtype_name) not in ORT_GAPS], dtype, "onnxruntime", OPSETS[family])
    _check([c for c in cases if (c[0], dtype_name) in ORT_GAPS], dtype, "reference")
