"""Random programs (graphgen.graphs) exported to ONNX give the traced program's values:

- run by onnxruntime (the reference evaluator where onnxruntime 1.32 has no kernel for an
  op and dtype, e.g. float64 Asinh), at tenferro-onnx's tolerances;
- imported back with `import_model` and run by tenferro on the same device.

A program the exporter cannot take must say so with a typed error (TenferroError): a
complex op without a pair rule, a bitcast below opset 26. Complex values travel as (real,
imag) pairs (docs/onnx.md).
"""

from __future__ import annotations

import numpy as np
import pytest
from graphgen import graphs
from hypothesis import given, note, settings
from hypothesis import strategies as st
from test_pass_equivalence import _host

from tenferro_core.errors import TenferroError
from tenferro_runtime import array_api as xp
from tenferro_runtime import eval_graph

tox = pytest.importorskip("tenferro_onnx", reason="tenferro-onnx is not installed")
pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")

DEVICES = ("numpy:cpu", "torch:cpu")  # read by conftest.py (on_backends): backend_device


def _pairs(x: np.ndarray) -> np.ndarray:
    return np.stack([x.real, x.imag], axis=-1) if np.iscomplexobj(x) else x


@settings(deadline=None, max_examples=40)
@given(data=st.data())
def test_exported_programs_give_the_traced_values(backend_device, data):
    import onnx

    from tenferro_onnx.checking import EngineError, run
    from tenferro_onnx.testing import assert_matches

    graph, args = data.draw(graphs(backend_device), label="graph")
    want = [_pairs(_host(w)) for w in eval_graph(graph, *args)]
    try:
        model = tox.export(lambda *xs: eval_graph(graph, *xs), *args)
    except TenferroError as exc:
        note(f"export refused: {type(exc).__name__}: {exc}")
        return
    onnx.checker.check_model(model, full_check=True)
    feeds = [_pairs(_host(a)) for a in args]
    try:
        got = run(model, feeds, "onnxruntime")
    except EngineError as exc:
        if "NOT_IMPLEMENTED" not in str(exc):
            raise
        note(f"onnxruntime has no kernel: {exc}")
        got = run(model, feeds, "reference")
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_matches(g, w, accumulates=True, what=f"onnx output {k}")
    back = tox.import_model(model)(*[xp.asarray(a, device=backend_device) for a in args])
    back = back if isinstance(back, tuple) else (back,)
    for k, (g, w) in enumerate(zip(back, want)):
        assert_matches(_host(g), w, accumulates=True, what=f"imported output {k}")
