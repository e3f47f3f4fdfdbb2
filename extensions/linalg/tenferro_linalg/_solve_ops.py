"""The solver ops of tenferro-linalg: family ids, payloads and shape rules.

Every op takes stacks of matrices with *equal* batch shapes and one dtype; the public
functions in `_solve` broadcast and promote first, so these rules only check. Kernels
are in `_solve_kernels`, AD rules in `_solve_rules`.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, ArgumentValueError, DTypeError, ShapeError
from tenferro_core.extension import define_op
from tenferro_core.params import p_choice, p_optional

from ._common import LAPACK_DTYPES, check_matrix, op_name, real_dtype


def _same(name: str, a: Any, b: Any, what: str = "x2") -> None:
    """One dtype and equal batch shapes (the public functions promote and broadcast first)."""
    first = "x1" if what == "x2" else "a"
    if a.dtype is not b.dtype:
        raise DTypeError(
            f"linalg.{name} expects {first} and {what} of one dtype, got {a.dtype} and {b.dtype}"
        )
    if tuple(a.shape[:-2]) != tuple(b.shape[:-2]):
        raise ShapeError(
            f"linalg.{name} expects equal batch shapes, got {first} {tuple(a.shape)} and {what} "
            f"{tuple(b.shape)}; broadcast them first (the public function does)"
        )


def p_tol(prim: str, name: str, v: Any) -> float:
    """A finite, non-negative real tolerance, as a Python float."""
    if type(v) is float and 0 <= v < math.inf:
        return v
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ArgumentError(f"{prim}: parameter {name!r} expects a finite float >= 0 (or None), got {v!r}")
    if not math.isfinite(v) or v < 0:  # the right type, a bad value: also a ValueError
        raise ArgumentValueError(
            f"{prim}: parameter {name!r} expects a finite float >= 0 (or None), got {v!r}")
    return float(v)


# ---- solve ---------------------------------------------------------------------------------


def _solve_rule(a, b, *, singular):
    n, _ = check_matrix("solve", a, square=True, what="x1")
    check_matrix("solve", b, what="x2")
    _same("solve", a, b)
    if b.shape[-2] != n:
        raise ShapeError(
            f"linalg.solve: x1 {tuple(a.shape)} is {n}x{n} but x2 {tuple(b.shape)} has "
            f"{b.shape[-2]} rows; x2 needs {n} rows"
        )
    return tuple(b.shape), b.dtype


solve_p = define_op(
    op_name("solve"), _solve_rule, nin=2, linear=(1,),
    payload={"singular": (p_choice("raise", "nan"), "raise")},
    doc="X with A X = B for square A (..., n, n), B (..., n, k). singular='raise' raises "
        "LinAlgError for an exactly singular A; 'nan' fills its solution with NaN (AD rules).",
)


# ---- inv, det, adjugate, slogdet -----------------------------------------------------------


def _square_rule(name: str, out: str):
    def rule(x):
        check_matrix(name, x, square=True)
        if out == "same":
            return tuple(x.shape), x.dtype
        return tuple(x.shape[:-2]), x.dtype

    return rule


inv_p = define_op(op_name("inv"), _square_rule("inv", "same"), doc="Inverse of square matrices.")
det_p = define_op(op_name("det"), _square_rule("det", "batch"), doc="Determinant of square matrices.")
adjugate_p = define_op(
    op_name("adjugate"), _square_rule("adjugate", "same"),
    doc="Adjugate adj(A) (= det(A) inv(A) when A is invertible), finite at every A; det's JVP.",
)


def _slogdet_rule(x):
    check_matrix("slogdet", x, square=True)
    batch = tuple(x.shape[:-2])
    return (batch, x.dtype), (batch, real_dtype(x.dtype))


slogdet_p = define_op(
    op_name("slogdet"), _slogdet_rule, multiple_results=True,
    doc="(sign, log|det|) of square matrices; sign is 0 and log|det| -inf when singular.",
)


# ---- pinv, lstsq ---------------------------------------------------------------------------


def _pinv_rule(x, rtol):
    m, n = check_matrix("pinv", x)
    if rtol.dtype is not real_dtype(x.dtype):
        raise DTypeError(f"linalg.pinv expects rtol of dtype {real_dtype(x.dtype)}, got {rtol.dtype}")
    if tuple(rtol.shape) != tuple(x.shape[:-2]):
        raise ShapeError(
            f"linalg.pinv expects rtol of x's batch shape {tuple(x.shape[:-2])}, got {tuple(rtol.shape)}"
        )
    return (*x.shape[:-2], n, m), x.dtype


pinv_p = define_op(
    op_name("pinv"), _pinv_rule, nin=2,
    doc="Moore-Penrose pseudo-inverse; singular values <= rtol * max are dropped.",
)


def _lstsq_rule(a, b, *, rcond):
    m, n = check_matrix("lstsq", a, what="a")
    check_matrix("lstsq", b, what="b")
    _same("lstsq", a, b, what="b")
    if b.shape[-2] != m:
        raise ShapeError(
            f"linalg.lstsq: a {tuple(a.shape)} has {m} rows but b {tuple(b.shape)} has "
            f"{b.shape[-2]}; they must match"
        )
    batch, k = tuple(a.shape[:-2]), b.shape[-1]
    rdt = real_dtype(a.dtype)
    return ((*batch, n, k), a.dtype), ((*batch, k if m > n else 0), rdt), (batch, D.DEFAULT_INDEX), \
        ((*batch, min(m, n)), rdt)


def _resolve_lstsq(avals, payload):
    """rcond=None: eps * max(M, N) of a's real dtype, as numpy.linalg.lstsq (left None
    where the rule rejects `a`)."""
    a = avals[0] if payload["rcond"] is None else None
    if a is not None and len(a.shape) >= 2 and a.dtype in LAPACK_DTYPES:
        payload["rcond"] = float(np.finfo(real_dtype(a.dtype).numpy).eps) * max(a.shape[-2:])
    return payload


lstsq_p = define_op(
    op_name("lstsq"), _lstsq_rule, nin=2, multiple_results=True,
    payload={"rcond": (p_optional(p_tol), None)}, resolve=_resolve_lstsq,
    doc="(x, residuals, rank, s) of min ||a x - b||, as numpy.linalg.lstsq, batched.",
)

OPS = [solve_p, inv_p, det_p, adjugate_p, slogdet_p, pinv_p, lstsq_p]

__all__ = ["OPS", "adjugate_p", "det_p", "inv_p", "lstsq_p", "p_tol",
           "pinv_p", "slogdet_p", "solve_p"]
