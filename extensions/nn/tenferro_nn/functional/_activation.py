"""Activations, softmax and dropout, composed of core primitives (traced, differentiated and
compiled like user code). `erf` is a rational approximation (Cephes ndtr.c) with an exact
derivative rule, since erf is not a primitive."""

from __future__ import annotations

import math
from typing import Any

from tenferro_ad import custom_jvp
from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError
from tenferro_runtime import array_api as xp
from tenferro_runtime import lax, random
from tenferro_runtime.random._math import ERF_COEFFICIENTS
from tenferro_runtime.tensor import Tensor

from ..checks import choice, flag, probability
from ..ops import call, log_softmax_p, relu_decomposition, relu_p, shifted
from ._util import check_floating, check_tensor, normalize_dim

# Cephes ndtr.c: erf(x) = x T(x^2) / U(x^2) on |x| <= 1 (U monic), erfc(a) = exp(-a^2) P(a) / Q(a)
# on 1 <= a < 8 and exp(-a^2) R(a) / S(a) on a >= 8 (the tables the random module's normal CDF uses)
_T, _U, _P, _Q, _R, _S = (ERF_COEFFICIENTS[k] for k in "TUPQRS")
_HALF = (D.float16, D.bfloat16)


def _horner(z: Tensor, coefs: tuple[float, ...]) -> Tensor:
    """sum(c_i z^(n-i)): the polynomial with coefficients from the highest degree down."""
    p = xp.full_like(z, coefs[0])
    for c in coefs[1:]:
        p = p * z + c
    return p


def _erf_values(x: Tensor) -> Tensor:
    a = xp.abs(x)
    z = xp.minimum(x * x, 1.0)  # the |x| <= 1 branch, kept finite where it is not taken
    small = x * _horner(z, _T) / _horner(z, _U)
    b = xp.clip(a, 1.0, 30.0)  # erf(30) == 1 in every float dtype; keeps P, R finite
    mid = _horner(b, _P) / _horner(b, _Q)
    tail = _horner(b, _R) / _horner(b, _S)
    erfc = xp.exp(-(b * b)) * xp.where(b < 8.0, mid, tail)
    return xp.where(a <= 1.0, small, xp.sign(x) * (1.0 - erfc))


@custom_jvp
def _erf(x: Tensor) -> Tensor:
    return _erf_values(x)


@_erf.defjvp
def _erf_jvp(primals: tuple, tangents: tuple) -> tuple:
    (x,), (t,) = primals, tangents
    return _erf(x), t * (xp.exp(-(x * x)) * (2.0 / math.sqrt(math.pi)))


def erf(x: Tensor) -> Tensor:
    """The error function, to about 1 ulp in float64 (Cephes' rational approximations);
    its derivative is the exact 2/sqrt(pi) exp(-x^2). float16/bfloat16 compute in float32."""
    check_floating("erf", x)
    if x.dtype in _HALF:
        return xp.astype(_erf(xp.astype(x, D.float32)), x.dtype)
    return _erf(x)


def relu(x: Tensor) -> Tensor:
    """max(x, 0), with derivative 0 at 0 and NaN kept (as PyTorch)."""
    check_tensor("relu", x)
    return call(relu_p, x) if x.dtype.kind == "f" else relu_decomposition(x)


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """x Phi(x) exactly (``approximate="none"``, through `erf`) or by PyTorch's tanh formula
    (``approximate="tanh"``)."""
    check_floating("gelu", x)
    if choice("gelu", "approximate", approximate, ("none", "tanh")) == "none":
        return 0.5 * x * (1.0 + erf(x * (1.0 / math.sqrt(2.0))))
    inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * (x * x * x))
    return 0.5 * x * (1.0 + xp.tanh(inner))


def sigmoid(x: Tensor) -> Tensor:
    """1 / (1 + exp(-x)) (the `logistic` primitive)."""
    check_floating("sigmoid", x)
    return lax.logistic(x)


def silu(x: Tensor) -> Tensor:
    """x sigmoid(x) (a.k.a. swish)."""
    return x * sigmoid(x)


def tanh(x: Tensor) -> Tensor:
    """Hyperbolic tangent."""
    check_floating("tanh", x)
    return xp.tanh(x)


def _shifted(name: str, x: Tensor, dim: int) -> tuple[Tensor, int]:
    """x minus its (gradient-free) maximum along `dim`: the stable form of softmax's input."""
    check_floating(name, x)
    axis = normalize_dim(name, dim, x.ndim)
    if x.shape and x.shape[axis] == 0:
        return x, axis
    return shifted(x, axis), axis


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """exp(x) / sum(exp(x)) along `dim`, computed after subtracting the maximum (a row of
    -inf gives NaN, as in PyTorch)."""
    s, axis = _shifted("softmax", x, dim)
    e = xp.exp(s)
    return e / xp.sum(e, axis=axis, keepdims=True)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """x - logsumexp(x) along `dim`, stable for any magnitude."""
    check_floating("log_softmax", x)
    if x.ndim:
        return call(log_softmax_p, x, traced=True, axis=normalize_dim("log_softmax", dim, x.ndim))
    s, axis = _shifted("log_softmax", x, dim)
    return s - xp.log(xp.sum(xp.exp(s), axis=axis, keepdims=True))


def safe_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """`softmax` whose fully masked rows (all -inf) are 0 instead of NaN (PyTorch's attention)."""
    s, axis = _shifted("softmax", x, dim)
    e = xp.exp(s)
    total = xp.sum(e, axis=axis, keepdims=True)
    return e / xp.where(total == 0, xp.ones_like(total), total)


def dropout(x: Tensor, p: float = 0.5, *, key: Any = None, training: bool = True) -> Tensor:
    """Zero each element with probability `p` and scale the rest by 1/(1-p) (training);
    the identity otherwise. The mask comes from `key` (tenferro_runtime.random)."""
    check_floating("dropout", x)
    p = probability("dropout", "p", p)
    training = flag("dropout", "training", training)
    if not training or p == 0.0:
        return x
    if key is None:
        raise ArgumentError(
            "dropout: training mode needs a random key (key=tenferro_runtime.random.key(seed), "
            "split per step); pass training=False for the identity")
    if p == 1.0:
        return xp.zeros_like(x)
    if isinstance(key, Tensor) and key.device != x.device:  # draw where x lives (a key is 2 ints)
        key = xp.asarray(key, device=x.device)
    keep = random.bernoulli(key, 1.0 - p, x.shape)
    return xp.where(keep, x * (1.0 / (1.0 - p)), xp.zeros_like(x))


__all__ = ["dropout", "erf", "gelu", "log_softmax", "relu", "safe_softmax", "sigmoid", "silu",
           "softmax", "tanh"]
