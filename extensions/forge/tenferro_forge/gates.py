"""`verify DIR` and `bench DIR` on Forge's side: the file and metadata checks and the static
scan here (reading, never importing, the candidate), everything that runs candidate code in
a sandboxed child (`sandbox.run_child`)."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import VERIFIER_VERSION
from .sandbox import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S, run_child
from .scan import scan
from .task import LANGUAGES, _write, is_gpu, load_task

METADATA_KEYS = {"author": str, "language": str, "op": str, "signature": dict, "claims": str}
VERIFY_ENV = {
    "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
    "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
    "TENFERRO_FORGE_DISABLE": "1",
}
"""The verify child: freed blocks stay in the heap (so the poison reaches the next allocation)."""


@dataclass
class Report:
    """A gate's outcome: `ok`, the findings (check, reason, maybe line), and what was measured."""

    step: str
    ok: bool
    findings: list[dict] = field(default_factory=list)
    source_hash: str = ""
    details: dict = field(default_factory=dict)

    def checks(self) -> set[str]:
        return {f["check"] for f in self.findings}

    def to_json(self) -> dict:
        return asdict(self)


def source_hash(directory: str | os.PathLike) -> str:
    """sha256 of kernel.py and metadata.json (what verify and bench judged)."""
    h = hashlib.sha256()
    for name in ("kernel.py", "metadata.json"):
        p = Path(directory) / name
        h.update(name.encode() + b"\0" + (p.read_bytes() if p.is_file() else b"<missing>") + b"\0")
    return h.hexdigest()


def read_candidate(directory: str | os.PathLike, task: dict) -> tuple[str | None, dict | None, list[dict]]:
    """(kernel source, metadata, findings) of the required files and the metadata schema."""
    d = Path(directory)
    findings: list[dict] = []
    source = metadata = None
    try:
        source = (d / "kernel.py").read_text()
    except (OSError, UnicodeDecodeError) as exc:
        findings.append(
            {"check": "files", "reason": f"kernel.py is missing or unreadable ({type(exc).__name__})"}
        )
    try:
        metadata = json.loads((d / "metadata.json").read_text())
    except FileNotFoundError:
        findings.append({"check": "files", "reason": "metadata.json is missing"})
    except (OSError, ValueError) as exc:
        findings.append({"check": "metadata", "reason": f"metadata.json is not valid JSON ({exc})"})
    if metadata is not None:
        findings += _metadata_findings(metadata, task)
        if findings:
            metadata = None
    return source, metadata, findings


def _metadata_findings(meta: Any, task: dict) -> list[dict]:
    bad = []
    if not isinstance(meta, dict):
        return [
            {"check": "metadata", "reason": f"metadata.json must hold an object, got {type(meta).__name__}"}
        ]
    for key, typ in METADATA_KEYS.items():
        if not isinstance(meta.get(key), typ):
            bad.append(f"{key!r} must be a {typ.__name__}, got {meta.get(key)!r}")
    if not bad:
        if meta["language"] not in task.get("languages", ()):
            bad.append(f"language {meta['language']!r} is not one of the task's {task.get('languages')}")
        if meta["op"] != task["op"]:
            bad.append(f"op {meta['op']!r} is not the task's {task['op']!r}")
        sig = meta["signature"]
        if sig.get("dtype") != task["dtype"] or sig.get("device") != task["device"]:
            bad.append(
                f"signature {sig} does not name the task's dtype {task['dtype']!r} and device "
                f"{task['device']!r}"
            )
    return [{"check": "metadata", "reason": f"metadata.json: {b}"} for b in bad]


def _scan(source: str, metadata: dict | None, task: dict) -> list[dict]:
    language = (metadata or {}).get("language", "numpy")
    return scan(source, language=language, dtype=task["dtype"], allowed_extra=LANGUAGES.get(language, ()))


def gpu_here() -> bool:
    """Whether Triton candidates run on a GPU here: torch has a CUDA device (read without
    importing torch) and TRITON_INTERPRET does not force the interpreter."""
    from .triton_io import interpreted

    if interpreted():
        return False
    try:
        from tenferro_torch.discovery import cuda_device_count
    except ImportError:
        return False
    return cuda_device_count() > 0


def _child_limits(task: dict, memory_mb: int) -> int | None:
    """The child's address-space cap: none for a GPU child (CUDA reserves more address space
    than any cap; the GPU's own memory bounds the candidate there)."""
    return None if is_gpu(task) and gpu_here() else memory_mb


GPU_NEEDED = (
    "benchmarking a Triton candidate needs a CUDA GPU: {why}; Triton's CPU interpreter runs the "
    "kernels for `verify`, but its timings say nothing about a GPU. Run `tenferro-forge bench` (or "
    "promote) on a machine whose torch sees a CUDA device, without TRITON_INTERPRET set"
)


def _read_and_scan(directory: str | os.PathLike, skip_scan: bool) -> tuple[dict, str, list]:
    """The task, the candidate's source hash, and the findings of its files and static scan:
    the first step of both gates."""
    task = load_task(directory)
    source, metadata, findings = read_candidate(directory, task)
    if source is not None and not skip_scan:
        findings += _scan(source, metadata, task)
    return task, source_hash(directory), findings


def verify(
    directory: str | os.PathLike,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_mb: int = DEFAULT_MEMORY_MB,
    seeds: tuple[int, ...] = (0, 1),
    skip_scan: bool = False,
    write: bool = True,
) -> Report:
    """Verify the candidate in `directory` (a task directory holding kernel.py and
    metadata.json). `skip_scan` exists for Forge's own tests of the sandbox (a crash the scan
    would stop); a report made with it is never promotable."""
    task, digest, findings = _read_and_scan(directory, skip_scan)
    details: dict = {"verifier_version": VERIFIER_VERSION, "skip_scan": skip_scan}
    if not findings:
        out = run_child(
            "verify",
            {"task": task, "dir": str(Path(directory).resolve()), "seeds": list(seeds)},
            timeout_s=timeout_s,
            memory_mb=_child_limits(task, memory_mb),
            env=VERIFY_ENV,
        )
        findings += out.get("findings", [])
        details["calls"] = out.get("calls")
        if out.get("ran_on"):
            details["ran_on"] = out["ran_on"]
        if not out.get("ok") and not findings:
            findings.append({"check": "harness", "reason": "verification failed without a reason"})
    report = Report("verify", not findings and not skip_scan, findings, digest, details)
    if write:
        _write(Path(directory) / "verify.json", json.dumps(report.to_json(), indent=2) + "\n")
    return report


def bench(
    directory: str | os.PathLike,
    *,
    calls: int = 30,
    warmup: int = 3,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_mb: int = DEFAULT_MEMORY_MB,
    write: bool = True,
    skip_scan: bool = False,
) -> Report:
    """Benchmark the candidate against the current dispatch kernel in a child process:
    `calls` timed calls per shape after `warmup`, interleaved; gate on the bootstrap 95%
    interval's lower bound (>= 1.10x on every shape) and on the roofline. The static scan
    runs first (`skip_scan`: Forge's own tests of the harness; never promotable)."""
    from .errors import GPURequiredError
    from .registry import bandwidth_cached

    task, digest, findings = _read_and_scan(directory, skip_scan)
    if is_gpu(task) and not gpu_here():
        why = "torch sees no CUDA device here, or TRITON_INTERPRET is set"
        raise GPURequiredError(GPU_NEEDED.format(why=why))
    details: dict = {"calls": calls, "skip_scan": skip_scan}
    if not findings:
        out = run_child(
            "bench",
            {
                "task": task,
                "dir": str(Path(directory).resolve()),
                "calls": calls,
                "warmup": warmup,
                "bandwidth": bandwidth_cached(),
            },
            timeout_s=timeout_s,
            memory_mb=_child_limits(task, memory_mb),
        )
        if out.get("refused") == "gpu":
            raise GPURequiredError(GPU_NEEDED.format(why=out["findings"][0]["reason"]))
        findings += out.get("findings", [])
        keep = ("shapes", "gate", "gate_passed", "bandwidth", "threads")
        keep += ("device_bandwidth", "device_name", "timer", "flush_bytes")
        details.update({k: out[k] for k in keep if k in out})
        if out.get("bandwidth"):
            bandwidth_cached(out["bandwidth"])
        if not findings and not out.get("gate_passed"):
            lows = ", ".join(f"{tuple(s['shape'])}: {s['ci_low']:.2f}x" for s in out.get("shapes", []))
            findings.append(
                {
                    "check": "gate",
                    "reason": f"the speedup's 95% interval lower bound must be "
                    f">= {out.get('gate', 1.1):.2f}x on every shape; got {lows or 'no shapes'}",
                }
            )
    report = Report("bench", not findings and not skip_scan, findings, digest, details)
    if write:
        _write(Path(directory) / "bench.json", json.dumps(report.to_json(), indent=2) + "\n")
    return report


__all__ = ["Report", "bench", "gpu_here", "read_candidate", "source_hash", "verify"]
