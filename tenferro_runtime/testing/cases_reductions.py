"""Conformance cases for reductions, scans, sorting and the contractions."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from tenferro_core import catalog
from tenferro_core.dtypes import DType
from tenferro_core.errors import ShapeError

from .cases import Case, Ctx, Spec, av, same_probe, spec_table
from .numerics import QUIET
from .reference_reductions import REDUCTION_REFERENCE, conv_values, dot_subscripts
from .strategies import DEFAULT, SIDES, Domain, arrays, shapes

TIES = Domain(-3, 3, extra=(0.5, -0.0))
PROD = Domain(-1.125, 1.125, im=(-0.75, 0.75))  # |x| ** 64 stays finite in float16


def _axes(draw, ndim: int) -> tuple[int, ...]:
    return tuple(draw(st.lists(st.integers(0, max(ndim - 1, 0)), unique=True, max_size=ndim)))


def _magnitude(x: np.ndarray) -> np.ndarray:
    return np.abs(x.astype(np.complex128 if x.dtype.kind == "c" else np.float64))


def _reduce(name: str, nonempty: bool = False, dom: Domain = DEFAULT, max_rank: int = 4,
            accumulates: bool = False) -> Spec:
    def draw(draw, dtype: DType, ctx: Ctx) -> Case:
        shape = list(draw(shapes(max_rank=max_rank)))
        axes = _axes(draw, len(shape))
        if nonempty:
            shape = [max(n, 1) if i in axes else n for i, n in enumerate(shape)]
        x = draw(arrays(dtype, tuple(shape), dom))
        bound = None
        if accumulates and dtype.kind in "fc":
            k = math.prod(shape[a] for a in axes)
            with np.errstate(**QUIET):
                bound = REDUCTION_REFERENCE[name](_magnitude(x), axes=axes).astype(np.float64) * k
        return Case((x,), {"axes": axes}, bound=bound)

    return Spec(name, same_probe(1, {"axes": (0,)}), draw)


def _arg(name: str) -> Spec:
    def probe(dtype: DType, ctx: Ctx):
        return (av((2,), dtype),), {"axis": 0, "index_dtype": ctx.index_dtype}

    def draw(draw, dtype: DType, ctx: Ctx) -> Case:
        shape = list(draw(shapes(min_rank=1)))
        axis = draw(st.integers(0, len(shape) - 1))
        shape[axis] = max(shape[axis], 1)
        x = draw(arrays(dtype, tuple(shape), draw(st.sampled_from((DEFAULT, TIES)))))
        return Case((x,), {"axis": axis, "index_dtype": draw(st.sampled_from(ctx.int_dtypes))})

    return Spec(name, probe, draw)


def _cumsum_draw(draw, dtype: DType, ctx: Ctx) -> Case:
    shape = draw(shapes(min_rank=1))
    axis = draw(st.integers(0, len(shape) - 1))
    x = draw(arrays(dtype, shape))
    reverse = draw(st.booleans())
    bound = None
    if dtype.kind in "fc":
        # the running magnitude, so a NaN/inf later in a line leaves the earlier bounds finite
        mag = np.flip(_magnitude(x), axis) if reverse else _magnitude(x)
        run = np.cumsum(mag, axis=axis)
        bound = (np.flip(run, axis) if reverse else run) * shape[axis]
    return Case((x,), {"axis": axis, "reverse": reverse}, bound=bound)


def _argsort_check(actual: np.ndarray, expected: np.ndarray, case: Case) -> None:
    """Unstable argsort: a permutation of each line that puts the values in sorted order."""
    (x,) = case.args
    dim = case.params["dimension"]
    if not np.array_equal(np.sort(actual, axis=dim), np.sort(expected, axis=dim)):
        raise AssertionError(f"argsort: result is not a permutation along axis {dim}: {actual!r}")
    got = np.take_along_axis(x, actual.astype(np.intp), axis=dim)
    want = np.take_along_axis(x, expected.astype(np.intp), axis=dim)
    same = (got == want) | ((got != got) & (want != want))
    if not np.all(same):
        raise AssertionError(f"argsort: values taken in the returned order {got!r} are not sorted: {want!r}")


def _sort(name: str) -> Spec:
    def probe(dtype: DType, ctx: Ctx):
        extra = {"index_dtype": ctx.index_dtype} if name == "argsort" else {}
        return (av((2,), dtype),), {"dimension": 0, **extra}

    def draw(draw, dtype: DType, ctx: Ctx) -> Case:
        shape = draw(shapes(min_rank=1))
        x = draw(arrays(dtype, shape, draw(st.sampled_from((DEFAULT, TIES)))))
        params = {"dimension": draw(st.integers(0, len(shape) - 1)),
                  "descending": draw(st.booleans()), "stable": draw(st.booleans())}
        if name == "sort":
            return Case((x,), params)
        params["index_dtype"] = draw(st.sampled_from(ctx.int_dtypes))
        return Case((x,), params, check=None if params["stable"] else _argsort_check)

    return Spec(name, probe, draw)


def _operand(roles: list[tuple[str, int]], sizes: dict[tuple[str, int], int], draw):
    """Shuffle the (role, j) axes of one operand: its shape and where each role landed."""
    order = [roles[i] for i in draw(st.permutations(range(len(roles))))]
    return tuple(sizes[r] for r in order), {r: i for i, r in enumerate(order)}


def _dot_draw(draw, dtype: DType, ctx: Ctx) -> Case:
    nb, nc = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    nl, nr = draw(st.integers(0, 4 - nb - nc)), draw(st.integers(0, 4 - nb - nc))
    sizes = {}
    for role, count in (("b", nb), ("c", nc), ("l", nl), ("r", nr)):
        for j in range(count):
            sizes[(role, j)] = draw(st.sampled_from(SIDES))
    shared = [("b", j) for j in range(nb)] + [("c", j) for j in range(nc)]
    lshape, lpos = _operand(shared + [("l", j) for j in range(nl)], sizes, draw)
    rshape, rpos = _operand(shared + [("r", j) for j in range(nr)], sizes, draw)
    dom = Domain(-10, 10, specials=False)
    lhs, rhs = draw(arrays(dtype, lshape, dom)), draw(arrays(dtype, rshape, dom))
    def pair(role: str, count: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return tuple(lpos[(role, j)] for j in range(count)), tuple(rpos[(role, j)] for j in range(count))

    params = {"contracting_dims": pair("c", nc), "batch_dims": pair("b", nb)}
    bound = None
    if dtype.kind in "fc":
        spec = dot_subscripts(lhs.ndim, rhs.ndim, params["contracting_dims"], params["batch_dims"])
        k = math.prod(sizes[("c", j)] for j in range(nc))
        bound = np.einsum(spec, _magnitude(lhs), _magnitude(rhs)) * max(k, 1)
    return Case((lhs, rhs), params, bound=bound)


def _conv_probe(dtype: DType, ctx: Ctx):
    return (av((1, 1, 3), dtype), av((1, 1, 2), dtype)), {}


def _maybe(draw, values: list) -> tuple | None:
    return None if draw(st.booleans()) else tuple(values)


def _conv_draw(draw, dtype: DType, ctx: Ctx) -> Case:
    nsp = draw(st.integers(1, 2))
    g, cg, og = draw(st.integers(1, 2)), draw(st.sampled_from((1, 2, 1, 0))), draw(st.integers(1, 2))
    n = draw(st.sampled_from((1, 2, 0)))
    spatial = [draw(st.integers(0, 5)) for _ in range(nsp)]
    window = [draw(st.integers(1, 3)) for _ in range(nsp)]
    strides = _maybe(draw, [draw(st.integers(1, 2)) for _ in range(nsp)])
    ld = _maybe(draw, [draw(st.integers(1, 2)) for _ in range(nsp)])
    rd = _maybe(draw, [draw(st.integers(1, 2)) for _ in range(nsp)])
    padded = draw(st.booleans())
    pads = []
    for i in range(nsp):
        lo, hi = (draw(st.integers(-1, 2)), draw(st.integers(-1, 2))) if padded else (0, 0)
        size_in = (spatial[i] - 1) * (ld[i] if ld else 1) + 1 if spatial[i] else 0
        size_k = (window[i] - 1) * (rd[i] if rd else 1) + 1
        hi += max(0, size_k - (size_in + lo + hi))  # keep the window inside the padded input
        pads.append((lo, hi))
    params = {"window_strides": strides, "lhs_dilation": ld, "rhs_dilation": rd,
              "padding": tuple(pads) if any(p != (0, 0) for p in pads) else None,
              "feature_group_count": g}
    lshape, rshape = (n, g * cg, *spatial), (g * og, cg, *window)
    if draw(st.booleans()):  # channels_last: lhs (N, *spatial, C); channels_first by default
        params["layout"] = "channels_last"
        lshape = (n, *spatial, g * cg)
    avals = (av(lshape, dtype), av(rshape, dtype))
    full = catalog.conv_general.check_params(params, avals)  # the case keeps the None spellings
    try:
        catalog.conv_general.rule(*avals, **full)
    except ShapeError as exc:  # pragma: no cover - the construction above avoids this
        raise AssertionError(f"conformance kit drew an invalid conv_general case: {exc}") from None
    dom = Domain(-4, 4, im=(-2, 2), specials=False)
    lhs, rhs = draw(arrays(dtype, lshape, dom)), draw(arrays(dtype, rshape, dom))
    with np.errstate(**QUIET):
        bound = conv_values(_magnitude(lhs), _magnitude(rhs), **full).real
    k = max(cg * math.prod(window), 1)
    return Case((lhs, rhs), params, bound=bound * k)


REDUCTION_SPECS: dict[str, Spec] = spec_table(
    _reduce("reduce_sum", accumulates=True), _reduce("reduce_prod", dom=PROD, max_rank=3, accumulates=True),
    _reduce("reduce_max", nonempty=True), _reduce("reduce_min", nonempty=True),
    _reduce("reduce_and"), _reduce("reduce_or"),
    _arg("argmax"), _arg("argmin"),
    Spec("cumsum", same_probe(1, {"axis": 0}), _cumsum_draw),
    _sort("sort"), _sort("argsort"),
    Spec("dot_general", same_probe(2, {"contracting_dims": ((0,), (0,))}), _dot_draw),
    Spec("conv_general", _conv_probe, _conv_draw),
)
