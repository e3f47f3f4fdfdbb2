"""Collectives as tenferro primitives: `all_reduce`, `all_gather`, `reduce_scatter`,
`broadcast`, with NumPy and torch kernels, AD rules (jvp/transpose), batch (vmap) and cost rules.

Every collective is ``effects=True``: dead-code elimination, CSE and constant folding keep it,
in program order among effects, also when its result is unused (every rank must run it).
The kernels take the operand's buffer and the canonical payload ``op``, ``algorithm`` (and
``root``), ``timeout``, and run the collective under the group's sequence number (comm.py).
The shape rules read the world size, so calling a collective before `init()` is a
NotInitializedError before anything runs.

**Semantics** (``n`` = world size): ``all_reduce(x, op)`` reduces elementwise over ranks
(sum, mean, max, min); ``all_gather(x)`` concatenates the ranks' `x` (same shape everywhere)
along axis 0 in rank order, shape ``(n * x.shape[0], ...)``; ``reduce_scatter(x, op)`` (sum,
mean) reduces and gives rank ``r`` block ``r`` of ``n`` along axis 0 (``x.shape[0]`` must be a
multiple of ``n``); ``broadcast(x, root)`` gives every rank the root's `x`.

**Derivatives** (the function of all ranks' inputs together; cotangents are per rank):
transpose of all_reduce-sum is all_reduce-sum, of mean is mean; all_gather and reduce_scatter-sum
transpose to each other (reduce_scatter-mean to all_gather / n); broadcast transposes to a sum
reduced to the root (other ranks get zeros). max/min have a jvp that takes the tangent of the
rank(s) holding the extreme (ties share it equally): ``sum_r [x_r == y] t_r / #ties``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tenferro_core.catalog.cost import Cost
from tenferro_core.errors import ArgumentError, ArgumentValueError, DTypeError, ShapeError
from tenferro_core.extension import define_op
from tenferro_distributed import comm
from tenferro_distributed.group import check_timeout, current

# ---- payload validators --------------------------------------------------------------------------


def _op_validator(*ops: str):
    def check(prim: str, name: str, v: Any) -> str:
        if isinstance(v, str) and v in ops:
            return str(v)
        err = ArgumentValueError if isinstance(v, str) else ArgumentError
        raise err(f"{prim}: {name} must be one of {ops}, got {v!r}")
    return check


def _alg_validator(collective: str):
    def check(prim: str, name: str, v: Any) -> str:
        return comm.check_algorithm(collective, v)
    return check


def _timeout_validator(prim: str, name: str, v: Any) -> float | None:
    return None if v is None else check_timeout(v, f"{prim}: {name}")


def _root_validator(prim: str, name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ArgumentError(f"{prim}: root must be an integer rank, got {v!r}")
    return int(v)


def _payload(collective: str, ops: tuple[str, ...] | None = None, root: bool = False) -> dict:
    p = {}
    if ops:
        p["op"] = (_op_validator(*ops), "sum")
    if root:
        p["root"] = (_root_validator, 0)
    p["algorithm"] = (_alg_validator(collective), "auto")
    p["timeout"] = (_timeout_validator, None)
    return p


# ---- shape rules ----------------------------------------------------------------------------------


def _check_dtype(name: str, x, op: str = "sum") -> None:
    if str(x.dtype) not in comm.SUPPORTED_DTYPES:
        raise DTypeError(f"{name}: dtype {x.dtype} is not supported by the collectives; use one of "
                         f"{sorted(comm.SUPPORTED_DTYPES)} (cast with astype)")
    if op == "mean" and x.dtype.kind != "f":
        raise DTypeError(f"{name}: op='mean' needs a floating dtype, got {x.dtype}; cast with "
                         f"astype or use op='sum'")


def _need_rows(name: str, x) -> None:
    if x.ndim < 1:
        raise ShapeError(f"{name}: expected at least 1 dimension (blocks along axis 0), got a 0-d "
                         f"tensor; reshape it to (1,)")


def _all_reduce_rule(x, *, op, algorithm, timeout):
    current()
    _check_dtype("all_reduce", x, op)
    return x.shape, x.dtype


def _all_gather_rule(x, *, algorithm, timeout):
    n = current().world_size
    _check_dtype("all_gather", x)
    _need_rows("all_gather", x)
    return (n * x.shape[0],) + tuple(x.shape[1:]), x.dtype


def _reduce_scatter_rule(x, *, op, algorithm, timeout):
    n = current().world_size
    _check_dtype("reduce_scatter", x, op)
    _need_rows("reduce_scatter", x)
    if x.shape[0] % n:
        raise ShapeError(f"reduce_scatter: axis 0 of shape {list(x.shape)} is not divisible by the "
                         f"world size {n}; pad it to a multiple of {n} "
                         f"({-(-x.shape[0] // n) * n} rows)")
    return (x.shape[0] // n,) + tuple(x.shape[1:]), x.dtype


def _broadcast_rule(x, *, root, algorithm, timeout):
    n = current().world_size
    if not 0 <= root < n:
        raise ArgumentValueError(f"broadcast: root must be a rank in [0, {n}), got {root}")
    _check_dtype("broadcast", x)
    return x.shape, x.dtype


# ---- primitives -------------------------------------------------------------------------------------

all_reduce_p = define_op("tenferro_distributed.all_reduce.v1", _all_reduce_rule,
                         payload=_payload("all_reduce", comm.OPS), effects=True,
                         doc="Reduce (sum, mean, max, min) elementwise over all ranks.")
all_gather_p = define_op("tenferro_distributed.all_gather.v1", _all_gather_rule,
                         payload=_payload("all_gather"), effects=True, linear=(0,),
                         doc="Concatenate every rank's tensor along axis 0, in rank order.")
reduce_scatter_p = define_op("tenferro_distributed.reduce_scatter.v1", _reduce_scatter_rule,
                             payload=_payload("reduce_scatter", ("sum", "mean")), effects=True,
                             linear=(0,), doc="Reduce over ranks; rank r keeps block r of axis 0.")
broadcast_p = define_op("tenferro_distributed.broadcast.v1", _broadcast_rule,
                        payload=_payload("broadcast", root=True), effects=True, linear=(0,),
                        doc="Every rank gets the root rank's tensor.")

# ---- kernels (the same for NumPy arrays and torch tensors) ---------------------------------------


def _k_all_reduce(x, *, op, algorithm, timeout):
    return comm.all_reduce_buf(x, op, algorithm, timeout)


def _k_all_gather(x, *, algorithm, timeout):
    return comm.all_gather_buf(x, algorithm, timeout)


def _k_reduce_scatter(x, *, op, algorithm, timeout):
    return comm.reduce_scatter_buf(x, op, algorithm, timeout)


def _k_broadcast(x, *, root, algorithm, timeout):
    return comm.broadcast_buf(x, root, algorithm, timeout)


KERNELS = {all_reduce_p: _k_all_reduce, all_gather_p: _k_all_gather,
           reduce_scatter_p: _k_reduce_scatter, broadcast_p: _k_broadcast}
"""One kernel per primitive; registered for the "numpy" and "torch" backends."""

# ---- AD rules -------------------------------------------------------------------------------------


def _all_reduce_jvp(primals, tangents, *, op, algorithm, timeout):
    from tenferro_runtime import array_api as xp

    (x,), (t,) = primals, tangents
    kw = dict(algorithm=algorithm, timeout=timeout)
    y = all_reduce_p.bind(x, op=op, **kw)
    if op in ("sum", "mean"):
        return y, all_reduce_p.bind(t, op=op, **kw)
    hit = x == y
    count = all_reduce_p.bind(xp.astype(hit, x.dtype), op="sum", **kw)
    picked = all_reduce_p.bind(xp.where(hit, t, xp.zeros_like(t)), op="sum", **kw)
    return y, picked / count


def _all_reduce_transpose(ct, x, *, op, algorithm, timeout):
    if op not in ("sum", "mean"):
        raise ArgumentValueError(f"all_reduce: op={op!r} is not linear, so it has no transpose")
    return (all_reduce_p.bind(_dense(ct), op=op, algorithm=algorithm, timeout=timeout),)


def _dense(ct):
    from tenferro_ad.ad_util import is_zero
    from tenferro_runtime import array_api as xp

    if is_zero(ct):
        a = ct.aval
        return xp.zeros(a.shape, dtype=a.dtype, device=a.device)
    return ct


def _same_alg(algorithm: str, collective: str) -> str:
    return algorithm if algorithm in ("auto",) + comm.A.ALGORITHMS[collective] else "auto"


def _all_gather_transpose(ct, x, *, algorithm, timeout):
    return (reduce_scatter_p.bind(_dense(ct), op="sum", algorithm=_same_alg(algorithm, "reduce_scatter"),
                                  timeout=timeout),)


def _reduce_scatter_transpose(ct, x, *, op, algorithm, timeout):
    g = all_gather_p.bind(_dense(ct), algorithm=_same_alg(algorithm, "all_gather"), timeout=timeout)
    return (g / current().world_size if op == "mean" else g,)


def _broadcast_transpose(ct, x, *, root, algorithm, timeout):
    from tenferro_runtime import array_api as xp

    s = all_reduce_p.bind(_dense(ct), op="sum", algorithm="auto", timeout=timeout)
    return (s if current().rank == root else xp.zeros_like(s),)


# ---- batch and cost rules ---------------------------------------------------------------------------


def _elementwise_batch(prim):
    def rule(args, dims, **payload):
        return prim.bind(args[0], **payload), dims[0]
    return rule


def _rows_batch(prim):
    """Blocks run along axis 0 of each example: put the batch axis at 1 (examples are >= 1-d)."""
    def rule(args, dims, **payload):
        from tenferro_ad.batching import moveaxis

        x, d = args[0], dims[0]
        if x.ndim < 2:
            raise ShapeError(f"{prim.name}: each vmapped example needs at least 1 dimension")
        return prim.bind(moveaxis(x, d, 1), **payload), 1
    return rule


def _cost(in_avals, out_avals, **payload):
    i, o = in_avals[0], out_avals[0]
    size = lambda a: int(np.prod(a.shape, dtype=np.int64))  # noqa: E731
    return Cost(max(size(i), size(o)), size(i) * i.dtype.itemsize + size(o) * o.dtype.itemsize)


def register(registry) -> None:
    """Add the primitives, their kernels and rules to a tenferro registry."""
    for prim, kernel in KERNELS.items():
        registry.add_op(prim)
        registry.add_kernel("numpy", prim, kernel)
        registry.add_kernel("torch", prim, kernel)
        registry.add_rule("cost", prim, _cost)
    registry.add_rule("jvp", all_reduce_p, _all_reduce_jvp)
    registry.add_rule("transpose", all_reduce_p, _all_reduce_transpose)
    registry.add_rule("transpose", all_gather_p, _all_gather_transpose)
    registry.add_rule("transpose", reduce_scatter_p, _reduce_scatter_transpose)
    registry.add_rule("transpose", broadcast_p, _broadcast_transpose)
    registry.add_rule("batch", all_reduce_p, _elementwise_batch(all_reduce_p))
    registry.add_rule("batch", broadcast_p, _elementwise_batch(broadcast_p))
    registry.add_rule("batch", all_gather_p, _rows_batch(all_gather_p))
    registry.add_rule("batch", reduce_scatter_p, _rows_batch(reduce_scatter_p))
