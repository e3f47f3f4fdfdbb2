"""A small launcher for the tests: spawns `world` local processes of `sys.executable`, each
joining a gloo group through a FileStore (nothing listens beyond 127.0.0.1: GLOO_SOCKET_IFNAME=lo),
runs ``module:function(**kwargs)`` and returns each rank's result (pickled to a file). A hard
deadline kills every child."""

from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
_CHILD = "import tfdist_helpers as h; h.worker_main()"


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
    procs = []
    for r in range(world):
        out = open(tmp / f"log{r}.txt", "w")
        procs.append((subprocess.Popen([sys.executable, "-c", _CHILD], env=dict(env, RANK=str(r)),
                                       stdout=out, stderr=subprocess.STDOUT, cwd=str(HERE)), out))
    deadline = time.monotonic() + timeout
    try:
        for p, _ in procs:
            p.wait(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        for p, _ in procs:
            p.kill()
        logs = "\n".join(f"--- rank {r}\n{(tmp / f'log{r}.txt').read_text()[-3000:]}" for r in range(world))
        raise AssertionError(f"{target} on {world} ranks passed its {timeout}s deadline\n{logs}") from None
    finally:
        for p, f in procs:
            p.wait()
            f.close()
    results = []
    for r in range(world):
        path = tmp / f"result{r}.pkl"
        if path.exists():
            results.append(pickle.loads(path.read_bytes()))
        elif r in allow_fail:
            results.append(None)
        else:
            raise AssertionError(f"rank {r} of {target} left no result (exit {procs[r][0].returncode}):\n"
                                 f"{(tmp / f'log{r}.txt').read_text()[-4000:]}")
    return results


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
