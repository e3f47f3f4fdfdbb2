"""import_model: models exported by torch.onnx (MLP, CNN, a transformer block) equal PyTorch;
round trips export -> import give the same outputs and gradients; imported functions compile
and run on another device; `check` reports errors; bad input raises typed errors."""

from __future__ import annotations

import io
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch
from onnx import helper

import tenferro_onnx as tox
from tenferro_ad import grad
from tenferro_core.errors import DTypeError, MissingRuleError, ShapeError, TenferroError
from tenferro_onnx.testing import assert_matches
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, lax, random

RNG = np.random.default_rng(1)
torch.manual_seed(0)


def _rand(*shape: int) -> Any:
    return xp.asarray(RNG.standard_normal(shape).astype(np.float32))


class Block(torch.nn.Module):
    """A pre-norm transformer block: attention and a GELU MLP."""

    def __init__(self, d: int = 16, heads: int = 2):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.att = torch.nn.MultiheadAttention(d, heads, batch_first=True)
        self.ff = torch.nn.Sequential(torch.nn.Linear(d, 32), torch.nn.GELU(), torch.nn.Linear(32, d))

    def forward(self, x: Any) -> Any:
        y = self.ln1(x)
        x = x + self.att(y, y, y, need_weights=False)[0]
        return x + self.ff(self.ln2(x))


TORCH_MODELS = {
    "mlp": lambda: (torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10),
                                        torch.nn.LogSoftmax(-1)), (4, 20)),
    "cnn": lambda: (torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(),
                                        torch.nn.MaxPool2d(2),
                                        torch.nn.Conv2d(8, 4, 3, stride=2, padding=1), torch.nn.Sigmoid(),
                                        torch.nn.AvgPool2d(2), torch.nn.Flatten(), torch.nn.Linear(4, 10)),
                    (2, 1, 8, 8)),
    "block": lambda: (Block(), (2, 5, 16)),
}


def _torch_onnx(model: Any, x: Any, dynamo: bool) -> bytes:
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), f, dynamo=dynamo, opset_version=18)
    return f.getvalue()


@pytest.mark.parametrize("name,dynamo", [("mlp", False), ("cnn", False), ("block", False), ("block", True)])
def test_torch_exported_models_equal_pytorch(name: str, dynamo: bool) -> None:
    model, shape = TORCH_MODELS[name]()
    model.eval()
    x = torch.randn(*shape)
    fn = tox.import_model(_torch_onnx(model, x, dynamo))
    xt = xp.asarray(x.numpy())
    assert_matches(np.asarray(fn(xt)), model(x).detach().numpy(), accumulates=True, what=name)
    # gradients with respect to the input equal torch.autograd's
    xg = x.clone().requires_grad_(True)
    model(xg).sum().backward()
    g = grad(lambda v: xp.sum(fn(v)))(xt)
    assert_matches(np.asarray(g), xg.grad.numpy(), accumulates=True, what=f"{name} gradient")
    # compiled, and on another device
    assert_matches(np.asarray(compile(fn)(xt)), model(x).detach().numpy(), accumulates=True)
    xd = xt.to_device("torch:cpu")
    out = fn(xd)
    assert str(out.device) == "torch:cpu"
    assert_matches(np.asarray(out), model(x).detach().numpy(), accumulates=True)


def _digits_cnn() -> Any:
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
    try:
        from demo import cnn
    finally:
        sys.path.pop(0)
    return cnn(random.key(0)).eval()


def test_digits_cnn_onnxruntime_predictions_equal_tenferro() -> None:
    from sklearn.datasets import load_digits

    from tenferro_onnx.checking import run

    model = _digits_cnn()
    images = (load_digits().images[:300] / 16.0).astype(np.float32)[:, None]
    x = xp.asarray(images[:8])
    onnx_model = tox.export(model, x, dynamic_axes={"x": {0: "batch"}, "output": {0: "batch"}})
    assert {"0.weight", "0.bias", "10.weight"} <= {t.name for t in onnx_model.graph.initializer}
    result = tox.check(onnx_model, x, fn=model, rtol=1e-5, atol=1e-5)
    assert result.ok and result.max_abs() < 1e-4
    logits = run(onnx_model, [images], "onnxruntime")[0]  # another batch size
    want = np.asarray(model(xp.asarray(images)))
    assert np.array_equal(logits.argmax(1), want.argmax(1))
    assert_matches(logits, want, accumulates=True)


ROUND_TRIPS = {
    "mlp": lambda x: xp.sum(xp.tanh(x @ x.T) * 2.0 + xp.exp(x[:, :4]), axis=1),
    "fori": lambda x: lax.fori_loop(0, 3, lambda k, v: xp.sin(v) * 1.1, x),
    "scan": lambda x: lax.scan(lambda c, xi: (c * xi + 1.0, c * xi), x[0], x)[1],
    "while": lambda x: lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 0.9 + 0.1),
                                      (xp.asarray(0), x))[1],
    "cond": lambda x: lax.cond(xp.sum(x) > 0, lambda v: v + 1.0, lambda v: v * 3.0, x),
    "fft": lambda x: (xp.sum(xp.abs(xp.fft.rfft(x)), axis=1, keepdims=True)
                      + xp.fft.irfft(xp.fft.rfft(x), n=6)),
    "sort": lambda x: xp.sort(x, axis=1) + xp.cumulative_sum(x, axis=0),
    "pool": lambda x: xp.max(x.reshape(2, 2, 3, 2), axis=(1, 3)),
    "index": lambda x: xp.take(x, xp.asarray([3, 0, 1]), axis=0) * xp.flip(x[1:, ::2], axis=0)[:3, :1],
    "pad": lambda x: lax.pad(x, xp.asarray(np.float32(0.5)), padding_config=((1, -1, 1), (0, 2, 0))),
}


@pytest.mark.parametrize("name", sorted(ROUND_TRIPS))
def test_round_trip_gives_same_outputs_and_gradients(name: str) -> None:
    f = ROUND_TRIPS[name]
    x = _rand(4, 6)
    g = tox.import_model(tox.export(f, x))
    assert_matches(np.asarray(g(x)), np.asarray(f(x)), accumulates=True, what=name)
    if name == "while":  # reverse mode through while_loop is unsupported, imported or not
        for fn in (f, g):
            with pytest.raises(MissingRuleError):
                grad(lambda v, fn=fn: xp.sum(fn(v)))(x)
        return
    ga = grad(lambda v: xp.sum(g(v) * g(v)))(x)
    gb = grad(lambda v: xp.sum(f(v) * f(v)))(x)
    assert_matches(np.asarray(ga), np.asarray(gb), accumulates=True, what=f"{name} gradient")


def test_round_trip_of_the_digits_cnn() -> None:
    model = _digits_cnn()
    x = _rand(3, 1, 8, 8)
    g = tox.import_model(tox.export(model, x))
    assert_matches(np.asarray(g(x)), np.asarray(model(x)), accumulates=True)
    assert repr(g).startswith("<onnx model")


# ---- check ------------------------------------------------------------------------------------------

def test_check_reports_errors_and_raises_on_mismatch() -> None:
    def f(x: Any) -> Any:
        return xp.exp(x) @ x.T

    x = _rand(3, 3)
    model = tox.export(f, x)
    result = tox.check(model, x, fn=f, rtol=1e-4)
    assert {o.engine for o in result.outputs} == {"onnxruntime", "reference"}
    assert all(o.max_abs < 1e-4 for o in result.outputs) and "onnxruntime" in str(result)
    assert tox.check(model, x).ok  # against the imported model run by tenferro
    with pytest.raises(tox.CheckMismatchError) as err:
        tox.check(model, x, fn=lambda x: f(x) + 1.0)
    assert isinstance(err.value, AssertionError) and not err.value.result.ok


# ---- bad input -------------------------------------------------------------------------------------

def test_corrupt_and_truncated_files_raise(tmp_path: Path) -> None:
    good = tmp_path / "good.onnx"
    tox.export(lambda x: xp.sin(x) @ x, _rand(3, 3), path=good)
    data = good.read_bytes()
    trunc = tmp_path / "trunc.onnx"
    trunc.write_bytes(data[: len(data) // 2])
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00\xff not an onnx model \x13" * 7)
    for p in (trunc, junk):
        with pytest.raises(tox.ModelFormatError) as err:
            tox.import_model(p)
        assert isinstance(err.value, ValueError) and str(p.name) in str(err.value) or "ONNX" in str(err.value)
    with pytest.raises(OSError, match="no ONNX file"):
        tox.import_model(tmp_path / "missing.onnx")
    with pytest.raises(tox.ModelFormatError):
        tox.import_model(12)


def test_shape_and_dtype_mismatches_raise() -> None:
    fn = tox.import_model(tox.export(lambda x: x * 2.0, _rand(2, 3)))
    with pytest.raises(ShapeError, match=r"input 'x' must have shape \(2, 3\)"):
        fn(_rand(3, 3))
    with pytest.raises(DTypeError, match="float32"):
        fn(xp.asarray(np.ones((2, 3), np.float64)))
    with pytest.raises(TypeError, match="takes 1 input"):
        fn(_rand(2, 3), _rand(2, 3))
    dyn = tox.import_model(tox.export(lambda x: x * 2.0, _rand(2, 3), dynamic_axes={"x": [0]}))
    assert np.asarray(dyn(_rand(5, 3))).shape == (5, 3)


@pytest.mark.parametrize("ctype", [np.complex64, np.complex128])
def test_complex_inputs_round_trip_as_pairs(ctype: Any) -> None:
    """An exported model holds complex inputs and outputs as (real, imag) pairs; its import takes
    the complex argument itself (or the pairs) and returns the pairs."""
    z = (RNG.standard_normal((2, 3)) + 1j * RNG.standard_normal((2, 3))).astype(ctype)
    z[0, 0] = complex(-0.0, np.inf)
    z[0, 1] = complex(np.nan, -0.0)
    x = _rand(3)
    model = tox.export(lambda z, x: (z * 2.0, xp.real(z) + x), xp.asarray(z), x)
    assert {p.key: p.value for p in model.metadata_props}["tenferro.complex_pairs"] == "z,output_0"
    fn = tox.import_model(model)
    pairs = np.stack([z.real, z.imag], axis=-1)
    with np.errstate(invalid="ignore"):  # inf * 0 in the complex product: NaN, as exported
        twice = z * 2
    for arg in (xp.asarray(z), z, xp.asarray(pairs)):
        doubled, summed = fn(arg, x)
        np.testing.assert_array_equal(np.asarray(doubled), np.stack([twice.real, twice.imag], axis=-1))
        np.testing.assert_array_equal(np.asarray(summed), z.real + np.asarray(x).astype(z.real.dtype))
    other = np.complex128 if ctype == np.complex64 else np.complex64
    with pytest.raises(DTypeError, match=f"input 'z' holds {np.dtype(ctype).name} values"):
        fn(xp.asarray(z.astype(other)), x)
    with pytest.raises(DTypeError, match=r"pairs, pass xp.stack\(\[xp.real\(x\), xp.imag\(x\)\]"):
        fn(xp.asarray(pairs), xp.asarray(np.ones(3, np.complex64)))
    assert "tenferro.complex_pairs" not in {p.key for p in tox.export(lambda x: x * 2.0, x).metadata_props}


def _model(nodes: list, opset: int = 18, inputs: Any = None) -> Any:
    inputs = inputs or [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])]
    out = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])
    g = helper.make_graph(nodes, "g", inputs, [out])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def test_known_zero_d_values_stay_arrays() -> None:
    """Constant-folded 0-d values (NumPy returns scalars for them) feed every rule: Mod of two
    constants, Gather at a 0-d index, then Reshape; a hunt over random exports found the Reshape
    refusing the scalar."""
    T = onnx.TensorProto

    def const(name: str, dtype: int, dims: list, vals: list) -> Any:
        return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, dtype, dims, vals))

    nodes = [const("c", T.FLOAT, [], [5.5]), const("d", T.FLOAT, [], [2.0]), const("s", T.INT64, [1], [1]),
             const("v", T.FLOAT, [3], [1.0, 2.0, 4.0]), const("i", T.INT64, [], [2]),
             helper.make_node("Mod", ["c", "d"], ["m"], fmod=1),
             helper.make_node("Reshape", ["m", "s"], ["r"]),
             helper.make_node("Gather", ["v", "i"], ["g"]), helper.make_node("Reshape", ["g", "s"], ["h"]),
             helper.make_node("Add", ["x", "r"], ["a"]), helper.make_node("Add", ["a", "h"], ["y"])]
    out = helper.make_tensor_value_info("y", T.FLOAT, [1])
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [1])], [out])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    np.testing.assert_array_equal(np.asarray(tox.import_model(model)(xp.asarray(np.ones(1, np.float32)))),
                                  np.array([6.5], np.float32))


def test_low_opset_and_unsupported_ops_raise() -> None:
    with pytest.raises(tox.OpsetError, match="opset 13.*convert_version") as err:
        tox.import_model(_model([helper.make_node("Relu", ["x"], ["y"])], opset=13))
    assert isinstance(err.value, ValueError)
    fn = tox.import_model(_model([helper.make_node("Hardmax", ["x"], ["y"], name="hm7")]))
    with pytest.raises(tox.UnsupportedOnnxOpError, match="'hm7'.*Hardmax") as err2:
        fn(_rand(2))
    assert isinstance(err2.value, NotImplementedError) and isinstance(err2.value, TenferroError)
    fn = tox.import_model(_model([helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect", name="pad1")],
                                 inputs=[helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2]),
                                         helper.make_tensor_value_info("p", onnx.TensorProto.INT64, [2])]))
    with pytest.raises(tox.UnsupportedOnnxOpError, match="pad1"):
        fn(_rand(2), xp.asarray(np.array([1, 1])))
