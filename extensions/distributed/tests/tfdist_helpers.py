"""A small launcher for the tests: starts `world` local processes, each joining a gloo group
through a FileStore (nothing listens beyond 127.0.0.1: GLOO_SOCKET_IFNAME=lo), runs
``module:function(**kwargs)`` and returns each rank's result (pickled to a file). A hard
deadline kills every child.

The ranks are forked from a multiprocessing fork server that imported torch and
tenferro_distributed once: a fresh interpreter per rank spent ~2.5 s of CPU importing them,
most of the distributed tests' time on CI's two cores. A rank starts with the environment and
working directory a fresh process would have; the server exits with the test process."""

from __future__ import annotations

import importlib
import multiprocessing
import os
import pickle
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
_PRELOAD = ["torch", "torch.distributed", "numpy", "tenferro_runtime", "tenferro_distributed",
            "tfdist_helpers"]
_CONTEXT = None


def _context() -> multiprocessing.context.BaseContext:
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(_PRELOAD)
    return _CONTEXT


def _rank_main(env: dict, log: str) -> None:
    """A forked rank: the environment, output and directory of a fresh process, then the job."""
    os.environ.clear()
    os.environ.update(env)
    sys.path.insert(0, str(HERE))
    os.chdir(HERE)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    worker_main()


def run_workers(target: str, world: int, tmp: Path, *, timeout: float = 90.0, kwargs: dict | None = None,
                dist_timeout: float = 30.0, allow_fail: tuple[int, ...] = ()) -> list:
    """Results per rank: ("ok", value) or ("error", type name, message, attrs). Ranks in
    `allow_fail` may die without a result (None)."""
    tmp.mkdir(parents=True, exist_ok=True)
    store = tmp / "store"
    if store.exists():
        store.unlink()
    env = dict(os.environ, WORLD_SIZE=str(world), GLOO_SOCKET_IFNAME="lo", TFDIST_TARGET=target,
               TFDIST_INIT=f"file://{store}", TFDIST_TIMEOUT=str(dist_timeout), TFDIST_DIR=str(tmp),
               PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    (tmp / "kwargs.pkl").write_bytes(pickle.dumps(kwargs or {}))
    ctx = _context()
    procs = []
    for r in range(world):
        p = ctx.Process(target=_rank_main, args=(dict(env, RANK=str(r)), str(tmp / f"log{r}.txt")),
                        daemon=True)
        p.start()
        procs.append(p)
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(timeout=max(deadline - time.monotonic(), 0.1))
    if any(p.exitcode is None for p in procs):
        for p in procs:
            p.kill()
            p.join()
        logs = "\n".join(f"--- rank {r}\n{_log(tmp, r)[-3000:]}" for r in range(world))
        raise AssertionError(f"{target} on {world} ranks passed its {timeout}s deadline\n{logs}")
    results = []
    for r in range(world):
        path = tmp / f"result{r}.pkl"
        if path.exists():
            results.append(pickle.loads(path.read_bytes()))
        elif r in allow_fail:
            results.append(None)
        else:
            raise AssertionError(f"rank {r} of {target} left no result (exit {procs[r].exitcode}):\n"
                                 f"{_log(tmp, r)[-4000:]}")
    return results


def _log(tmp: Path, rank: int) -> str:
    path = tmp / f"log{rank}.txt"
    return path.read_text(errors="replace") if path.exists() else "(no log)"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_main() -> None:
    import tenferro_distributed as dist

    rank = int(os.environ["RANK"])
    out = Path(os.environ["TFDIST_DIR"]) / f"result{rank}.pkl"
    kwargs = pickle.loads((Path(os.environ["TFDIST_DIR"]) / "kwargs.pkl").read_bytes())
    mod, fn = os.environ["TFDIST_TARGET"].split(":")
    func = getattr(importlib.import_module(mod), fn)
    init_kw = kwargs.pop("init", {})
    port = kwargs.pop("tcp_port", None)
    if port is not None:  # the torchrun way: MASTER_ADDR/MASTER_PORT, a TCPStore hosted by rank 0
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        init_kw["init_method"] = "env://"
    init_kw.setdefault("init_method", os.environ["TFDIST_INIT"])
    dist.init(timeout=float(os.environ["TFDIST_TIMEOUT"]), **init_kw)
    try:
        res = ("ok", func(**kwargs))
    except Exception as e:  # reported to the parent, which asserts on it
        res = ("error", type(e).__name__, str(e), {k: getattr(e, k) for k in ("ranks", "seq", "collective")
                                                   if hasattr(e, k)}, time.monotonic())
    tmpf = out.with_suffix(".tmp")
    tmpf.write_bytes(pickle.dumps(res))
    tmpf.replace(out)
    sys.stdout.flush()
    os._exit(0)  # no teardown: a broken group's destroy may wait on dead peers
