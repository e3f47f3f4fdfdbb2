"""Every registered compiler pass, alone and in the full pipeline, keeps a random graph's
values bitwise (same dtype, shape and bits; NaNs equal whatever their payload), on numpy:cpu
and torch:cpu. The passes are read from the default runtime when a test runs, so a newly
registered pass is covered with no change here; graphs come from graphgen.graphs."""

from __future__ import annotations

import warnings

import numpy as np
from graphgen import graphs
from hypothesis import given, note
from hypothesis import strategies as st

from tenferro_runtime import default_runtime, eval_graph
from tenferro_runtime.graph import verify_graph
from tenferro_runtime.pipeline import PassWarning, optimize

DEVICES = ("numpy:cpu", "torch:cpu")  # read by conftest.py (on_backends): backend_device


def _host(t) -> np.ndarray:
    return np.asarray(t.device.backend.to_host(t._buf))


def _comparable(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(NaN mask, bits with NaNs zeroed) of a float/complex array; complex as two real planes."""
    if a.dtype.kind == "c":
        a = np.stack([a.real, a.imag])
    nan = np.isnan(a)
    return nan, np.where(nan, 0, a).astype(a.dtype).view(f"u{a.dtype.itemsize}")


def assert_same(got: list, want: list, what: str) -> None:
    assert len(got) == len(want), f"{what}: {len(got)} outputs, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.aval == w.aval, f"{what}: output {i} is {g.aval}, expected {w.aval}"
        hg, hw = _host(g), _host(w)
        assert hg.dtype == hw.dtype and hg.shape == hw.shape, f"{what}: output {i} host buffer differs"
        msg = f"{what}: output {i} differs"
        if hg.dtype.kind in "fc":
            (ng, bg), (nw, bw) = _comparable(hg), _comparable(hw)
            np.testing.assert_array_equal(ng, nw, err_msg=f"{msg} (NaN places)")
            np.testing.assert_array_equal(bg, bw, err_msg=f"{msg} (bits): {hg!r} vs {hw!r}")
        else:
            np.testing.assert_array_equal(hg, hw, err_msg=msg)


def _check(new, args, want: list, what: str) -> None:
    """`new` is well formed, gives `want` on `args` and leaves them as they were."""
    verify_graph(new)
    before = [_host(a).copy() for a in args]
    assert_same(eval_graph(new, *args), want, what)
    for i, (a, h) in enumerate(zip(args, before)):
        np.testing.assert_array_equal(_host(a), h, err_msg=f"{what}: input {i} was overwritten")


def _passes() -> list:
    return sorted(default_runtime().passes.items(), key=lambda kv: (kv[1][1], kv[0]))


@given(data=st.data())
def test_each_pass_keeps_values(backend_device, data):
    graph, args = data.draw(graphs(backend_device), label="graph")
    text, want = str(graph), eval_graph(graph, *args)
    for name, (fn, _, _) in _passes():
        note(f"pass {name!r}")
        new = fn(graph)
        assert str(graph) == text, f"pass {name!r} edited its input graph"
        note(f"after {name!r}:\n{new}")
        _check(new, args, want, f"pass {name!r}")


@given(data=st.data())
def test_pipeline_keeps_values(backend_device, data):
    graph, args = data.draw(graphs(backend_device), label="graph")
    with warnings.catch_warnings():
        warnings.simplefilter("error", PassWarning)
        new = optimize(graph, default_runtime())
    note(f"optimized:\n{new}")
    assert "pass_error" not in new.meta
    _check(new, args, eval_graph(graph, *args), "pipeline")


def test_a_dropped_copy_keeps_transcendental_bits(backend_device):
    """The draw that once failed on torch:cpu: simplify drops a one-operand concatenate (a
    copy), so sinh reads the broadcast constant itself; torch's vectorized loop and its scalar
    loop round sinh(0.78125) 1 ulp apart, so its kernels compute on dense operands."""
    from tenferro_core import catalog
    from tenferro_runtime import array_api as xp
    from tenferro_runtime.graph import Graph, Node, Var

    row = xp.asarray(np.full((1, 4, 4), 0.78125, np.float32), device=backend_device)
    const = xp.broadcast_to(row, (2, 4, 4))  # stride 0 on the first axis: torch's scalar loop
    a, b, d, e = (Var(const.aval) for _ in range(4))
    cat = catalog.concatenate
    nodes = [Node(cat, [a], cat.check_params({"dimension": 0}, (a.aval,)), [b]),
             Node(catalog.sinh, [b], {}, [d]), Node(catalog.tanh, [a], {}, [e])]
    graph = Graph(inputs=[], nodes=nodes, outputs=[d, e], consts={a: const})
    with warnings.catch_warnings():
        warnings.simplefilter("error", PassWarning)
        new = optimize(graph, default_runtime())
    dense = xp.asarray(np.full((2, 4, 4), 0.78125, np.float32), device=backend_device)
    _check(new, (), eval_graph(graph), "pipeline")
    _check(new, (), [xp.sinh(dense), xp.tanh(dense)], "dense values")
