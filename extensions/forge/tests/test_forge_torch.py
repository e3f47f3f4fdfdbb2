"""torch:cpu candidates end to end: the task's torch contract, the torch scan rules, operands
as tensors with the NumPy cases' layouts, an honest torch candidate (sign in two passes)
verified, benchmarked and promoted, the promoted kernel run by dispatch on torch:cpu eagerly
and compiled (a counter proves it), revoke falls back; torch cheats rejected with their
reason."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import tenferro_runtime as tr
from forge_helpers import FIXTURES, SMALL, gated
from tenferro_forge import gates, registry
from tenferro_forge import plugin as forge_plugin
from tenferro_forge.errors import ForgeArgumentError
from tenferro_forge.scan import scan
from tenferro_forge.task import new_task
from tenferro_numpy import plugin as numpy_plugin
from tenferro_runtime import array_api as xp
from tenferro_runtime.runtime import Runtime, use_runtime
from tenferro_torch import plugin as torch_plugin

EXAMPLE = FIXTURES.parents[1] / "examples" / "sign_torch"
SIGN_SHAPES = [(512, 1024)]


def _task(directory, candidate, op, shapes=SMALL, params=None):
    new_task(directory, op, device="torch:cpu", dtype="float32", shapes=shapes, params=params)
    for f in candidate.iterdir():
        if f.is_file():
            shutil.copyfile(f, directory / f.name)
    return directory


@pytest.fixture(scope="module")
def sign_gates(tmp_path_factory):
    """The honest torch example verified and benchmarked once: (dir, verify, bench)."""
    d = _task(tmp_path_factory.mktemp("sign") / "task", EXAMPLE, "sign", shapes=SIGN_SHAPES)
    return gated(d, tmp_path_factory.mktemp("bench_registry"))


def test_torch_task_states_the_torch_contract(tmp_path):
    d = new_task(tmp_path / "t", "reduce_sum", device="torch:cpu", dtype="float64", shapes=["64x8"],
                 params={"axes": [1]})
    task = json.loads((d / "task.json").read_text())
    assert task["backend"] == "torch" and task["languages"] == ["torch"] and task["device"] == "torch:cpu"
    prompt = (d / "PROMPT.md").read_text()
    assert "`torch.Tensor`s on the CPU" in prompt and "dtype `torch.float64`" in prompt
    assert "torch.compile" in prompt and "set_num_threads" in prompt and "no storage shared" in prompt
    numpy_prompt = new_task(tmp_path / "n", "neg", device="numpy:cpu", dtype="float32",
                            shapes=["8"]).joinpath("PROMPT.md").read_text()
    assert "torch.compile" not in numpy_prompt and "exact `numpy.ndarray`" in numpy_prompt
    for device in ("torch:cuda", "torch:", "triton:cuda"):  # torch:cuda:N takes Triton candidates
        with pytest.raises(ForgeArgumentError, match="torch:cuda:N \\(Triton candidates\\)"):
            new_task(tmp_path / "x", "neg", device=device, dtype="float32", shapes=["8"])
    with pytest.raises(ValueError):  # the builtin a user catches
        new_task(tmp_path / "x", "neg", device="torch:cuda", dtype="float32", shapes=["8"])


@pytest.mark.parametrize(
    "line, reason",
    [
        ("f = torch.compile(torch.sign)", "torch.compile"),
        ("torch.set_num_threads(16)", "thread count"),
        ("torch.backends.mkldnn.enabled = False", "global state"),
        ("k = torch.ops.aten.sign", "registered kernels"),
        ("from tenferro_torch.ops.elementwise import KERNELS", "baseline"),
        ("import torch.utils.cpp_extension", "cpp_extension"),
        ("y = x.half()", "dtype downcast"),
        ("y = x.to(torch.bfloat16)", "dtype downcast"),
        ("y = torch._C._nn", "private"),
        ("p = x.untyped_storage().data_ptr()", "raw storage"),
        ("with torch.autocast('cpu'): pass", "autocast"),
        ("class T(torch.Tensor): pass", "tensor subclass"),
        ("class L:\n    def __torch_function__(self, *a): pass", "lazy or array-like"),
        ("torch.save(x, 'cache.pt')", "file writes"),
        ("fut = torch.jit.fork(torch.sign, x)", "torch.jit"),
    ],
)
def test_torch_scan_names_each_cheat(line, reason):
    src = f"import torch\n{line}\n\ndef kernel(x):\n    return torch.sign(x)\n"
    found = scan(src, language="torch", dtype="float32", allowed_extra=("torch",))
    assert any(reason in f["reason"] for f in found), found
    plain = "import torch\n\ndef kernel(x):\n    y = torch.empty_like(x)\n    return torch.sign(x, out=y)\n"
    assert scan(plain, language="torch", dtype="float32", allowed_extra=("torch",)) == []


def test_float_is_a_downcast_only_for_float64_torch_tasks():
    src = "import torch\n\ndef kernel(x):\n    return x.float().double()\n"
    assert any("dtype downcast" in f["reason"] for f in scan(src, language="torch", dtype="float64"))
    assert scan(src, language="torch", dtype="float32", allowed_extra=("torch",)) == []


def test_operands_keep_their_layout_as_tensors():
    from tenferro_forge.torch_io import TorchIO

    io = TorchIO("float32")
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    row = np.arange(6, dtype=np.float32)
    zero_d = np.ones((), np.float32)
    cases = [base, base[:, ::2], base.T, np.broadcast_to(row, (5, 6)), base[:0], zero_d]
    tensors = io.inputs(cases)
    for a, t in zip(cases, tensors):
        np.testing.assert_array_equal(t.numpy(), a)
        if a.size > 1:
            assert tuple(s * a.itemsize for s in t.stride()) == a.strides
    assert tensors[3].stride()[0] == 0  # the broadcast row stays a stride-0 view
    assert io.inputs([base])[0] is tensors[0]  # the same object for the identity-cache probe
    assert io.overlaps(tensors[0][1:], [tensors[0]]) and not io.overlaps(tensors[0].clone(), [tensors[0]])


@given(
    st.lists(st.integers(0, 4), min_size=0, max_size=3),
    st.integers(1, 3),
    st.booleans(),
    st.integers(0, 3),
    st.sampled_from(["float16", "float32", "float64"]),
)
@example([2, 0, 3], 2, True, 1, "float16")
@example([0], 1, False, 1, "float16")
def test_any_numpy_layout_becomes_the_same_tensor_layout(shape, step, transpose, broadcast_axis, dtype):
    """Strided (step), transposed and broadcast (a stride-0 axis) views, 0-d and 0-size: the
    tensor has the array's values and strides, in a storage of its own unless shared as is."""
    from tenferro_forge.torch_io import TorchIO

    shape = tuple(shape)
    a = np.random.default_rng(len(shape)).standard_normal(shape[:-1] + (step * shape[-1],) if shape else ())
    a = a.astype(dtype)[..., ::step] if shape else a.astype(dtype)
    if transpose:
        a = a.T
    if a.ndim and broadcast_axis < a.ndim:
        first = tuple(slice(0, 1) if i == broadcast_axis else slice(None) for i in range(a.ndim))
        a = np.broadcast_to(a[first], a.shape)
    io = TorchIO(dtype)
    (t,) = io.inputs([a])
    assert str(t.dtype) == f"torch.{dtype}" and tuple(t.shape) == a.shape
    np.testing.assert_array_equal(t.numpy(), a)
    if a.size:
        assert all(s * a.itemsize == b for s, b, n in zip(t.stride(), a.strides, a.shape) if n > 1)
    if a.size:  # a 0-size array has no memory to share
        assert np.shares_memory(t.numpy(), a) == (a.flags.c_contiguous and a.flags.writeable)


def test_honest_torch_candidate_passes_both_gates(sign_gates):
    d, verified, benched = sign_gates
    assert verified.ok, verified.findings
    assert verified.details["calls"] >= 20
    assert benched.ok, benched.findings  # a measured speedup: the lower bound >= 1.10x
    (stats,) = benched.details["shapes"]
    assert stats["ci_low"] >= 1.10 and stats["calls"] >= 30
    assert benched.details["threads"] >= 1


def _runtime():
    return Runtime([numpy_plugin, torch_plugin, forge_plugin], check_kernels=True)


def _calls(rt, x):
    """(eager result, compiled result, promoted-kernel calls during both) on torch:cpu."""
    before = sum(forge_plugin.CALLS.values())
    with use_runtime(rt):
        t = xp.asarray(x, device="torch:cpu")
        eager = np.asarray(xp.sign(t))
        compiled = np.asarray(tr.compile(lambda a: xp.sign(a))(t))
    return eager, compiled, sum(forge_plugin.CALLS.values()) - before


def test_promoted_torch_kernel_runs_in_dispatch_and_revoke_falls_back(sign_gates, monkeypatch):
    monkeypatch.setenv("TENFERRO_FORGE_COUNT", "1")
    d, verified, benched = sign_gates
    entry = registry.promote(d, verify_report=verified, bench_report=benched)
    kid = entry["id"]
    assert kid == "torch_sign_torch-cpu_float32_512x1024_v1"
    assert entry["backend"] == "torch" and entry["device"] == "torch:cpu"
    assert entry["versions"]["torch"].startswith("2.")
    x = np.random.default_rng(0).standard_normal((500, 1000)).astype(np.float32)  # bucket 512x1024
    x[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    want = np.sign(x)
    rt = _runtime()
    assert any(f"promoted kernel {kid} serves sign on torch:cpu" in line
               for r in rt.reports for line in r.registered)
    eager, compiled, calls = _calls(rt, x)
    np.testing.assert_array_equal(eager, want)
    np.testing.assert_array_equal(compiled, want)
    assert calls == 2  # once eagerly, once in the compiled plan
    for other in (x[:100], x.astype(np.float64)):  # another bucket, another dtype: the default
        e, _, n = _calls(rt, other)
        np.testing.assert_array_equal(e, np.sign(other))
        assert n == 0
    with use_runtime(rt):  # numpy:cpu never sees a torch entry
        before = sum(forge_plugin.CALLS.values())
        np.testing.assert_array_equal(np.asarray(xp.sign(xp.asarray(x))), want)
        assert sum(forge_plugin.CALLS.values()) == before
    registry.revoke(kid)
    eager, compiled, calls = _calls(_runtime(), x)
    np.testing.assert_array_equal(eager, want)
    np.testing.assert_array_equal(compiled, want)
    assert calls == 0


@pytest.mark.parametrize(
    "fixture, op, params, check",
    [
        ("torch_input_mutation", "sign", None, "input_mutation"),
        ("torch_output_alias", "reduce_max", {"axes": [1]}, "fresh_output"),
        ("torch_uninitialized_output", "reduce_max", {"axes": [1]}, "stale_memory"),
        ("torch_precision_downcast", "reduce_sum", {"axes": [1]}, "scan"),
    ],
)
def test_torch_cheats_rejected_with_their_reason(tmp_path, fixture, op, params, check):
    d = _task(tmp_path / "t", FIXTURES / fixture, op, params=params)
    report = gates.verify(d)
    assert not report.ok and check in report.checks(), report.findings
    if fixture == "torch_output_alias":
        assert any("shares storage with an input" in f["reason"] for f in report.findings)
    if fixture == "torch_precision_downcast":  # also caught by the dtype-tied tolerance alone
        hidden = gates.verify(d, skip_scan=True)
        assert not hidden.ok and "correctness" in hidden.checks(), hidden.findings
