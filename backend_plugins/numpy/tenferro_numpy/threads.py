"""NumPy's and SciPy's BLAS threads: the runtime's `threads` through threadpoolctl, an idle
policy that gives cores back, and one thread for small products.

Three causes of slow steps, each fixed here (docs/performance.md, "Threads"):

- OpenBLAS's pthreads workers spin for 2**28 TSC cycles (~0.1 s) after every parallel call
  before they sleep. Next to torch's OpenMP pool in the same process (numpy:cpu and torch:cpu
  steps in turn) or another busy process, that spin holds a core the other pool waits for.
  `set_threads` restarts each OpenBLAS pool with a short spin (OpenBLAS's
  ``OPENBLAS_THREAD_TIMEOUT``, read again through its own `openblas_read_env`), unless the
  user set that variable: 2**20 cycles (~0.4 ms), long enough to bridge the Python between
  the products of a decode step, short enough to give the core back within a step.
- OpenBLAS splits every product over m*n*k = 262,144 multiply-adds across its threads. A
  hand-off costs tens of microseconds on an idle machine and a scheduler time slice (ms) when
  another process holds the other core, so the digits demo's 10-200 us products ran 10x
  slower on a busy machine. Products below `SMALL_PRODUCT` multiply-adds run on one thread
  (the kernel `NumpyBackend.specialize` wraps for the signature switches NumPy's OpenBLAS
  to one thread and back, only when the count changes).
- The number itself: at most the runtime's `threads`, through threadpoolctl, for every BLAS
  library loaded (SciPy's own OpenBLAS is loaded first so the limit reaches it); and for a
  large product no more than the CPUs other processes leave idle (sampled every
  `LOAD_SAMPLE_S` from /proc/loadavg's running tasks, less this process's own): OpenBLAS's
  threads wait for each other inside a product by spinning, so one that shares a core with
  another busy process makes the product wait for time slices (the MLP step 68 ms on two
  threads next to one CPU-bound process, 7.6 ms on one).

Thread pools are process-wide, so this state is too: one `_STATE`.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from time import monotonic
from typing import Any

SMALL_PRODUCT = 1 << 24
"""Products with fewer multiply-adds (m*n*k; ~16.8M, ~0.25 ms on one core) run on one BLAS
thread: below that, handing half to another thread saves less than the hand-off can cost."""

SMALL_OPERANDS = 1 << 20
"""...unless their operands exceed 1 MiB: a matrix-vector product (a decode step's
projection) is bound by memory, not multiply-adds, and a second thread's share of the
bandwidth pays for the hand-off. SmolLM2's 121 weight products of one decode step (float32,
2-core VM, idle): 37 ms on one thread, 21 ms on two; the step 46 -> ~43 ms."""

IDLE_SPIN_LOG2 = 20
"""OpenBLAS's thread timeout (log2 of TSC cycles a worker spins before it sleeps, ~0.4 ms).
At OpenBLAS's minimum (4) every product of SmolLM2's decode step woke a sleeping worker:
43 ms a token against 38 ms at 20 and 36.5 at 22, alternating in one process. A longer spin
holds a core another pool wants: numpy:cpu and torch:cpu steps in one process
stayed within 10% of each alone at 20 and not at 22 (torch:cpu shared/alone 0.89-1.06 in
six runs at 20, 0.91-1.26 at 22, on the AMD VM; the same on an earlier Intel VM), though at
22 a worker no longer sleeps through the MLP Adam update between two train steps (a wake
costs the next product 80-190 us there: the steps 5-10% faster). docs/performance.md,
"Threads"."""

LOAD_SAMPLE_S = 0.1
"""How often (seconds) a large product looks again at how many CPUs other processes use."""

_AFFIXES = tuple(itertools.product(("", "scipy_"), ("", "64_", "_64")))


class _State:
    """What was applied: the limit, the count NumPy's OpenBLAS now uses, its raw setters."""

    def __init__(self) -> None:
        self.limit: int | None = None
        self.current: int | None = None
        self.setters: tuple[Any, ...] = ()
        self.respun: dict[str, bool] = {}  # OpenBLAS library -> its pool was restarted
        self.sampled = -1e9  # time.monotonic() of the last load sample
        self.large = 1  # threads for a large product: the limit, less the CPUs others hold

    def use(self, n: int) -> None:
        for fn in self.setters:
            fn(n)
        self.current = n

    def resample(self, now: float) -> None:
        self.sampled = now
        idle = idle_cpus()
        self.large = self.limit if idle is None else max(1, min(self.limit, idle))


_STATE = _State()


def idle_cpus(loadavg: str = "/proc/loadavg", tasks: str = "/proc/self/task") -> int | None:
    """The machine's CPUs less the runnable tasks of other processes (loadavg's running count,
    less this process's threads that are running now); None where /proc cannot say."""
    try:
        with open(loadavg) as f:
            running = int(f.read().split()[3].partition("/")[0])
        own = 0
        for tid in os.listdir(tasks):
            try:
                with open(f"{tasks}/{tid}/stat") as f:
                    own += f.read().rpartition(")")[2].split()[0] == "R"
            except OSError:  # the thread ended
                continue
    except (OSError, ValueError, IndexError):
        return None
    return (os.cpu_count() or 1) - max(0, running - max(own, 1))


def _symbol(lib: Any, name: str) -> Any:
    for prefix, suffix in _AFFIXES:
        fn = getattr(lib, f"{prefix}{name}{suffix}", None)
        if fn is not None:
            return fn
    return None


def _numpy_dirs() -> tuple[str, ...]:
    import numpy as np

    pkg = Path(np.__file__).resolve().parent
    return str(pkg) + os.sep, str(pkg.parent / "numpy.libs") + os.sep


def _short_spin(lc: Any) -> bool:
    """Restart an OpenBLAS pthreads pool so its idle workers sleep after IDLE_SPIN_LOG2 (once
    per library; not where the user set OPENBLAS_THREAD_TIMEOUT). True when it did."""
    if (lc.internal_api != "openblas" or getattr(lc, "threading_layer", None) != "pthreads"
            or lc.filepath in _STATE.respun):
        return False
    _STATE.respun[lc.filepath] = False
    if os.environ.get("OPENBLAS_THREAD_TIMEOUT") or os.environ.get("GOTO_THREAD_TIMEOUT"):
        return False
    lib = lc.dynlib
    read_env, shutdown = getattr(lib, "openblas_read_env", None), getattr(lib, "blas_thread_shutdown_", None)
    timeout = getattr(lib, "openblas_thread_timeout", None)
    if read_env is None or shutdown is None or timeout is None:
        return False
    os.environ["OPENBLAS_THREAD_TIMEOUT"] = str(IDLE_SPIN_LOG2)
    try:
        read_env()  # OpenBLAS keeps the value; blas_thread_init reads it on the restart
    finally:
        del os.environ["OPENBLAS_THREAD_TIMEOUT"]
    if timeout() != IDLE_SPIN_LOG2:
        return False
    shutdown()  # workers joined; openblas_set_num_threads (next) starts them again
    _STATE.respun[lc.filepath] = True
    return True


def _load_scipy_blas() -> None:
    """Load the OpenBLAS a SciPy wheel bundles (``scipy.libs/``) without importing SciPy
    (0.2 s, and the numpy backend's first device must stay cheap), so the limit and the idle
    spin reach it before SciPy uses it: SciPy's modules later get the same loaded library.
    Nothing to do where SciPy links the system's BLAS (NumPy's, already loaded) or is absent."""
    import ctypes
    import importlib.util

    try:
        spec = importlib.util.find_spec("scipy")  # finds, does not import
    except (ImportError, ValueError):
        return
    if spec is None or not spec.submodule_search_locations:
        return
    for path in sorted((Path(next(iter(spec.submodule_search_locations))).parent / "scipy.libs")
                       .glob("libscipy_openblas*.so*")):
        try:
            ctypes.CDLL(str(path))
        except OSError:
            continue


def set_threads(n: int) -> None:
    """Use at most `n` threads in every loaded BLAS library (NumPy's and SciPy's OpenBLAS),
    with the short idle spin, and remember `n` for the per-product choice."""
    import threadpoolctl

    _load_scipy_blas()
    controllers = [lc for lc in threadpoolctl.ThreadpoolController().lib_controllers
                   if lc.user_api == "blas"]
    numpy_dirs = _numpy_dirs()
    setters = []
    for lc in controllers:
        _short_spin(lc)
        lc.set_num_threads(n)
        clear = getattr(type(lc), "clear_controlling_thread", None)
        if clear is not None:  # threadpoolctl lets only the first thread that set a limit set more
            clear()
        if (lc.internal_api == "openblas" and getattr(lc, "threading_layer", None) == "pthreads"
                and lc.filepath.startswith(numpy_dirs)):
            fn = _symbol(lc.dynlib, "openblas_set_num_threads")
            if fn is not None:
                setters.append(fn)
    _STATE.setters = tuple(setters)
    _STATE.limit = _STATE.current = _STATE.large = n
    _STATE.sampled = -1e9


def small_state(macs: int, nbytes: int) -> Any:
    """The thread state a product of `macs` multiply-adds over `nbytes` of operands switches
    to one thread before it runs (a kernel that inlines the switch reads `.current` and calls
    `.use(1)`), or None where `sized` would not run it on one thread."""
    state = _STATE
    if not state.setters or not state.limit or state.limit == 1:
        return None
    return state if macs < SMALL_PRODUCT and nbytes < SMALL_OPERANDS else None


def sized(kernel: Any, macs: int, nbytes: int = 0) -> Any:
    """`kernel` (a BLAS product of `macs` multiply-adds per call, reading `nbytes` of
    operands) run on one thread when it is small, otherwise on the runtime's `threads` less
    the CPUs other processes keep busy; `kernel` itself where there is nothing to switch (no
    limit applied yet, a limit of 1, or no NumPy OpenBLAS found)."""
    state = _STATE
    if not state.setters or not state.limit or state.limit == 1:
        return kernel
    if small_state(macs, nbytes) is not None:
        def one_thread(*args: Any, **kwargs: Any) -> Any:
            if state.current != 1:
                state.use(1)
            return kernel(*args, **kwargs)

        return one_thread

    def all_threads(*args: Any, **kwargs: Any) -> Any:
        now = monotonic()
        if now - state.sampled > LOAD_SAMPLE_S:
            state.resample(now)
        if state.current != state.large:
            state.use(state.large)
        return kernel(*args, **kwargs)

    return all_threads
