"""Energy of a whole job: each rank measures its own steps, the job report gathers them.

Each rank accounts its step with `tenferro_runtime.energy.measure` (its meters: RAPL, NVML,
power x time, or the cost-model estimate, each labelled); at the end of the step one small
all_gather gives every rank every rank's joules, seconds and sources, so all ranks hold the
same report: per-rank and total joules per step and per epoch, with the sources. A job
budget (`max_joules`) is checked on that gathered total, so every rank sees the same number
and all stop together, after the step that crossed it (its update done: parameters and
optimizer state whole), with `JobEnergyBudgetExceeded`::

    job = JobEnergy(max_joules=5e4)
    for epoch in range(epochs):
        with job.epoch(f"epoch {epoch}"):
            for x, y in loader:
                with job.step():
                    ...train step...
    print(job.table())
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tenferro_core.errors import ArgumentError, ArgumentValueError, EnergyBudgetExceeded
from tenferro_distributed.group import current

SOURCES = ("nvml", "rapl", "power x time", "estimate")


class JobEnergyBudgetExceeded(EnergyBudgetExceeded):
    """The job's total energy (all ranks) crossed its budget; raised on every rank after the
    same step. `spent`, `budget` (joules), `where` (the step's label)."""


@dataclass
class JobRecord:
    """One step or epoch of the job: joules and seconds per rank, their total, and each
    rank's sources ("rapl", "estimate", with " ~" when approximate)."""

    label: str
    kind: str
    joules: list[float]
    seconds: list[float]
    sources: list[str]
    children: list[JobRecord] = field(default_factory=list)

    @property
    def total(self) -> float:
        return float(sum(self.joules))


def _code(sources: str) -> int:
    """The sources of a Region as a bit mask (bit 2k: source k, bit 2k+1: approximate)."""
    m = 0
    for part in (s.strip() for s in sources.split(",") if s.strip()):
        name, approx = (part[:-2], True) if part.endswith(" ~") else (part, False)
        if name in SOURCES:
            m |= 1 << (2 * SOURCES.index(name) + int(approx))
    return m


def _decode(m: int) -> str:
    out = [SOURCES[k // 2] + (" ~" if k % 2 else "") for k in range(2 * len(SOURCES)) if m >> k & 1]
    return ", ".join(out) or "none"


class JobEnergy:
    """The job's energy report and budget (see the module doc). Every rank makes one and
    runs the same steps (each step ends with a collective)."""

    def __init__(self, *, max_joules: float | None = None, timeout: float | None = None):
        if max_joules is not None:
            if isinstance(max_joules, bool) or not isinstance(max_joules, (int, float)):
                raise ArgumentError(f"JobEnergy: max_joules must be a number of joules or None, got "
                                    f"{max_joules!r}")
            if not (max_joules > 0 and math.isfinite(max_joules)):
                raise ArgumentValueError(f"JobEnergy: max_joules must be a positive finite number, got "
                                         f"{max_joules!r}")
        current()
        self.max_joules = None if max_joules is None else float(max_joules)
        self.timeout = timeout
        self.steps: list[JobRecord] = []
        self.epochs: list[JobRecord] = []
        self._epoch: JobRecord | None = None

    @property
    def total(self) -> float:
        """Joules of every rank over every step so far."""
        return float(sum(s.total for s in self.steps))

    def _gather(self, region: Any) -> tuple[list[float], list[float], list[str]]:
        from tenferro_distributed import api
        from tenferro_runtime import array_api as xp

        mine = xp.asarray([region.joules, region.seconds, float(_code(region.sources))], dtype=xp.float64)
        rows = api.all_gather(mine, timeout=self.timeout).numpy().reshape(-1, 3)
        return ([float(v) for v in rows[:, 0]], [float(v) for v in rows[:, 1]],
                [_decode(int(v)) for v in rows[:, 2]])

    @contextlib.contextmanager
    def step(self, label: str | None = None) -> Iterator[Any]:
        """Measure the block on this rank, then gather every rank's joules (a collective) and
        check the job budget; yields this rank's `Region`."""
        from tenferro_runtime.energy import measure

        label = label or f"step {len(self.steps) + 1}"
        with measure(label, kind="step") as region:
            yield region
        joules, secs, srcs = self._gather(region)
        rec = JobRecord(label, "step", joules, secs, srcs)
        self.steps.append(rec)
        if self._epoch is not None:
            self._epoch.children.append(rec)
        if self.max_joules is not None and self.total > self.max_joules:
            raise JobEnergyBudgetExceeded(
                f"the job's energy budget of {self.max_joules:g} J is spent: {self.total:.4g} J over "
                f"{len(joules)} ranks after {label} (this step's update is done; every rank stops here)",
                self.total, self.max_joules, label)

    @contextlib.contextmanager
    def epoch(self, label: str | None = None) -> Iterator[JobRecord]:
        """Group the steps of the block into an epoch record (per rank: the sum of its steps)."""
        n = current().world_size
        rec = JobRecord(label or f"epoch {len(self.epochs) + 1}", "epoch", [0.0] * n, [0.0] * n, [""] * n)
        self._epoch = rec
        try:
            yield rec
        finally:
            self._epoch = None
            for s in rec.children:
                rec.joules = [a + b for a, b in zip(rec.joules, s.joules)]
                rec.seconds = [a + b for a, b in zip(rec.seconds, s.seconds)]
            rec.sources = [", ".join(sorted({p for s in rec.children for p in s.sources[r].split(", ")}))
                           for r in range(n)]
            self.epochs.append(rec)

    def report(self) -> dict:
        """Plain data: per epoch and per step, per-rank joules, total and sources."""
        def row(r: JobRecord) -> dict:
            return {"label": r.label, "joules_per_rank": r.joules, "total_joules": r.total,
                    "seconds_per_rank": r.seconds, "sources_per_rank": r.sources}
        return {"total_joules": self.total, "epochs": [row(e) for e in self.epochs],
                "steps": [row(s) for s in self.steps], "budget_joules": self.max_joules}

    def table(self) -> str:
        """The epochs (or the steps, without epochs) as a text table."""
        recs = self.epochs or self.steps
        if not recs:
            return "(no steps measured)"
        n = len(recs[0].joules)
        ranks = "".join(f"{'rank ' + str(r) + ' J':>14}" for r in range(n))
        head = f"{'':<12}{ranks}{'total J':>14}  sources"
        lines = [head]
        for r in recs:
            lines.append(f"{r.label:<12}" + "".join(f"{j:>14.4g}" for j in r.joules) + f"{r.total:>14.4g}  "
                         + "; ".join(f"{k}: {s}" for k, s in enumerate(r.sources)))
        lines.append(f"{'job':<12}" + " " * 14 * n + f"{self.total:>14.4g}")
        return "\n".join(lines)


__all__ = ["JobEnergy", "JobEnergyBudgetExceeded", "JobRecord"]
