"""Export of control flow, compiled functions, fused groups, AD bookkeeping ops and the op
families (einsum, fft, linalg det); the coverage of every registered op; typed errors;
determinism; dynamic axes."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import onnx
import pytest

import tenferro_onnx as tox
from tenferro_core.errors import ConcretizationError, TenferroError
from tenferro_einsum import einsum
from tenferro_onnx.checking import run
from tenferro_onnx.lower import cannot_export, lower_node, rule_for
from tenferro_onnx.testing import assert_matches
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, lax
from tenferro_runtime.graph import Node, eval_graph
from tenferro_runtime.runtime import default_runtime

RNG = np.random.default_rng(0)


def _rand(*shape: int, dtype: Any = np.float32) -> Any:
    return xp.asarray(RNG.standard_normal(shape).astype(dtype))


def _pairs(x: np.ndarray) -> np.ndarray:
    return np.stack([x.real, x.imag], axis=-1) if np.iscomplexobj(x) else x


def _check(fn: Any, *args: Any, accumulates: bool = True, engine: str = "onnxruntime", rtol: Any = None,
           **kw: Any) -> Any:
    model = tox.export(fn, *args, **kw)
    onnx.checker.check_model(model, full_check=True)
    want = fn(*args)
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    got = run(model, [_pairs(np.asarray(a)) for a in args if not hasattr(a, "state_dict")], engine)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_matches(g, _pairs(np.asarray(w)), accumulates=accumulates, what=getattr(fn, "__name__", "fn"),
                       rtol=rtol)
    return model


# ---- coverage ----------------------------------------------------------------------------------

def test_every_registered_op_exports_or_raises_the_documented_error() -> None:
    ops = default_runtime().ops
    undocumented = [n for n in ops if rule_for(n) is None and cannot_export(n) is None]
    assert not undocumented, f"ops with neither an ONNX rule nor a CANNOT_EXPORT entry: {undocumented}"
    from tenferro_onnx._builder import Builder

    for name in ops:
        why = cannot_export(name)
        if why is None or rule_for(name) is not None:
            continue
        node = Node(ops[name], [], {}, [], "model.py:7")
        with pytest.raises(tox.ExportError, match=re.escape(name)) as err:
            lower_node(Builder(tox.DEFAULT_OPSET), node, {})
        assert why in str(err.value) and "model.py:7" in str(err.value) and "opset" in str(err.value)
        assert isinstance(err.value, NotImplementedError) and isinstance(err.value, TenferroError)


def test_bitcast_raises_at_the_default_opset_and_exports_at_26() -> None:
    x = _rand(3)
    where = r"bitcast_convert \(at test_onnx_export_graphs.py:\d+\).*opset 23"
    with pytest.raises(tox.ExportError, match=where):
        tox.export(lambda x: lax.bitcast_convert(x, new_dtype="int32"), x)
    m = tox.export(lambda x: lax.bitcast_convert(x, new_dtype="int32"), x, opset=26)
    onnx.checker.check_model(m, full_check=True)
    assert [n.op_type for n in m.graph.node][0] == "BitCast"


def test_linalg_decompositions_raise_with_call_site_and_opset() -> None:
    with pytest.raises(tox.ExportError) as err:
        tox.export(lambda a: xp.linalg.inv(a), _rand(3, 3))
    msg = str(err.value)
    assert "tenferro_linalg.inv.v1" in msg and "test_onnx_export_graphs.py:" in msg and "opset 23" in msg


# ---- families ----------------------------------------------------------------------------------

@pytest.mark.parametrize("spec,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 1)]), ("i,i->", [(0,), (0,)]),
    ("ij->ji", [(2, 3)]), ("abc,cd,de->abe", [(1, 2, 3), (3, 4), (4, 2)]), ("ii->i", [(3, 3)]),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_einsum_exports_to_einsum(spec: str, shapes: list, dtype: Any) -> None:
    args = [xp.asarray((RNG.standard_normal(s) * 4).astype(dtype)) for s in shapes]
    _check(lambda *xs: einsum(spec, *xs), *args)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
def test_fft_family_exports_to_dft(dtype: Any, norm: str) -> None:
    x = _rand(4, 6, dtype=dtype)
    rtol = 1e-7 if dtype == np.float64 else None  # onnxruntime's float64 DFT is good to ~1e-8

    def _check(fn: Any, *args: Any) -> None:
        globals()["_check"](fn, *args, rtol=rtol)

    c = xp.asarray((RNG.standard_normal((3, 5)) + 1j * RNG.standard_normal((3, 5))).astype(
        np.complex64 if dtype == np.float32 else np.complex128))
    _check(lambda x: xp.fft.rfft(x, norm=norm), x)
    _check(lambda x: xp.fft.irfft(xp.fft.rfft(x, norm=norm), n=5, norm=norm), x)
    _check(lambda x: xp.abs(xp.fft.rfftn(x, norm=norm)), x)
    _check(lambda x: xp.fft.irfftn(xp.fft.rfftn(x, norm=norm), s=(4, 6), norm=norm), x)
    _check(lambda c: xp.fft.ifft(xp.fft.fft(c, norm=norm) * c, axis=0, norm=norm), c)
    _check(lambda x: xp.real(xp.fft.fft(x[:1])) + xp.imag(xp.fft.fft(x[:1])), x)


def test_complex_op_without_pair_rule_raises() -> None:
    c = xp.asarray(np.ones(3, np.complex64))
    with pytest.raises(tox.ExportError, match="exp .*complex"):
        tox.export(lambda c: xp.exp(c), c)


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (1, 1), (2, 0, 0)])
def test_det_exports_to_det(shape: tuple) -> None:
    _check(lambda a: xp.linalg.det(a), _rand(*shape))


# ---- control flow, compiled functions, fused groups, AD ops ------------------------------------

def test_cond_switch_while_fori_scan() -> None:
    x = _rand(3)
    i = xp.asarray(np.int32(2))
    branches = [lambda v: v * 2.0, lambda v: xp.sin(v), lambda v: v - 1.0]
    _check(lambda x: lax.cond(xp.sum(x) > 0, lambda v: v + 1.0, lambda v: v * 3.0, x), x)
    for k in (-1, 0, 1, 2, 7):
        _check(lambda x, i: lax.switch(i, branches, x), x, xp.asarray(np.int32(k)))
    _check(lambda x, i: lax.switch(i, branches, x), x, i)
    _check(lambda x: lax.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, c[1] * 1.5),
                                    (xp.asarray(0), x)), x)
    _check(lambda x: lax.fori_loop(0, 4, lambda k, v: v * 0.5 + xp.sin(v), x), x)

    def step(c: Any, xi: Any) -> Any:
        return c + xi, c * xi

    xs = _rand(5, 3)
    _check(lambda x, xs: lax.scan(step, x, xs), x, xs)
    _check(lambda x, xs: lax.scan(step, x, xs, reverse=True), x, xs)
    _check(lambda x, xs: lax.scan(step, x, xs[:0]), x, xs)


@pytest.mark.parametrize("engine", ["onnxruntime", "reference"])
@pytest.mark.parametrize("element", [(), (3,), (2, 3), (0, 2)])
@pytest.mark.parametrize("length", [0, 1, 4])
def test_scan_outputs_stack_on_a_new_axis(engine: str, element: tuple, length: int) -> None:
    """A scan's ys of every rank (a Loop's scan outputs), also 0-size and after zero trips, on
    onnxruntime and on the reference evaluator (whose Loop tenferro-onnx corrects: it gave
    (N, 1) for scalars and (N * k, ...) for rank 2)."""
    def f(c: Any, xs: Any) -> Any:
        return lax.scan(lambda c, x: (c * 0.5 + x, xp.sin(c) + x), c, xs)

    _check(f, _rand(*element), _rand(length, *element), engine=engine)


@pytest.mark.parametrize("engine", ["onnxruntime", "reference"])
@pytest.mark.parametrize("start", [0, 2, 5, 9])
def test_while_loops_of_zero_and_more_trips(engine: str, start: int) -> None:
    """A while loop (a Loop without scan outputs) whose condition is false at once returns its
    operands, also on the reference evaluator (whose corrected Loop read the stack shapes
    only a run of the body records), alone and inside a cond branch."""
    def loop(x: Any, i: Any) -> Any:
        return lax.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, c[1] * 1.5 - 1.0), (i, x))

    i = xp.asarray(np.int32(start))
    _check(loop, _rand(3), i, engine=engine)
    _check(lambda x, i: lax.cond(xp.sum(x) > -100.0, lambda v: loop(v, i)[1], lambda v: v, x),
           _rand(3), i, engine=engine)


@pytest.mark.parametrize("engine", ["onnxruntime", "reference"])
@pytest.mark.parametrize("dilation, stride, padding, groups", [
    (2, 2, (2, 1), 1), (2, 2, (1, 2), 1), (3, 1, (0, 0), 1), (2, 2, (0, 3), 2), (1, 2, (1, 1), 1)])
def test_dilated_convolutions_read_only_their_taps(engine: str, dilation: int, stride: int,
                                                   padding: tuple, groups: int) -> None:
    """A dilated convolution never reads the inputs between its taps: a NaN there stays out of
    the result, on onnxruntime and on the reference evaluator (whose Conv multiplied zeros
    inserted in the kernel by them; tenferro-onnx corrects it). Float32: onnxruntime has no
    float64 Conv."""
    x = _rand(2, 2, 9).numpy().copy()
    x[:, :, 1::2] = np.nan  # odd positions: holes of a dilation-2 kernel at even offsets
    w = _rand(4, 2 // groups, 2).numpy()

    def f(x: Any, w: Any) -> Any:
        return lax.conv_general(x, w, window_strides=(stride,), padding=(padding,),
                                rhs_dilation=(dilation,), feature_group_count=groups)

    got = run(tox.export(f, xp.asarray(x), xp.asarray(w)), [x, w], engine)[0]
    want = f(xp.asarray(x), xp.asarray(w)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    if dilation % 2 == stride % 2 == padding[0] % 2 == 0:
        assert np.isfinite(want).all()  # every tap on an even position


def test_a_constant_switch_index_exports_the_branch_itself() -> None:
    """A `switch` on a constant index is the chosen branch, with no If: onnxruntime 1.32
    crashed (a segfault) folding nested constant Ifs whose branches held Loops."""
    xs = _rand(3, 4)

    def scan_branch(k: float) -> Any:
        return lambda v: lax.scan(lambda c, x: (c * 0.5 + x * k, c), v, xs)[0]

    branches = [scan_branch(1.0), scan_branch(2.0), lambda v: v * 3.0, scan_branch(4.0)]
    for k in (-1, 1, 2, 3, 9):
        index = xp.asarray(np.int32(k))
        model = _check(lambda x, index=index: lax.switch(index, branches, x), _rand(4))
        assert all(n.op_type != "If" for n in model.graph.node)


def test_nested_control_flow() -> None:
    def f(x: Any) -> Any:
        def body(k: Any, v: Any) -> Any:
            return lax.cond(xp.sum(v) > 0, lambda u: u - 1.0, lambda u: u + 2.0, v)

        return lax.fori_loop(0, 3, body, x)

    _check(f, _rand(4))


def test_compiled_function_and_fused_groups_expand() -> None:
    def f(x: Any, y: Any) -> Any:
        return xp.tanh(x * y + 1.0) @ xp.exp(y).T

    cf = compile(f)
    x, y = _rand(3, 4), _rand(3, 4)
    m = _check(cf, x, y)
    assert "call" not in {n.op_type for n in m.graph.node}
    g = cf.lower(x, y)
    assert any(n.prim.name == "fused" for n in g.nodes), str(g)
    _check(lambda x, y: eval_graph(g, x, y)[0], x, y)


def test_ad_bookkeeping_ops() -> None:
    from tenferro_ad import checkpoint, stop_gradient

    x = _rand(5)
    _check(lambda x: stop_gradient(x) * x, x)
    _check(lambda x: checkpoint(lambda v: xp.sin(v) * v)(x), x)


# ---- names, determinism, files, dynamic axes ------------------------------------------------------

def test_value_names_come_from_the_code(tmp_path: Any) -> None:
    def predict(images: Any, scale: Any) -> Any:
        return images * scale

    m = tox.export(predict, _rand(2), _rand(2), output_names=["scores"])
    assert [i.name for i in m.graph.input] == ["images", "scale"]
    assert [o.name for o in m.graph.output] == ["scores"]
    assert m.graph.name == "predict"


def test_export_is_deterministic(tmp_path: Any) -> None:
    def f(x: Any) -> Any:
        return lax.fori_loop(0, 2, lambda k, v: xp.sin(v) @ v.T @ v, x)

    x = _rand(3, 3)
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    m1 = tox.export(f, x, path=a)
    m2 = tox.export(f, x, path=b)
    assert m1.SerializeToString() == m2.SerializeToString()
    assert a.read_bytes() == b.read_bytes()


def test_external_data_for_large_weights(tmp_path: Any) -> None:
    w = _rand(64, 64)
    path = tmp_path / "big.onnx"
    tox.export(lambda x: x @ w, _rand(2, 64), path=path, external_data=True)
    assert (tmp_path / "big.onnx.data").stat().st_size >= 64 * 64 * 4
    m = onnx.load(str(path))
    got = run(m, [np.ones((2, 64), np.float32)], "onnxruntime")[0]
    np.testing.assert_allclose(got, np.ones((2, 64), np.float32) @ np.asarray(w), rtol=1e-5)


def test_dynamic_batch_axis_runs_other_sizes() -> None:
    w, bias = _rand(6, 4), _rand(4)

    def mlp(x: Any) -> Any:
        h = xp.maximum(x.reshape(x.shape[0], -1) @ w + bias, 0.0)
        return xp.sum(h, axis=1, keepdims=True) / h.shape[1] - xp.max(h, axis=0) * 0.0 + h[:, :1]

    m = tox.export(mlp, _rand(5, 2, 3), dynamic_axes={"x": {0: "batch"}, "output": {0: "batch"}})
    onnx.checker.check_model(m, full_check=True)
    assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    for n in (1, 3, 8):
        x = RNG.standard_normal((n, 2, 3)).astype(np.float32)
        got = run(m, [x], "onnxruntime")[0]
        assert_matches(got, np.asarray(mlp(xp.asarray(x))), accumulates=True)


def test_dynamic_axis_that_cannot_be_computed_raises() -> None:
    def f(x: Any) -> Any:
        return lax.dynamic_update_slice(x, xp.sin(x), xp.asarray(0))

    with pytest.raises(tox.ExportError, match="dynamic axis 'batch'"):
        tox.export(f, _rand(5), dynamic_axes={"x": {0: "batch"}})


# ---- bad input -------------------------------------------------------------------------------------

def test_bad_arguments_raise_typed_errors() -> None:
    x = _rand(2)
    with pytest.raises(tox.OpsetError, match="opset 12 is outside") as err:
        tox.export(lambda x: x + 1.0, x, opset=12)
    assert isinstance(err.value, ValueError)
    with pytest.raises(TypeError, match="export expects a function"):
        tox.export(3, x)
    with pytest.raises(ValueError, match="neither inputs"):
        tox.export(lambda x: x, x, dynamic_axes={"y": [0]})

    def data_dependent(x: Any) -> Any:
        return x if float(xp.sum(x)) > 0 else -x

    with pytest.raises(ConcretizationError):
        tox.export(data_dependent, x)


def test_unwritable_path_raises_oserror(tmp_path: Any) -> None:
    with pytest.raises(OSError):
        tox.export(lambda x: x + 1.0, _rand(2), path=tmp_path / "missing" / "m.onnx")


def test_max_pool_pattern_keeps_nan_and_relu_pattern() -> None:
    import tenferro_nn as nn

    pool = nn.MaxPool2d(2)
    x = np.asarray(RNG.standard_normal((2, 3, 4, 6)).astype(np.float32))
    x[0, 1, 2, 3] = np.nan
    x[1, 0, 0, 0] = -np.inf
    m = _check(lambda v: pool(nn.ReLU()(v)), xp.asarray(x))
    ops = {n.op_type for n in m.graph.node}
    assert {"MaxPool", "Relu"} <= ops and "ReduceMax" not in ops


def test_batch_and_sequence_axes() -> None:
    wq = _rand(8, 8)

    def attend(x: Any) -> Any:
        b, t, d = x.shape
        q = (x.reshape(b * t, d) @ wq).reshape(b, t, d) + xp.astype(xp.arange(t), xp.float32)[:, None] * 0.1
        s = q @ xp.permute_dims(x, (0, 2, 1)) / 3.0
        p = xp.exp(s - xp.max(s, axis=-1, keepdims=True))
        return (p / xp.sum(p, axis=-1, keepdims=True) @ x)[:, -1]

    m = tox.export(attend, _rand(2, 5, 8), dynamic_axes={"x": {0: "batch", 1: "seq"}, "output": {0: "batch"}})
    onnx.checker.check_model(m, full_check=True)
    for b, t in [(1, 1), (3, 7), (4, 2)]:
        x = RNG.standard_normal((b, t, 8)).astype(np.float32)
        assert_matches(run(m, [x], "onnxruntime")[0], np.asarray(attend(xp.asarray(x))), accumulates=True)

    def masked(x: Any) -> Any:
        i = xp.arange(x.shape[1])
        return xp.where(i[:, None] >= i[None, :], x, 0.0)

    with pytest.raises(tox.ExportError, match=r"captured constant of shape \(997, 997\).*'seq'"):
        tox.export(masked, _rand(5, 5), dynamic_axes={"x": {0: "seq", 1: "seq"}})


def test_extension_ops_traced_on_torch_export_as_their_decomposition() -> None:
    """On torch:cpu, traced log_softmax and cross entropy bind tenferro_nn's ops (torch has
    kernels for them); export inlines each op's decomposition, with a dynamic batch axis."""
    import tenferro_nn as nn
    from tenferro_runtime import default_device

    with default_device("torch:cpu"):
        x, t = _rand(4, 5), xp.asarray(np.array([1, 0, 4, 2]))

        def loss(x: Any, t: Any) -> Any:
            return nn.functional.log_softmax(x, 1), nn.cross_entropy(x, t, reduction="none")

        from tenferro_runtime.graph import trace

        names = {n.prim.name for n in trace(loss, x, t).nodes}
        assert {"tenferro_nn.log_softmax.v1", "tenferro_nn.nll.v1"} <= names
        m = tox.export(loss, x, t, dynamic_axes={"x": {0: "batch"}, "t": {0: "batch"}})
    onnx.checker.check_model(m, full_check=True)
    for b in (1, 4, 7):
        xv = RNG.standard_normal((b, 5)).astype(np.float32)
        tv = RNG.integers(0, 5, b)
        with default_device("torch:cpu"):
            want = [np.asarray(w) for w in loss(xp.asarray(xv), xp.asarray(tv))]
        for g, w in zip(run(m, [xv, tv], "onnxruntime"), want):
            assert_matches(g, w, accumulates=True)
