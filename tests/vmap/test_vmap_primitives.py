"""Every core primitive under vmap (and vmap of vmap) equals stacking it over the examples,
on numpy:cpu and torch:cpu: operands drawn by the conformance kit's specs, a batch of 0 to 3
examples, batch axes in every position, unbatched operands mixed in."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tenferro_ad import vmap
from tenferro_ad.batching import PerformanceWarning
from tenferro_core import catalog
from tenferro_core import dtypes as D
from tenferro_runtime import default_runtime
from tenferro_runtime.testing.cases import rule_accepts
from tenferro_runtime.testing.conformance import SPECS, context, host_of, resolve_device, to_device
from tenferro_runtime.testing.tolerance import assert_close

DEVICES = ["numpy:cpu", "torch:cpu"]
BATCHED = [p.name for p in catalog.PRIMITIVES if p.nin != 0]
_EXAMPLES = max(3, settings().max_examples // 6)


def _dtypes(prim, device):
    ctx = context(device)
    spec = SPECS[prim.name]
    return [d for d in ctx.dtypes if rule_accepts(prim, spec, d, ctx)]


def _vary(host: np.ndarray, b: int, rng: np.random.Generator) -> np.ndarray:
    """Example `b` of an operand: `host` itself, then permutations of its values (along the
    first axis for index arrays, whose last axis pairs with axes) or shifted scalars."""
    if b == 0:
        return host
    if host.ndim == 0:
        if host.dtype.kind in "iu":
            return (host + b).astype(host.dtype)
        return host if host.dtype.kind == "b" else (host + host.dtype.type(0.5) * b).astype(host.dtype)
    if host.dtype.kind in "iu" and host.ndim >= 1 and host.size:
        return host[rng.permutation(host.shape[0])] if host.shape[0] > 1 else host
    return rng.permutation(host.reshape(-1)).reshape(host.shape)


def _run(prim, params, tensors):
    return prim.bind(*tensors, **params)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("prim_name", BATCHED)
@settings(max_examples=_EXAMPLES, suppress_health_check=[HealthCheck.too_slow,
                                                         HealthCheck.differing_executors])
@given(data=st.data())
def test_vmap_matches_stacking(prim_name, device, data):
    prim = catalog.BY_NAME[prim_name]
    dev = resolve_device(device)
    dtype = data.draw(st.sampled_from(_dtypes(prim, dev)), label="dtype")
    spec, ctx = SPECS[prim_name], context(dev)
    extra = {}
    if spec.variants is not None:
        extra["variant"] = data.draw(st.sampled_from(spec.variants(dtype, ctx)), label="variant")
    case = spec.draw(data.draw, dtype, ctx, **extra)
    n = len(case.args)
    batched = data.draw(st.lists(st.booleans(), min_size=n, max_size=n).filter(any), label="batched")
    nest = data.draw(st.booleans(), label="vmap of vmap")
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=1 + nest, max_size=1 + nest), label="sizes")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    params = case.params

    # examples[i][k]: operand i of flat example k (k runs over the nested batch, outer first)
    count = int(np.prod(sizes))
    examples = [[_vary(a, k, rng) if b else a for k in range(count)]
                for a, b in zip(case.args, batched)]
    in_axes, stacked = [], []
    for a, b, ex in zip(case.args, batched, examples):
        if not b:
            in_axes.append([None] * len(sizes))
            stacked.append(a)
            continue
        arr = np.stack(ex, axis=0).reshape(tuple(sizes) + a.shape) if count else \
            np.zeros(tuple(sizes) + a.shape, a.dtype)
        # place the outer batch axis at ax0 of the stacked array and the inner at ax1 of
        # what remains once the outer is taken out (the in_axes vmap sees at each level)
        ax_outer = data.draw(st.integers(0, a.ndim + len(sizes) - 1), label="outer axis")
        if len(sizes) == 2:
            ax_inner = data.draw(st.integers(0, a.ndim), label="inner axis")
            inner = np.moveaxis(arr, 1, 1 + ax_inner)  # (s0, ..inner placed.., ...)
            arr = np.moveaxis(inner, 0, ax_outer)
            axes = [ax_outer, ax_inner]
        else:
            arr = np.moveaxis(arr, 0, ax_outer)
            axes = [ax_outer]
        in_axes.append(axes)
        stacked.append(np.ascontiguousarray(arr))
    tensors = [to_device(s, dev) for s in stacked]

    def f(*ops):
        return _run(prim, params, ops)

    g = f
    for level in reversed(range(len(sizes))):
        g = vmap(g, in_axes=tuple(ax[level] for ax in in_axes), axis_size=sizes[level])
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerformanceWarning)  # every core op has a batch rule
        got = host_of(g(*tensors))

    avals = tuple(to_device(a, dev).aval for a in case.args)
    (aval,) = prim.abstract_eval(avals, prim.check_params(params, avals))
    outs = [host_of(f(*[to_device(examples[i][k], dev) for i in range(n)])) for k in range(count)]
    want = (np.stack(outs) if outs else np.zeros((0,) + aval.shape, aval.dtype.numpy)
            ).reshape(tuple(sizes) + aval.shape)
    what = f"vmap^{len(sizes)}({prim_name}) batched={batched} in_axes={in_axes} sizes={sizes}"
    if aval.dtype.kind in "fc" and prim.category in ("contraction", "reduction"):
        assert_close(got, want, aval.dtype, mult=4 * max(1, max(a.size for a in case.args)),
                     what=what)
    elif aval.dtype.kind in "fc" and prim.category == "elementwise" and prim.nin:
        # a longer array may take the library's vector path: transcendentals differ in ulps
        assert_close(got, want, aval.dtype, mult=case.mult, what=what)
    else:
        assert got.shape == want.shape and got.dtype == want.dtype, what
        if aval.dtype.kind == "f" and aval.dtype.bits == 16:  # ml_dtypes' NaN != NaN here
            got, want = got.astype(np.float32), want.astype(np.float32)
        np.testing.assert_array_equal(got, want, err_msg=what)


@pytest.mark.parametrize("device", DEVICES)
def test_nullary_primitives_inside_vmap(device):
    """iota and full take no operand, so they are the same for every example; an output of
    them is broadcast along the batch axis."""
    from tenferro_runtime import lax

    dev = resolve_device(device)
    x = to_device(np.arange(6.0).reshape(3, 2), dev)

    def f(row):
        return lax.add(row, lax.convert(lax.iota(shape=(2,), dtype=D.int64, device=dev),
                                        new_dtype=D.float64))

    np.testing.assert_array_equal(host_of(vmap(f)(x)), np.arange(6.0).reshape(3, 2) + [0, 1])
    ones = vmap(lambda r: lax.full(shape=(2,), fill_value=1.0, dtype=D.float64, device=dev))(x)
    np.testing.assert_array_equal(host_of(ones), np.ones((3, 2)))


def test_every_registered_op_has_a_batch_rule():
    """The coverage walk: every op of the runtime (core catalog, graph primitives, and every
    loaded family and plugin op) has a registered batch rule."""
    rt = default_runtime()
    missing = [name for name, prim in rt.ops.items() if rt.rule("batch", prim) is None]
    assert not missing, f"ops without a batch rule: {missing}"


@pytest.mark.parametrize("device", DEVICES)
def test_scatter_add_of_whole_operand_rows_adds_them_in_order_batched_or_not(device):
    """scatter_add with empty index rows (each update row addresses the whole operand): the
    rows are added one after another whether the operand is batched or not, so vmap equals
    stacking bitwise in float16 (hypothesis found 257.0 against 257.25 when the unbatched
    kernel summed the rows first)."""
    from tenferro_runtime import array_api as xp
    from tenferro_runtime import lax

    x = xp.asarray(np.array([1.156, 0.0], np.float16), device=device)
    idx = xp.asarray(np.zeros((2, 2, 0), np.int8), device=device)
    upd = np.full((1, 2, 2, 2), 64.0, np.float16)

    def f(u):
        return lax.scatter_add(x, idx, u, axes=())

    got = host_of(vmap(f)(xp.asarray(upd, device=device)))
    want = np.stack([host_of(f(xp.asarray(u, device=device))) for u in upd])
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("start", [np.iinfo(np.uint64).max, np.iinfo(np.uint64).max // 2 + 1])
def test_batched_starts_are_clamped_in_their_own_dtype(device, start):
    """An unbatched uint64 start of 2**64 - 1 next to a batched one (found by the search
    above): it wrapped to -1 in int64 and clamped to 0, where eager clamps it to the last
    window."""
    from tenferro_runtime import array_api as xp
    from tenferro_runtime import lax

    dev = resolve_device(device)
    x = to_device(np.zeros((2, 2), np.bool_), dev)
    update = to_device(np.ones((1, 1), np.bool_), dev)
    first = to_device(np.asarray(start, np.uint64), dev)
    seconds = to_device(np.array([0, 1, 5], np.int8), dev)
    got = host_of(vmap(lambda j: lax.dynamic_update_slice(x, update, first, j))(seconds))
    want = np.stack([host_of(lax.dynamic_update_slice(x, update, first, xp.asarray(j, device=device)))
                     for j in seconds])
    np.testing.assert_array_equal(got, want)
    assert want[:, 1].any() and not want[:, 0].any()  # the last row: the start clamped to 1
