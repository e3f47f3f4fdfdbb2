"""The `threads` setting: how many threads each backend's kernels may use.

One number for the whole process (BLAS and OpenMP pools are process-wide): the
`Runtime(threads=...)` argument, else the environment variable ``TENFERRO_THREADS``, else
the CPUs this process may use (its affinity mask, capped by its cgroup CPU quota; at least
1), lowered to ``OMP_NUM_THREADS`` / ``OPENBLAS_NUM_THREADS`` / ``MKL_NUM_THREADS`` when one
of those holds a smaller positive integer (a job script that pins those keeps its limit).

The runtime hands the number to each backend that has the optional ``set_threads(n)``
(`tenferro_core.backend.OPTIONAL_BACKEND_ATTRS`) when the runtime first makes one of its
devices: numpy (threadpoolctl: NumPy's and SciPy's BLAS) and torch (`torch.set_num_threads`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from typing import Any

from tenferro_core.errors import ArgumentError, ArgumentValueError

ENV = "TENFERRO_THREADS"
"""The environment variable that sets the default `threads` of every runtime."""

STANDARD_ENVS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
"""The libraries' own variables: a positive integer in one of them lowers the default."""

CGROUP_V2_CPU_MAX = "/sys/fs/cgroup/cpu.max"
CGROUP_V1_QUOTA = "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"
CGROUP_V1_PERIOD = "/sys/fs/cgroup/cpu/cpu.cfs_period_us"


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def cgroup_cpu_limit(cpu_max: str = CGROUP_V2_CPU_MAX, cfs_quota: str = CGROUP_V1_QUOTA,
                     cfs_period: str = CGROUP_V1_PERIOD) -> float | None:
    """The CPUs a cgroup quota allows this process (quota / period, e.g. 1.5), or None when
    no quota is set or none can be read. cgroup v2's ``cpu.max`` ("max 100000" or "150000
    100000") first, then v1's ``cpu.cfs_quota_us`` (-1: none) / ``cpu.cfs_period_us``."""
    text = _read(cpu_max)
    if text:
        quota, _, period = text.partition(" ")
        try:
            if quota != "max" and float(quota) > 0 and float(period or 100000) > 0:
                return float(quota) / float(period or 100000)
        except ValueError:
            pass
        return None
    quota, period = _read(cfs_quota), _read(cfs_period)
    try:
        if quota is not None and period is not None and float(quota) > 0 and float(period) > 0:
            return float(quota) / float(period)
    except ValueError:
        pass
    return None


def available_cpus(affinity: Iterable[int] | None = None, **cgroup_paths: str) -> int:
    """The CPUs this process may use: its affinity mask (`os.sched_getaffinity`, else
    `os.cpu_count()`), capped by its cgroup CPU quota rounded up (`cgroup_cpu_limit`, whose
    file paths `cgroup_paths` may replace); at least 1."""
    if affinity is None:
        try:
            affinity = os.sched_getaffinity(0)
        except (AttributeError, OSError):  # not Linux
            affinity = range(os.cpu_count() or 1)
    n = len(set(affinity)) or 1
    quota = cgroup_cpu_limit(**cgroup_paths)
    if quota is not None:
        n = min(n, max(1, math.ceil(quota)))
    return max(1, n)


def _explain() -> str:
    return (f"threads is the number of threads each backend's kernels may use (BLAS, OpenMP): "
            f"pass a positive integer, e.g. Runtime(threads=1), or set {ENV}=1; leave it unset "
            f"for the CPUs this process may use")


def check_threads(value: Any, where: str = "Runtime(threads=...)") -> int:
    """`value` as a positive int; `ArgumentError` (a TypeError) for a non-integer,
    `ArgumentValueError` (a ValueError) for 0 or a negative number."""
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            import numpy as np

            ok = isinstance(value, np.integer)
        except ImportError:  # pragma: no cover (numpy is a core dependency)
            ok = False
        if not ok:
            raise ArgumentError(f"{where} must be a positive integer, got {type(value).__name__} "
                                f"{value!r}; {_explain()}")
        value = int(value)
    if value < 1:
        raise ArgumentValueError(f"{where} must be a positive integer (1 or more), got {value!r}; "
                                 f"{_explain()}")
    return value


def _env_int(text: str) -> int | None:
    try:
        n = int(text.strip())
    except ValueError:
        return None
    return n if n > 0 else None


def default_threads(environ: Mapping[str, str] | None = None, **available: Any) -> int:
    """The threads a runtime uses when neither the argument nor ``TENFERRO_THREADS`` is
    given: `available_cpus(**available)`, lowered to the smallest positive integer among
    ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` and ``MKL_NUM_THREADS`` (other values in
    those are the libraries' business and ignored here)."""
    environ = os.environ if environ is None else environ
    n = available_cpus(**available)
    pins = [_env_int(environ[k]) for k in STANDARD_ENVS if environ.get(k)]
    pins = [p for p in pins if p is not None]
    return min([n, *pins])


def resolve_threads(value: Any = None, environ: Mapping[str, str] | None = None,
                    **available: Any) -> tuple[int, str]:
    """(threads, where it came from): the argument, else ``TENFERRO_THREADS``, else
    `default_threads`. Raises before anything changes: `ArgumentError` (TypeError) for a
    non-integer argument, `ArgumentValueError` (ValueError) for 0, a negative number or an
    environment variable that is not a positive integer."""
    environ = os.environ if environ is None else environ
    if value is not None:
        return check_threads(value), "argument"
    text = environ.get(ENV, "").strip()
    if text:
        n = _env_int(text)
        if n is None:
            raise ArgumentValueError(f"the environment variable {ENV} must be a positive integer, "
                                     f"got {text!r}; {_explain()}")
        return n, ENV
    return default_threads(environ, **available), "default"


def apply_threads(backend: Any, n: int) -> bool:
    """Hand `n` to `backend.set_threads` when the backend has one; True when it did."""
    set_threads = getattr(backend, "set_threads", None)
    if set_threads is None:
        return False
    set_threads(n)
    return True
