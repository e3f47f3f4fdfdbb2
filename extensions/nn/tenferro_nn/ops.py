"""tenferro-nn's functions as ops where a backend has one kernel for their composition.

`linear`, `relu`, `log_softmax` and the class-index negative log-likelihood are compositions
of core primitives: ``relu`` is 6 primitive calls, ``cross_entropy`` about 45, each a Python
dispatch of 5-20 us where the backend's own kernel (torch's ``addmm``, ``threshold``,
``log_softmax``, ``nll_loss``) does the whole thing in one call of a few us. Each op below
has the composition as its decomposition, and batch and cost rules.

Their derivatives are ops too, so a backward graph runs the backend's backward kernels (as
PyTorch's autograd does): each is linear in its tangent, with a transpose rule naming the
other (``relu_tangent`` is its own transpose, torch's ``threshold_backward``;
``log_softmax_tangent``/``log_softmax_cotangent``, the latter torch's
``_log_softmax_backward_data``; ``nll``, linear in logp, and ``nll_cotangent``, torch's
``nll_loss_backward``), and jvp rules for their other operand, so every order works.

The functions bind an op where `native` says so: the operand's device has a kernel for it,
for an eager call (``relu``: the compile pipeline's torch fusion already makes threshold
kernels of its composition) or in a trace too (``call(..., traced=True)``: linear,
log_softmax, the NLL). Devices without a kernel (numpy) get the composition itself.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tenferro_ad import stop_gradient
from tenferro_ad.ad_util import Zero, add_tangents, instantiate, is_zero
from tenferro_ad.batching import batch_size, moveaxis, to_front
from tenferro_ad.rules.batching import axes_rule, elementwise
from tenferro_core.catalog.cost import TRANSCENDENTAL_FLOPS, Cost, elementwise_rule, io_bytes
from tenferro_core.errors import DTypeError, ShapeError, TenferroIndexError
from tenferro_core.extension import define_op
from tenferro_core.params import p_choice, p_int
from tenferro_runtime import array_api as xp
from tenferro_runtime import lax, tracing
from tenferro_runtime.tensor import Tensor


def native(op: Any, x: Any, traced: bool = False) -> bool:
    """Whether `op` should run as one op on `x`: `x`'s device has a kernel for it, and `x` is a
    concrete tensor with no trace active (or, with `traced`, any tensor or tracer)."""
    if traced:
        aval = getattr(x, "_aval", None)
        return aval is not None and op in aval.device.kernels
    if type(x) is not Tensor:
        return False
    stack = tracing.interpreters()
    if stack is not tracing.BOTTOM and stack.traces:
        return False
    return op in x._aval.device.kernels


def call(op: Any, *args: Any, traced: bool = False, **params: Any) -> Any:
    """`op` bound where `native` says so (its first operand decides), else its decomposition
    run directly (a trace, or a device without a kernel, sees core primitives only)."""
    if native(op, args[0], traced):
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
    return relu_p.bind(x), relu_tangent_p.bind(x, t)


def _relu_tangent_rule(x: Any, t: Any) -> tuple:
    _floating("tenferro_nn.relu_tangent", x)
    _same("tenferro_nn.relu_tangent", x, t)
    return x.shape, x.dtype


def relu_tangent_decomposition(x: Any, t: Any) -> Any:
    return xp.where(x <= 0, 0, t)


relu_tangent_p = define_op(
    "tenferro_nn.relu_tangent.v1", _relu_tangent_rule, nin=2, linear=(1,),
    decomposition=relu_tangent_decomposition,
    doc="x <= 0 ? 0 : t, relu's derivative at x applied to t (linear in t; its own transpose).")


def relu_tangent_jvp(primals: tuple, tangents: tuple) -> tuple:
    """The step's derivative in x is 0: only t's tangent goes through."""
    (x, t), (_, dt) = primals, tangents
    out = relu_tangent_p.bind(x, t)
    return out, Zero(out.aval) if is_zero(dt) else relu_tangent_p.bind(x, instantiate(dt))


def relu_tangent_transpose(ct: Any, x: Any, t: Any) -> tuple:
    return None, Zero(t.aval) if is_zero(ct) else relu_tangent_p.bind(x, ct)


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
    (x,), (t,) = primals, tangents
    y = log_softmax_p.bind(x, axis=axis)
    return y, log_softmax_tangent_p.bind(y, t, axis=axis)


def _log_softmax_ad_rule(name: str) -> Any:
    def rule(y: Any, t: Any, *, axis: int) -> tuple:
        _floating(name, y)
        _axis(name, y, axis)
        _same(name, y, t)
        return y.shape, y.dtype

    return rule


def log_softmax_tangent_decomposition(y: Any, t: Any, *, axis: int) -> Any:
    return t - xp.sum(xp.exp(y) * t, axis=axis, keepdims=True)


def log_softmax_cotangent_decomposition(y: Any, c: Any, *, axis: int) -> Any:
    return c - xp.exp(y) * xp.sum(c, axis=axis, keepdims=True)


log_softmax_tangent_p = define_op(
    "tenferro_nn.log_softmax_tangent.v1", _log_softmax_ad_rule("tenferro_nn.log_softmax_tangent"),
    nin=2, linear=(1,), payload={"axis": (p_int, None)}, decomposition=log_softmax_tangent_decomposition,
    doc="t - sum(exp(y) t) along the axis: log_softmax's derivative at y = log_softmax(x) "
        "applied to t (linear in t).")
log_softmax_cotangent_p = define_op(
    "tenferro_nn.log_softmax_cotangent.v1", _log_softmax_ad_rule("tenferro_nn.log_softmax_cotangent"),
    nin=2, linear=(1,), payload={"axis": (p_int, None)},
    decomposition=log_softmax_cotangent_decomposition,
    doc="c - exp(y) sum(c) along the axis: the transpose of log_softmax_tangent (torch's "
        "log_softmax backward).")


def log_softmax_tangent_jvp(primals: tuple, tangents: tuple, *, axis: int) -> tuple:
    """d[t - sum(e^y t)] = (dt - sum(e^y dt)) - sum(e^y dy t)."""
    (y, t), (dy, dt) = primals, tangents
    out = log_softmax_tangent_p.bind(y, t, axis=axis)
    d = Zero(out.aval) if is_zero(dt) else log_softmax_tangent_p.bind(y, instantiate(dt), axis=axis)
    if not is_zero(dy):
        d = add_tangents(d, -xp.sum(xp.exp(y) * dy * t, axis=axis, keepdims=True)
                         * xp.ones_like(t))
    return out, d


def log_softmax_cotangent_jvp(primals: tuple, tangents: tuple, *, axis: int) -> tuple:
    """d[c - e^y sum(c)] = (dc - e^y sum(dc)) - e^y dy sum(c)."""
    (y, c), (dy, dc) = primals, tangents
    out = log_softmax_cotangent_p.bind(y, c, axis=axis)
    d = Zero(out.aval) if is_zero(dc) else log_softmax_cotangent_p.bind(y, instantiate(dc), axis=axis)
    if not is_zero(dy):
        d = add_tangents(d, -(xp.exp(y) * dy * xp.sum(c, axis=axis, keepdims=True)))
    return out, d


def _log_softmax_transpose(other: Any) -> Any:
    def transpose(ct: Any, y: Any, t: Any, *, axis: int) -> tuple:
        return None, Zero(t.aval) if is_zero(ct) else other.bind(y, ct, axis=axis)

    return transpose


def log_softmax_ad_batch(op: Any) -> Any:
    def batch(args: tuple, dims: tuple, *, axis: int) -> tuple:
        size = batch_size(args, dims)
        y, t = (to_front(x, d, size) for x, d in zip(args, dims))
        return op.bind(y, t, axis=axis + 1), 0

    return batch


# ---- nll: -logp[target] along the class axis ------------------------------------------------------
REDUCTIONS = ("none", "mean", "sum")
"""The loss reductions (tenferro_nn.losses checks a loss's `reduction` against them)."""
_NLL = {"axis": (p_int, None), "ignore_index": (p_int, -100), "reduction": (p_choice(*REDUCTIONS), "none")}


def _nll_rule(logp: Any, target: Any, *, axis: int, ignore_index: int, reduction: str) -> tuple:
    name = "tenferro_nn.nll"
    _floating(name, logp)
    _axis(name, logp, axis)
    want = tuple(logp.shape[:axis]) + tuple(logp.shape[axis + 1:])
    if tuple(target.shape) != want:
        raise ShapeError(f"{name}: expected a target of shape {list(want)} (the input's without "
                         f"axis {axis}), got {list(target.shape)}")
    _class_indices(name, target)
    return (want if reduction == "none" else ()), logp.dtype


def _class_indices(name: str, target: Any) -> None:
    if target.dtype.kind not in "iu":
        raise DTypeError(f"{name}: the target must hold integer class indices, got {target.dtype}")


def hits(target: Any, c: int, axis: int, ignore_index: int) -> Any:
    """Boolean one-hot of `target` along a new `axis` of size `c`, False where the target is
    `ignore_index` (or not a class)."""
    classes = xp.reshape(xp.arange(c, dtype=target.dtype, device=target.device),
                         (c,) + (1,) * (target.ndim - axis))
    valid = xp.expand_dims(target != ignore_index, axis=axis)
    return xp.logical_and(xp.expand_dims(target, axis=axis) == classes, valid)


def check_classes(fn: str, host: np.ndarray, classes: int, ignore_index: int) -> bool:
    """Raise TenferroIndexError for the first of the class-index targets `host` (a NumPy
    array) that is neither a class in [0, classes) nor `ignore_index`; True when every entry
    is a class (none is ignored)."""
    if not host.size:
        return False
    lo, hi = int(host.min()), int(host.max())
    if 0 <= lo and hi < classes and not lo <= ignore_index <= hi:  # the common case: two reductions
        return True
    flat = host.reshape(-1)
    bad = (flat != ignore_index) & ((flat < 0) | (flat >= classes))
    if bad.any():
        raise TenferroIndexError(
            f"{fn}: target class {int(flat[int(np.argmax(bad))])} is out of bounds for {classes} "
            f"classes; expected indices in [0, {classes}) or ignore_index={ignore_index}")
    return False


def _counted(target: Any, ignore_index: int, dtype: Any, axes: Any = None) -> Any:
    """The number of targets that are not `ignore_index` (over `axes`; None: all), in `dtype`:
    the mean's denominator (0 when all are ignored: the mean is NaN, as in PyTorch)."""
    return xp.sum(xp.astype(target != ignore_index, dtype), axis=axes)


def nll_decomposition(logp: Any, target: Any, *, axis: int, ignore_index: int, reduction: str) -> Any:
    hit = hits(target, logp.shape[axis], axis, ignore_index)
    per = -xp.sum(xp.where(hit, logp, 0.0), axis=axis)
    if reduction == "none":
        return per
    total = xp.sum(per)
    return total if reduction == "sum" else total / _counted(target, ignore_index, logp.dtype)


nll_p = define_op(
    "tenferro_nn.nll.v1", _nll_rule, nin=2, linear=(0,), payload=_NLL, decomposition=nll_decomposition,
    doc="-logp[target] along the class axis, 0 where the target is ignore_index, then reduced "
        "(none, sum, or mean over the targets not ignored); targets must be classes or "
        "ignore_index: a kernel raises TenferroIndexError (`check_classes`) for any other, "
        "since the losses leave that check to it when it runs eagerly.")


def nll_transpose(ct: Any, logp: Any, target: Any, *, axis: int, ignore_index: int, reduction: str) -> tuple:
    if is_zero(ct):
        return Zero(logp.aval), None
    return nll_cotangent_p.bind(ct, target, classes=logp.aval.shape[axis], axis=axis,
                                ignore_index=ignore_index, reduction=reduction), None


def nll_batch(args: tuple, dims: tuple, *, axis: int, ignore_index: int, reduction: str) -> tuple:
    """Per example: the unreduced loss, then its sum or mean over the example's targets."""
    size = batch_size(args, dims)
    logp, target = (to_front(x, d, size) for x, d in zip(args, dims))
    per = nll_p.bind(logp, target, axis=axis + 1, ignore_index=ignore_index, reduction="none")
    if reduction == "none":
        return per, 0
    rest = tuple(range(1, per.ndim))
    total = xp.sum(per, axis=rest)
    if reduction == "sum":
        return total, 0
    return total / _counted(target, ignore_index, logp.dtype, rest), 0


def nll_cost(in_avals: tuple, out_avals: tuple, **params: Any) -> Cost:
    n = in_avals[1].size
    return Cost(n, io_bytes(in_avals[1:], out_avals) + n * in_avals[0].dtype.itemsize)


def _nll_cotangent_rule(ct: Any, target: Any, *, classes: int, axis: int, ignore_index: int,
                        reduction: str) -> tuple:
    name = "tenferro_nn.nll_cotangent"
    _floating(name, ct)
    want = tuple(target.shape) if reduction == "none" else ()
    if tuple(ct.shape) != want:
        raise ShapeError(f"{name}: expected a cotangent of shape {list(want)} (the target's for "
                         f"reduction none, else a scalar), got {list(ct.shape)}")
    _class_indices(name, target)
    if not 0 <= axis <= len(target.shape):
        raise ShapeError(f"{name}: axis {axis} is out of range for a {len(target.shape) + 1}-d result; "
                         f"expected 0 <= axis <= {len(target.shape)}")
    if classes < 0:
        raise ShapeError(f"{name}: classes must be >= 0, got {classes}")
    return tuple(target.shape[:axis]) + (classes,) + tuple(target.shape[axis:]), ct.dtype


def nll_cotangent_decomposition(ct: Any, target: Any, *, classes: int, axis: int, ignore_index: int,
                                reduction: str) -> Any:
    if reduction != "none":
        scale = ct if reduction == "sum" else ct / _counted(target, ignore_index, ct.dtype)
        ct = xp.broadcast_to(scale, target.shape)
    hit = hits(target, classes, axis, ignore_index)
    return xp.where(hit, -xp.expand_dims(ct, axis=axis), 0.0)


nll_cotangent_p = define_op(
    "tenferro_nn.nll_cotangent.v1", _nll_cotangent_rule, nin=2, linear=(0,),
    payload={"classes": (p_int, None), **_NLL}, decomposition=nll_cotangent_decomposition,
    doc="-ct (over the count of targets not ignored, for the mean) at each target's class along a "
        "new axis of size classes, 0 elsewhere and where the target is ignore_index: the "
        "transpose of nll (torch's nll_loss backward).")


def nll_cotangent_transpose(ct: Any, c: Any, target: Any, *, classes: int, axis: int,
                            ignore_index: int, reduction: str) -> tuple:
    if is_zero(ct):
        return Zero(c.aval), None
    return nll_p.bind(ct, target, axis=axis, ignore_index=ignore_index, reduction=reduction), None


def nll_cotangent_batch(args: tuple, dims: tuple, *, classes: int, axis: int, ignore_index: int,
                        reduction: str) -> tuple:
    """Per example: each example's scalar cotangent (over its count, for the mean) spread over
    its targets, then the unreduced op."""
    size = batch_size(args, dims)
    ct, target = (to_front(x, d, size) for x, d in zip(args, dims))
    if reduction != "none":
        rest = tuple(range(1, target.ndim))
        if reduction == "mean":
            ct = ct / _counted(target, ignore_index, ct.dtype, rest)
        ct = xp.broadcast_to(xp.reshape(ct, (size,) + (1,) * len(rest)), target.shape)
    return nll_cotangent_p.bind(ct, target, classes=classes, axis=axis + 1, ignore_index=ignore_index,
                                reduction="none"), 0


# ---- linear: x @ w.T + b ----------------------------------------------------------------------------
def _linear_rule(x: Any, w: Any, b: Any) -> tuple:
    name = "tenferro_nn.linear"
    _floating(name, x)
    if len(w.shape) != 2 or not x.shape or x.shape[-1] != w.shape[1] or tuple(b.shape) != (w.shape[0],):
        raise ShapeError(f"{name}: expected input (..., in), weight (out, in) and bias (out,), got "
                         f"{list(x.shape)}, {list(w.shape)} and {list(b.shape)}")
    if not x.dtype == w.dtype == b.dtype:
        raise DTypeError(f"{name}: expected one dtype, got {x.dtype}, {w.dtype} and {b.dtype}")
    return tuple(x.shape[:-1]) + (w.shape[0],), x.dtype


def _product(x: Any, w: Any) -> Any:
    return lax.dot_general(x, w, contracting_dims=((x.ndim - 1,), (1,)))


def linear_decomposition(x: Any, w: Any, b: Any) -> Any:
    return _product(x, w) + b


linear_p = define_op("tenferro_nn.linear.v1", _linear_rule, nin=3, decomposition=linear_decomposition,
                     category="contraction",
                     doc="x @ w.T + b for x (..., in), w (out, in), b (out,) (torch's addmm).")


def linear_jvp(primals: tuple, tangents: tuple) -> tuple:
    """dx w^T + x dw^T + db, in core primitives (their transposes are the products and a sum)."""
    (x, w, b), (dx, dw, db) = primals, tangents
    y = linear_p.bind(x, w, b)
    d: Any = Zero(y.aval)
    if not is_zero(dx):
        d = _product(dx, w)
    if not is_zero(dw):
        d = add_tangents(d, _product(x, dw))
    if not is_zero(db):
        d = add_tangents(d, xp.broadcast_to(db, y.shape))
    return y, d


def linear_batch(args: tuple, dims: tuple) -> tuple:
    """A batched input alone moves its batch axis first; a batched weight or bias takes the
    products batched by dot_general."""
    (x, w, b), (dx, dw, db) = args, dims
    if dw is None and db is None:
        return linear_p.bind(moveaxis(x, dx, 0), w, b), 0
    size = batch_size(args, dims)
    x, w, b = (to_front(a, d, size) for a, d in zip(args, dims))
    y = lax.dot_general(x, w, contracting_dims=((x.ndim - 1,), (2,)), batch_dims=((0,), (0,)))
    return y + xp.reshape(b, (size,) + (1,) * (y.ndim - 2) + (b.shape[-1],)), 0


def linear_cost(in_avals: tuple, out_avals: tuple, **params: Any) -> Cost:
    return Cost(2 * out_avals[0].size * in_avals[1].shape[1] + out_avals[0].size,
                io_bytes(in_avals, out_avals))


def _same(name: str, x: Any, t: Any) -> None:
    if tuple(x.shape) != tuple(t.shape) or x.dtype != t.dtype:
        raise ShapeError(f"{name}: expected operands of one shape and dtype, got {x.dtype}"
                         f"{list(x.shape)} and {t.dtype}{list(t.shape)}")


OPS = (linear_p, relu_p, relu_tangent_p, log_softmax_p, log_softmax_tangent_p, log_softmax_cotangent_p, nll_p,
       nll_cotangent_p)
_LSM_COST = elementwise_rule(4 + 2 * TRANSCENDENTAL_FLOPS)
RULES = [
    ("jvp", linear_p, linear_jvp), ("batch", linear_p, linear_batch), ("cost", linear_p, linear_cost),
    ("jvp", relu_p, relu_jvp), ("batch", relu_p, elementwise(relu_p)), ("cost", relu_p, elementwise_rule(1)),
    ("jvp", relu_tangent_p, relu_tangent_jvp), ("transpose", relu_tangent_p, relu_tangent_transpose),
    ("batch", relu_tangent_p, elementwise(relu_tangent_p)), ("cost", relu_tangent_p, elementwise_rule(1)),
    ("jvp", log_softmax_p, log_softmax_jvp), ("cost", log_softmax_p, _LSM_COST),
    ("batch", log_softmax_p, axes_rule(log_softmax_p, "axis", many=False)),
    ("jvp", log_softmax_tangent_p, log_softmax_tangent_jvp),
    ("transpose", log_softmax_tangent_p, _log_softmax_transpose(log_softmax_cotangent_p)),
    ("batch", log_softmax_tangent_p, log_softmax_ad_batch(log_softmax_tangent_p)),
    ("cost", log_softmax_tangent_p, _LSM_COST),
    ("jvp", log_softmax_cotangent_p, log_softmax_cotangent_jvp),
    ("transpose", log_softmax_cotangent_p, _log_softmax_transpose(log_softmax_tangent_p)),
    ("batch", log_softmax_cotangent_p, log_softmax_ad_batch(log_softmax_cotangent_p)),
    ("cost", log_softmax_cotangent_p, _LSM_COST),
    ("transpose", nll_p, nll_transpose), ("batch", nll_p, nll_batch), ("cost", nll_p, nll_cost),
    ("transpose", nll_cotangent_p, nll_cotangent_transpose), ("batch", nll_cotangent_p, nll_cotangent_batch),
    ("cost", nll_cotangent_p, elementwise_rule(1)),
]
"""(kind, op, rule) for the plugin to register; nll and nll_cotangent are linear in their
first operand, so their jvp is derived."""

__all__ = ["OPS", "REDUCTIONS", "RULES", "call", "check_classes", "hits", "linear_p",
           "log_softmax_cotangent_p", "log_softmax_p", "log_softmax_tangent_p", "native",
           "nll_cotangent_p", "nll_p", "relu_p", "relu_tangent_p", "shifted"]
