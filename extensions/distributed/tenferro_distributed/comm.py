"""Collectives on buffers (NumPy arrays or torch tensors): algorithm choice, the debug check
of matching arguments across ranks, and the run under the group's sequence number and timeout.

The kernels of the primitives (ops.py) and the async API call these. A NumPy buffer reaches
gloo through ``torch.from_numpy`` (shared memory, no copy): only the result is a new array.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from tenferro_core.errors import DeviceError
from tenferro_distributed import algorithms as A
from tenferro_distributed.errors import CollectiveMismatchError, UnknownAlgorithmError
from tenferro_distributed.group import Group, current

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
OPS = ("sum", "mean", "max", "min")
_ALGS = ("auto", "native", "ring", "tree", "rhd")
_DTYPES = ("float16", "float32", "float64", "int8", "int32", "int64", "uint8")  # gloo has no int16
SUPPORTED_DTYPES = frozenset(_DTYPES)
_SIG = 14


def check_algorithm(collective: str, algorithm: Any) -> str:
    """The canonical algorithm name ("auto" for None) or an UnknownAlgorithmError."""
    if algorithm is None:
        return "auto"
    if algorithm == "auto" or algorithm in A.ALGORITHMS[collective]:
        return str(algorithm)
    raise UnknownAlgorithmError(f"{collective}: unknown algorithm {algorithm!r}; choose one of "
                                f"{('auto',) + A.ALGORITHMS[collective]} (auto: the group's policy)")


def resolve_algorithm(g: Group, collective: str, algorithm: str, nbytes: int) -> str:
    """The algorithm that runs: the named one, else the group's policy (the cost model's choice
    under policy "auto"). Identical on every rank: policy and model are set collectively."""
    if algorithm != "auto":
        return algorithm
    if g.policy == "auto" and g.cost_model is not None:
        return g.cost_model.choose(collective, nbytes)
    return g.policy if g.policy in A.ALGORITHMS[collective] else "native"


def _torch(buf: Any) -> Any:
    """A flat torch view of a contiguous buffer (NumPy: shares memory)."""
    import torch

    if isinstance(buf, np.ndarray):
        return torch.from_numpy(buf).reshape(-1)
    return buf.reshape(-1)


def _readable(buf: Any) -> Any:
    """`buf` contiguous (and writable for NumPy, which torch.from_numpy wants), copied only if not."""
    if isinstance(buf, np.ndarray):
        return buf if buf.flags.c_contiguous and buf.flags.writeable else np.array(buf, order="C")
    return buf.contiguous()


def _copy(buf: Any) -> Any:
    return np.array(buf, copy=True, order="C") if isinstance(buf, np.ndarray) else buf.clone().contiguous()


def _check_args(g: Group, name: str, x: Any, op: str, algorithm: str, root: int, deadline: float) -> None:
    """Debug mode: all-gather each rank's (collective, op, algorithm, dtype, shape, root) and name
    the ranks that differ from rank 0 (every rank raises the same error)."""
    import torch

    shape = tuple(x.shape)
    sig = [COLLECTIVES.index(name), OPS.index(op) if op in OPS else -1, _ALGS.index(algorithm),
           _DTYPES.index(str(x.dtype).replace("torch.", "")), len(shape), root, int(np.prod(shape))]
    sig += list(shape[:_SIG - len(sig)]) + [-1] * (_SIG - len(sig) - min(len(shape), _SIG - len(sig)))
    where = "cpu" if isinstance(x, np.ndarray) else x.device  # NCCL: signatures on the GPU
    mine = torch.tensor(sig, dtype=torch.int64, device=where)
    allsig = torch.empty(g.world_size * _SIG, dtype=torch.int64, device=where)
    A._gather_fn()(allsig, mine, async_op=True).wait(timeout=A._left(deadline))
    rows = allsig.reshape(g.world_size, _SIG).tolist()
    bad = [r for r in range(g.world_size) if rows[r] != rows[0]]
    if bad:
        def show(row):
            nd = row[4]
            return (f"{COLLECTIVES[row[0]]}(op={OPS[row[1]] if row[1] >= 0 else None}, "
                    f"algorithm={_ALGS[row[2]]}, {_DTYPES[row[3]]}{row[7:7 + nd]}, root={row[5]})")
        diffs = "; ".join(f"rank {r}: {show(rows[r])}" for r in bad)
        raise CollectiveMismatchError(f"{name} #{g.seq}: ranks disagree with rank 0's {show(rows[0])}: "
                                      f"{diffs}; every rank must call the same collective with the same "
                                      f"shape, dtype and arguments")


def _dispatch(g: Group, name: str, body, x: Any, op: str, algorithm: str, root: int,
              timeout: float | None, asynchronous: bool, finish=lambda r: r):
    if g.backend == "nccl" and (isinstance(x, np.ndarray) or x.device.type != "cuda"):
        raise DeviceError(f"{name}: the NCCL process group communicates CUDA tensors only, got a "
                          f"{'NumPy' if isinstance(x, np.ndarray) else str(x.device)} buffer; put the tensor "
                          f"on torch:cuda, or init(backend='gloo') for CPU tensors")
    def fn(t: float):
        deadline = time.monotonic() + t
        if g.debug:
            _check_args(g, name, x, op, algorithm, root, deadline)
        return body(deadline)

    if asynchronous:
        return g.submit(name, fn, timeout, finish)
    return finish(g.run(name, fn, timeout))


def all_reduce_buf(x: Any, op: str = "sum", algorithm: str = "auto", timeout: float | None = None,
                   asynchronous: bool = False, finish=lambda r: r):
    """The reduction of `x` over ranks, a new buffer of `x`'s type (or a Work if asynchronous)."""
    g = current()
    out = _copy(x)
    alg = resolve_algorithm(g, "all_reduce", algorithm, out.nbytes if isinstance(out, np.ndarray)
                            else out.numel() * out.element_size())
    rop = "sum" if op == "mean" else op

    def body(deadline):
        flat = _torch(out)
        A.ALL_REDUCE[alg](flat, rop, g.rank, g.world_size, deadline)
        if op == "mean":
            flat.div_(g.world_size)
        return out

    return _dispatch(g, "all_reduce", body, x, op, algorithm, 0, timeout, asynchronous, finish)


def all_gather_buf(x: Any, algorithm: str = "auto", timeout: float | None = None,
                   asynchronous: bool = False, finish=lambda r: r):
    """The ranks' `x` concatenated along axis 0 in rank order."""
    g = current()
    src = _readable(x)
    shape = (g.world_size * x.shape[0],) + tuple(x.shape[1:])
    if isinstance(src, np.ndarray):
        out = np.empty(shape, src.dtype)
    else:
        out = src.new_empty(shape)
    alg = resolve_algorithm(g, "all_gather", algorithm, _nbytes(out))

    def body(deadline):
        A.ALL_GATHER[alg](_torch(out), _torch(src), g.rank, g.world_size, deadline)
        return out

    return _dispatch(g, "all_gather", body, x, "sum", algorithm, 0, timeout, asynchronous, finish)


def reduce_scatter_buf(x: Any, op: str = "sum", algorithm: str = "auto", timeout: float | None = None,
                       asynchronous: bool = False, finish=lambda r: r):
    """Block `rank` (of `world_size` along axis 0) of the reduction of `x` over ranks."""
    g = current()
    shape = (x.shape[0] // g.world_size,) + tuple(x.shape[1:])
    if isinstance(x, np.ndarray):
        out = np.empty(shape, x.dtype)
    else:
        out = x.new_empty(shape)
    alg = resolve_algorithm(g, "reduce_scatter", algorithm, _nbytes(x))
    rop = "sum" if op == "mean" else op
    src = _copy(x) if alg == "ring" else _readable(x)

    def body(deadline):
        flat = _torch(out)
        A.REDUCE_SCATTER[alg](flat, _torch(src), rop, g.rank, g.world_size, deadline)
        if op == "mean":
            flat.div_(g.world_size)
        return out

    return _dispatch(g, "reduce_scatter", body, x, op, algorithm, 0, timeout, asynchronous, finish)


def broadcast_buf(x: Any, root: int = 0, algorithm: str = "auto", timeout: float | None = None,
                  asynchronous: bool = False, finish=lambda r: r):
    """Rank `root`'s `x` on every rank."""
    g = current()
    out = _copy(x)
    alg = resolve_algorithm(g, "broadcast", algorithm, _nbytes(out))

    def body(deadline):
        A.BROADCAST[alg](_torch(out), root, g.rank, g.world_size, deadline)
        return out

    return _dispatch(g, "broadcast", body, x, "sum", algorithm, root, timeout, asynchronous, finish)


def _nbytes(buf: Any) -> int:
    return buf.nbytes if isinstance(buf, np.ndarray) else buf.numel() * buf.element_size()
