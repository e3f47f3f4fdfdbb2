"""Three of tenferro-nn's functions as ops, for eager calls on backends with a native kernel.

`relu`, `log_softmax` and the class-index negative log-likelihood are compositions of core
primitives: ``relu`` is 6 primitive calls, ``cross_entropy`` about 45, each a Python dispatch
of 5-20 us where the backend's own kernel (torch's ``threshold``, ``log_softmax``,
``nll_loss``) does the whole thing in one call of a few us. Each op below is such a
composition defined as one op (its decomposition is the composition), with a jvp rule
written in core primitives, so a gradient tape records one op and its backward graph
holds core primitives only.

The functions bind an op only where `native` says so: an eager call (no trace active; a
gradient tape or energy monitor may observe) on a device with a kernel for it. Traced code
(`compile`, `vmap`, `jvp`, ONNX export) and devices without a kernel (numpy) get the
composition itself, so graphs and their passes see core primitives, as before.
"""

from __future__ import annotations

import math
from typing import Any

from tenferro_ad import stop_gradient
from tenferro_ad.batching import batch_size, moveaxis, to_front
from tenferro_core.catalog.cost import TRANSCENDENTAL_FLOPS, Cost, elementwise_rule, io_bytes
from tenferro_core.errors import DTypeError, ShapeError
from tenferro_core.extension import define_op
from tenferro_core.params import p_int
from tenferro_runtime import array_api as xp
from tenferro_runtime import tracing
from tenferro_runtime.tensor import Tensor


def native(op: Any, x: Any) -> bool:
    """Whether `op` should run as one op on `x`: `x` is a concrete tensor, no trace is active
    and `x`'s device has a kernel for `op`."""
    if type(x) is not Tensor:
        return False
    stack = tracing.interpreters()
    if stack is not tracing.BOTTOM and stack.traces:
        return False
    return op in x._aval.device.kernels


def call(op: Any, *args: Any, **params: Any) -> Any:
    """`op` bound where `native` says so (its first operand decides), else its decomposition
    run directly (a trace, or a device without a kernel, sees core primitives only)."""
    if native(op, args[0]):
        return op.bind(*args, **params)
    return op.decomposition(*args, **params)


def _floating(name: str, x: Any) -> None:
    if x.dtype.kind != "f":
        raise DTypeError(f"{name}: expected a real floating tensor, got {x.dtype}; convert it with "
                         f"astype(x, float32)")


def _axis(name: str, x: Any, axis: int) -> None:
    if not 0 <= axis < len(x.shape):
        raise ShapeError(f"{name}: axis {axis} is out of range for a {len(x.shape)}-d input; "
                         f"expected 0 <= axis < {len(x.shape)} (normalized)")


# ---- relu ---------------------------------------------------------------------------------------
def _relu_rule(x: Any) -> tuple:
    _floating("tenferro_nn.relu", x)
    return x.shape, x.dtype


def relu_decomposition(x: Any) -> Any:
    """``x <= 0 ? 0 : x``: derivative 0 at 0, NaN kept, -0.0 made 0.0 (PyTorch's values)."""
    return xp.where(x <= 0, 0, x)


relu_p = define_op("tenferro_nn.relu.v1", _relu_rule, decomposition=relu_decomposition,
                   category="elementwise", doc="max(x, 0) with derivative 0 at 0 (PyTorch's relu).")


def relu_jvp(primals: tuple, tangents: tuple) -> tuple:
    (x,), (t,) = primals, tangents
    return relu_p.bind(x), xp.where(x <= 0, 0, t)


def relu_batch(args: tuple, dims: tuple) -> tuple:
    return relu_p.bind(args[0]), dims[0]


# ---- log_softmax --------------------------------------------------------------------------------
def _log_softmax_rule(x: Any, *, axis: int) -> tuple:
    _floating("tenferro_nn.log_softmax", x)
    _axis("tenferro_nn.log_softmax", x, axis)
    return x.shape, x.dtype


def shifted(x: Any, axis: int) -> Any:
    """x minus its (gradient-free) maximum along `axis`, the stable form of softmax's input; a
    maximum of -inf (a row of -inf) is replaced by 0, so the row stays -inf there and
    `safe_softmax` can tell it (+inf and NaN rows give NaN, as in PyTorch and JAX)."""
    m = stop_gradient(xp.max(x, axis=axis, keepdims=True))
    return x - xp.where(m == -math.inf, 0, m)


def log_softmax_decomposition(x: Any, *, axis: int) -> Any:
    if x.shape[axis] == 0:
        return x
    s = shifted(x, axis)
    return s - xp.log(xp.sum(xp.exp(s), axis=axis, keepdims=True))


log_softmax_p = define_op(
    "tenferro_nn.log_softmax.v1", _log_softmax_rule, payload={"axis": (p_int, None)},
    decomposition=log_softmax_decomposition,
    doc="x - logsumexp(x) along a (normalized) axis.")


def log_softmax_jvp(primals: tuple, tangents: tuple, *, axis: int) -> tuple:
    """d log_softmax(x)[t] = t - sum(softmax(x) t) along the axis."""
    (x,), (t,) = primals, tangents
    y = log_softmax_p.bind(x, axis=axis)
    return y, t - xp.sum(xp.exp(y) * t, axis=axis, keepdims=True)


def log_softmax_batch(args: tuple, dims: tuple, *, axis: int) -> tuple:
    x = moveaxis(args[0], dims[0], 0)
    return log_softmax_p.bind(x, axis=axis + 1), 0


# ---- nll: -logp[target] along the class axis ------------------------------------------------------
def _nll_rule(logp: Any, target: Any, *, axis: int, ignore_index: int) -> tuple:
    name = "tenferro_nn.nll"
    _floating(name, logp)
    _axis(name, logp, axis)
    want = tuple(logp.shape[:axis]) + tuple(logp.shape[axis + 1:])
    if tuple(target.shape) != want:
        raise ShapeError(f"{name}: expected a target of shape {list(want)} (the input's without "
                         f"axis {axis}), got {list(target.shape)}")
    if target.dtype.kind not in "iu":
        raise DTypeError(f"{name}: the target must hold integer class indices, got {target.dtype}")
    return want, logp.dtype


def hits(target: Any, c: int, axis: int, ignore_index: int) -> Any:
    """Boolean one-hot of `target` along a new `axis` of size `c`, False where the target is
    `ignore_index` (or not a class)."""
    classes = xp.reshape(xp.arange(c, dtype=target.dtype, device=target.device),
                         (c,) + (1,) * (target.ndim - axis))
    valid = xp.expand_dims(target != ignore_index, axis=axis)
    return xp.logical_and(xp.expand_dims(target, axis=axis) == classes, valid)


def nll_decomposition(logp: Any, target: Any, *, axis: int, ignore_index: int) -> Any:
    hit = hits(target, logp.shape[axis], axis, ignore_index)
    return -xp.sum(xp.where(hit, logp, 0.0), axis=axis)


nll_p = define_op(
    "tenferro_nn.nll.v1", _nll_rule, nin=2, payload={"axis": (p_int, None), "ignore_index": (p_int, -100)},
    decomposition=nll_decomposition,
    doc="-logp[target] along the class axis, 0 where the target is ignore_index; targets must be "
        "classes or ignore_index (tenferro_nn's losses check that first).")


def nll_jvp(primals: tuple, tangents: tuple, *, axis: int, ignore_index: int) -> tuple:
    """Linear in logp: the one-hot picks of the tangent (the target has no tangent)."""
    logp, target = primals
    out = nll_p.bind(logp, target, axis=axis, ignore_index=ignore_index)
    return out, nll_decomposition(tangents[0], target, axis=axis, ignore_index=ignore_index)


def nll_batch(args: tuple, dims: tuple, *, axis: int, ignore_index: int) -> tuple:
    size = batch_size(args, dims)
    logp, target = (to_front(x, d, size) for x, d in zip(args, dims))
    return nll_p.bind(logp, target, axis=axis + 1, ignore_index=ignore_index), 0


def nll_cost(in_avals: tuple, out_avals: tuple, **params: Any) -> Cost:
    return Cost(out_avals[0].size, io_bytes(in_avals[1:], out_avals) + out_avals[0].size
                * in_avals[0].dtype.itemsize)


OPS = (relu_p, log_softmax_p, nll_p)
JVP = {relu_p: relu_jvp, log_softmax_p: log_softmax_jvp, nll_p: nll_jvp}
BATCH = {relu_p: relu_batch, log_softmax_p: log_softmax_batch, nll_p: nll_batch}
COST = {relu_p: elementwise_rule(1), log_softmax_p: elementwise_rule(4 + 2 * TRANSCENDENTAL_FLOPS),
        nll_p: nll_cost}

__all__ = ["BATCH", "COST", "JVP", "OPS", "call", "hits", "log_softmax_p", "native", "nll_p", "relu_p",
           "shifted"]
