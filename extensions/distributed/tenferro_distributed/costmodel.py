"""An alpha-beta cost model of the collective algorithms, fitted by a short calibration.

The time of algorithm `a` on a message of `m` bytes is modelled as ``alpha[a] + beta[a] * m``
(latency in seconds, inverse bandwidth in seconds per byte), with a second (alpha, beta) pair
for messages above `SPLIT` bytes where the calibration reached them: past the caches the
bandwidth drops (on the 2-core VM a line fitted to 1 KB-4 MB predicted 39 ms for a 64 MB
all_reduce that took 91 ms). Between two calibrated sizes the (alpha, beta) of that interval
is used, the line through its two points: two lines still missed the regime changes by 20-40%
at half the calibrated sizes. `calibrate()` times each all_reduce algorithm on a few sizes
(`time_all_reduce`: the 20th percentile of `reps` runs of back-to-back calls, the slowest
rank's time, so every rank fits the same numbers), fits alpha and beta by least squares, installs the
model on the group and sets its policy to "auto": from then on a collective called without ``algorithm=``
runs the algorithm with the smallest predicted time for its message size. The choice is the
same on every rank because the model is.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from tenferro_core.errors import ArgumentValueError
from tenferro_distributed import algorithms as A
from tenferro_distributed.group import current

SPLIT = 1 << 20
"""Bytes above which a message is in the large regime (its own alpha and beta, where fitted)."""


@dataclass(frozen=True)
class CostModel:
    """alpha (s) and beta (s/byte) per all_reduce algorithm; `large`: alg -> (alpha, beta) for
    messages above `split` bytes, for the algorithms calibrated there; `points`: alg ->
    (sizes, times) calibrated, between which a message's time is the alpha-beta line of its
    interval (the bandwidth changes regime more than once: caches, then memory)."""

    alpha: dict
    beta: dict
    large: dict = field(default_factory=dict)
    split: int = SPLIT
    points: dict = field(default_factory=dict)

    def predict(self, algorithm: str, nbytes: int) -> float:
        """Predicted seconds of `algorithm` for a message of `nbytes` bytes: within the
        calibrated sizes, the line through the two around it; outside them, the fitted line
        of its regime."""
        pts = self.points.get(algorithm)
        if pts is not None and len(pts[0]) >= 2 and pts[0][0] <= nbytes <= pts[0][-1]:
            return float(np.interp(nbytes, pts[0], pts[1]))
        if nbytes > self.split and algorithm in self.large:
            a, b = self.large[algorithm]
            return a + b * nbytes
        return self.alpha[algorithm] + self.beta[algorithm] * nbytes

    def choose(self, collective: str, nbytes: int) -> str:
        """The algorithm of `collective` with the smallest predicted time (fitted ones only;
        collectives other than all_reduce use ring when it is predicted faster than native)."""
        if collective == "all_reduce":
            return min(self.alpha, key=lambda a: (self.predict(a, nbytes), a))
        if "ring" in A.ALGORITHMS[collective] and "ring" in self.alpha:
            return "ring" if self.predict("ring", nbytes) < self.predict("native", nbytes) else "native"
        return "native"


def _line(m: np.ndarray, t: np.ndarray, clip: bool = True) -> tuple[float, float]:
    """alpha, beta (clipped at 0 unless `clip` is False: the large regime's line is steeper and
    may cross zero below the split, where it is not used) by least squares on the relative
    error (each row divided by its time): sizes span decades, and plain least squares would
    fit the largest ones and leave the latency to noise."""
    w = 1.0 / np.maximum(t, 1e-12)
    (a, b), *_ = np.linalg.lstsq(np.stack([np.ones_like(m), m], axis=1) * w[:, None], t * w, rcond=None)
    return (max(float(a), 0.0), max(float(b), 0.0)) if clip else (float(a), max(float(b), 0.0))


def fit(sizes: list[int], times: dict[str, list[float]], split: int = SPLIT) -> CostModel:
    """The model from times at `sizes` bytes per algorithm: one line through the sizes up to
    `split`, and another through those from `split` up where at least two lie above it (used
    outside the calibrated sizes), and the calibrated points themselves (used between them)."""
    m = np.asarray(sizes, np.float64)
    small, big = m <= split, m >= split
    fit_big = int((m > split).sum()) >= 1 and int(big.sum()) >= 2
    if int(small.sum()) < 2:
        small = np.ones_like(m, dtype=bool)
    alpha, beta, large, points = {}, {}, {}, {}
    order = np.argsort(m, kind="stable")
    for alg, t in times.items():
        t = np.asarray(t, np.float64)
        alpha[alg], beta[alg] = _line(m[small], t[small])
        if fit_big:
            large[alg] = _line(m[big], t[big], clip=False)
        points[alg] = (tuple(float(x) for x in m[order]), tuple(float(x) for x in t[order]))
    return CostModel(alpha, beta, large, split, points)


def calls_per_timing(nbytes: int, budget: int = 1 << 24) -> int:
    """How many back-to-back calls one timing spans for a message of `nbytes`: about `budget`
    bytes of traffic, 1-64 calls. One call of a small message (~0.3 ms on loopback) is timed
    with the other rank's arrival and the scheduler's jitter in it; a run of calls averages
    them. The same on every rank, since it depends on the size only."""
    return max(1, min(64, budget // max(int(nbytes), 1)))


def time_all_reduce(sizes: tuple[int, ...], reps: int = 5,
                    algorithms: tuple[str, ...] = A.ALGORITHMS["all_reduce"]) -> dict[str, list[float]]:
    """Seconds per all_reduce (float32 sum) of each algorithm at each of `sizes` bytes, the
    slowest rank's (so every rank gets the same numbers): the 20th percentile of `reps` rounds
    in which the algorithms take turns (a disturbed moment hits one round of each), each round
    a barrier and then `calls_per_timing` calls, the time per call. A low quantile rather than
    the fastest round: on a loaded machine one round can be lucky as well as disturbed
    (bench/distributed.py: 64-65 of 68 predictions within 20% against 58-61 with the fastest).
    A collective: every rank must call it."""
    import torch

    from tenferro_distributed.comm import all_reduce_buf
    from tenferro_distributed.group import barrier

    bad = [a for a in algorithms if a not in A.ALGORITHMS["all_reduce"]]
    if bad or reps < 1 or not sizes or min(sizes) < 4:
        raise ArgumentValueError(f"calibrate/time_all_reduce: algorithms must be among "
                                 f"{A.ALGORITHMS['all_reduce']}, "
                                 f"reps >= 1, sizes >= 4 bytes; got algorithms={algorithms}, reps={reps}, "
                                 f"sizes={sizes}")
    times: dict[str, list[float]] = {a: [] for a in algorithms}
    for size in sizes:
        buf = torch.ones(size // 4, dtype=torch.float32)
        calls = calls_per_timing(size)
        for alg in algorithms:
            all_reduce_buf(buf, "sum", alg)  # warm-up (connections, allocations)
        runs: dict[str, list[float]] = {a: [] for a in algorithms}
        for _ in range(reps):
            for alg in algorithms:
                barrier()
                t0 = time.perf_counter()
                for _ in range(calls):
                    all_reduce_buf(buf, "sum", alg)
                runs[alg].append((time.perf_counter() - t0) / calls)
        for alg in algorithms:
            times[alg].append(float(np.percentile(runs[alg], 20)))
    flat = torch.tensor([t for a in algorithms for t in times[a]], dtype=torch.float64)
    worst = all_reduce_buf(flat, "max", "native")
    k = len(sizes)
    return {a: worst[i * k:(i + 1) * k].tolist() for i, a in enumerate(algorithms)}


def calibrate(sizes: tuple[int, ...] = (1 << 10, 1 << 14, 1 << 18, 1 << 20, 1 << 22, 1 << 24), reps: int = 3,
              algorithms: tuple[str, ...] = A.ALGORITHMS["all_reduce"], install: bool = True) -> CostModel:
    """Time all_reduce per algorithm on `sizes` bytes (`time_all_reduce`) and fit the model (a
    collective: every rank must call it). Installs it with policy "auto" unless install=False."""
    model = fit([4 * (s // 4) for s in sizes], time_all_reduce(sizes, reps, algorithms))
    if install:
        g = current()
        g.cost_model, g.policy = model, "auto"
    return model


def set_policy(policy: str) -> None:
    """The algorithm collectives use without ``algorithm=``: "native", "ring", "tree", "rhd"
    (where the collective has it, else native) or "auto" (the calibrated cost model; call
    `calibrate()` first). Every rank must set the same policy."""
    g = current()
    names = ("auto",) + A.ALGORITHMS["all_reduce"]
    if policy not in names:
        from tenferro_distributed.errors import UnknownAlgorithmError
        raise UnknownAlgorithmError(f"set_policy: unknown policy {policy!r}; choose one of {names}")
    if policy == "auto" and g.cost_model is None:
        raise ArgumentValueError("set_policy('auto') needs a cost model: call calibrate() first")
    g.policy = policy
