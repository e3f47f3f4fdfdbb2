"""The default contraction path never costs more FLOPs (opt_einsum's count) than opt_einsum's
`greedy` path: on opt_einsum's own test table of 70 equations and on generated equations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenferro_einsum import einsum, einsum_path
from tenferro_runtime import array_api as xp
from tenferro_runtime import default_runtime

# opt_einsum 3.4, opt_einsum/tests/test_contract.py: `tests`, with the index sizes of
# opt_einsum.testing.build_shapes (a=2, b=3, c=4, ...).
TABLE = [
    "a,->a", "ab,->ab", ",ab,->ab", ",,->",
    "a,ab,abc->abc", "a,b,ab->ab",
    "ea,fb,gc,hd,abcd->efgh", "ea,fb,abcd,gc,hd->efgh", "abcd,ea,fb,gc,hd->efgh",
    "acdf,jbje,gihb,hfac,gfac,gifabc,hfac", "acdf,jbje,gihb,hfac,gfac,gifabc,hfac",
    "cd,bdhe,aidb,hgca,gc,hgibcd,hgac", "abhe,hidj,jgba,hiab,gab",
    "bde,cdh,agdb,hica,ibd,hgicd,hiac", "chd,bde,agbc,hiad,hgc,hgi,hiad",
    "chd,bde,agbc,hiad,bdi,cgh,agdb", "bdhe,acad,hiab,agac,hibd",
    "ab,ab,c->", "ab,ab,c->c", "ab,ab,cd,cd->", "ab,ab,cd,cd->ac", "ab,ab,cd,cd->cd",
    "ab,ab,cd,cd,ef,ef->",
    "ab,cd,ef->abcdef", "ab,cd,ef->acdf", "ab,cd,de->abcde", "ab,cd,de->be", "ab,bcd,cd->abcd",
    "ab,bcd,cd->abd",
    "eb,cb,fb->cef", "dd,fb,be,cdb->cef", "bca,cdb,dbf,afc->", "dcc,fce,ea,dbf->ab",
    "fdf,cdd,ccd,afe->ae", "abcd,ad", "ed,fcd,ff,bcf->be", "baa,dcf,af,cde->be", "bd,db,eac->ace",
    "fff,fae,bef,def->abd", "efc,dbc,acf,fd->abe",
    "ab,ab", "ab,ba", "abc,abc", "abc,bac", "abc,cba",
    "ab,bc", "ab,cb", "ba,bc", "ba,cb", "abcd,cd", "abcd,ab", "abcd,cdef", "abcd,cdef->feba",
    "abcd,efdc",
    "aab,bc->ac", "ab,bcc->ac", "aab,bcc->ac", "baa,bcc->ac", "aab,ccb->ac",
    "aab,fa,df,ecc->bde", "ecb,fef,bad,ed->ac", "bcf,bbb,fbf,fc->", "bb,ff,be->e", "bcb,bb,fc,fff->",
    "fbb,dfd,fc,fc->", "afd,ba,cc,dc->bf", "adb,bc,fa,cfc->d", "bbd,bda,fc,db->acf",
    "dba,ead,cad->bce", "aef,fbc,dca->bde",
]
SIZES = dict(zip("abcdefghijklmnopqrs", [2, 3, 4, 5, 4, 3, 2, 6, 5, 4, 3, 2, 5, 7, 4, 3, 2, 3, 4]))


def _shapes(eq: str) -> list[tuple[int, ...]]:
    return [tuple(SIZES[c] for c in term) for term in eq.split("->")[0].split(",")]


def _greedy_cost(eq: str, shapes: list) -> int:
    import opt_einsum

    return int(opt_einsum.contract_path(eq, *shapes, shapes=True, optimize="greedy")[1].opt_cost)


def _priced(eq: str, shapes: list, path: list) -> int:
    import opt_einsum

    return int(opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=list(path))[1].opt_cost)


def test_the_table_has_opt_einsums_70_equations():
    assert len(TABLE) == 70


@pytest.mark.parametrize("eq", TABLE)
def test_default_path_is_never_worse_than_greedy_on_opt_einsums_table(eq):
    shapes = _shapes(eq)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s) for s in shapes]
    ops = [xp.asarray(a) for a in arrays]
    path, flops = einsum_path(eq, *ops)
    assert flops <= _greedy_cost(eq, shapes)
    assert flops == _priced(eq, shapes, path)  # the reported FLOPs are the chosen path's
    assert einsum_path(eq, *ops, optimize=True) == (path, flops)
    np.testing.assert_allclose(einsum(eq, *ops).numpy(), np.einsum(eq, *arrays), rtol=1e-10, atol=1e-10)


def test_the_issues_equation_costs_greedys_96_flops():
    eq = "bcf,bbb,fbf,fc->"
    ops = [xp.ones(s) for s in [(3, 4, 3), (3, 3, 3), (3, 3, 3), (3, 4)]]
    assert einsum_path(eq, *ops)[1] == 96


def test_the_chosen_path_is_cached():
    cache = default_runtime().caches.get("einsum_plans")
    cache.clear()
    ops = [xp.ones(s) for s in [(3, 4, 3), (3, 3, 3), (3, 3, 3), (3, 4)]]
    first = einsum_path("bcf,bbb,fbf,fc->", *ops)
    assert einsum_path("bcf,bbb,fbf,fc->", *ops) == first
    stats = default_runtime().caches.stats()["einsum_plans"]
    assert stats.misses == 1 and stats.hits == 1


@st.composite
def equations(draw):
    letters = "abcdefgh"
    sizes = {c: draw(st.integers(0, 5) if draw(st.integers(0, 9)) == 0 else st.integers(1, 5))
             for c in letters}
    terms = [draw(st.text(st.sampled_from(letters), min_size=0, max_size=4))
             for _ in range(draw(st.integers(1, 7)))]
    used = sorted(set("".join(terms)))
    out = "".join(draw(st.permutations(used))[: draw(st.integers(0, len(used)))])
    eq = ",".join(terms) + "->" + out
    return eq, [tuple(sizes[c] for c in t) for t in terms]


@settings(max_examples=60, deadline=None)
@given(case=equations())
def test_default_path_is_never_worse_than_greedy_on_generated_equations(case):
    eq, shapes = case
    path, flops = einsum_path(eq, *[xp.ones(s) for s in shapes])
    assert flops <= _greedy_cost(eq, shapes)
    assert flops == _priced(eq, shapes, path)
