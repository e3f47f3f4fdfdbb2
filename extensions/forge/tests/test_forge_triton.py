"""Triton candidates (tasks on torch:cuda:N): the example verified, each Triton cheat rejected
with its reason, `bench` refused with a typed error where no GPU runs the kernels, and a
promoted torch:cuda entry never chosen on torch:cpu.

Every candidate runs in Forge's child process, which sets TRITON_INTERPRET=1 itself (before
importing triton) when it finds no GPU. Here the variable is set for each test (the children
inherit it) unless TENFERRO_TRITON_REAL=1 (what `make gpu-check` sets, as in the triton
plugin's tests), where they verify on the GPU. Only the baseline test runs Triton in this
process: triton reads TRITON_INTERPRET when a kernel is defined, not when it is imported, so
it does not matter which test folder imported triton first."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from forge_helpers import FIXTURES
from tenferro_forge import cli, gates, registry
from tenferro_forge.errors import ForgeArgumentError, ForgeError, GPURequiredError
from tenferro_forge.scan import scan
from tenferro_forge.task import new_task

EXAMPLE = Path(__file__).parents[1] / "examples" / "row_max_triton"
REAL = os.environ.get("TENFERRO_TRITON_REAL") == "1"
SHAPES = [(4, 3000)]
"""Small: the interpreter runs each Triton program in NumPy steps."""


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    if not REAL:
        monkeypatch.setenv("TRITON_INTERPRET", "1")


def triton_task(directory: Path, candidate: Path | None, shapes=SHAPES) -> Path:
    new_task(directory, "reduce_max", device="torch:cuda:0", dtype="float32", shapes=shapes,
             params={"axes": [1]})
    if candidate is not None:
        for name in ("kernel.py", "metadata.json"):
            shutil.copyfile(candidate / name, directory / name)
    return directory


def test_a_triton_task_names_its_language_contract_and_rules(tmp_path):
    d = triton_task(tmp_path / "t", None)
    task = json.loads((d / "task.json").read_text())
    assert task["languages"] == ["triton"] and task["backend"] == "torch"
    prompt = (d / "PROMPT.md").read_text()
    assert "@triton.jit" in prompt and "TRITON_INTERPRET=1" in prompt and "triton.autotune" in prompt
    assert "only\n  allocate" in prompt
    for device in ("torch:cuda", "torch:cuda:x", "cuda:0", "triton:cuda:0"):
        with pytest.raises(ForgeArgumentError, match="torch:cuda:N"):
            new_task(tmp_path / "x", "neg", device=device, dtype="float32", shapes=["8"])


def test_the_example_passes_verification_under_the_interpreter_and_bench_needs_a_gpu(tmp_path, capsys):
    d = triton_task(tmp_path / "ok", EXAMPLE)
    report = gates.verify(d, timeout_s=120)
    assert report.ok, report.findings
    assert report.details["calls"] >= 25
    assert report.details["ran_on"] == ("cuda:0" if REAL else "cpu (Triton interpreter)")
    if REAL:
        return
    with pytest.raises(GPURequiredError, match="needs a CUDA GPU") as err:
        gates.bench(d, calls=30)
    assert isinstance(err.value, ForgeError) and isinstance(err.value, RuntimeError)
    assert "interpreter" in str(err.value) and not (d / "bench.json").exists()
    with pytest.raises(GPURequiredError):  # promote re-runs the bench: refused the same way
        registry.promote(d, verify_report=report)
    assert not (d / "promotion.json").exists() and registry.entries() == []
    assert cli.main(["bench", str(d)]) == 2  # the CLI: the typed error's message, exit status 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


REJECTED = {
    "triton_returns_reference": {"torch_compute": "amax", "no_kernel": "without launching"},
    "triton_identity_cache": {"identity_cache": "caching by identity"},
    "triton_input_mutation": {"input_mutation": "changed its input"},
    "triton_partial_output": {"correctness|stale_memory": "shape (6, 200)"},  # garbage, or the poison
}


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_triton_cheats_are_rejected_with_their_reason(tmp_path, name):
    d = triton_task(tmp_path / name, FIXTURES / name, shapes=[(6, 200)])
    report = gates.verify(d, timeout_s=120)
    assert not report.ok
    for checks, words in REJECTED[name].items():
        hits = [f["reason"] for f in report.findings if f["check"] in checks.split("|")]
        assert hits and any(words in r for r in hits), report.findings


@pytest.mark.parametrize(
    "line, reason",
    [
        ("from triton.testing import do_bench", "timers"),
        ("import triton.runtime.driver", "drivers"),
        ("k = triton.autotune(configs=[], key=[])", "autotune"),
        ("y = tl.inline_asm_elementwise('mov', '=r', [], dtype=tl.int32, is_pure=True, pack=1)",
         "inline assembly"),
        ("triton.knobs.runtime.interpret = True", "global switches"),
        ("torch.cuda.synchronize()", "torch.cuda"),
        ("from triton.language import _core", "private triton"),
        ("y = tl.load(p).to(tl.float16)", "dtype downcast"),
    ],
)
def test_the_scan_names_triton_escapes(line, reason):
    src = (EXAMPLE / "kernel.py").read_text() + f"\n\ndef extra(p):\n    {line}\n"
    hits = [f["reason"] for f in scan(src, language="triton", allowed_extra=("torch", "triton"))]
    assert any(reason in h for h in hits), hits


def test_the_scan_keeps_other_modules_out_of_jit_kernels():
    src = (EXAMPLE / "kernel.py").read_text().replace(
        "    nan = tl.max((acc != acc).to(tl.int32), 0)", "    nan = torch.isnan(acc).any()"
    )
    hits = [f["reason"] for f in scan(src, language="triton", allowed_extra=("torch", "triton"))]
    assert hits == ["torch inside @triton.jit _max_nan: a kernel computes with triton.language only "
                    "(other modules run only in the interpreter)"]


def test_the_scan_accepts_the_example_and_wants_a_jit_kernel():
    src = (EXAMPLE / "kernel.py").read_text()
    assert scan(src, language="triton", allowed_extra=("torch", "triton")) == []
    plain = "import torch\n\n\ndef kernel(x, *, axes):\n    return torch.amax(x, dim=axes)\n"
    hits = [f["reason"] for f in scan(plain, language="triton", allowed_extra=("torch", "triton"))]
    assert any("no top-level @triton.jit kernel" in h for h in hits)
    assert scan(src, language="torch", allowed_extra=("torch",))  # triton is not a torch candidate's


class _Bench:
    ok = True
    details = {"shapes": [{"shape": [8, 262144], "ci_low": 2.0, "calls": 30}], "gate": 1.1}


def test_a_promoted_torch_cuda_entry_is_chosen_on_its_gpu_only_never_on_torch_cpu(tmp_path):
    from types import SimpleNamespace

    from tenferro_core.avals import Aval
    from tenferro_core.dtypes import float32
    from tenferro_forge import plugin
    from tenferro_runtime import array_api as xp
    from tenferro_runtime.runtime import Runtime, use_runtime

    d = triton_task(tmp_path / "p", EXAMPLE, shapes=[(8, 262144)])
    task = json.loads((d / "task.json").read_text())
    entry = registry.add(task, d, language="triton", author="test", verify_report=None, bench_report=_Bench())
    assert entry["device"] == "torch:cuda:0" and entry["backend"] == "torch"
    assert entry["id"] == "triton_reduce_max_torch-cuda-0_float32_8x262144_v1"
    fp_cpu, fp_gpu = registry.device_fingerprint("torch:cpu"), registry.device_fingerprint("torch:cuda:0")
    assert fp_cpu != fp_gpu == entry["device_fingerprint"]  # the GPU model and triton version count

    rt = Runtime.from_entry_points()
    notes = [line for r in rt.reports if r.name in ("forge", "tenferro_forge") for line in r.registered]
    assert any(f"promoted kernel {entry['id']} serves reduce_max on torch:cuda:0" in n for n in notes), notes
    chooser = rt.kernels[("torch", "reduce_max")][0]
    assert isinstance(chooser, plugin.Chooser) and [e["id"] for e in chooser.entries] == [entry["id"]]
    x = np.random.default_rng(0).standard_normal((8, 262144)).astype(np.float32)
    with use_runtime(rt):
        got = np.asarray(xp.max(xp.asarray(x, device="torch:cpu"), axis=1))
    np.testing.assert_array_equal(got, x.max(axis=1))
    assert plugin.SELECTED[entry["id"]] == 0 and chooser.loaded == {}  # declined, source never loaded
    aval, params = Aval((8, 262144), float32), {"axes": (1,)}
    out = (Aval((8,), float32),)
    for name, want in (("torch:cpu", None), ("torch:cuda:1", None), ("torch:cuda:0", "sentinel")):
        chooser.loaded[entry["id"]] = "sentinel"  # stands in for the loaded launcher (no triton here)
        assert chooser.choose_kernel(SimpleNamespace(name=name), (aval,), out, params) == want
    small = Aval((8, 1024), float32)
    assert chooser.choose_kernel(SimpleNamespace(name="torch:cuda:0"), (small,), out, params) is None


def test_the_bench_baseline_is_the_triton_executors_generated_kernel(caplog):
    """gpu_bench's baseline (and the dispatch kernel it reports beside it), built here on
    torch:cpu under the interpreter (on torch:cuda:0 with TENFERRO_TRITON_REAL=1)."""
    import logging

    import torch

    from tenferro_forge.gpu_bench import baseline, dispatch_kernel
    from tenferro_forge.ops import signature
    from tenferro_runtime.runtime import Runtime

    device = "torch:cuda:0" if REAL else "torch:cpu"
    caplog.set_level(logging.DEBUG, logger="tenferro_triton")
    x = np.random.default_rng(1).standard_normal((8, 300)).astype(np.float32)
    x[2, 7] = np.nan
    avals, canon, _ = signature("reduce_max", "float32", x.shape, {"axes": [1]})
    rt = Runtime.from_entry_points(check_kernels=False)
    generated = baseline(rt, "reduce_max", canon, [x], device)
    current = dispatch_kernel(rt, "reduce_max", avals, canon, device)
    buf = torch.from_numpy(x).to(device.partition(":")[2])
    for fn in (generated, current):
        np.testing.assert_array_equal(fn(buf, **canon).cpu().numpy(), x.max(axis=1))
    assert "1 generated kernel(s), 0 fallback(s)" in caplog.text
