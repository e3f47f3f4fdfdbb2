"""The collectives users call: on Tensors (eagerly, under grad/vmap, inside compile) and their
async variants, which start the collective on the group's communication thread and return a
`Work` whose ``wait()`` gives the result (for overlapping communication with compute, e.g.
gradient buckets during backward).

Async collectives run eagerly on concrete tensors (they are not recorded by grad or compile);
a sync collective issued while async ones are pending waits for them first, so every rank runs
the collectives in the order they were issued.
"""

from __future__ import annotations

from typing import Any

from tenferro_core.avals import Aval
from tenferro_core.errors import ArgumentError
from tenferro_distributed import comm
from tenferro_distributed.group import Work
from tenferro_distributed.ops import all_gather_p, all_reduce_p, broadcast_p, reduce_scatter_p


def _tensor(x: Any) -> Any:
    if hasattr(x, "_aval"):
        return x
    from tenferro_runtime import array_api as xp

    return xp.asarray(x)


def all_reduce(x: Any, op: str = "sum", *, algorithm: str | None = None,
               timeout: float | None = None) -> Any:
    """Elementwise reduction of `x` over all ranks: op "sum", "mean", "max" or "min".
    `algorithm`: None/"auto" (the group's policy), "native", "ring", "tree" or "rhd"."""
    return all_reduce_p.bind(_tensor(x), op=op, algorithm=algorithm, timeout=timeout)


def all_gather(x: Any, *, algorithm: str | None = None, timeout: float | None = None) -> Any:
    """Every rank's `x` (same shape on all, >= 1-d) concatenated along axis 0 in rank order."""
    return all_gather_p.bind(_tensor(x), algorithm=algorithm, timeout=timeout)


def reduce_scatter(x: Any, op: str = "sum", *, algorithm: str | None = None,
                   timeout: float | None = None) -> Any:
    """Block `rank()` of the sum (or mean) of `x` over ranks, `x` split in `world_size()` blocks
    along axis 0 (which the world size must divide)."""
    return reduce_scatter_p.bind(_tensor(x), op=op, algorithm=algorithm, timeout=timeout)


def broadcast(x: Any, root: int = 0, *, algorithm: str | None = None, timeout: float | None = None) -> Any:
    """Rank `root`'s `x` on every rank (`x` gives the shape and dtype on the others)."""
    return broadcast_p.bind(_tensor(x), root=root, algorithm=algorithm, timeout=timeout)


def _start(prim, fn, x: Any, **payload) -> Work:
    from tenferro_runtime.tensor import Tensor

    x = _tensor(x)
    if type(x) is not Tensor:
        raise ArgumentError(f"{prim.name}: async collectives run eagerly on concrete tensors, got "
                            f"{type(x).__name__}; inside grad/vmap/compile call the sync collective")
    params = prim.check_params(payload, (x._aval,))
    prim.abstract_eval((x._aval,), params)  # the shape rule's checks, before anything starts
    device = x.device

    def finish(buf):
        return Tensor._new(buf, Aval(tuple(buf.shape), x.dtype, device))

    return fn(x._buf, *[params[k] for k in params], asynchronous=True, finish=finish)


def all_reduce_async(x: Any, op: str = "sum", *, algorithm: str | None = None,
                     timeout: float | None = None) -> Work:
    """Start `all_reduce`; returns a `Work` (``wait()`` -> Tensor)."""
    return _start(all_reduce_p, comm.all_reduce_buf, x, op=op, algorithm=algorithm, timeout=timeout)


def all_gather_async(x: Any, *, algorithm: str | None = None, timeout: float | None = None) -> Work:
    """Start `all_gather`; returns a `Work`."""
    return _start(all_gather_p, comm.all_gather_buf, x, algorithm=algorithm, timeout=timeout)


def reduce_scatter_async(x: Any, op: str = "sum", *, algorithm: str | None = None,
                         timeout: float | None = None) -> Work:
    """Start `reduce_scatter`; returns a `Work`."""
    return _start(reduce_scatter_p, comm.reduce_scatter_buf, x, op=op, algorithm=algorithm, timeout=timeout)


def broadcast_async(x: Any, root: int = 0, *, algorithm: str | None = None,
                    timeout: float | None = None) -> Work:
    """Start `broadcast`; returns a `Work`."""
    return _start(broadcast_p, comm.broadcast_buf, x, root=root, algorithm=algorithm, timeout=timeout)
