"""conv_general's layout param and the layout pass: channels_last matches channels_first, and
`choose_conv_layout` rewrites exactly the convolutions whose backend prefers the other layout,
keeping the graph well formed and its values (bitwise on numpy, within rounding on torch), and
what reads a rewritten conv's result reads it in the layout the original conv gave."""

from __future__ import annotations

import numpy as np
import pytest

from tenferro_core import catalog
from tenferro_core.avals import Aval
from tenferro_core.dtypes import float32
from tenferro_core.errors import ArgumentError, ShapeError
from tenferro_runtime import array_api as xp
from tenferro_runtime import default_runtime, lax
from tenferro_runtime.graph import eval_graph, trace, verify_graph
from tenferro_runtime.passes import BUILTIN
from tenferro_runtime.passes.layout import choose_conv_layout, preferred_layout

LAYOUTS = ("channels_first", "channels_last")
# torch's two memory formats sum in different orders (mkldnn / cuDNN): equal within rounding
TOL = {"float32": 2e-5, "float64": 1e-12, "complex64": 2e-5}


def _last(a):
    return np.ascontiguousarray(np.moveaxis(a, 1, -1))


def _check_close(got, want, device):
    got, want = np.asarray(got), np.asarray(want)
    if device.startswith("numpy"):  # one code path for both layouts
        np.testing.assert_array_equal(got, want)
    else:
        tol = TOL[str(want.dtype)]
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))


def _cases(seed: int, count: int):
    """Random valid convolutions: 1 to 3 spatial axes, strides, padding (negative too),
    both dilations and groups."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        nsp = int(rng.integers(1, 4))
        g, cg, og, n = (int(rng.integers(1, 4)) for _ in range(4))
        win = [int(rng.integers(1, 4)) for _ in range(nsp)]
        ld = tuple(int(rng.integers(1, 3)) for _ in range(nsp))
        rd = tuple(int(rng.integers(1, 3)) for _ in range(nsp))
        spatial = [int(rng.integers(1, 6)) for _ in range(nsp)]
        pads = []
        for s, k, a, b in zip(spatial, win, ld, rd):
            lo, hi = int(rng.integers(-1, 3)), int(rng.integers(-1, 3))
            span = (s - 1) * a + 1 + lo + hi - ((k - 1) * b + 1)
            pads.append((lo, hi - min(span, 0)))
        params = {"window_strides": tuple(int(rng.integers(1, 3)) for _ in range(nsp)),
                  "padding": tuple(pads), "lhs_dilation": ld, "rhs_dilation": rd,
                  "feature_group_count": g}
        dtype = rng.choice(["float32", "float64", "complex64"])
        lhs = rng.standard_normal((n, g * cg, *spatial)).astype(dtype)
        rhs = rng.standard_normal((g * og, cg, *win)).astype(dtype)
        if dtype == "complex64":
            lhs = lhs + 1j * rng.standard_normal(lhs.shape).astype("float32")
        yield lhs, rhs, params


def test_channels_last_matches_channels_first(backend_device):
    for lhs, rhs, params in _cases(0, 40):
        want = lax.conv_general(xp.asarray(lhs, device=backend_device),
                                xp.asarray(rhs, device=backend_device), **params)
        got = lax.conv_general(xp.asarray(_last(lhs), device=backend_device),
                               xp.asarray(rhs, device=backend_device), layout="channels_last",
                               **params)
        assert got.shape == (want.shape[0], *want.shape[2:], want.shape[1])
        _check_close(np.moveaxis(np.asarray(got), -1, 1), want, backend_device)


def test_shape_rule_of_channels_last():
    conv = catalog.conv_general
    avals = (Aval((2, 9, 7, 6), float32), Aval((4, 3, 3, 2), float32))  # N H W C, 2 groups
    params = conv.check_params({"layout": "channels_last", "feature_group_count": 2,
                               "window_strides": (2, 1)}, avals)
    assert params["layout"] == "channels_last"
    assert conv.abstract_eval(avals, params)[0].shape == (2, 4, 6, 4)
    assert conv.check_params({}, avals)["layout"] == "channels_first"
    nchw = (avals[0], Aval((4, 9, 3, 2), float32))  # 9 channels in NCHW, but 6 in NHWC
    conv.abstract_eval(nchw, conv.check_params({}, nchw))
    with pytest.raises(ShapeError, match="channels \\(6, axis -1 in channels_last\\)"):
        conv.abstract_eval(nchw, conv.check_params({"layout": "channels_last"}, nchw))


@pytest.mark.parametrize("bad", ["NHWC", "channels-last", "", 1, None, ("channels_last",), b"x"])
def test_layout_param_is_validated(bad):
    x, w = xp.ones((1, 2, 5)), xp.ones((3, 2, 2))
    with pytest.raises(ArgumentError, match="layout.*channels_first.*channels_last"):
        lax.conv_general(x, w, layout=bad)


def _model(x, w1, w2):
    """Two convolutions with elementwise ops between them (the shape the pass sees in a CNN)."""
    y = lax.conv_general(x, w1, padding=((1, 1), (1, 1)))
    y = xp.tanh(y) * 2.0
    return lax.conv_general(y, w2, window_strides=(2, 1), padding=((0, 1), (1, 0)),
                            feature_group_count=2) + 1.0


@pytest.fixture
def prefer(monkeypatch, backend_device):
    backend = default_runtime().device(backend_device).backend

    def set_preference(layout):
        monkeypatch.setattr(backend, "preferred_conv_layout", layout, raising=False)

    return set_preference


def _conv_layouts(graph):
    return [n.params["layout"] for n in graph.nodes if n.prim.name == "conv_general"]


@pytest.mark.parametrize("preference", [None, "channels_first", "channels_last", "unknown"])
def test_rewrite_exactly_when_the_backend_prefers_the_other_layout(preference, prefer, backend_device):
    rng = np.random.default_rng(1)
    args = [xp.asarray(rng.standard_normal(s).astype("float32"), device=backend_device)
            for s in ((2, 4, 6, 5), (4, 4, 3, 3), (6, 2, 2, 2))]
    prefer(preference)
    graph = trace(_model, *args)
    before = list(graph.nodes)
    new = choose_conv_layout(graph)
    assert graph.nodes == before  # the input graph is never edited
    verify_graph(new)
    assert (new.inputs, new.outputs) == (graph.inputs, graph.outputs)
    if preference != "channels_last":  # channels_first already, or no (valid) preference
        assert new is graph
        return
    assert _conv_layouts(new) == ["channels_last"] * 2
    # a transpose before and after each conv, and a copy back to row-major (elementwise ops read them)
    assert len(new.nodes) == len(graph.nodes) + 6
    for got, want in zip(eval_graph(new, *args), eval_graph(graph, *args)):
        _check_close(got, want, backend_device)
    # and back: a channels_last graph on a channels_first backend
    prefer("channels_first")
    back = choose_conv_layout(new)
    verify_graph(back)
    assert _conv_layouts(back) == ["channels_first"] * 2
    for got, want in zip(eval_graph(back, *args), eval_graph(graph, *args)):
        _check_close(got, want, backend_device)


def test_channels_last_graph_is_rewritten_to_channels_first(prefer, backend_device):
    rng = np.random.default_rng(2)
    x = xp.asarray(rng.standard_normal((1, 5, 5, 3)), device=backend_device)
    w = xp.asarray(rng.standard_normal((2, 3, 2, 2)), device=backend_device)
    prefer("channels_first")
    graph = trace(lambda a, b: lax.conv_general(a, b, layout="channels_last"), x, w)
    new = choose_conv_layout(graph)
    verify_graph(new)
    assert [n.prim.name for n in new.nodes] == ["transpose", "conv_general", "transpose", "copy"]
    assert _conv_layouts(new) == ["channels_first"]
    _check_close(eval_graph(new, x, w)[0], eval_graph(graph, x, w)[0], backend_device)


def test_backends_declare_a_layout_and_the_pass_is_registered(backend_device):
    rt = default_runtime()
    assert preferred_layout(rt.device(backend_device)) in LAYOUTS
    assert BUILTIN["layout"] == ("layout", "choose_conv_layout", 600.0)
    assert rt.passes["layout"][0] is choose_conv_layout


def test_a_product_reads_the_rewritten_conv_in_its_original_layout(prefer, backend_device):
    """A complex matrix-vector product of a conv's result: BLAS gave another last bit for the
    transposed view the rewrite left (found by test_pass_equivalence); a conv that only the
    next conv's transpose reads gets no copy (the transposes cancel)."""
    x = xp.asarray(np.arange(9, dtype=np.int32).reshape(1, 1, 9) * 33220 - 176473, device=backend_device)
    w = xp.asarray(np.array([[[0, 0, 0]], [[1j, -2.121367, 1j]]], np.complex64), device=backend_device)
    v = xp.asarray(np.array([[1j, 0, 1j, 1j, 1j, 1j, 1j]], np.complex64), device=backend_device)

    def f(x, w, v):
        y = lax.conv_general(xp.astype(x, xp.complex64), w)
        z = lax.conv_general(y, xp.ones((3, 2, 2), dtype=xp.complex64, device=y.device))
        return lax.dot_general(y, v, contracting_dims=((0, 2), (0, 1))), z

    prefer("channels_last")
    graph = trace(f, x, w, v)
    new = choose_conv_layout(graph)
    verify_graph(new)
    names = [n.prim.name for n in new.nodes]
    assert names.count("copy") == 2  # the first conv's result (a product reads it) and the output
    for got, want in zip(eval_graph(new, x, w, v), eval_graph(graph, x, w, v)):
        got, want = np.asarray(got), np.asarray(want)
        if backend_device.startswith("numpy"):
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
        else:
            _check_close(got, want, backend_device)
