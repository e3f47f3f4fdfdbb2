"""The process group: `init()`, `shutdown()`, `rank()`, `world_size()`, `barrier()`.

tenferro runs on torch.distributed (gloo for CPU devices, NCCL for ``torch:cuda``). `init()`
reads torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/MASTER_PORT) or takes
rank, world size, backend and `init_method` (``env://``, ``tcp://host:port``,
``file:///path``) explicitly; it makes the rendezvous store itself
(``torch.distributed.rendezvous``) and hands it to ``init_process_group``, so the same store
serves tenferro's fault detection.

**State.** One holder, `_HOLDER`, keeps the current `Group` (this process's membership);
everything else lives on the Group: its sequence number, timeout, debug flag, algorithm
policy and cost model, the async executor and the heartbeat thread.

**Sequence numbers.** Every collective (sync or async, eager or inside a compiled function)
takes the group's next sequence number when it runs; all ranks run the same collectives in the
same order, so ``(collective, seq)`` names one collective on every rank.

**Faults.** A heartbeat thread writes ``hb/<rank> = "<beat> <seq>"`` to the store every
`heartbeat` seconds. When a collective fails (gloo reports a closed connection, or the
per-call timeout passes) the survivor writes ``failed/<rank>`` and reads every rank's
heartbeat twice, 3 periods apart: a rank whose beat did not move and that reported no failure
of its own is dead (`RankFailureError`), a live rank whose seq is behind
this one's has not reached the collective (`CollectiveTimeoutError`). An unreachable TCP store
means its host, rank 0, is gone. Either error names the ranks, the collective and its seq;
the group is then broken: every later collective raises at once (call `shutdown()`; restart
the job, e.g. ``torchrun --max-restarts``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from tenferro_core.errors import ArgumentError, ArgumentValueError
from tenferro_distributed.errors import (
    CollectiveError,
    CollectiveMismatchError,
    CollectiveTimeoutError,
    DistributedError,
    NotInitializedError,
    RankFailureError,
)

DEFAULT_TIMEOUT = 300.0
"""Seconds a collective may take when neither `init(timeout=)` nor the call names one."""


def check_timeout(timeout: Any, what: str = "timeout") -> float:
    """A positive finite number of seconds as a float, else an ArgumentValueError/ArgumentError."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise ArgumentError(f"{what} must be a positive number of seconds, got {timeout!r} "
                            f"({type(timeout).__name__}); pass e.g. {what}=30.0")
    if not (0 < float(timeout) < float("inf")):
        raise ArgumentValueError(f"{what} must be a positive finite number of seconds, got {timeout!r}; "
                                 f"pass e.g. {what}=30.0")
    return float(timeout)


@dataclass(eq=False)
class Group:
    """This process's membership of the job; made by `init()`, read with `current()`."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    timeout: float
    debug: bool
    heartbeat: float
    store: Any  # torch.distributed Store (prefixed "tenferro/")
    store_host: int | None  # the rank hosting a TCP store (None: a file store, survives any rank)
    seq: int = 0
    policy: str = "native"
    cost_model: Any = None
    broken: CollectiveError | None = None
    _beat: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _store_lock: threading.Lock = field(default_factory=threading.Lock)
    _seq_lock: threading.Lock = field(default_factory=threading.Lock)
    _executor: ThreadPoolExecutor | None = None
    _pending: list = field(default_factory=list)
    _thread: threading.Thread | None = None

    # ---- heartbeat ------------------------------------------------------------------------

    def _write_beat(self) -> None:
        self._beat += 1
        with self._store_lock:
            self.store.set(f"hb/{self.rank}", f"{self._beat} {self.seq}")

    def _beat_loop(self) -> None:
        while not self._stop.wait(self.heartbeat):
            try:
                self._write_beat()
            except Exception:  # the store is gone: diagnosis reports it; nothing to do here
                if self._stop.wait(self.heartbeat):
                    return

    def _read_beats(self) -> dict[int, tuple[int, int]] | None:
        """{rank: (beat, seq)}, or None when the store cannot be reached."""
        try:
            with self._store_lock:
                vals = self.store.multi_get([f"hb/{r}" for r in range(self.world_size)])
        except Exception:
            return None
        out = {}
        for r, v in enumerate(vals):
            beat, seq = bytes(v).decode().split()
            out[r] = (int(beat), int(seq))
        return out

    def _failed(self) -> set[int]:
        """The ranks that reported a failed collective (alive when they did)."""
        keys = [f"failed/{r}" for r in range(self.world_size)]
        try:
            with self._store_lock:
                return {r for r, k in enumerate(keys) if self.store.check([k])}
        except Exception:
            return set()

    # ---- running collectives --------------------------------------------------------------

    def _next_seq(self) -> int:
        with self._seq_lock:
            self.seq += 1
            return self.seq

    def run(self, name: str, fn: Callable[[float], Any], timeout: float | None) -> Any:
        """Run collective `name` (``fn(timeout)`` does the communication) with the next seq;
        any failure becomes a typed error naming the missing ranks. Waits for the async
        collectives started before it, so every rank runs them in one order."""
        if self._pending:
            return self.submit(name, fn, timeout).wait()
        return self._run(name, fn, timeout, self._next_seq())

    def _run(self, name: str, fn: Callable[[float], Any], timeout: float | None, seq: int) -> Any:
        if self.broken is not None:
            raise type(self.broken)(f"{name} #{seq}: the process group is broken since "
                                    f"{self.broken.collective} #{self.broken.seq} ({self.broken}); call "
                                    f"tenferro_distributed.shutdown() and restart the job",
                                    name, seq, self.broken.ranks)
        t = self.timeout if timeout is None else timeout
        start = time.monotonic()
        try:
            return fn(t)
        except (CollectiveError, CollectiveMismatchError):  # typed; a mismatch leaves the group intact
            raise
        except Exception as e:
            err = self.diagnose(name, seq, e, t, time.monotonic() - start)
            self.broken = err
            raise err from e

    def submit(self, name: str, fn: Callable[[float], Any], timeout: float | None,
               finish: Callable[[Any], Any] = lambda r: r) -> Work:
        """Start collective `name` on the group's communication thread; returns its `Work`."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="tenferro-comm")
        seq = self._next_seq()
        fut = self._executor.submit(self._run, name, fn, timeout, seq)
        self._pending.append(fut)
        fut.add_done_callback(self._pending.remove)
        return Work(fut, name, seq, finish)

    def diagnose(self, name: str, seq: int, error: BaseException, timeout: float,
                 elapsed: float) -> CollectiveError:
        """The typed error for collective `name` #`seq` that failed with `error` on this rank."""
        where = f"{name} #{seq} on rank {self.rank} of {self.world_size}"
        try:  # survivors that fail too may stop beating (exit) later: they are not dead
            with self._store_lock:
                self.store.set(f"failed/{self.rank}", str(seq))
        except Exception:
            pass
        first = self._read_beats()
        if first is not None:
            self._stop.wait(3 * self.heartbeat)  # a window for live ranks to beat again
            second = self._read_beats()
            failed = self._failed()
        if first is None or second is None:
            host = self.store_host if self.store_host is not None else 0
            return RankFailureError(f"{where} failed ({_short(error)}) and the rendezvous store is "
                                    f"unreachable: rank {host}, which hosts it, died or hung", name, seq,
                                    (host,))
        dead = tuple(r for r in range(self.world_size)
                     if r != self.rank and second[r][0] == first[r][0] and r not in failed)
        if dead:
            quiet = f"{3 * self.heartbeat:.1f}s"
            return RankFailureError(f"{where} failed after {elapsed:.1f}s ({_short(error)}): rank(s) "
                                    f"{list(dead)} died or froze (no heartbeat for {quiet})",
                                    name, seq, dead)
        behind = tuple(r for r in range(self.world_size) if second[r][1] < seq)
        timed_out = "timeout" in str(error).lower() or "timed out" in str(error).lower() or elapsed >= timeout
        if behind or timed_out:
            at = ", ".join(f"#{second[r][1]}" for r in behind)
            who = (f"rank(s) {list(behind)} did not reach it (alive, at {at})" if behind
                   else "no rank could be named")
            return CollectiveTimeoutError(f"{where} did not complete within {timeout:g}s: {who}", name, seq,
                                          behind)
        return CollectiveError(f"{where} failed ({_short(error)}); every rank is alive and reached it",
                               name, seq, ())


class Work:
    """A started collective: `wait()` returns its result (or raises its typed error)."""

    def __init__(self, future: Future, name: str, seq: int, finish: Callable[[Any], Any]):
        self._future, self.collective, self.seq, self._finish = future, name, seq, finish

    def done(self) -> bool:
        return self._future.done()

    def wait(self) -> Any:
        return self._finish(self._future.result())

    def __repr__(self) -> str:
        return f"Work({self.collective} #{self.seq}, done={self.done()})"


def _short(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return f"{type(e).__name__}: {s[0][:200] if s else ''}"


_HOLDER: dict[str, Group | None] = {"group": None}


def current() -> Group:
    """The group `init()` made; NotInitializedError before it (or after `shutdown()`)."""
    g = _HOLDER["group"]
    if g is None:
        raise NotInitializedError("tenferro_distributed is not initialized: call "
                                  "tenferro_distributed.init() first (under torchrun, or with rank=, "
                                  "world_size= and init_method=)")
    return g


def is_initialized() -> bool:
    return _HOLDER["group"] is not None


def rank() -> int:
    return current().rank


def world_size() -> int:
    return current().world_size


def local_rank() -> int:
    return current().local_rank


def _env_int(name: str, given: int | None) -> int:
    if given is not None:
        v = given
    elif name in os.environ:
        v = os.environ[name]
    else:
        raise ArgumentError(f"init: no {name.lower()} given and ${name} is not set; launch with torchrun "
                            f"or pass {name.lower()}=")
    try:
        return int(v)
    except (TypeError, ValueError):
        raise ArgumentError(f"init: {name.lower()} must be an integer, got {v!r}") from None


def _backend_for(device: Any) -> str:
    name = str(device) if device is not None else "numpy:cpu"
    return "nccl" if name.startswith("torch:cuda") else "gloo"


def init(backend: str | None = None, *, rank: int | None = None, world_size: int | None = None,
         init_method: str | None = None, timeout: float | None = None, device: Any = None,
         debug: bool | None = None, heartbeat: float = 0.5, store: Any = None) -> Group:
    """Join the job: rendezvous, create the torch.distributed process group, start the heartbeat.

    `backend` defaults to NCCL for a ``torch:cuda`` `device`, gloo otherwise. `rank` and
    `world_size` default to $RANK and $WORLD_SIZE, `init_method` to ``env://`` (torchrun's
    MASTER_ADDR/MASTER_PORT). `timeout` (seconds, default $TENFERRO_DIST_TIMEOUT or 300) bounds
    every collective. `debug` (default $TENFERRO_DIST_DEBUG=1) checks before each collective that
    all ranks pass the same shapes, dtypes and arguments. `heartbeat` (seconds) is the period of
    the liveness beat that names dead ranks. `store`: a torch.distributed Store made by the caller
    instead of `init_method`'s rendezvous; a TCPStore is taken to be hosted by rank 0. A TCP
    rendezvous at 127.0.0.1/localhost listens on 127.0.0.1 only. Returns the `Group`."""
    import torch.distributed as dist

    if _HOLDER["group"] is not None:
        raise DistributedError("init: tenferro_distributed is already initialized; call shutdown() first")
    t = check_timeout(timeout if timeout is not None else float(os.environ.get("TENFERRO_DIST_TIMEOUT",
                                                                              DEFAULT_TIMEOUT)))
    hb = check_timeout(heartbeat, "heartbeat")
    r, n = _env_int("RANK", rank), _env_int("WORLD_SIZE", world_size)
    if n < 1 or not 0 <= r < n:
        raise ArgumentValueError(f"init: rank must be in [0, world_size), got rank={r}, world_size={n}")
    backend = backend or _backend_for(device)
    if backend not in ("gloo", "nccl", "mpi"):
        raise ArgumentValueError(f"init: backend must be 'gloo' or 'nccl', got {backend!r}")
    method = init_method or "env://"
    if debug is None:
        debug = os.environ.get("TENFERRO_DIST_DEBUG", "") not in ("", "0")
    local = int(os.environ.get("LOCAL_RANK", r))
    if backend == "nccl":
        import torch

        torch.cuda.set_device(local)
    mine = None
    try:
        if store is None:
            store = _loopback_store(method, r, n, t)
        if store is None:
            store, r, n = next(dist.rendezvous(method, r, n, timeout=timedelta(seconds=t)))
            host = None if method.startswith("file://") else 0
        else:
            host = None if isinstance(store, dist.FileStore) else 0
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        if attempt not in ("", "0"):  # torchrun's store keeps a failed attempt's keys (dead gloo addresses)
            store = dist.PrefixStore(f"attempt{attempt}/", store)
        mine = dist.PrefixStore("tenferro/", store)
        mine.set(f"arrived/{r}", "1")
        dist.init_process_group(backend, store=dist.PrefixStore("pg/", store), rank=r, world_size=n,
                                timeout=timedelta(seconds=t))
    except Exception as e:
        raise _init_error(e, mine, r, n, t, method) from e
    g = Group(r, n, local, backend, t, bool(debug), hb, mine, host)
    g._write_beat()
    g._thread = threading.Thread(target=g._beat_loop, name="tenferro-heartbeat", daemon=True)
    g._thread.start()
    _HOLDER["group"] = g
    try:
        barrier()
    except BaseException:
        _teardown(g)
        raise
    return g


def _init_error(e: Exception, store: Any, rank: int, world: int, timeout: float,
                method: str) -> CollectiveError:
    """The typed error for a failed rendezvous, naming the ranks that never arrived."""
    missing: tuple[int, ...] = ()
    if store is not None:
        try:
            missing = tuple(q for q in range(world) if not store.check([f"arrived/{q}"]))
        except Exception:
            missing = ()
    where = f"init: rank {rank} of {world} ({method})"
    who = f"rank(s) {list(missing)} never arrived" if missing else "no missing rank could be named"
    if "timeout" in str(e).lower() or "timed out" in str(e).lower():
        return CollectiveTimeoutError(f"{where}: the rendezvous did not complete within {timeout:g}s: "
                                      f"{who}; start every rank (same init_method and world_size)", "init",
                                      0, missing)
    return CollectiveError(f"{where} failed ({_short(e)}); {who}", "init", 0, missing)


_LOOPBACK = ("127.0.0.1", "localhost")


def _loopback_store(method: str, rank: int, world: int, timeout: float) -> Any:
    """For a rendezvous on this machine (``tcp://127.0.0.1:port``, or ``env://`` with
    MASTER_ADDR 127.0.0.1/localhost and no torchrun agent store), the TCPStore with rank 0's
    server on a socket bound to 127.0.0.1: torch's own binds every interface. None otherwise."""
    import socket
    from urllib.parse import urlparse

    import torch.distributed as dist

    if method.startswith("tcp://"):
        u = urlparse(method)
        host, port = u.hostname, u.port
    elif method.startswith("env://") and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    else:
        return None
    if host not in _LOOPBACK or not port:
        return None
    td = timedelta(seconds=timeout)
    if rank:
        return dist.TCPStore("127.0.0.1", int(port), world, False, td)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", int(port)))
    sock.listen(128)
    return dist.TCPStore("127.0.0.1", int(port), world, True, td, master_listen_fd=sock.detach(),
                         use_libuv=False)


def barrier(timeout: float | None = None) -> None:
    """Wait until every rank reaches it (a collective: it takes a sequence number)."""
    import torch.distributed as dist

    g = current()
    t = None if timeout is None else check_timeout(timeout)
    g.run("barrier", lambda tt: dist.barrier(async_op=True).wait(timeout=timedelta(seconds=tt)), t)


def _teardown(g: Group) -> None:
    import torch.distributed as dist

    g._stop.set()
    if g._executor is not None:
        g._executor.shutdown(wait=g.broken is None, cancel_futures=True)
    _HOLDER["group"] = None
    if dist.is_initialized():
        dist.destroy_process_group()


def shutdown() -> None:
    """Leave the job: stop the heartbeat and the communication thread, destroy the group."""
    g = _HOLDER["group"]
    if g is not None:
        _teardown(g)


__all__ = ["init", "shutdown", "is_initialized", "rank", "world_size", "local_rank", "barrier", "current",
           "Group", "Work", "check_timeout", "DEFAULT_TIMEOUT"]
