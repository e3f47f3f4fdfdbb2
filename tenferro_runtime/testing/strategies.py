"""Hypothesis strategies for conformance inputs.

Shapes are small (rank <= 4, sides <= 4) and often hit the edges: 0-d, 0-size
and size-1 axes. Values follow a per-primitive `Domain`: integers span their
dtype with its extremes mixed in, floats are bounded with NaN, +-inf and +-0
mixed in where the primitive has IEEE semantics for them, complex numbers have
bounded parts. `Layout` describes how an operand is presented to the backend:
contiguous, or as a transposed / strided-slice / reversed view of a bigger
buffer (built with the backend's own transpose, slice and reverse).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tenferro_core.dtypes import DType

SIDES = (2, 1, 3, 0, 4, 2, 3, 1, 2)
FLOAT_SPECIALS = (math.nan, math.inf, -math.inf, 0.0, -0.0)
COMPLEX_PICKS = (1j, -2j, 0.5j, 0j, 1 + 0j, -1.5 + 0j)


@dataclass(frozen=True)
class Domain:
    """Values an operand may take.

    lo/hi bound real values (None: the dtype's range for integers, +-100 for
    floats); `im` bounds imaginary parts (default lo..hi); `specials` mixes
    NaN/inf/signed zeros into real floats and `complex_specials` into complex
    parts; `nonzero` keeps magnitudes >= 1/64; `extra` values are mixed in.
    """

    lo: float | None = None
    hi: float | None = None
    im: tuple[float, float] | None = None
    specials: bool = True
    complex_specials: bool = False
    nonzero: bool = False
    extra: tuple[Any, ...] = ()


DEFAULT = Domain()


@functools.cache
def shapes(min_rank: int = 0, max_rank: int = 4, min_side: int = 0, max_side: int = 4):
    """Small shapes, biased toward edge sizes (0 and 1)."""
    sides = sorted({s for s in SIDES if min_side <= s <= max_side}, key=SIDES.index)
    return st.lists(st.sampled_from(sides), min_size=min_rank, max_size=max_rank).map(tuple)


def _int_elements(dtype: DType, dom: Domain):
    info = np.iinfo(dtype.numpy)
    lo = info.min if dom.lo is None else max(info.min, int(dom.lo))
    hi = info.max if dom.hi is None else min(info.max, int(dom.hi))
    edges = sorted({v for v in (lo, hi, lo + 1, hi - 1, 0, 1, -1, 2) if lo <= v <= hi})
    extra = [int(v) for v in dom.extra if lo <= v <= hi]
    base = st.integers(lo, hi)
    out = st.one_of(st.integers(max(lo, -4), min(hi, 4)), base, st.sampled_from(edges + extra))
    if dom.nonzero:
        return out.filter(bool), base.filter(bool)
    return out, base


def _inward(lo: float, hi: float, bits: int) -> tuple[float, float]:
    """The bounds rounded inward to floats of width `bits` (hypothesis needs them exact)."""
    ftype = {16: np.float16, 32: np.float32, 64: np.float64}[bits]
    a, b = ftype(lo), ftype(hi)
    if a < lo:
        a = np.nextafter(a, ftype(np.inf))
    if b > hi:
        b = np.nextafter(b, ftype(-np.inf))
    return float(a), float(b)


def _float_part(bits: int, lo: float, hi: float, nonzero: bool):
    s = st.floats(*_inward(lo, hi, bits), width=bits, allow_subnormal=False)
    return s.filter(lambda v: abs(v) >= 1 / 64) if nonzero else s


def _float_elements(dtype: DType, dom: Domain):
    lo = -100.0 if dom.lo is None else float(dom.lo)
    hi = 100.0 if dom.hi is None else float(dom.hi)
    base = _float_part(dtype.bits, lo, hi, dom.nonzero)
    picks = [float(v) for v in dom.extra]
    if dom.specials:
        picks += [v for v in FLOAT_SPECIALS if not (dom.nonzero and v == 0)]
    return (st.one_of(base, st.sampled_from(picks)) if picks else base), base


def _complex_elements(dtype: DType, dom: Domain):
    bits = dtype.bits // 2
    lo = -100.0 if dom.lo is None else float(dom.lo)
    hi = 100.0 if dom.hi is None else float(dom.hi)
    ilo, ihi = dom.im or (lo, hi)
    re, im = _float_part(bits, lo, hi, False), _float_part(bits, ilo, ihi, False)
    if dom.complex_specials:
        re = st.one_of(re, st.sampled_from(FLOAT_SPECIALS))
        im = st.one_of(im, st.sampled_from(FLOAT_SPECIALS))
    out = st.builds(complex, re, im)
    axes = tuple(z for z in COMPLEX_PICKS if lo <= z.real <= hi and ilo <= z.imag <= ihi)
    if axes:  # purely real or imaginary values: where real-part shortcuts go wrong
        out = st.one_of(out, st.sampled_from(axes))
    if dom.nonzero:
        out = out.filter(lambda z: abs(z) >= 1 / 64)
    return out, out


@functools.cache
def elements(dtype: DType, dom: Domain = DEFAULT):
    """(element strategy, plain background strategy) for a dtype and domain."""
    if dtype.kind == "b":
        return st.booleans(), st.booleans()
    if dtype.kind in "iu":
        return _int_elements(dtype, dom)
    if dtype.kind == "f":
        return _float_elements(dtype, dom)
    return _complex_elements(dtype, dom)


@functools.cache
def arrays(dtype: DType, shape: tuple[int, ...], dom: Domain = DEFAULT):
    """Host arrays of `dtype` and `shape`; specials appear only at explicitly drawn places."""
    elems, background = elements(dtype, dom)
    return hnp.arrays(dtype.numpy, shape, elements=elems, fill=background)


def scalars(dtype: DType, dom: Domain = DEFAULT):
    """0-d host arrays of `dtype`."""
    return arrays(dtype, (), dom)


# ---- layouts ----------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """How an operand reaches the backend: ``contiguous`` or a view of a bigger buffer.

    transposed: big = x transposed by the inverse of `perm`; transpose(big, perm) == x.
    strided:    x sits at big[offset::stride] per axis; a strided slice recovers it.
    reversed:   big = x flipped along `dims`; reverse(big, dims) == x.
    """

    kind: str = "contiguous"
    perm: tuple[int, ...] = ()
    offsets: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    dims: tuple[int, ...] = ()

    def embed(self, x: np.ndarray) -> np.ndarray:
        """The bigger contiguous host buffer that holds x in this layout."""
        if self.kind == "transposed":
            return np.ascontiguousarray(np.transpose(x, np.argsort(self.perm)))
        if self.kind == "reversed":
            return np.ascontiguousarray(np.flip(x, self.dims))
        if self.kind == "strided":
            shape = tuple(o + n * s for o, n, s in zip(self.offsets, x.shape, self.strides))
            big = np.full(shape, junk(x.dtype), dtype=x.dtype)
            big[self.slices(x.shape)] = x
            return big
        return x

    def slices(self, shape: tuple[int, ...]) -> tuple[slice, ...]:
        return tuple(slice(o, o + (n - 1) * s + 1 if n else o, s)
                     for o, n, s in zip(self.offsets, shape, self.strides))

    def view(self, big: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """The same view taken with NumPy (what the reference sees)."""
        if self.kind == "transposed":
            return np.transpose(big, self.perm)
        if self.kind == "reversed":
            return np.flip(big, self.dims)
        if self.kind == "strided":
            return big[self.slices(shape)]
        return big


CONTIGUOUS = Layout()


def junk(npd: np.dtype) -> Any:
    """A value that shows up if a kernel reads outside its view."""
    if npd.kind in "fc":
        return np.nan
    if npd.kind in "iu":
        return np.iinfo(npd).max
    return True


@functools.cache
def layouts(shape: tuple[int, ...]) -> Any:
    """A contiguous or non-contiguous presentation of an operand of `shape` (one strategy
    object per shape, as `arrays` and `shapes`: hypothesis works out a new strategy's
    properties on its first draw, which cost more than the draw itself)."""
    return _layouts(shape)


@st.composite
def _layouts(draw, shape: tuple[int, ...]) -> Layout:
    """A contiguous or non-contiguous presentation of an operand of `shape`."""
    nd = len(shape)
    if nd == 0:
        return CONTIGUOUS
    kinds = ["contiguous", "strided", "reversed"] + (["transposed"] if nd >= 2 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "transposed":
        return Layout(kind, perm=tuple(draw(st.permutations(range(nd)))))
    if kind == "reversed":
        dims = draw(st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd, unique=True))
        return Layout(kind, dims=tuple(dims))
    if kind == "strided":
        offsets = tuple(draw(st.lists(st.integers(0, 1), min_size=nd, max_size=nd)))
        strides = tuple(draw(st.lists(st.integers(1, 3), min_size=nd, max_size=nd)))
        return Layout(kind, offsets=offsets, strides=strides)
    return CONTIGUOUS


@st.composite
def dot_problems(draw, dtype_names: Sequence[str], max_side: int = 4) -> tuple:
    """(lhs shape, rhs shape, dot_general params, a dtype name, transposed): up to two batch,
    contracting and free axes per operand in any order, sides 0..`max_side` (backends'
    per-signature dot kernels are checked against their generic kernel with these)."""
    nb, nc = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    nl, nr = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    side = st.integers(0, max_side)
    sizes = {"b": [draw(side) for _ in range(nb)], "c": [draw(side) for _ in range(nc)],
             "l": [draw(side) for _ in range(nl)], "r": [draw(side) for _ in range(nr)]}
    l_axes = [("b", i) for i in range(nb)] + [("c", i) for i in range(nc)] + [("l", i) for i in range(nl)]
    r_axes = [("b", i) for i in range(nb)] + [("c", i) for i in range(nc)] + [("r", i) for i in range(nr)]
    l_axes = [l_axes[i] for i in draw(st.permutations(range(len(l_axes))))]
    r_axes = [r_axes[i] for i in draw(st.permutations(range(len(r_axes))))]
    params = {"contracting_dims": (tuple(l_axes.index(("c", i)) for i in range(nc)),
                                   tuple(r_axes.index(("c", i)) for i in range(nc))),
              "batch_dims": (tuple(l_axes.index(("b", i)) for i in range(nb)),
                             tuple(r_axes.index(("b", i)) for i in range(nb)))}
    lshape = [sizes[t][i] for t, i in l_axes]
    rshape = [sizes[t][i] for t, i in r_axes]
    return lshape, rshape, params, draw(st.sampled_from(sorted(dtype_names))), draw(st.booleans())


DOT_EXAMPLES = (
    ([7, 5], [3, 5], {"contracting_dims": ((1,), (1,)), "batch_dims": ((), ())}, "float32", False),
    ([2, 4, 3], [2, 3, 5], {"contracting_dims": ((2,), (1,)), "batch_dims": ((0,), (0,))}, "float64", True),
    ([5, 2, 3], [3, 5, 4], {"contracting_dims": ((0, 2), (1, 0)), "batch_dims": ((), ())}, "float64", True),
    ([0, 3], [3, 0], {"contracting_dims": ((1,), (0,)), "batch_dims": ((), ())}, "float32", False),
)
"""`dot_problems` values every such test runs: x @ W.T, a batched product, two contracting
axes in another order, and 0-size matrices."""


def with_dot_examples(test: Any) -> Any:
    """`test(problem, seed)` run on every `DOT_EXAMPLES` entry too (seed = its index)."""
    from hypothesis import example

    for i, problem in enumerate(DOT_EXAMPLES):
        test = example(problem, i)(test)
    return test

