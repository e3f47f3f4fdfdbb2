"""einsum under vmap (and vmap of vmap) equals stacking it: the whole-contraction op with a
fresh batch letter, and equations that lower to core primitives, on each CPU backend."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenferro_ad import vmap
from tenferro_ad.testing import check_vmap
from tenferro_einsum import einsum
from tenferro_runtime import array_api as xp

EQUATIONS = {  # equation: operand shapes of one example
    "ij,jk->ik": ((2, 3), (3, 4)),
    "abc,cd,de->abe": ((2, 2, 3), (3, 2), (2, 4)),
    "i,i->": ((5,), (5,)),
    "ij->ji": ((2, 3),),
    "ii->i": ((3, 3),),             # a diagonal: lowered to core primitives
    "ij,ij->ij": ((2, 3), (2, 3)),  # a Hadamard product: lowered too
}


@pytest.mark.parametrize("eq", sorted(EQUATIONS))
@settings(max_examples=4, deadline=None)
@given(data=st.data())
def test_einsum_under_vmap_equals_stacking(eq, data):
    shapes = EQUATIONS[eq]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    size = data.draw(st.integers(1, 3), label="batch")
    axes = [data.draw(st.one_of(st.none(), st.integers(0, len(s))), label=f"axis {i}")
            for i, s in enumerate(shapes)]
    if all(a is None for a in axes):
        axes[0] = 0
    shared = [xp.asarray(rng.standard_normal(s)) for s in shapes]
    examples = [[shared[i] if a is None else xp.asarray(rng.standard_normal(s))
                 for i, (s, a) in enumerate(zip(shapes, axes))] for _ in range(size)]
    check_vmap(lambda *ops: einsum(eq, *ops), examples, axes)


def test_nested_vmap_and_an_empty_batch():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((5, 6))
    f = vmap(vmap(lambda x, y: einsum("ij,jk->ik", x, y), in_axes=(0, None)), in_axes=(1, None))
    got = f(xp.asarray(a), xp.asarray(b))  # (3, 2, 4, 6)
    np.testing.assert_allclose(got.numpy(), np.einsum("abij,jk->baik", a, b), atol=1e-12)
    empty = vmap(lambda x: einsum("ij,jk->ik", x, xp.asarray(b)))(xp.zeros((0, 4, 5), dtype=xp.float64))
    assert empty.shape == (0, 4, 6)
