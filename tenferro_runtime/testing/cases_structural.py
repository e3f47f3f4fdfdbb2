"""Conformance cases for the structural primitives: layout, conversion, slicing,
padding, concatenation, gather/scatter and creation."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from tenferro_core import catalog
from tenferro_core import dtypes as D
from tenferro_core.dtypes import DType
from tenferro_core.errors import DTypeError

from .cases import Case, Ctx, Spec, av, same_probe, spec_table
from .numerics import QUIET
from .reference_structural import scatter_candidates
from .strategies import SIDES, Domain, arrays, elements, scalars, shapes


def _one(name: str, draw_params, probe_params: dict, exact: bool = True) -> Spec:
    """A unary structural op: x drawn freely, params drawn from x's shape."""

    def draw(draw, dtype: DType, ctx: Ctx) -> Case:
        shape, params = draw_params(draw)
        return Case((draw(arrays(dtype, shape)),), params, exact=exact)

    return Spec(name, same_probe(1, probe_params), draw)


def _factor_shape(draw, size: int) -> tuple[int, ...]:
    """A random shape with `size` elements."""
    if size == 0:
        shape = list(draw(shapes(min_rank=1)))
        shape[draw(st.integers(0, len(shape) - 1))] = 0
        return tuple(shape)
    factors, n, p = [], size, 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    rank = draw(st.integers(1 if factors else 0, 4))
    out = [1] * rank
    for f in factors:
        out[draw(st.integers(0, rank - 1))] *= f
    return tuple(out)


def _reshape_params(draw):
    shape = draw(shapes())
    return shape, {"new_sizes": _factor_shape(draw, math.prod(shape))}


def _transpose_params(draw):
    shape = draw(shapes())
    return shape, {"permutation": tuple(draw(st.permutations(range(len(shape)))))}


def _broadcast_params(draw):
    shape = draw(shapes(max_rank=3))
    out_rank = len(shape) + draw(st.integers(0, 4 - len(shape)))
    dims = sorted(draw(st.lists(st.integers(0, max(out_rank - 1, 0)), min_size=len(shape),
                                max_size=len(shape), unique=True)))
    out = [draw(st.sampled_from(SIDES)) for _ in range(out_rank)]
    for i, d in enumerate(dims):
        if shape[i] != 1:
            out[d] = shape[i]
    return shape, {"shape": tuple(out), "broadcast_dimensions": tuple(dims)}


def _slice_params(draw):
    shape = draw(shapes())
    starts = [draw(st.integers(0, n)) for n in shape]
    limits = [draw(st.integers(s, n)) for s, n in zip(starts, shape)]
    strides = None if draw(st.booleans()) else tuple(draw(st.integers(1, 3)) for _ in shape)
    return shape, {"start_indices": tuple(starts), "limit_indices": tuple(limits), "strides": strides}


def _reverse_params(draw):
    shape = draw(shapes())
    dims = draw(st.lists(st.integers(0, max(len(shape) - 1, 0)), unique=True, max_size=len(shape)))
    return shape, {"dimensions": tuple(dims)}


def _convert_targets(dtype: DType, ctx: Ctx) -> tuple[str, ...]:
    return tuple(d.name for d in ctx.dtypes)


def _convert_draw(draw, dtype: DType, ctx: Ctx, variant: str) -> Case:
    target = D.as_dtype(variant)
    dom = Domain()
    if target.kind in "iu" and dtype.kind in "fc":  # out-of-range float -> int is unspecified
        info = np.iinfo(target.numpy)
        dom = Domain(max(-100, int(info.min)), min(100, int(info.max)), specials=False)
    x = draw(arrays(dtype, draw(shapes()), dom))
    return Case((x,), {"new_dtype": target})


def _finfo(dtype: DType):
    if dtype is D.bfloat16:  # NumPy's finfo does not know ml_dtypes' bfloat16
        import ml_dtypes

        return ml_dtypes.finfo(dtype.numpy)
    return np.finfo(dtype.numpy)


def limit_values(dtype: DType) -> np.ndarray:
    """The values at `dtype`'s limits, 1-d: bool both; integers min, min + 1, -1, 0, 1, max - 1,
    max; floats -max, max, 0, -0.0, +-inf, NaN, the smallest subnormal and normal (both
    signs), and +-1, 1.5, -2.5 (truncation); complex: each of those of its parts as the real
    part (imaginary 0) and as the imaginary part (real 0)."""
    if dtype.kind == "b":
        return np.array([False, True])
    if dtype.kind in "iu":
        info = np.iinfo(dtype.numpy)
        lo, hi = int(info.min), int(info.max)
        return np.array(sorted({v for v in (lo, lo + 1, -1, 0, 1, hi - 1, hi) if lo <= v <= hi}),
                        dtype=dtype.numpy)
    if dtype.kind == "f":
        f = _finfo(dtype)
        vals = (f.min, f.max, 0.0, -0.0, math.inf, -math.inf, math.nan, f.smallest_subnormal,
                -f.smallest_subnormal, f.smallest_normal, -f.smallest_normal, 1.0, -1.0, 1.5, -2.5)
        return np.array([float(v) for v in vals]).astype(dtype.numpy)
    part = limit_values(D.real_of(dtype))
    out = np.zeros(2 * part.size, dtype.numpy)
    out.real[:part.size] = part
    out.imag[part.size:] = part
    return out


def _fits_int(v: float, info: np.iinfo) -> bool:
    return math.isfinite(v) and int(info.min) <= math.trunc(v) <= int(info.max)


def _toward_zero_until_fits(v: np.ndarray, info: np.iinfo) -> np.ndarray:
    """The first float from v (1 element) toward 0 whose truncation fits `info`."""
    while not _fits_int(float(v[0]), info):
        v = np.nextafter(v, np.zeros_like(v))
    return v


def convert_limits_case(src: DType, dst: DType) -> Case:
    """convert from `src` to `dst` on `src`'s limit values; into an integer dtype only the
    values whose truncation fits it (the rest is unspecified), plus the floats nearest the
    target's min and max that do (float64 2**63 - 1024 for int64)."""
    x = limit_values(src)
    if dst.kind in "iu" and src.kind in "fc":
        info = np.iinfo(dst.numpy)
        x = x[[_fits_int(float(v.real), info) for v in x]]
        real = D.real_of(src).numpy
        with np.errstate(over="ignore"):  # beyond src's range: inf, then its max
            near = [_toward_zero_until_fits(np.array([float(b)]).astype(real), info)
                    for b in (int(info.min), int(info.max))]
        x = np.concatenate([x, np.concatenate(near).astype(src.numpy)])
    return Case((x,), {"new_dtype": dst}, check=_exact_where_representable)


def _exact_where_representable(actual: np.ndarray, expected: np.ndarray, case: Case) -> None:
    """Within the tolerance, and exactly (signed zeros aside) where the source value is a
    value of the target (widening, subnormals, infinities, integers that fit)."""
    from .reference_structural import convert_values
    from .tolerance import assert_close

    (x,) = case.args
    dst = case.params["new_dtype"]
    what = f"convert({x.dtype.name} -> {dst})"
    assert_close(actual, expected, dst, what=what)
    if dst.kind in "biu":
        return  # assert_close compared them exactly
    wide = np.complex128 if dst.kind == "c" else np.float64
    got, want = actual.astype(wide), expected.astype(wide)
    finite = np.isfinite(want)  # infinities and NaN: assert_close compared them exactly
    with np.errstate(**QUIET):
        back = convert_values(np.where(finite, expected, np.zeros((), expected.dtype)), x.dtype)
        same = finite & np.asarray(back == x)
    bad = same & (got != want)
    if bad.any():
        raise AssertionError(f"{what}: {x[bad]!r} is a value of {dst} but converted to {actual[bad]!r}")


def _bitcast_targets(dtype: DType, ctx: Ctx) -> tuple[str, ...]:
    targets = []
    for t in ctx.dtypes:  # the widths the shape rule accepts
        try:
            catalog.bitcast_convert.rule(av((), dtype), new_dtype=t)
            targets.append(t.name)
        except DTypeError:
            pass
    return tuple(targets)


def _bitcast_draw(draw, dtype: DType, ctx: Ctx, variant: str) -> Case:
    x = draw(arrays(dtype, draw(shapes())))
    return Case((x,), {"new_dtype": D.as_dtype(variant)}, exact=True)


def _index_scalar(draw, ctx: Ctx, n: int) -> np.ndarray:
    """A 0-d start index of any integer dtype: near the axis, or at the dtype's extremes."""
    idt = draw(st.sampled_from(ctx.int_dtypes))
    info = np.iinfo(idt.numpy)
    v = draw(st.one_of(st.integers(max(info.min, -n - 2), min(info.max, n + 2)),
                       st.sampled_from((int(info.min), int(info.max)))))
    return np.asarray(v, dtype=idt.numpy)


def _dynamic_probe(update: bool):
    def probe(dtype: DType, ctx: Ctx):
        idx = av((), ctx.index_dtype)
        if update:
            return (av((2,), dtype), av((1,), dtype), idx), {}
        return (av((2,), dtype), idx), {"slice_sizes": (1,)}

    return probe


def _dynamic_slice_draw(draw, dtype: DType, ctx: Ctx) -> Case:
    shape = draw(shapes())
    sizes = tuple(draw(st.integers(0, n)) for n in shape)
    starts = tuple(_index_scalar(draw, ctx, n) for n in shape)
    return Case((draw(arrays(dtype, shape)), *starts), {"slice_sizes": sizes}, exact=True)


def _dynamic_update_draw(draw, dtype: DType, ctx: Ctx) -> Case:
    shape = draw(shapes())
    ushape = tuple(draw(st.integers(0, n)) for n in shape)
    starts = tuple(_index_scalar(draw, ctx, n) for n in shape)
    return Case((draw(arrays(dtype, shape)), draw(arrays(dtype, ushape)), *starts), exact=True)


def _pad_draw(draw, dtype: DType, ctx: Ctx) -> Case:
    shape = draw(shapes())
    config = []
    for n in shape:
        interior = draw(st.integers(0, 2))
        lo = draw(st.integers(-3, 3))
        core = n + max(n - 1, 0) * interior
        hi = draw(st.integers(max(-3, -(core + lo)), 3))
        config.append((lo, hi, interior))
    x, value = draw(arrays(dtype, shape)), draw(scalars(dtype))
    return Case((x, value), {"padding_config": tuple(config)}, exact=True)


def _concatenate_draw(draw, dtype: DType, ctx: Ctx) -> Case:
    base = list(draw(shapes(min_rank=1)))
    dim = draw(st.integers(0, len(base) - 1))
    xs = []
    for _ in range(draw(st.integers(1, 3))):
        base[dim] = draw(st.sampled_from(SIDES))
        xs.append(draw(arrays(dtype, tuple(base))))
    return Case(tuple(xs), {"dimension": dim}, exact=True)


def _indexing_probe(nin: int):
    def probe(dtype: DType, ctx: Ctx):
        avals = (av((2,), dtype), av((1, 1), ctx.index_dtype), av((1,), dtype))
        return avals[:nin], {"axes": (0,)}

    return probe


def _indexing_inputs(draw, ctx: Ctx, gather: bool):
    """(x shape, indices, axes, updates shape): index rows for `axes`, some out of range."""
    shape = draw(shapes(max_rank=3))
    axes = tuple(draw(st.lists(st.integers(0, max(len(shape) - 1, 0)), unique=True,
                               max_size=len(shape))))
    batch = draw(shapes(max_rank=2))
    rest = [n for i, n in enumerate(shape) if i not in axes]
    if gather and any(shape[a] == 0 for a in axes) and math.prod(batch) * math.prod(rest):
        batch = (0,) + batch[1:]  # gathering along an empty axis needs an empty result
    idt = draw(st.sampled_from(ctx.int_dtypes))
    info = np.iinfo(idt.numpy)
    hi = max(shape, default=0) + 1
    indices = draw(arrays(idt, batch + (len(axes),), Domain(max(int(info.min), -2), hi)))
    if draw(st.booleans()):  # sometimes extreme index values too
        extreme = draw(arrays(idt, indices.shape, Domain()))
        indices = np.where(draw(arrays(D.bool_, indices.shape)), extreme, indices)
    return shape, indices, axes, batch + tuple(rest)


def _gather_draw(draw, dtype: DType, ctx: Ctx) -> Case:
    shape, indices, axes, _ = _indexing_inputs(draw, ctx, gather=True)
    return Case((draw(arrays(dtype, shape)), indices), {"axes": axes}, exact=True)


def _scatter_check(actual: np.ndarray, expected: np.ndarray, case: Case) -> None:
    """Each written place holds one of the updates aimed at it; the others are unchanged."""
    x, indices, updates = case.args
    allowed = {pos: vals for pos, vals in
               scatter_candidates(x, indices, updates, case.params["axes"]).items()}
    for pos in np.ndindex(x.shape):
        options = allowed.get(pos, [x[pos]])
        got = actual[pos]
        if not any(got == v or (got != got and v != v) for v in options):
            raise AssertionError(f"scatter: at {pos} got {got!r}, expected one of {options!r}")


def _scatter_draw(add: bool):
    def draw_case(draw, dtype: DType, ctx: Ctx) -> Case:
        shape, indices, axes, ushape = _indexing_inputs(draw, ctx, gather=False)
        x, updates = draw(arrays(dtype, shape)), draw(arrays(dtype, ushape))
        params = {"axes": axes}
        if not add:
            return Case((x, indices, updates), params, check=_scatter_check)
        bound = None
        if dtype.kind in "fc":
            from .reference_structural import STRUCTURAL_REFERENCE

            with np.errstate(**QUIET):
                mag = STRUCTURAL_REFERENCE["scatter_add"](
                    np.abs(x).astype(np.float64), indices, np.abs(updates).astype(np.float64), axes=axes)
            bound = mag * max(math.prod(indices.shape[:-1]), 1)
        return Case((x, indices, updates), params, bound=bound)

    return draw_case


def _nullary_probe(name: str):
    def probe(dtype: DType, ctx: Ctx):
        if name == "iota":
            return (), {"dtype": dtype, "shape": (2,), "dimension": 0, "device": ctx.device}
        return (), {"shape": (2,), "fill_value": 0, "dtype": dtype, "device": ctx.device}

    return probe


def _iota_draw(draw, dtype: DType, ctx: Ctx) -> Case:
    shape = draw(shapes(min_rank=1))
    dim = draw(st.integers(0, len(shape) - 1))
    return Case((), {"dtype": dtype, "shape": shape, "dimension": dim, "device": ctx.device})


def _full_draw(draw, dtype: DType, ctx: Ctx) -> Case:
    value = draw(elements(dtype)[0])
    if isinstance(value, np.generic):
        value = value.item()
    return Case((), {"shape": draw(shapes()), "fill_value": value, "dtype": dtype, "device": ctx.device})


STRUCTURAL_SPECS: dict[str, Spec] = spec_table(
    _one("reshape", _reshape_params, {"new_sizes": (2,)}),
    _one("transpose", _transpose_params, {"permutation": (0,)}),
    _one("broadcast_in_dim", _broadcast_params, {"shape": (3, 2), "broadcast_dimensions": (1,)}),
    Spec("convert", same_probe(1, {"new_dtype": D.bool_}), _convert_draw, _convert_targets),
    Spec("bitcast_convert", lambda d, ctx: ((av((2,), d),), {"new_dtype": d}), _bitcast_draw,
         _bitcast_targets),
    _one("slice", _slice_params, {"start_indices": (0,), "limit_indices": (2,)}),
    Spec("dynamic_slice", _dynamic_probe(False), _dynamic_slice_draw),
    Spec("dynamic_update_slice", _dynamic_probe(True), _dynamic_update_draw),
    Spec("pad", lambda d, ctx: ((av((2,), d), av((), d)), {"padding_config": ((1, 1, 0),)}), _pad_draw),
    Spec("concatenate", same_probe(2, {"dimension": 0}), _concatenate_draw),
    _one("reverse", _reverse_params, {"dimensions": (0,)}),
    Spec("gather", _indexing_probe(2), _gather_draw),
    Spec("scatter", _indexing_probe(3), _scatter_draw(False)),
    Spec("scatter_add", _indexing_probe(3), _scatter_draw(True)),
    Spec("iota", _nullary_probe("iota"), _iota_draw),
    Spec("full", _nullary_probe("full"), _full_draw),
    _one("copy", lambda draw: (draw(shapes()), {}), {}),
)

__all__ = ["STRUCTURAL_SPECS", "convert_limits_case", "limit_values"]
