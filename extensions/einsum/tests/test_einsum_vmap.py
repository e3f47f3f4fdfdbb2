"""einsum under vmap of vmap on generated equations: nested batch sizes 0 to 3, batch axes
anywhere, shared operands; equals numpy.einsum on each example, on each CPU backend
(conftest). Complements test_einsum_batching.py (fixed equations, one level)."""

from __future__ import annotations

import string
import warnings

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tenferro_ad import PerformanceWarning, vmap
from tenferro_einsum import einsum
from tenferro_einsum.native import contract_p
from tenferro_runtime import array_api as xp

LETTERS = "abcde"


@st.composite
def _equation(draw) -> tuple[str, list[tuple[int, ...]]]:
    sizes = {c: draw(st.integers(1, 3)) for c in LETTERS}
    terms = [draw(st.text(LETTERS, min_size=0, max_size=3)) for _ in range(draw(st.integers(1, 3)))]
    used = sorted(set("".join(terms)))
    out = "".join(draw(st.permutations(used))[: draw(st.integers(0, len(used)))])
    return ",".join(terms) + "->" + out, [tuple(sizes[c] for c in t) for t in terms]


@settings(max_examples=8, deadline=None)
@given(eq=_equation(), data=st.data())
def test_einsum_under_nested_vmap_equals_each_example(eq, data):
    spec, shapes = eq
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    sizes = data.draw(st.tuples(st.sampled_from([0, 1, 3]), st.sampled_from([0, 1, 2])),
                      label="sizes (outer, inner)")
    batched = data.draw(st.lists(st.booleans(), min_size=len(shapes), max_size=len(shapes))
                        .filter(any), label="batched")
    args, outer, inner, stacks = [], [], [], []
    for i, (s, b) in enumerate(zip(shapes, batched)):
        x = np.asarray(rng.standard_normal(sizes + s if b else s))
        stacks.append(x if b else np.broadcast_to(x, sizes + s))
        if not b:
            args.append(x)
            outer.append(None)
            inner.append(None)
            continue
        ai = data.draw(st.integers(0, len(s)), label=f"inner axis {i}")
        ao = data.draw(st.integers(0, len(s) + 1), label=f"outer axis {i}")
        args.append(np.moveaxis(np.moveaxis(x, 1, 1 + ai), 0, ao))
        outer.append(ao)
        inner.append(ai)
    g = vmap(vmap(lambda *ops: einsum(spec, *ops), in_axes=tuple(inner), axis_size=sizes[1]),
             in_axes=tuple(outer), axis_size=sizes[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerformanceWarning)
        got = g(*[xp.asarray(np.array(a, order="C")) for a in args]).numpy()
    ins, out = spec.split("->")
    want = np.einsum(",".join("YZ" + t for t in ins.split(",")) + "->YZ" + out, *stacks)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10, err_msg=spec)


def test_a_spec_without_a_free_letter_falls_back_to_the_loop():
    """All 52 letters taken (size-1 axes): the rule batches by the documented loop."""
    spec = string.ascii_lowercase + "," + string.ascii_uppercase + "->" + string.ascii_letters
    b = xp.ones((1,) * 26, dtype=xp.float64)
    x = xp.asarray(np.arange(2.0).reshape((2,) + (1,) * 26))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = vmap(lambda a: contract_p.bind(a, b, spec=spec, path=((0, 1),)))(x)
    assert out.shape == (2,) + (1,) * 52
    np.testing.assert_array_equal(out.numpy().reshape(2), [0.0, 1.0])
    assert any(issubclass(w.category, PerformanceWarning) for w in caught)
