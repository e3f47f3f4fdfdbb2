"""`make gpu-check` (bench/gpu_check.py) without a GPU: the no-GPU path end to end in a
subprocess, and the report logic (goal evaluation, report.md / report.json, pytest's junit
counts, the time budget of a part) on fabricated results."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "gpu_check.py"
_spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
gc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gc)


def test_without_a_gpu_it_says_so_writes_the_report_and_exits_0(tmp_path: Path) -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU even where there is one
    run = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    assert gc.NO_GPU in run.stdout
    assert gc.NO_GPU in (tmp_path / "report.md").read_text()
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["status"] == "no-gpu" and report["message"] == gc.NO_GPU
    assert report["environment"]["gpu"] is None and report["date"][:2] == "20"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "report.md"]


def test_probe_tells_no_gpu_from_a_gpu_torch_cannot_use() -> None:
    cpu_torch = {"cuda": None, "hip": None, "__version__": "2.13.0+cpu"}
    assert gc.probe(cpu_torch, physical=0) == {"status": "no-gpu", "message": gc.NO_GPU}
    assert gc.probe(cpu_torch, physical=2, visible_env="")["status"] == "no-gpu"  # all hidden
    unusable = gc.probe(cpu_torch, physical=2)
    assert unusable["status"] == "unusable"
    assert "2 NVIDIA GPU(s) present" in unusable["message"] and "2.13.0+cpu" in unusable["message"]


def _rows(kind: str, slower: tuple = (), missing: tuple = ()) -> list[dict]:
    """bench_rows-style rows: generated 0.8x torch's time, 1.25x at `slower` lengths."""
    return [{"kind": kind, "rows": 4096, "L": n, "torch_ms": 1.0,
             "generated_ms": 1.25 if n in slower else 0.8, "ratio": 1.25 if n in slower else 0.8,
             "call_ms": 1.0} for n in gc.ROW_LENGTHS if n not in missing]


def _train(triton_ms: float) -> dict:
    ms = {"tenferro triton": triton_ms, "tenferro inductor": 1.1, "tenferro plan": 1.5,
          "PyTorch eager": 2.0, "torch.compile": 1.0}
    return {"ms": ms, "first_call_s": dict.fromkeys(ms, 3.0), "first_loss": dict.fromkeys(ms, 2.3),
            "errors": {}}


BENCH = {
    "gpu": "NVIDIA H100 80GB HBM3",
    "chain": {"fused_gbps": 2700.0, "copy_gbps": 3000.0, "ratio": 0.9, "ms": 0.2},
    "rows": {"softmax": _rows("softmax", slower=(16384,)),
             "layer_norm": _rows("layer_norm", missing=(8192,))},
    "matmul": {"float16": {"triton_tflops": 665.0, "torch_tflops": 700.0, "triton_ms": 0.2},
               "bfloat16": {"triton_tflops": 560.0, "torch_tflops": 700.0, "triton_ms": 0.25}},
    "mlp": _train(0.9),
    "cnn": {**_train(1.2), "errors": {"tenferro plan": "KernelError: boom"}},
    "errors": {},
}


def _by_goal(goals: list[dict]) -> dict:
    return {g["goal"].split(",")[0]: g for g in goals}


def test_goals_pass_fail_and_not_measured() -> None:
    goals = gc.evaluate(BENCH)
    assert len(goals) == 1 + 2 * len(gc.ROW_LENGTHS) + 2 + 1
    g = _by_goal(goals)
    assert g["fused 10-op float32 elementwise chain"]["passed"] is True
    assert g["fused 10-op float32 elementwise chain"]["target"] == ">= 0.85"
    assert g["softmax 4096x256 float32"]["passed"] is True
    assert g["softmax 4096x256 float32"]["value"] == pytest.approx(1.25)
    assert g["softmax 4096x16384 float32"]["passed"] is False
    assert g["layer_norm 4096x8192 float32"]["passed"] is None  # no figure: not measured
    assert g["layer_norm 4096x16384 float32"]["passed"] is True
    assert g["matmul float16 4096^3"]["passed"] is True and g["matmul bfloat16 4096^3"]["passed"] is False
    mlp = g["MLP 784-512-512-10 b128 Adam train step"]
    assert mlp["passed"] is True and mlp["value"] == pytest.approx(0.9) and mlp["target"] == "<= 1.0"
    assert _by_goal(gc.evaluate({**BENCH, "mlp": _train(1.05)}))[
        "MLP 784-512-512-10 b128 Adam train step"]["passed"] is False


def test_goals_of_an_empty_run_are_all_not_measured() -> None:
    """A benchmark run that timed out before any part: every goal is listed, none passes."""
    goals = gc.evaluate({})
    assert goals and all(g["passed"] is None and g["value"] is None for g in goals)


def _report() -> dict:
    tests = [{"name": "torch:cuda tests", "status": "passed", "seconds": 41.0, "returncode": 0,
              "timed_out": False, "counts": {"passed": 812, "failed": 0, "errors": 0, "skipped": 3,
                                             "failures": []}},
             {"name": "Triton tests on the GPU", "status": "failed", "seconds": 95.2, "returncode": 1,
              "timed_out": False, "counts": {"passed": 480, "failed": 1, "errors": 0, "skipped": 13,
                                             "failures": ["test_matmul::test_x"]}}]
    bench = {"name": "GPU benchmarks", "status": "timed out", "seconds": 270.0, "returncode": -9,
             "timed_out": True, "results": BENCH}
    report = {"date": "2026-01-01T00:00:00+00:00", "status": "gpu", "message": "GPU: H100",
              "environment": {"gpu": "NVIDIA H100 80GB HBM3", "capability": "9.0", "memory_gib": 79.1,
                              "gpus": 1, "driver": "550.54", "cuda": "12.4", "torch": "2.13.0",
                              "triton": "3.9.0", "python": "3.11.7", "commit": "abc123"},
              "tests": tests, "bench": bench}
    report["goals"] = gc.evaluate(BENCH)
    return report


def test_report_files_state_the_gpu_the_parts_and_each_goal(tmp_path: Path) -> None:
    md_path, json_path = gc.write_report(_report(), tmp_path / "gpu-check")
    md = md_path.read_text()
    assert "**NVIDIA H100 80GB HBM3** (compute capability 9.0" in md and "driver 550.54" in md
    assert "| torch:cuda tests | passed | 812 | 0 | 0 | 3 | 41.0 |" in md
    assert "| Triton tests on the GPU | failed | 480 | 1 |" in md and "`test_matmul::test_x`" in md
    assert "Benchmarks: timed out (270.0 s)." in md
    assert "| matmul float16 4096^3, TFLOP/s vs cuBLAS | >= 0.9 | 0.95 | PASS |" in md
    assert "| matmul bfloat16 4096^3, TFLOP/s vs cuBLAS | >= 0.9 | 0.8 | FAIL |" in md
    assert ("| layer_norm 4096x8192 float32, speed vs torch (torch time / generated) | >= 1.0 | – "
            "| not measured |") in md
    assert "## MLP 784-512-512-10 b128 float32 Adam train step on torch:cuda:0" in md
    assert "| tenferro triton | 0.900 | 0.9 | 3 |" in md
    assert "## digits CNN b64 float32 Adam train step" in md
    assert "| tenferro plan | failed: KernelError: boom" in md
    results = md.count("| PASS |") + md.count("| FAIL |") + md.count("| not measured |")
    assert results == len(gc.evaluate(BENCH))
    data = json.loads(json_path.read_text())
    assert data["environment"]["gpu"] == "NVIDIA H100 80GB HBM3"
    assert [g["passed"] for g in data["goals"]] == [g["passed"] for g in gc.evaluate(BENCH)]
    assert data["bench"]["results"]["mlp"]["ms"]["torch.compile"] == 1.0


def test_junit_counts_and_status(tmp_path: Path) -> None:
    xml = tmp_path / "t.xml"
    xml.write_text('<?xml version="1.0"?><testsuites><testsuite name="pytest" tests="5" failures="1" '
                   'errors="1" skipped="1"><testcase classname="a.b" name="ok"/>'
                   '<testcase classname="a.b" name="bad"><failure message="x"/></testcase>'
                   '<testcase classname="a.c" name="err"><error message="y"/></testcase>'
                   '</testsuite></testsuites>')
    counts = gc.junit_counts(xml)
    assert counts == {"passed": 2, "failed": 1, "errors": 1, "skipped": 1,
                      "failures": ["a.b::bad", "a.c::err"]}
    assert gc.junit_counts(tmp_path / "missing.xml") is None
    run = {"timed_out": False, "returncode": 1}
    assert gc.pytest_status(run, counts) == "failed"
    assert gc.pytest_status({**run, "returncode": 0}, counts) == "passed"
    assert gc.pytest_status({**run, "returncode": 4}, None) == "error (exit 4)"
    assert gc.pytest_status({**run, "timed_out": True, "returncode": -9}, None) == "timed out"


def test_a_part_past_its_budget_is_stopped_and_reported(tmp_path: Path) -> None:
    part = gc.Part("sleeper", [sys.executable, "-c", "import time; print('started', flush=True); "
                                                     "time.sleep(60)"], tmp_path / "log", timeout=2.0)
    run = part.wait()
    assert run["timed_out"] and run["seconds"] < 20 and run["returncode"] != 0
    assert "started" in (tmp_path / "log").read_text()
    done = gc.Part("quick", [sys.executable, "-c", "pass"], tmp_path / "log2", timeout=30.0).wait()
    assert not done["timed_out"] and done["returncode"] == 0
