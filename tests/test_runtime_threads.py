"""The `threads` setting: its default (affinity, cgroup quota, the libraries' variables), the
environment variable, the Runtime argument, typed errors before anything changes, and its
effect on NumPy's/SciPy's BLAS (threadpoolctl's report) and torch's intra-op pool."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from tenferro_core.errors import ArgumentError, ArgumentValueError, TenferroError
from tenferro_runtime import Runtime
from tenferro_runtime.threads import (
    ENV,
    available_cpus,
    cgroup_cpu_limit,
    default_threads,
    resolve_threads,
)

threadpoolctl = pytest.importorskip("threadpoolctl")
torch = pytest.importorskip("torch")


def _cgroup(tmp_path, v2=None, quota=None, period=None) -> dict:
    paths = {"cpu_max": str(tmp_path / "cpu.max"), "cfs_quota": str(tmp_path / "cfs_quota_us"),
             "cfs_period": str(tmp_path / "cfs_period_us")}
    for key, text in (("cpu_max", v2), ("cfs_quota", quota), ("cfs_period", period)):
        if text is not None:
            with open(paths[key], "w") as f:
                f.write(text + "\n")
    return paths


# ---- the default ---------------------------------------------------------------------
def test_cgroup_v2_quota(tmp_path):
    assert cgroup_cpu_limit(**_cgroup(tmp_path, v2="max 100000")) is None
    assert cgroup_cpu_limit(**_cgroup(tmp_path, v2="150000 100000")) == 1.5
    assert available_cpus(range(8), **_cgroup(tmp_path, v2="150000 100000")) == 2  # rounded up
    assert available_cpus(range(8), **_cgroup(tmp_path, v2="50000 100000")) == 1
    assert available_cpus(range(8), **_cgroup(tmp_path, v2="max 100000")) == 8
    assert available_cpus({0, 3}, **_cgroup(tmp_path, v2="400000 100000")) == 2  # affinity caps


def test_cgroup_v1_quota(tmp_path):
    assert cgroup_cpu_limit(**_cgroup(tmp_path, quota="-1", period="100000")) is None
    assert available_cpus(range(16), **_cgroup(tmp_path, quota="300000", period="100000")) == 3
    assert available_cpus(range(16), **_cgroup(tmp_path, quota="25000", period="100000")) == 1


def test_no_cgroup_files_means_the_affinity(tmp_path):
    assert cgroup_cpu_limit(**_cgroup(tmp_path)) is None
    assert available_cpus({1, 2, 5}, **_cgroup(tmp_path)) == 3
    assert available_cpus(set(), **_cgroup(tmp_path)) == 1  # at least one


def test_unreadable_cgroup_text_is_no_quota(tmp_path):
    assert cgroup_cpu_limit(**_cgroup(tmp_path, v2="garbage here")) is None
    assert cgroup_cpu_limit(**_cgroup(tmp_path, quota="x", period="100000")) is None


def test_the_real_default_is_this_process_cpus():
    import os

    n = available_cpus()
    assert 1 <= n <= len(os.sched_getaffinity(0))


def test_the_libraries_variables_lower_the_default(tmp_path):
    cg = _cgroup(tmp_path)
    assert default_threads({}, affinity=range(4), **cg) == 4
    assert default_threads({"OMP_NUM_THREADS": "1"}, affinity=range(4), **cg) == 1
    assert default_threads({"OPENBLAS_NUM_THREADS": "2", "MKL_NUM_THREADS": "3"},
                           affinity=range(4), **cg) == 2
    assert default_threads({"OMP_NUM_THREADS": "8"}, affinity=range(4), **cg) == 4  # never raise it
    assert default_threads({"OMP_NUM_THREADS": "4,2", "MKL_NUM_THREADS": ""},
                           affinity=range(4), **cg) == 4  # not ours to judge: ignored


# ---- the variable and the argument -----------------------------------------------------
def test_the_argument_wins_then_the_variable_then_the_default(tmp_path):
    cg = _cgroup(tmp_path)
    assert resolve_threads(3, {ENV: "2"}, affinity=range(4), **cg) == (3, "argument")
    assert resolve_threads(None, {ENV: " 2 ", "OMP_NUM_THREADS": "1"}, affinity=range(4), **cg) == (2, ENV)
    assert resolve_threads(None, {}, affinity=range(4), **cg) == (4, "default")
    assert resolve_threads(np.int64(2), {}) == (2, "argument")


@pytest.mark.parametrize("text", ["two", "0", "-1", "1.5", "2 threads"])
def test_a_bad_variable_is_a_value_error_naming_it(text):
    with pytest.raises(ArgumentValueError) as info:
        resolve_threads(None, {ENV: text})
    assert isinstance(info.value, ValueError) and isinstance(info.value, TenferroError)
    msg = str(info.value)
    assert ENV in msg and repr(text) in msg and "positive integer" in msg


@pytest.mark.parametrize("value, error, builtin", [
    (0, ArgumentValueError, ValueError), (-1, ArgumentValueError, ValueError),
    ("two", ArgumentError, TypeError), (1.5, ArgumentError, TypeError),
    (True, ArgumentError, TypeError), ("2", ArgumentError, TypeError),
])
def test_a_bad_argument_is_typed_and_changes_nothing(value, error, builtin):
    before = (torch.get_num_threads(), _blas_threads())
    with pytest.raises(error) as info:
        Runtime.from_entry_points(threads=value)
    assert isinstance(info.value, builtin)
    msg = str(info.value)
    assert "Runtime(threads=...)" in msg and repr(value) in msg and "TENFERRO_THREADS" in msg
    assert (torch.get_num_threads(), _blas_threads()) == before


def test_a_bad_variable_fails_the_runtime(monkeypatch):
    monkeypatch.setenv(ENV, "two")
    with pytest.raises(ValueError, match="TENFERRO_THREADS"):
        Runtime.from_entry_points()
    monkeypatch.setenv(ENV, "3")
    assert Runtime.from_entry_points().threads == 3
    assert Runtime.from_entry_points(threads=1).threads_source == "argument"


# ---- the effect ----------------------------------------------------------------------------
def _blas_threads() -> dict[str, int]:
    return {i["filepath"]: i["num_threads"] for i in threadpoolctl.threadpool_info()
            if i["user_api"] == "blas"}


@pytest.fixture
def restore_threads():
    """Put BLAS and torch back as they were (other tests share this process)."""
    from tenferro_numpy.backend import NumpyBackend

    torch_before, blas_before = torch.get_num_threads(), _blas_threads()
    yield
    NumpyBackend().set_threads(min(blas_before.values()) if blas_before else 1)
    torch.set_num_threads(torch_before)


def _other(n: int) -> int:
    return 2 if n == 1 else 1


def test_the_setting_reaches_threadpoolctl_and_torch(restore_threads):
    want = _other(torch.get_num_threads())
    rt = Runtime.from_entry_points(threads=want)
    assert rt.threads == want
    rt.device("numpy:cpu")
    rt.device("torch:cpu")
    blas = _blas_threads()
    assert blas and set(blas.values()) == {want}, blas  # NumPy's and SciPy's OpenBLAS
    assert any("scipy" in p and "numpy" not in p for p in blas), "SciPy's own BLAS is limited too"
    assert torch.get_num_threads() == want


def test_apply_threads_reaches_every_backend_now(restore_threads):
    want = _other(torch.get_num_threads())
    rt = Runtime.from_entry_points(threads=want)
    assert {"numpy", "torch"} <= set(rt.apply_threads())
    assert torch.get_num_threads() == want and set(_blas_threads().values()) == {want}


def test_small_products_run_on_one_blas_thread(restore_threads, monkeypatch):
    from tenferro_numpy import threads
    from tenferro_runtime import array_api as xp
    from tenferro_runtime import use_runtime

    rt = Runtime.from_entry_points(threads=2)
    numpy_blas = lambda: [n for p, n in _blas_threads().items() if "numpy" in p]  # noqa: E731
    idle = [2]
    monkeypatch.setattr(threads, "idle_cpus", lambda: idle[0])
    with use_runtime(rt):
        small = xp.ones((8, 8), dtype=xp.float32, device="numpy:cpu")
        big = xp.ones((256, 256), dtype=xp.float32, device="numpy:cpu")
        assert np.asarray(small @ small)[0, 0] == 8
        assert numpy_blas() == [1]
        assert np.asarray(big @ big)[0, 0] == 256  # 2**24 multiply-adds: no longer small
        assert numpy_blas() == [2]
        idle[0] = 1  # another process holds a core: a large product leaves it alone
        threads._STATE.sampled = -1e9  # (the next product samples again)
        assert np.asarray(big @ big)[0, 0] == 256
        assert numpy_blas() == [1]


def test_idle_cpus_reads_loadavg_less_this_process(tmp_path):
    import os

    from tenferro_numpy.threads import idle_cpus

    (tmp_path / "loadavg").write_text("2.50 1.00 0.50 3/345 9999\n")
    tasks = tmp_path / "task"
    for tid, state in (("1", "R"), ("2", "S")):
        (tasks / tid).mkdir(parents=True)
        (tasks / tid / "stat").write_text(f"{tid} (py thon) {state} 1 2 3\n")
    # three running tasks, one of them this process's: two others
    assert idle_cpus(str(tmp_path / "loadavg"), str(tasks)) == (os.cpu_count() or 1) - 2
    assert idle_cpus(str(tmp_path / "missing"), str(tasks)) is None
    n = idle_cpus()
    assert n is None or n <= (os.cpu_count() or 1)


def test_openblas_workers_give_their_core_back(restore_threads):
    """Each OpenBLAS pool restarts with OpenBLAS's shortest idle spin (2**4 cycles, not its
    default 2**28, ~0.1 s) unless OPENBLAS_THREAD_TIMEOUT was set; the pool still works."""
    from tenferro_numpy import threads

    Runtime.from_entry_points(threads=1).device("numpy:cpu")
    assert threads._STATE.respun, "the OpenBLAS libraries were seen"
    for path, restarted in threads._STATE.respun.items():
        timeout = ctypes.CDLL(path).openblas_thread_timeout()
        assert timeout == (threads.IDLE_SPIN_LOG2 if restarted else timeout)
    if not any(_user_timeout()):
        assert all(threads._STATE.respun.values())
    a = np.arange(90000.0).reshape(300, 300)
    np.testing.assert_allclose(a @ a, np.dot(a.astype(np.longdouble), a).astype(float))


def _user_timeout() -> list[str]:
    import os

    return [os.environ[k] for k in ("OPENBLAS_THREAD_TIMEOUT", "GOTO_THREAD_TIMEOUT") if k in os.environ]


def test_torch_is_imported_with_a_short_openmp_spin_and_the_environment_restored():
    """libgomp reads GOMP_SPINCOUNT when torch loads it: the torch backend sets it for that
    import only (child processes keep their own default), and leaves a user's setting."""
    import subprocess
    import sys

    code = ("import os, sys; from tenferro_torch import backend as b; b._torch(); "
            "print('torch' in sys.modules, os.environ.get('GOMP_SPINCOUNT'))")
    env = {k: v for k, v in __import__("os").environ.items()
           if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True)
    assert out.stdout.split() == ["True", "None"]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**env, "GOMP_SPINCOUNT": "5000"})
    assert out.stdout.split() == ["True", "5000"]
