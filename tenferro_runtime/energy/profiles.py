"""Device profiles of the cost-model energy estimate: joules per FLOP, per byte moved, and
idle watts, for common CPUs and NVIDIA GPUs, and `calibrate` to fit one from measured runs.

How the table's numbers are made (each profile's `source_note` gives its own inputs):

* J/FLOP ~= TDP / peak FLOP/s: the energy of one operation at full load. CPUs use the FP64
  vector peak (cores x clock x FLOPs/cycle), GPUs the FP32 CUDA-core peak (not tensor cores:
  torch does not use TF32 for float32 matmuls by default, so half precision on tensor cores
  is overestimated).
* J/byte ~= 0.3 x TDP / memory bandwidth: about a third of the power goes to moving data
  when a kernel is bandwidth-bound.
* idle_watts: the device's draw when powered and idle (vendor figures or typical readings).

These are order-of-magnitude numbers for labelled estimates, never measurements: `calibrate`
replaces them with coefficients fitted to a real meter on the machine at hand.
"""

from __future__ import annotations

import itertools
import os
import platform
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from tenferro_core.errors import TenferroError

CPUINFO = Path("/proc/cpuinfo")
_BYTES_NOTE = "J/byte = 0.3 x TDP / bandwidth"


class CalibrationError(TenferroError, ValueError):
    """`calibrate` got samples it cannot fit (bad values, or too few to separate the terms)."""


@dataclass(frozen=True)
class DeviceProfile:
    """Energy coefficients of one device kind; `source_note` says where they come from."""

    name: str
    joules_per_flop: float
    joules_per_byte: float
    idle_watts: float
    source_note: str
    cores: int = 1  # a CPU profile's cores per socket: a process using fewer idles a share of it

    def joules(self, flops: float, bytes_moved: float, seconds: float = 0.0) -> float:
        """The estimate for `flops` and `bytes_moved` over `seconds` (idle draw included)."""
        return flops * self.joules_per_flop + bytes_moved * self.joules_per_byte + self.idle_watts * seconds


def _p(name: str, tdp: float, peak_flops: float, bandwidth: float, idle: float, what: str,
       cores: int = 1) -> DeviceProfile:
    note = (f"{what}: TDP {tdp:g} W, peak {peak_flops / 1e12:g} TFLOP/s, {bandwidth / 1e9:g} GB/s; "
            f"J/FLOP = TDP / peak, {_BYTES_NOTE}; idle ~{idle:g} W")
    return DeviceProfile(name, tdp / peak_flops, 0.3 * tdp / bandwidth, idle, note, cores)


# name -> profile; CPUs at FP64 vector peak, GPUs at FP32 CUDA-core peak (see the module doc)
PROFILES: dict[str, DeviceProfile] = {p.name: p for p in (
    _p("generic-x86-core", 10.0, 48e9, 20e9, 2.0,
       "one x86-64 core, AVX2 (2 FMA x 4 doubles x 3 GHz), ~10 W per core, ~20 GB/s per core"),
    _p("amd-epyc-zen3", 280.0, 64 * 2.45e9 * 16, 204.8e9, 70.0,
       "AMD EPYC 7763 (Zen 3, 64 cores x 2.45 GHz x 16 FP64/cycle), 8 x DDR4-3200", cores=64),
    _p("amd-epyc-zen4", 360.0, 96 * 2.4e9 * 16, 460.8e9, 90.0,
       "AMD EPYC 9654 (Zen 4, 96 cores x 2.4 GHz x 16 FP64/cycle), 12 x DDR5-4800", cores=96),
    _p("intel-xeon-icelake", 270.0, 40 * 2.3e9 * 32, 204.8e9, 60.0,
       "Intel Xeon Platinum 8380 (Ice Lake, 40 cores x 2.3 GHz x 32 FP64/cycle AVX-512), 8 x DDR4-3200",
       cores=40),
    _p("intel-xeon-sapphire-rapids", 350.0, 56 * 2.0e9 * 32, 307.2e9, 80.0,
       "Intel Xeon Platinum 8480+ (Sapphire Rapids, 56 cores x 2.0 GHz x 32 FP64/cycle), 8 x DDR5-4800",
       cores=56),
    _p("apple-m-series", 20.0, 250e9, 100e9, 1.0,
       "Apple M2 CPU cluster (~250 GFLOP/s FP64 NEON, ~20 W under load), LPDDR5 100 GB/s"),
    _p("arm-neoverse", 250.0, 80 * 3.0e9 * 8, 204.8e9, 50.0,
       "Ampere Altra Q80-30 (Neoverse N1, 80 cores x 3.0 GHz x 8 FP64/cycle), 8 x DDR4-3200", cores=80),
    _p("generic-gpu", 300.0, 30e12, 1800e9, 30.0, "a mid-range datacenter GPU"),
    _p("nvidia-t4", 70.0, 8.1e12, 320e9, 10.0, "NVIDIA T4 (Turing), FP32, GDDR6"),
    _p("nvidia-a10", 150.0, 31.2e12, 600e9, 20.0, "NVIDIA A10 (Ampere), FP32, GDDR6"),
    _p("nvidia-l4", 72.0, 30.3e12, 300e9, 16.0, "NVIDIA L4 (Ada), FP32, GDDR6"),
    _p("nvidia-a100", 400.0, 19.5e12, 2039e9, 50.0, "NVIDIA A100 SXM4 80GB, FP32, HBM2e"),
    _p("nvidia-h100", 700.0, 67e12, 3350e9, 70.0, "NVIDIA H100 SXM5, FP32, HBM3"),
    _p("nvidia-h200", 700.0, 67e12, 4800e9, 70.0, "NVIDIA H200 SXM, FP32, HBM3e"),
    _p("nvidia-rtx-4090", 450.0, 82.6e12, 1008e9, 20.0, "NVIDIA GeForce RTX 4090 (Ada), FP32, GDDR6X"),
)}

# (regex on a CPU model name / ARM part, profile), first match wins
_CPU_PATTERNS = (
    (r"EPYC\s+9\d\d4|EPYC\s+[48]\d\d4|Zen ?4", "amd-epyc-zen4"),
    (r"EPYC", "amd-epyc-zen3"),
    (r"Xeon.*(Platinum|Gold|Silver|Bronze)\s+\d[45]\d\d|Sapphire|Emerald|Xeon.*w[579]-\d4",
     "intel-xeon-sapphire-rapids"),
    (r"Xeon", "intel-xeon-icelake"),
    (r"Apple M", "apple-m-series"),
    (r"Neoverse|0xd0c|0xd40|0xd49|0xd4f|Graviton|Ampere|Altra", "arm-neoverse"),
)
_GPU_PATTERNS = (
    (r"\bH200\b", "nvidia-h200"), (r"\bH100\b", "nvidia-h100"), (r"\bA100\b", "nvidia-a100"),
    (r"\bA10G?\b", "nvidia-a10"), (r"\bL4\b", "nvidia-l4"), (r"\bT4\b", "nvidia-t4"),
    (r"RTX\s*4090", "nvidia-rtx-4090"),
)


def _match(text: str, patterns: Iterable[tuple[str, str]]) -> DeviceProfile | None:
    for pattern, name in patterns:
        if re.search(pattern, text, re.IGNORECASE):
            return PROFILES[name]
    return None


def cpu_model(cpuinfo: Path | None = None) -> str:
    """This machine's CPU model: /proc/cpuinfo's ``model name`` (ARM: ``CPU part``), "" if unknown."""
    if cpuinfo is None and sys.platform == "darwin" and platform.machine() == "arm64":
        return "Apple M"  # Apple silicon: no /proc/cpuinfo; every one maps to the M-series profile
    try:
        text = (cpuinfo or CPUINFO).read_text(errors="replace")
    except OSError:
        return ""
    for key in ("model name", "CPU part"):
        m = re.search(rf"^{key}\s*:\s*(.+)$", text, re.MULTILINE)
        if m:
            return m.group(1).strip()
    return ""


def _device_id(device: Any) -> str:
    dev_id = getattr(device, "id", None)
    return dev_id if isinstance(dev_id, str) else str(device).partition(":")[2]


def profile_for(device: Any, hint: str | None = None) -> DeviceProfile:
    """The profile of `device` (a Device, or a name like "numpy:cpu"). CPU devices match the
    `hint` or else this machine's CPU model; other devices match the `hint` (a device name such
    as "NVIDIA H100 80GB HBM3"); no match gives ``generic-x86-core`` / ``generic-gpu``."""
    if _device_id(device).startswith("cpu"):
        return _share(_match(hint or cpu_model(), _CPU_PATTERNS) or PROFILES["generic-x86-core"])
    return (_match(hint, _GPU_PATTERNS) if hint else None) or PROFILES["generic-gpu"]


def _share(p: DeviceProfile) -> DeviceProfile:
    """A socket profile scaled to the cores this process may use (a 2-vCPU VM on a 64-core
    EPYC idles at 2/64 of the socket's idle draw, not all of it)."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 1
    if p.cores <= usable:
        return p
    return replace(p, name=f"{p.name} ({usable} of {p.cores} cores)",
                   idle_watts=p.idle_watts * usable / p.cores)


def _vector(name: str, values: float | Sequence[float]) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(values, dtype=np.float64))
    if arr.ndim != 1 or not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise CalibrationError(f"calibrate: {name} must be finite numbers >= 0, got {values!r}")
    return arr


def _nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least squares with x >= 0 for a few unknowns: the best of the unconstrained fits on
    every subset of the columns whose solution is non-negative (exact NNLS)."""
    best, best_res = np.zeros(a.shape[1]), float(b @ b)
    for k in range(1, a.shape[1] + 1):
        for cols in itertools.combinations(range(a.shape[1]), k):
            sub = a[:, cols]
            x, *_ = np.linalg.lstsq(sub, b, rcond=None)
            if np.all(x >= 0):
                res = float(np.sum((sub @ x - b) ** 2))
                if res < best_res * (1 - 1e-12):
                    best, best_res = np.zeros(a.shape[1]), res
                    best[list(cols)] = x
    return best


def calibrate(name: str, measured_joules: float | Sequence[float], flops: float | Sequence[float],
              bytes: float | Sequence[float], seconds: float | Sequence[float],
              idle_watts: float | None = None, base: DeviceProfile | None = None) -> DeviceProfile:
    """Fit a profile to measured runs: ``joules ~= J/FLOP x flops + J/byte x bytes + idle x s``.

    Procedure: on the device to calibrate, run a matmul-heavy workload (many FLOPs per byte)
    and a bandwidth-heavy one (elementwise ops on large arrays) inside energy accounting that
    reads a real meter (NVML, RAPL), and note for each run its measured joules, its cost-rule
    FLOPs and bytes (`tenferro_runtime.cost.graph_cost`, or the accounting's op records) and
    its duration. Pass the runs as sequences (one entry per run); more runs fit better.

    The coefficients are a least-squares fit constrained to be >= 0. `idle_watts` given (the
    device's draw when idle, read from the meter with nothing running) is subtracted first;
    None fits it too when there are at least three runs, else takes 0. When the runs cannot
    separate FLOPs from bytes (one run, or proportional runs), `base` (a table profile) keeps
    its J/FLOP : J/byte ratio and only its scale is fitted; without `base` that is an error.
    """
    joules, f, b, s = (_vector(n, v) for n, v in (("measured_joules", measured_joules),
                                                   ("flops", flops), ("bytes", bytes), ("seconds", seconds)))
    if not len(joules) == len(f) == len(b) == len(s):
        raise CalibrationError(f"calibrate: measured_joules, flops, bytes and seconds need one entry per "
                               f"run, got lengths {len(joules)}, {len(f)}, {len(b)}, {len(s)}")
    fit_idle = idle_watts is None and len(joules) >= 3
    idle = 0.0 if idle_watts is None else float(_vector("idle_watts", idle_watts)[0])
    columns = [f, b] + ([s] if fit_idle else [])
    a = np.stack(columns, axis=1)
    target = joules - idle * s
    scale = np.where(np.abs(a).max(axis=0) > 0, np.abs(a).max(axis=0), 1.0)  # condition the fit
    rank = np.linalg.matrix_rank(a / scale)
    if rank < a.shape[1]:
        if base is None:
            raise CalibrationError(
                f"calibrate({name!r}): {len(joules)} run(s) cannot separate J/FLOP from J/byte; pass a "
                f"matmul-heavy and a bandwidth-heavy run, or base=<a table profile> to scale its ratio")
        shape = f * base.joules_per_flop + b * base.joules_per_byte
        factor = float(shape @ target / (shape @ shape)) if shape @ shape > 0 else 0.0
        coef = np.array([base.joules_per_flop, base.joules_per_byte]) * max(factor, 0.0)
        how = f"base profile {base.name!r} scaled x{max(factor, 0.0):.3g}"
    else:
        coef = _nnls(a / scale, target) / scale
        how = "non-negative least squares"
    if fit_idle:
        idle = float(coef[2])
    note = (f"calibrated from {len(joules)} measured run(s) ({how}); idle {idle:g} W "
            f"{'fitted' if fit_idle else 'given' if idle_watts is not None else 'assumed 0'}")
    return DeviceProfile(name, float(coef[0]), float(coef[1]), idle, note)


__all__ = ["PROFILES", "CalibrationError", "DeviceProfile", "calibrate", "cpu_model", "profile_for"]
