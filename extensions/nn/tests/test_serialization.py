"""safetensors serialization: bit-exact round trips of every dtype a device has (0-d, 0-size,
non-contiguous, NaN payloads, -0.0), metadata, models, pytree state, PyTorch interop and bad
input."""

from __future__ import annotations

import json
import os
import tempfile
from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tenferro_core.errors import ArgumentError, DTypeError
from tenferro_nn import Module, StateDictError
from tenferro_nn.serialization import (
    MissingFileError,
    SerializationError,
    load,
    load_metadata,
    load_model,
    load_state,
    save,
    save_model,
    save_state,
)
from tenferro_runtime import array_api as xp
from tenferro_runtime import default_runtime
from tenferro_runtime.pytree import tree_leaves
from tenferro_runtime.tensor import Tensor


def _dtypes(device: str) -> list[str]:
    return sorted(d.name for d in default_runtime().device(device).dtypes)


def _bits(dtype: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Random bit patterns of `dtype` (NaN payloads, infinities, subnormals, -0.0 included)."""
    from tenferro_core import dtypes as D

    npd = D.as_dtype(dtype).numpy
    n = int(np.prod(shape))
    raw = np.random.default_rng(seed).integers(0, 256, size=n * npd.itemsize, dtype=np.uint8)
    if dtype == "bool":
        raw %= 2
    a = raw.view(npd).reshape(shape)
    if npd.kind in "fc" and n >= 2:  # make sure the awkward values are there
        flat = a.reshape(-1).view(np.dtype(f"u{npd.itemsize // (2 if npd.kind == 'c' else 1)}"))
        sign = 1 << (flat.dtype.itemsize * 8 - 1)
        flat[0] = sign  # -0.0
        flat[1] = np.iinfo(flat.dtype).max ^ sign  # a NaN with every payload bit set
    return a


def _same(a: Tensor, b: Tensor) -> None:
    assert a.dtype is b.dtype and a.shape == b.shape
    assert np.ascontiguousarray(a.numpy()).tobytes() == np.ascontiguousarray(b.numpy()).tobytes()


@given(data=st.data(), shape=st.lists(st.integers(0, 4), max_size=3).map(tuple),
       seed=st.integers(0, 2**32 - 1), transposed=st.booleans())
def test_round_trip_is_bit_exact_for_every_dtype_of_the_device(backend_device, data, shape, seed, transposed):
    dtype = data.draw(st.sampled_from(_dtypes(backend_device)), label="dtype")
    t = xp.asarray(_bits(dtype, shape, seed))
    if transposed and t.ndim >= 2:
        t = xp.permute_dims(t, tuple(reversed(range(t.ndim))))  # not contiguous
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.safetensors")
        scalar = xp.reshape(xp.reshape(t, (-1,))[:1], ()) if t.size else xp.asarray(0)
        save(path, {"t": t, "scalar": scalar})
        back = load(path)
    assert list(back) == ["t", "scalar"]
    _same(back["t"], t)
    _same(back["scalar"], scalar)
    assert str(back["t"].device) == backend_device


def test_every_dtype_in_one_file_with_metadata(tmp_path, backend_device):
    tensors = {f"x_{d}": xp.asarray(_bits(d, (3, 2), i)) for i, d in enumerate(_dtypes(backend_device))}
    tensors["numpy"] = np.arange(4, dtype=np.int16)
    save(tmp_path / "all.safetensors", tensors, metadata={"epoch": "3"})
    back = load(tmp_path / "all.safetensors")
    assert list(back) == list(tensors)
    for k, t in tensors.items():
        _same(back[k], xp.asarray(t))
    meta = load_metadata(tmp_path / "all.safetensors")
    assert meta["epoch"] == "3" and meta["format"] == "tenferro" and meta["tenferro_nn"] == "0.1.0"
    assert json.loads(meta["tenferro.dtypes"])["numpy"] == "int16"
    save(tmp_path / "pt.safetensors", {"a": xp.asarray(1.0)}, metadata={"format": "pt"})
    assert load_metadata(tmp_path / "pt.safetensors")["format"] == "pt"  # for readers that demand it


def test_load_onto_another_device(tmp_path):
    save(tmp_path / "a.safetensors", {"a": xp.asarray([1.0, 2.0], device="numpy:cpu")})
    assert str(load(tmp_path / "a.safetensors", device="numpy:cpu")["a"].device) == "numpy:cpu"


# ---- models ---------------------------------------------------------------------------------
class Linear(Module):
    """PyTorch's nn.Linear parameter names and layout."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = xp.zeros((n_out, n_in), dtype=xp.float32)
        self.bias = xp.zeros(n_out, dtype=xp.float32)

    def forward(self, x):
        return x @ self.weight.mT + self.bias


class LayerNorm(Module):
    """PyTorch's nn.LayerNorm over the last axis."""

    def __init__(self, n, eps=1e-5):
        super().__init__()
        self.weight = xp.ones(n, dtype=xp.float32)
        self.bias = xp.zeros(n, dtype=xp.float32)
        self.eps = eps

    def forward(self, x):
        mu = xp.mean(x, axis=-1, keepdims=True)
        var = xp.mean((x - mu) ** 2, axis=-1, keepdims=True)
        return (x - mu) / xp.sqrt(var + self.eps) * self.weight + self.bias


class Net(Module):
    def __init__(self, n_in=4, n_out=3):
        super().__init__()
        self.fc = Linear(n_in, n_out)
        self.norm = LayerNorm(n_out)
        self.register_buffer("steps", xp.asarray(0))

    def forward(self, x):
        return self.norm(self.fc(x))


def _torch_net():
    torch = pytest.importorskip("torch")

    class TorchNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)
            self.norm = torch.nn.LayerNorm(3)
            self.register_buffer("steps", torch.tensor(0))

    torch.manual_seed(0)
    net = TorchNet()
    with torch.no_grad():
        for p in net.parameters():
            p.normal_()
    return torch, net


X = np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32)


def test_a_pytorch_state_dict_loads_into_an_equivalent_model(tmp_path):
    torch, tnet = _torch_net()
    from safetensors.torch import save_file

    save_file(tnet.state_dict(), tmp_path / "torch.safetensors")
    back = load(tmp_path / "torch.safetensors")
    assert sorted(back) == ["fc.bias", "fc.weight", "norm.bias", "norm.weight", "steps"]
    np.testing.assert_array_equal(back["fc.weight"].numpy(), tnet.fc.weight.detach().numpy())
    net = Net()
    assert load_model(net, tmp_path / "torch.safetensors") == ([], [])
    want = tnet.norm(tnet.fc(torch.from_numpy(X))).detach().numpy()
    np.testing.assert_allclose(net(xp.asarray(X)).numpy(), want, rtol=1e-5, atol=1e-5)


def test_a_saved_model_loads_into_pytorch(tmp_path):
    torch, tnet = _torch_net()
    from safetensors.torch import load_file

    net = Net()
    rng = np.random.default_rng(1)
    net.load_state_dict({k: rng.standard_normal(t.shape).astype(np.float32) if t.dtype.kind == "f" else
                         np.asarray(7) for k, t in net.state_dict().items()})
    save_model(net, tmp_path / "m.safetensors")
    tnet.load_state_dict(load_file(tmp_path / "m.safetensors"))
    assert int(tnet.steps) == 7
    want = tnet.norm(tnet.fc(torch.from_numpy(X))).detach().numpy()
    np.testing.assert_allclose(net(xp.asarray(X)).numpy(), want, rtol=1e-5, atol=1e-5)


def test_a_saved_file_loads_with_pytorch_to_equal_values(tmp_path, backend_device):
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    names = [d for d in _dtypes(backend_device) if d not in ("uint16", "uint32", "uint64")]
    tensors = {d: xp.asarray(_bits(d, (2, 3), i)) for i, d in enumerate(names)}
    save(tmp_path / "x.safetensors", tensors)
    got = load_file(tmp_path / "x.safetensors")
    for d, t in tensors.items():
        g = got[d]
        if t.dtype.kind == "c":  # stored as the real/imaginary float view
            g = torch.view_as_complex(g)
        if d == "bfloat16":
            g = g.view(torch.int16)
        assert g.numpy().tobytes() == t.numpy().tobytes() and tuple(g.shape) == t.shape, d


def test_native_pytorch_dtypes_load(tmp_path, backend_device):
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    src = {"c": torch.tensor([1 + 2j, -3j], dtype=torch.complex64), "h": torch.tensor([0.5, -0.0]).half()}
    save_file(src, tmp_path / "c.safetensors")
    back = load(tmp_path / "c.safetensors")
    assert back["c"].dtype.name == "complex64" and back["c"].numpy().tolist() == [1 + 2j, -3j]
    assert back["h"].numpy().tobytes() == src["h"].numpy().tobytes()


def test_load_model_mismatch_names_the_key_and_changes_nothing(tmp_path):
    net = Net()
    wrong = {**net.state_dict(), "fc.weight": xp.zeros((3, 5), dtype=xp.float32)}
    save(tmp_path / "small.safetensors", wrong)
    before = {k: t.numpy().copy() for k, t in net.state_dict().items()}
    with pytest.raises(StateDictError, match=r"'fc.weight' has shape \[3, 5\]"):
        load_model(net, tmp_path / "small.safetensors")
    save(tmp_path / "partial.safetensors", {"fc.bias": xp.ones(3, dtype=xp.float32)})
    with pytest.raises(StateDictError, match="missing key"):
        load_model(net, tmp_path / "partial.safetensors")
    for k, t in net.state_dict().items():
        np.testing.assert_array_equal(t.numpy(), before[k])
    assert load_model(net, tmp_path / "partial.safetensors", strict=False).missing_keys[0] == "fc.weight"
    assert net.fc.bias.numpy().tolist() == [1, 1, 1]
    with pytest.raises(ArgumentError, match="Module"):
        save_model({"a": xp.asarray(1)}, tmp_path / "x.safetensors")


# ---- pytree state ---------------------------------------------------------------------------
class Moments(NamedTuple):
    m: Tensor
    v: Tensor


def _state(n=2, scale=1.0):
    rng = np.random.default_rng(5)
    return {"step": 3, "lr": 0.01, "name": "adam", "amsgrad": False, "clip": None,
            "state": [Moments(xp.asarray(rng.standard_normal((2, 3)) * scale),
                              xp.asarray(rng.standard_normal(3) * scale)) for _ in range(n)]}


def test_state_round_trip_under_pytree_paths(tmp_path, backend_device):
    state = _state()
    save_state(tmp_path / "opt.safetensors", state)
    assert sorted(load(tmp_path / "opt.safetensors")) == ["state.0.m", "state.0.v", "state.1.m", "state.1.v"]
    like = _state(scale=0.0)
    like["step"] = 0
    back = load_state(tmp_path / "opt.safetensors", like=like)
    plain = (back["step"], back["lr"], back["name"], back["amsgrad"], back["clip"])
    assert plain == (3, 0.01, "adam", False, None)
    assert type(back["state"][1]) is Moments
    for a, b in zip(back["state"], state["state"]):
        _same(a.m, b.m)
        _same(a.v, b.v)
        assert str(a.m.device) == backend_device


def test_state_with_a_module_and_special_floats(tmp_path):
    net = Net()
    tree = {"model": net, "best": float("nan"), "scale": float("-inf")}
    save_state(tmp_path / "s.safetensors", tree)
    assert "model.fc.weight" in load(tmp_path / "s.safetensors")
    back = load_state(tmp_path / "s.safetensors", like={"model": Net(), "best": 0.0, "scale": 1.0})
    assert type(back["model"]) is Net and np.isnan(back["best"]) and back["scale"] == float("-inf")
    for a, b in zip(back["model"].state_dict().values(), net.state_dict().values()):
        _same(a, b)


def test_an_optimizer_state_round_trips(tmp_path, backend_device):
    optim = pytest.importorskip("tenferro_nn.optim")
    rng = np.random.default_rng(2)
    params = {"w": xp.asarray(rng.standard_normal((3, 2))), "b": xp.asarray(rng.standard_normal(2))}
    opt = optim.Adam(lr=0.1)
    state = opt.init(params)
    for _ in range(2):
        grads = {k: xp.asarray(rng.standard_normal(v.shape)) for k, v in params.items()}
        params, state = opt.update(params, grads, state)
    save_state(tmp_path / "adam.safetensors", {"params": params, "opt": state})
    back = load_state(tmp_path / "adam.safetensors", like={"params": params, "opt": opt.init(params)})
    assert "opt.slots.exp_avg.0" in load(tmp_path / "adam.safetensors")
    for a, b in zip(tree_leaves(back), tree_leaves({"params": params, "opt": state})):
        _same(a, b)


def test_state_mismatch_names_the_first_differing_path(tmp_path):
    save_state(tmp_path / "s.safetensors", _state())
    with pytest.raises(StateDictError, match=r"at 'state.2' `like` holds an entry that the file lacks"):
        load_state(tmp_path / "s.safetensors", like=_state(3))
    bad = _state()
    bad["state"][1] = Moments(bad["state"][1].m, xp.zeros(4))
    with pytest.raises(StateDictError, match=r"'state.1.v' is float64\[3\] in the file but float64\[4\]"):
        load_state(tmp_path / "s.safetensors", like=bad)
    bad = _state()
    bad["step"] = xp.asarray(0)
    with pytest.raises(StateDictError, match="at 'step' the file holds int but `like` holds tensor"):
        load_state(tmp_path / "s.safetensors", like=bad)
    with pytest.raises(StateDictError, match="at 'lr' the file holds an entry that `like` lacks"):
        load_state(tmp_path / "s.safetensors", like={k: v for k, v in _state().items() if k != "lr"})
    save(tmp_path / "flat.safetensors", {"a": xp.asarray(1.0)})
    with pytest.raises(SerializationError, match="not written by save_state"):
        load_state(tmp_path / "flat.safetensors", like={"a": xp.asarray(1.0)})


def test_state_with_a_value_that_is_not_plain(tmp_path):
    with pytest.raises(ArgumentError, match=r"'state.0' holds a object"):
        save_state(tmp_path / "s.safetensors", {"state": [object()]})
    assert not os.listdir(tmp_path)


# ---- bad input ------------------------------------------------------------------------------
def test_missing_file_and_not_safetensors(tmp_path):
    with pytest.raises(MissingFileError, match="no file .*nope.safetensors") as info:
        load(tmp_path / "nope.safetensors")
    assert isinstance(info.value, FileNotFoundError)
    (tmp_path / "bad.safetensors").write_bytes(b"this is not a safetensors file at all")
    (tmp_path / "empty.safetensors").write_bytes(b"")
    for name in ("bad.safetensors", "empty.safetensors"):
        with pytest.raises(SerializationError, match=f"{name}' is not a safetensors file"):
            load(tmp_path / name)
        with pytest.raises(SerializationError, match="not a safetensors file"):
            load_model(Net(), tmp_path / name)
    with pytest.raises(MissingFileError, match="folder"):
        save(tmp_path / "no" / "such" / "x.safetensors", {"a": xp.asarray(1)})


def test_bad_values_keys_and_metadata_touch_no_file(tmp_path):
    path = tmp_path / "x.safetensors"
    save(path, {"keep": xp.asarray([1, 2])})
    cases = [
        (({"a": [1, 2]},), ArgumentError, "'a' holds a list; expected a tenferro Tensor"),
        (({1: xp.asarray(1)},), ArgumentError, "names must be str"),
        (({"__metadata__": xp.asarray(1)},), ArgumentError, "__metadata__"),
        (([xp.asarray(1)],), ArgumentError, "expected a dict"),
        (({"a": xp.asarray(1)}, {"k": 1}), ArgumentError, "metadata must map str -> str"),
        (({"a": xp.asarray(1)}, {"tenferro.dtypes": "x"}), ArgumentError, "reserved"),
        (({"a": np.array(["s"])},), DTypeError, "'a'"),
    ]
    for args, err, msg in cases:
        with pytest.raises(err, match=msg):
            save(path, *args)
    assert list(load(path)) == ["keep"] and sorted(os.listdir(tmp_path)) == ["x.safetensors"]
    with pytest.raises(ArgumentError, match="path must be a str"):
        load(3)


def test_a_dtype_the_device_lacks_is_named(tmp_path, backend_device):
    from tenferro_core import dtypes as D

    lacking = [d for d in D.ALL_DTYPES if d not in default_runtime().device(backend_device).dtypes]
    other = "torch:cpu" if backend_device == "numpy:cpu" else "numpy:cpu"
    if not lacking or other.partition(":")[0] not in default_runtime().backends:
        pytest.skip("every dtype is supported here")
    d = lacking[0]
    save(tmp_path / "x.safetensors", {"w": xp.asarray(np.zeros(2, d.numpy), device=other)})
    with pytest.raises(DTypeError, match=f"'w' is {d}, which device {backend_device} does not support"):
        load(tmp_path / "x.safetensors")
