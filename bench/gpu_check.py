"""`make gpu-check`: everything that needs an NVIDIA GPU, in one command, within 8 minutes.

On a machine with a CUDA device (and a CUDA build of torch in the environment) it runs

1. the torch:cuda tests (backend_plugins/torch/tests/test_cuda.py and the conformance kit on
   torch:cuda:0), the Triton tests compiled for the GPU (TENFERRO_TRITON_REAL=1, see
   backend_plugins/triton/tests/conftest.py) and tenferro-forge's Triton-candidate tests on
   the GPU, side by side, each under a time budget;
2. the GPU benchmarks, `gpu_benchmarks()` of bench/codegen.py (alone, after the tests);

and writes build/gpu-check/report.md (tables, the issue's GPU goals with pass/fail per row)
and report.json (the same, machine-readable, with the GPU model, driver, CUDA, torch and
Triton versions and the date). A part past its budget is stopped and reported as timed out.
The exit status is 1 when a test failed or a part did not finish, 0 otherwise: missed goals
are reported, they do not fail the command. Without a GPU it says so, writes a report saying
so, and exits 0; with a GPU that torch cannot use (a CPU build of torch, a driver problem)
it says why and exits 1.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
NO_GPU = "no NVIDIA GPU / CUDA not available: nothing to check"
ROW_LENGTHS = (256, 512, 1024, 2048, 4096, 8192, 16384)
TORCH_TESTS = ["backend_plugins/torch/tests/test_cuda.py",
               "backend_plugins/torch/tests/test_torch_conformance.py::TestTorchCudaConformance"]
TRITON_TESTS = ["backend_plugins/triton/tests"]
FORGE_TESTS = ["extensions/forge/tests/test_forge_triton.py"]


# ---- is there a GPU to check? ---------------------------------------------------------------

def probe(build: dict | None = None, physical: int | None = None,
          visible_env: str | None = None) -> dict[str, Any]:
    """{"status": "gpu" | "no-gpu" | "unusable", "message"}: whether torch can use an NVIDIA
    GPU here, asked without importing torch where the answer is already no (a CPU build of
    torch and no GPU). The arguments stand in for the machine (tests); by default torch's
    ``version.py``, /proc/driver/nvidia/gpus and CUDA_VISIBLE_DEVICES are read."""
    from tenferro_torch import discovery

    if build is None:
        build = discovery.torch_build()
    if physical is None:
        gpus = discovery.NVIDIA_GPUS
        physical = len(list(gpus.iterdir())) if gpus.is_dir() else 0
        visible_env = os.environ.get("CUDA_VISIBLE_DEVICES")
    visible = discovery.visible_count(physical, visible_env)
    torch_version = build.get("__version__", "?")
    if build.get("cuda") is None:
        if visible:
            return {"status": "unusable", "message": (
                f"{visible} NVIDIA GPU(s) present, but torch {torch_version} is a build without "
                f"CUDA: install a CUDA build of torch in this environment to check them")}
        return {"status": "no-gpu", "message": NO_GPU}
    import torch

    if torch.cuda.is_available():
        return {"status": "gpu", "message": f"GPU: {torch.cuda.get_device_name(0)}"}
    if visible:
        return {"status": "unusable", "message": (
            f"{visible} NVIDIA GPU(s) present, but torch {torch.__version__} (CUDA "
            f"{torch.version.cuda}) cannot use them (driver too old or not loaded?)")}
    return {"status": "no-gpu", "message": NO_GPU}


def gpu_info() -> dict[str, Any]:
    """The GPU model, its compute capability and memory, the driver, CUDA, torch and Triton."""
    import importlib.metadata

    import torch

    props = torch.cuda.get_device_properties(0)
    info = {"gpu": torch.cuda.get_device_name(0), "gpus": torch.cuda.device_count(),
            "capability": f"{props.major}.{props.minor}",
            "memory_gib": round(props.total_memory / 2**30, 1), "cuda": torch.version.cuda,
            "torch": torch.__version__, "triton": importlib.metadata.version("triton")}
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True)
        info["driver"] = smi.stdout.splitlines()[0].strip()
    except (OSError, subprocess.SubprocessError, IndexError):
        info["driver"] = None
    return info


# ---- the parts: subprocesses under a time budget -------------------------------------------

class Part:
    """A command run in its own process group, its output in `log`, stopped at `timeout`."""

    def __init__(self, name: str, cmd: list[str], log: Path, timeout: float,
                 env: dict[str, str] | None = None) -> None:
        self.name, self.cmd, self.log, self.timeout = name, cmd, log, timeout
        self.start = time.monotonic()
        with open(log, "w") as out:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                         env={**os.environ, **(env or {})}, start_new_session=True)

    def wait(self) -> dict[str, Any]:
        """{"name", "command", "log", "seconds", "returncode", "timed_out"} once it ended or
        ran out of time (then its whole process group is killed)."""
        left = self.timeout - (time.monotonic() - self.start)
        timed_out = False
        try:
            rc = self.proc.wait(timeout=max(left, 0.0))
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(self.proc.pid, signal.SIGKILL)
            rc = self.proc.wait()
        return {"name": self.name, "command": " ".join(self.cmd), "log": str(self.log),
                "seconds": round(time.monotonic() - self.start, 1), "returncode": rc,
                "timed_out": timed_out}


def junit_counts(path: Path) -> dict[str, Any] | None:
    """{"passed", "failed", "errors", "skipped", "failures" (up to 20 test ids)} from pytest's
    --junitxml file, or None when there is none (a killed or crashed run)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    failing = [f"{c.get('classname')}::{c.get('name')}" for c in root.iter("testcase")
               if c.find("failure") is not None or c.find("error") is not None]
    return {"passed": total["tests"] - total["failures"] - total["errors"] - total["skipped"],
            "failed": total["failures"], "errors": total["errors"], "skipped": total["skipped"],
            "failures": failing[:20]}


def pytest_status(run: dict[str, Any], counts: dict[str, Any] | None) -> str:
    """"passed", "failed", "timed out" or "error (exit N)" of a pytest part."""
    if run["timed_out"]:
        return "timed out"
    if run["returncode"] == 0 and counts is not None:
        return "passed"
    if run["returncode"] == 1:
        return "failed"
    return f"error (exit {run['returncode']})"


def run_checks(out: Path, test_budget: float, bench_budget: float, jobs: int) -> dict[str, Any]:
    """The test parts side by side, then the benchmarks alone: the report's "tests" and
    "bench" entries."""
    py = sys.executable
    env = {"HYPOTHESIS_PROFILE": "dev", "TENFERRO_CHECK_KERNELS": "1"}
    xdist = ["-n", str(jobs)] if jobs > 1 else []
    specs = [("torch:cuda tests", TORCH_TESTS, {}),
             ("Triton tests on the GPU", TRITON_TESTS, {"TENFERRO_TRITON_REAL": "1"}),
             ("Forge Triton tests on the GPU", FORGE_TESTS, {"TENFERRO_TRITON_REAL": "1"})]
    parts = []
    for i, (name, paths, extra) in enumerate(specs):
        junit = out / f"tests-{i}.xml"
        junit.unlink(missing_ok=True)
        cmd = [py, "-m", "pytest", "-q", *xdist, f"--junitxml={junit}", *paths]
        parts.append((Part(name, cmd, out / f"tests-{i}.log", test_budget, {**env, **extra}), junit))
    tests = []
    for part, junit in parts:
        run = part.wait()
        run["counts"] = junit_counts(junit)
        run["status"] = pytest_status(run, run["counts"])
        print(f"{run['name']}: {run['status']} {run['counts'] or ''} ({run['seconds']} s)", flush=True)
        tests.append(run)
    results = out / "bench.json"
    results.unlink(missing_ok=True)
    bench = Part("GPU benchmarks", [py, "bench/codegen.py", "--gpu-only", "--json", str(results)],
                 out / "bench.log", bench_budget).wait()
    try:
        bench["results"] = json.loads(results.read_text())
    except (OSError, json.JSONDecodeError):
        bench["results"] = {}
    bench["status"] = ("timed out" if bench["timed_out"] else "completed" if bench["returncode"] == 0
                       else f"error (exit {bench['returncode']})")
    print(f"GPU benchmarks: {bench['status']} ({bench['seconds']} s)", flush=True)
    return {"tests": tests, "bench": bench}


# ---- goals and the report ------------------------------------------------------------------

def _goal(name: str, value: float | None, op: str, target: float) -> dict[str, Any]:
    passed = None if value is None else (value >= target if op == ">=" else value <= target)
    return {"goal": name, "target": f"{op} {target}", "value": value, "passed": passed}


def evaluate(bench: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's GPU goals, one row each, from `gpu_benchmarks()`'s results: {"goal",
    "target", "value", "passed"} with passed None where the figure is missing."""
    rows = []
    chain = bench.get("chain") or {}
    rows.append(_goal("fused 10-op float32 elementwise chain, fraction of device copy bandwidth",
                      chain.get("ratio"), ">=", 0.85))
    for kind in ("softmax", "layer_norm"):
        got = {r["L"]: r for r in (bench.get("rows") or {}).get(kind, [])}
        for n in ROW_LENGTHS:
            r = got.get(n)
            speed = r["torch_ms"] / r["generated_ms"] if r else None
            rows.append(_goal(f"{kind} 4096x{n} float32, speed vs torch (torch time / generated)",
                              speed, ">=", 1.0))
    for dtype in ("float16", "bfloat16"):
        m = (bench.get("matmul") or {}).get(dtype)
        rows.append(_goal(f"matmul {dtype} 4096^3, TFLOP/s vs cuBLAS",
                          m and m["triton_tflops"] / m["torch_tflops"], ">=", 0.9))
    ms = (bench.get("mlp") or {}).get("ms", {})
    both = {"tenferro triton", "torch.compile"} <= set(ms)
    ratio = ms["tenferro triton"] / ms["torch.compile"] if both else None
    rows.append(_goal("MLP 784-512-512-10 b128 Adam train step, tenferro (triton executor) time "
                      "vs torch.compile", ratio, "<=", 1.0))
    return rows


def _fmt(v: Any) -> str:
    return "–" if v is None else f"{v:.3g}" if isinstance(v, float) else str(v)


def render_md(report: dict[str, Any]) -> str:
    """report.md: the machine, the test parts, the goals (PASS/FAIL/not measured), the train
    steps and what failed."""
    env = report.get("environment", {})
    lines = [f"# GPU check ({report['date']})", ""]
    if report["status"] != "gpu":
        return "\n".join(lines + [f"{report['message']} (torch {env.get('torch')}, Python "
                                  f"{env.get('python')}, commit {env.get('commit')}).", "",
                                  "Run `make gpu-check` on a machine with an NVIDIA GPU.", ""])
    lines += [f"**{env.get('gpu')}** (compute capability {env.get('capability')}, "
              f"{env.get('memory_gib')} GiB; {env.get('gpus')} visible), driver {env.get('driver')}, "
              f"CUDA {env.get('cuda')}, torch {env.get('torch')}, Triton {env.get('triton')}, "
              f"Python {env.get('python')}, commit {env.get('commit')}.", "",
              "## Tests", "", "| part | status | passed | failed | errors | skipped | seconds |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for t in report["tests"]:
        c = t.get("counts") or {}
        lines.append(f"| {t['name']} | {t['status']} | {_fmt(c.get('passed'))} | {_fmt(c.get('failed'))} "
                     f"| {_fmt(c.get('errors'))} | {_fmt(c.get('skipped'))} | {t['seconds']} |")
    failing = [f"- {t['name']}: `{f}`" for t in report["tests"]
               for f in (t.get("counts") or {}).get("failures", [])]
    lines += ["", *(["Failing tests (first 20 per part):", "", *failing, ""] if failing else [])]
    bench = report["bench"]
    lines += ["## Goals", "", f"Benchmarks: {bench['status']} ({bench['seconds']} s).", "",
              "| goal | target | measured | result |", "| --- | --- | --- | --- |"]
    for g in report["goals"]:
        result = {True: "PASS", False: "FAIL", None: "not measured"}[g["passed"]]
        lines.append(f"| {g['goal']} | {g['target']} | {_fmt(g['value'])} | {result} |")
    res = bench.get("results", {})
    for kind, what in (("mlp", "MLP 784-512-512-10 b128"), ("cnn", "digits CNN b64")):
        r = res.get(kind)
        if not r:
            continue
        tc = r["ms"].get("torch.compile")
        lines += ["", f"## {what} float32 Adam train step on torch:cuda:0", "",
                  "| row | ms per step | x torch.compile | first call s |", "| --- | --- | --- | --- |"]
        for name, t in r["ms"].items():
            lines.append(f"| {name} | {t:.3f} | {_fmt(t / tc if tc else None)} | "
                         f"{_fmt(r['first_call_s'].get(name))} |")
        lines += [f"| {name} | failed: {err} | | |" for name, err in r.get("errors", {}).items()]
    if res.get("chain"):
        c = res["chain"]
        lines += ["", f"Elementwise chain: {c['fused_gbps']:.0f} GB/s fused, {c['copy_gbps']:.0f} GB/s copy."]
    for dtype, m in (res.get("matmul") or {}).items():
        lines.append(f"Matmul {dtype} 4096^3: {m['triton_tflops']:.0f} TFLOP/s, "
                     f"cuBLAS {m['torch_tflops']:.0f}.")
    errors = res.get("errors") or {}
    if errors:
        lines += ["", "## Benchmark errors", "", *(f"- {k}: {v}" for k, v in errors.items())]
    return "\n".join(lines + [""])


def write_report(report: dict[str, Any], out: Path) -> tuple[Path, Path]:
    """report.md and report.json in `out` (made if missing)."""
    out.mkdir(parents=True, exist_ok=True)
    md, js = out / "report.md", out / "report.json"
    md.write_text(render_md(report))
    js.write_text(json.dumps(report, indent=1, default=str) + "\n")
    return md, js


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "gpu-check", help="report folder")
    ap.add_argument("--test-budget", type=float, default=180.0, help="seconds for the test parts")
    ap.add_argument("--bench-budget", type=float, default=270.0, help="seconds for the benchmarks")
    ap.add_argument("--jobs", type=int, default=6, help="pytest-xdist workers per test part")
    args = ap.parse_args(argv)
    found = probe()
    print(found["message"], flush=True)
    report: dict[str, Any] = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                              **found}
    env = {"python": platform.python_version(), "host": platform.node(), "commit": _commit()}
    if found["status"] != "gpu":
        from tenferro_torch.discovery import torch_build

        report["environment"] = {"gpu": None, "torch": torch_build().get("__version__"), **env}
        md, _ = write_report(report, args.out)
        print(f"report: {md}")
        return 0 if found["status"] == "no-gpu" else 1
    report["environment"] = {**gpu_info(), **env}
    args.out.mkdir(parents=True, exist_ok=True)
    report.update(run_checks(args.out, args.test_budget, args.bench_budget, args.jobs))
    report["goals"] = evaluate(report["bench"]["results"])
    md, _ = write_report(report, args.out)
    for g in report["goals"]:
        print(f"  {'PASS' if g['passed'] else 'FAIL' if g['passed'] is False else 'n/a '}  {g['goal']}: "
              f"{_fmt(g['value'])} (goal {g['target']})")
    print(f"report: {md}")
    ok = all(t["status"] == "passed" for t in report["tests"]) and report["bench"]["status"] == "completed"
    return 0 if ok and not report["bench"]["results"].get("errors") else 1


if __name__ == "__main__":
    sys.exit(main())
