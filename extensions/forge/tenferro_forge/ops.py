"""What Forge knows of an op: which ops it takes, their operands' domain, the float64
reference, the tolerance tied to the declared dtype, and the generated inputs.

Forge covers the catalog's elementwise ops with one or two operands and the float
reductions (their operands share one shape); the reference is the NumPy backend's kernel
run on float64 copies of the operands, cast to the declared dtype only at the comparison.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tenferro_core import dtypes
from tenferro_core.avals import Aval
from tenferro_core.catalog import BY_NAME

from .errors import ForgeArgumentError

REDUCTIONS = ("reduce_sum", "reduce_prod", "reduce_max", "reduce_min")
FLOAT_DTYPES = ("float16", "float32", "float64")
DOMAINS = {  # op -> operand domain (values outside make NaN where a correct kernel gives NaN too)
    "sqrt": "positive",
    "rsqrt": "positive",
    "log": "positive",
    "log1p": "above_minus_one",
    "asin": "unit",
    "acos": "unit",
    "atanh": "unit",
    "acosh": "at_least_one",
}
EXACT = (
    "reduce_max",
    "reduce_min",
    "neg",
    "abs",
    "maximum",
    "minimum",
    "floor",
    "ceil",
    "round",
    "trunc",
    "sign",
    "select",
    "clamp",
)
"""Ops whose result is one of the operands' values (or an exact function of one): any
rounding at all is wrong, so the tolerance is zero."""
DISTRIBUTIONS = ("normal", "uniform", "pareto", "spikes")
ULPS = 8  # elementwise tolerance in units of the declared dtype's epsilon


def primitive(op: str) -> Any:
    """The catalog primitive `op`, or a ForgeArgumentError naming the ops Forge takes."""
    prim = BY_NAME.get(op)
    if prim is None or not (
        op in REDUCTIONS or (prim.category == "elementwise" and prim.nin in (1, 2) and not prim.params)
    ):
        raise ForgeArgumentError(
            f"forge cannot make a task for op {op!r}; it takes the catalog's elementwise ops with "
            f"one or two operands and no params, and {', '.join(REDUCTIONS)}: pick one of those"
        )
    return prim


def dtype_of(name: str) -> dtypes.DType:
    if name not in FLOAT_DTYPES:
        raise ForgeArgumentError(
            f"forge takes the float dtypes {FLOAT_DTYPES}, got {name!r}; "
            f"pass --dtype float32 (or float16 / float64)"
        )
    return dtypes.as_dtype(name)


def signature(op: str, dtype: str, shape: tuple, params: dict) -> tuple[list[Aval], dict, list[Aval]]:
    """(operand avals, canonical params, output avals); raises the op's own ShapeError or
    ArgumentError for a shape or params it refuses."""
    prim = primitive(op)
    avals = [Aval(tuple(shape), dtype_of(dtype))] * prim.nin
    canon = prim.check_params(_tuples(params), avals)
    return avals, canon, list(prim.abstract_eval(avals, canon))


def _tuples(params: dict) -> dict:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in params.items()}


def allowed(op: str, dtype: str, shape: tuple, params: dict) -> bool:
    """Whether the op accepts operands of `shape` with `params` (edge shapes it refuses are
    skipped, never run)."""
    try:
        signature(op, dtype, shape, params)
    except Exception:
        return False
    return True


def reference(op: str, arrays: list[np.ndarray], params: dict) -> np.ndarray:
    """The float64 reference result (the NumPy backend's kernel on float64 copies)."""
    from tenferro_numpy.kernels import KERNELS

    prim = primitive(op)
    canon = prim.check_params(_tuples(params), [Aval(a.shape, dtypes.float64) for a in arrays])
    with np.errstate(all="ignore"):
        return np.asarray(KERNELS[op](*[np.array(a, dtype=np.float64) for a in arrays], **canon))


def tolerance(op: str, dtype: str) -> str:
    """The tolerance rule in words (PROMPT.md, reports)."""
    eps = float(np.finfo(dtype).eps)
    if op in EXACT:
        return "exact: the result must equal the float64 reference rounded to the dtype"
    if op in ("reduce_sum", "reduce_prod"):
        return (
            f"|result - ref| <= 4 (log2 n + 1) eps sum|x| (+ the same of |ref| for prod), "
            f"eps = {eps:.3g} ({dtype}), n the elements reduced: a pairwise or blocked sum passes, "
            f"a sum in a narrower dtype does not"
        )
    return f"|result - ref| <= {ULPS} eps |ref| + tiny, eps = {eps:.3g} ({dtype})"


def mismatch(
    op: str, dtype: str, arrays: list[np.ndarray], params: dict, got: np.ndarray, ref: np.ndarray
) -> str | None:
    """None when `got` matches the float64 reference within the dtype's tolerance, else why."""
    npd = np.dtype(dtype)
    want = ref.astype(npd)
    g = got.astype(np.float64)
    nan_ref, nan_got = np.isnan(want), np.isnan(g)
    if not np.array_equal(nan_ref, nan_got):
        i = tuple(int(v) for v in np.argwhere(nan_ref != nan_got)[0])
        return f"NaN pattern differs at index {i}: got {g[i]!r}, want {want[i]!r}"
    inf = np.isinf(want) | np.isinf(g)
    if not np.array_equal(np.where(inf, want, 0), np.where(inf, g, 0)):
        i = tuple(int(v) for v in np.argwhere(np.where(inf, want, 0) != np.where(inf, g, 0))[0])
        return f"infinity differs at index {i}: got {g[i]!r}, want {want[i]!r}"
    ok = ~(nan_ref | inf)
    finfo = np.finfo(npd)
    eps, tiny = float(finfo.eps), float(finfo.smallest_normal)
    with np.errstate(all="ignore"):
        if op in EXACT:
            bound = np.zeros_like(ref)
        elif op in ("reduce_sum", "reduce_prod"):
            axes = tuple(params.get("axes", ()))
            n = max(1, math.prod(arrays[0].shape[a] for a in axes))
            scale = np.sum(np.abs(arrays[0].astype(np.float64)), axis=axes) if op == "reduce_sum" else 0
            bound = 4 * (math.log2(n) + 1) * eps * (scale + np.abs(ref)) + tiny
            if op == "reduce_prod":
                bound = bound * n
        else:
            bound = ULPS * eps * np.abs(ref) + tiny
        # exact ops: against the reference rounded to the dtype; others: against float64 itself
        err = np.abs(g - want.astype(np.float64)) if op in EXACT else np.abs(g - ref)
        bad = ok & ~(err <= bound)
    if bad.any():
        i = tuple(int(v) for v in np.argwhere(bad)[0])
        return (
            f"{int(bad.sum())} of {bad.size} elements outside the {dtype} tolerance; first at "
            f"index {i}: got {g[i]!r}, want {ref[i]!r} "
            f"(allowed error {np.broadcast_to(bound, ref.shape)[i]:.3g})"
        )
    return None


def draw(op: str, dtype: str, shape: tuple, dist: str, seed: int) -> np.ndarray:
    """One operand of `shape` from distribution `dist` (normal, uniform, pareto, spikes: one
    element a thousand times the rest), mapped into the op's domain, in the declared dtype."""
    rng = np.random.default_rng(seed)
    if dist == "normal":
        x = rng.standard_normal(shape)
    elif dist == "uniform":
        x = rng.uniform(-1.0, 1.0, shape)
    elif dist == "pareto":
        x = rng.pareto(1.5, shape) * rng.choice([-1.0, 1.0], shape)
    elif dist == "spikes":
        x = rng.uniform(-1e-3, 1e-3, shape)
        if x.size:
            x.reshape(-1)[rng.integers(x.size)] = rng.choice([-1.0, 1.0]) * 10.0
    else:
        raise ForgeArgumentError(f"unknown distribution {dist!r}; use one of {DISTRIBUTIONS}")
    return domain(op, x).astype(dtype)


def domain(op: str, x: np.ndarray) -> np.ndarray:
    kind = DOMAINS.get(op)
    if kind == "positive":
        return np.abs(x) + 1e-3
    if kind == "above_minus_one":
        return np.abs(x) - 0.5
    if kind == "unit":
        return np.tanh(x) * 0.999
    if kind == "at_least_one":
        return np.abs(x) + 1.0
    if op in ("exp", "sinh", "cosh"):
        return np.clip(x, -20, 20)
    if op == "reduce_prod":
        return 1.0 + np.tanh(x) * 0.1
    return x


def specials(dtype: str) -> np.ndarray:
    """IEEE special values of the dtype: NaN, +-inf, -0.0, the smallest subnormal, the largest."""
    fi = np.finfo(dtype)
    return np.array(
        [np.nan, np.inf, -np.inf, -0.0, float(fi.smallest_subnormal), float(fi.max), -float(fi.max)],
        dtype=dtype,
    )


def edge_shapes(op: str, dtype: str, shapes: list[tuple], params: dict) -> list[tuple]:
    """Shapes beside the task's: each dimension 0, 1, off by one, 0-d, where the op allows."""
    out: list[tuple] = []
    for shape in shapes:
        for i in range(len(shape)):
            for n in (0, 1, max(1, shape[i] - 1), shape[i] + 1, max(1, shape[i] // 3) + 2):
                out.append(shape[:i] + (n,) + shape[i + 1 :])
    out += [(), (1,) * max(1, len(shapes[0])), (3,) * max(1, len(shapes[0]))]
    seen, keep = set(shapes), []
    for s in out:
        if s not in seen and allowed(op, dtype, s, params):
            seen.add(s)
            keep.append(s)
    return keep


__all__ = [
    "DISTRIBUTIONS",
    "REDUCTIONS",
    "allowed",
    "draw",
    "edge_shapes",
    "mismatch",
    "primitive",
    "reference",
    "signature",
    "specials",
    "tolerance",
]
