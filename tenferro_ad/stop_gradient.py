"""`stop_gradient`: the identity whose derivatives of every order are zero."""

from __future__ import annotations

from typing import Any

from tenferro_core.extension import define_op

from .ad_util import Zero


def _rule(x):
    return x.shape, x.dtype


def _identity(x):
    """A new tensor on x's buffer (a distinct value, so tapes see a new node)."""
    from tenferro_runtime.tensor import Tensor

    return Tensor._new(x._buf, x._aval)


stop_gradient_p = define_op(
    "tenferro_ad.stop_gradient.v1", _rule, decomposition=_identity,
    doc="Identity in value; zero tangent (so no gradient flows through it, at any order).",
)


def _jvp(primals, tangents):
    (x,) = primals
    return stop_gradient_p.bind(x), Zero(x._aval)


def stop_gradient(x: Any) -> Any:
    """x, with derivatives of every order treated as zero."""
    from tenferro_runtime.array_api import asarray

    return stop_gradient_p.bind(asarray(x))
