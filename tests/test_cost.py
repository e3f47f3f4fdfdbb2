"""Primitive categories and cost rules: hand-computed FLOPs/bytes, coverage of the core
catalog and of every op family, overrides, errors, and graph_cost of a traced MLP."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import tenferro_einsum.plugin as einsum_plugin
import tenferro_fft.plugin as fft_plugin
import tenferro_linalg.plugin as linalg_plugin
import tenferro_numpy.plugin as numpy_plugin
from plugin_fixtures import hook_plugin
from tenferro_core import catalog, define_op, dtypes
from tenferro_core.avals import Aval
from tenferro_core.catalog.categories import CATEGORY, missing_categories
from tenferro_core.catalog.cost import (
    CORE_COST_RULES,
    ELEMENTWISE_FLOPS,
    TRANSCENDENTAL_FLOPS,
    Cost,
    nbytes,
)
from tenferro_core.errors import ArgumentError, MissingRuleError, PluginError, TenferroError
from tenferro_core.primitive import CATEGORIES, Primitive
from tenferro_runtime import Runtime, trace, use_runtime
from tenferro_runtime import array_api as xp
from tenferro_runtime.cost import graph_cost, op_cost

ROOT = Path(__file__).resolve().parents[1]
F32, F64 = dtypes.float32, dtypes.float64


@pytest.fixture(scope="module")
def rt():
    return Runtime([numpy_plugin, einsum_plugin, linalg_plugin, fft_plugin])


def cost(rt, prim, *shapes_dtypes, **params):
    """op_cost of `prim` on operands given as (shape, dtype) pairs, outputs from abstract_eval."""
    dev = rt.device("numpy:cpu")
    avals = tuple(Aval(tuple(s), d, dev) for s, d in shapes_dtypes)
    if "device" in prim.params:
        params["device"] = dev
    nparams = prim.check_params(params, avals)
    out = prim.abstract_eval(avals, nparams)
    return op_cost(rt, prim, avals, out, nparams)


# ---- categories -----------------------------------------------------------------------------


def test_every_catalog_primitive_has_a_valid_category():
    assert missing_categories(catalog.PRIMITIVES) == []
    assert set(CATEGORY) == {p.name for p in catalog.PRIMITIVES}
    assert all(p.category in CATEGORIES for p in catalog.PRIMITIVES)


@pytest.mark.parametrize("name, category", [
    ("add", "elementwise"), ("eq", "elementwise"), ("select", "elementwise"),
    ("clamp", "elementwise"), ("convert", "elementwise"), ("iota", "elementwise"),
    ("full", "elementwise"), ("broadcast_in_dim", "broadcast"), ("reduce_max", "reduction"),
    ("argmin", "reduction"), ("cumsum", "reduction"), ("sort", "reduction"),
    ("argsort", "reduction"), ("reshape", "structural"), ("copy", "structural"),
    ("pad", "structural"), ("gather", "indexing"), ("dynamic_update_slice", "indexing"),
    ("scatter_add", "indexing"), ("dot_general", "contraction"), ("conv_general", "contraction"),
])
def test_category_table(name, category):
    assert catalog.BY_NAME[name].category == category


def test_category_is_validated_and_family_ops_default_to_extension():
    assert define_op("test_cost.ident.v1", lambda x: (x.shape, x.dtype)).category == "extension"
    op = define_op("test_cost.twice.v1", lambda x: (x.shape, x.dtype), category="elementwise")
    assert op.category == "elementwise"
    with pytest.raises(ArgumentError, match="category must be one of"):
        define_op("test_cost.bad.v1", lambda x: (x.shape, x.dtype), category="fancy")
    with pytest.raises(ArgumentError, match="'fancy'"):
        Primitive("mine", lambda x: (x.shape, x.dtype), category="fancy")
    assert Primitive("mine", lambda x: (x.shape, x.dtype), category="random").category == "random"


# ---- coverage -------------------------------------------------------------------------------


def test_every_catalog_primitive_has_a_cost_rule():
    assert set(CORE_COST_RULES) == {p.name for p in catalog.PRIMITIVES}


FAMILY_PLUGINS = (einsum_plugin, linalg_plugin, fft_plugin)


def test_every_family_op_has_a_cost_rule(rt, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "custom_op"))
    import tenferro_softplus.plugin as softplus_plugin

    full = Runtime([numpy_plugin, *FAMILY_PLUGINS, softplus_plugin])
    assert all(r.ok for r in full.reports), [r.error for r in full.reports]
    families = [op for op in full.ops.values() if op.family]
    assert len(families) >= 1 + 21 + 3 + 1
    assert [op.name for op in families if full.rule("cost", op) is None] == []


SQUARE = ((3, 3), F64)


@pytest.mark.parametrize("name, operands, params", [
    ("cholesky", [SQUARE], {}), ("eigh", [SQUARE], {}), ("eigvalsh", [SQUARE], {}),
    ("eig", [SQUARE], {}), ("eigvals", [SQUARE], {}), ("svd", [((2, 4, 3), F64)], {}),
    ("svd", [((4, 3), F64)], {"full_matrices": False}), ("svdvals", [((3, 5), F64)], {}),
    ("qr", [((5, 3), F64)], {}), ("qr", [((5, 3), F64)], {"mode": "complete"}),
    ("lu_factor", [((4, 3), F64)], {}), ("lu_pivots_to_permutation", [((3,), dtypes.int32)],
                                         {"size": 3}),
    ("lu_solve", [SQUARE, ((3,), dtypes.int32), ((3, 2), F64)], {}),
    ("solve_triangular", [SQUARE, ((3, 2), F64)], {}), ("expm", [SQUARE], {}),
    ("expm_frechet", [SQUARE, SQUARE], {}), ("solve", [SQUARE, ((3, 2), F64)], {}),
    ("inv", [SQUARE], {}), ("det", [SQUARE], {}), ("adjugate", [SQUARE], {}),
    ("slogdet", [SQUARE], {}), ("pinv", [((4, 3), F64), ((), F64)], {}),
    ("lstsq", [((4, 3), F64), ((4, 2), F64)], {}),
])
def test_linalg_cost_rules_give_valid_costs(rt, name, operands, params):
    c = cost(rt, rt.ops[f"tenferro_linalg.{name}.v1"], *operands, **params)
    assert isinstance(c, Cost) and all(type(v) is int for v in c)
    assert c.bytes > 0 and (c.flops > 0) == (name != "lu_pivots_to_permutation")


# ---- hand-computed values -------------------------------------------------------------------


def test_matmul_and_batched_dot_general(rt):
    c = cost(rt, catalog.dot_general, ((2, 3), F32), ((3, 4), F32), contracting_dims=((1,), (0,)))
    assert c == Cost(2 * 2 * 4 * 3, (6 + 12 + 8) * 4)
    c = cost(rt, catalog.dot_general, ((5, 2, 3), F64), ((5, 3, 4), F64),
             contracting_dims=((2,), (1,)), batch_dims=((0,), (0,)))
    assert c == Cost(2 * 5 * 2 * 4 * 3, (30 + 60 + 40) * 8)
    c = cost(rt, catalog.dot_general, ((3,), F32), ((3,), F32), contracting_dims=((0,), (0,)))
    assert c == Cost(6, (3 + 3 + 1) * 4)  # dot product: 3 multiplies and 3 adds


def test_conv_general(rt):
    c = cost(rt, catalog.conv_general, ((1, 3, 8, 8), F32), ((4, 3, 3, 3), F32))
    assert c == Cost(2 * (4 * 6 * 6) * 3 * 9, (192 + 108 + 144) * 4)
    c = cost(rt, catalog.conv_general, ((2, 4, 5, 5), F32), ((4, 2, 3, 3), F32),
             feature_group_count=2, window_strides=(2, 2))
    assert c == Cost(2 * (2 * 4 * 2 * 2) * 2 * 9, (200 + 72 + 32) * 4)


def test_elementwise(rt):
    assert cost(rt, catalog.add, ((10,), F64), ((10,), F64)) == Cost(10, 30 * 8)
    assert cost(rt, catalog.exp, ((3, 4), F32)) == Cost(12 * TRANSCENDENTAL_FLOPS, 24 * 4)
    assert cost(rt, catalog.clamp, ((5,), F32), ((5,), F32), ((5,), F32)) == Cost(10, 20 * 4)
    assert cost(rt, catalog.lt, ((5,), F32), ((5,), F32)) == Cost(5, 5 * 4 * 2 + 5)
    pred = ((4,), dtypes.bool_)
    assert cost(rt, catalog.select, pred, ((4,), F64), ((4,), F64)) == Cost(4, 4 + 3 * 32)
    assert cost(rt, catalog.real, ((4,), dtypes.complex64)) == Cost(0, 32 + 16)
    assert cost(rt, catalog.convert, ((4,), F32), new_dtype=F64) == Cost(4, 16 + 32)
    assert cost(rt, catalog.full, shape=(2, 3), fill_value=1.0, dtype=F32) == Cost(0, 24)
    assert cost(rt, catalog.iota, shape=(5,), dtype=dtypes.int64) == Cost(0, 40)


def test_reductions(rt):
    assert cost(rt, catalog.reduce_sum, ((3, 4), F32), axes=(1,)) == Cost(12, (12 + 3) * 4)
    assert cost(rt, catalog.argmax, ((3, 4), F32), axis=0) == Cost(12, 12 * 4 + 4 * 8)
    assert cost(rt, catalog.cumsum, ((6,), F64), axis=0) == Cost(6, 96)
    assert cost(rt, catalog.sort, ((4, 8), F32), dimension=1) == Cost(32 * 3, 64 * 4)
    assert cost(rt, catalog.sort, ((4, 1), F32), dimension=1) == Cost(0, 8 * 4)


def test_structural_and_indexing_move_bytes_only(rt):
    assert cost(rt, catalog.transpose, ((3, 4), F32), permutation=(1, 0)) == Cost(0, 96)
    assert cost(rt, catalog.reshape, ((3, 4), F32), new_sizes=(12,)) == Cost(0, 96)
    c = cost(rt, catalog.broadcast_in_dim, ((), F32), shape=(3, 4), broadcast_dimensions=())
    assert c == Cost(0, 4 + 48)
    c = cost(rt, catalog.slice, ((10,), F32), start_indices=(2,), limit_indices=(6,))
    assert c == Cost(0, 2 * 4 * 4)  # reads the 4 elements it takes, writes them
    c = cost(rt, catalog.gather, ((5, 3), F32), ((2, 1), dtypes.int64), axes=(0,))
    assert c == Cost(0, 2 * 8 + 2 * 6 * 4)
    c = cost(rt, catalog.scatter_add, ((5, 3), F32), ((2, 1), dtypes.int64), ((2, 3), F32), axes=(0,))
    assert c == Cost(6, 60 + 16 + 24 + 60)
    c = cost(rt, catalog.concatenate, ((2, 3), F32), ((4, 3), F32), dimension=0)
    assert c == Cost(0, 2 * 18 * 4)


def test_family_values(rt):
    c = cost(rt, rt.ops["tenferro_einsum.contract.v1"], ((2, 3), F32), ((3, 4), F32),
             spec="ab,bc->ac", path=((0, 1),))
    assert c == Cost(2 * 2 * 4 * 3, (6 + 12 + 8) * 4)
    c = cost(rt, rt.ops["tenferro_einsum.contract.v1"], ((2, 3), F64), ((3, 4), F64), ((4, 5), F64),
             spec="ab,bc,cd->ad", path=((0, 1), (0, 1)))
    assert c.flops == 2 * 2 * 3 * 4 + 2 * 2 * 4 * 5
    assert c.bytes == (6 + 12 + 20 + 10) * 8 + 2 * 8 * 8  # the (2, 4) intermediate: written, read
    fft = rt.ops["tenferro_fft.fft.v1"]
    assert cost(rt, fft, ((3, 8), dtypes.complex128), axes=(1,)).flops == 5 * 24 * 3
    assert cost(rt, fft, ((4, 4), dtypes.complex64), axes=(0, 1)).flops == 5 * 16 * 4
    assert cost(rt, rt.ops["tenferro_fft.rfft.v1"], ((8,), F64), axes=(0,)).flops == 60
    assert cost(rt, rt.ops["tenferro_linalg.inv.v1"], ((2, 4, 4), F64)).flops == 2 * 2 * 64
    assert cost(rt, rt.ops["tenferro_linalg.cholesky.v1"], ((3, 3), F32)) == Cost(9, 72)
    c = cost(rt, rt.ops["tenferro_linalg.lu_factor.v1"], ((6, 6), F64))
    assert c.flops == 2 * 216 // 3


# ---- properties -----------------------------------------------------------------------------

ELEMENTWISE = [p for p in catalog.PRIMITIVES if p.category == "elementwise" and p.nin]
DTYPES = [dtypes.bool_, dtypes.int8, dtypes.int64, dtypes.uint16, dtypes.float16, F32, F64,
          dtypes.complex64]
shapes = st.lists(st.integers(0, 5), max_size=4).map(tuple)


@given(st.sampled_from(ELEMENTWISE), shapes, st.sampled_from(DTYPES))
def test_elementwise_costs_are_ints_and_bytes_are_reads_plus_writes(prim, shape, dtype):
    avals = [Aval(shape, dtype) for _ in range(prim.nin)]
    if prim.name == "select":
        avals[0] = Aval(shape, dtypes.bool_)
    params = {"new_dtype": F64} if "new_dtype" in prim.params else {}
    try:
        out = prim.abstract_eval(avals, prim.check_params(params, avals))
    except TenferroError:
        assume(False)
    flops, moved = CORE_COST_RULES[prim.name](tuple(avals), out, **prim.check_params(params, avals))
    assert type(flops) is int and type(moved) is int and flops >= 0
    assert moved == nbytes(avals) + nbytes(out)
    assert flops == ELEMENTWISE_FLOPS[prim.name] * math.prod(shape)


@given(st.integers(0, 3), st.integers(0, 6), st.integers(0, 6), st.integers(0, 6),
       st.sampled_from([F32, F64, dtypes.int32]))
def test_dot_general_is_two_batch_m_n_k(b, m, n, k, dtype):
    avals = (Aval((b, m, k), dtype), Aval((b, k, n), dtype))
    params = catalog.dot_general.check_params(
        {"contracting_dims": ((2,), (1,)), "batch_dims": ((0,), (0,))})
    out = catalog.dot_general.abstract_eval(avals, params)
    c = CORE_COST_RULES["dot_general"](avals, out, **params)
    assert c == Cost(2 * b * m * n * k, (b * m * k + b * k * n + b * m * n) * dtype.itemsize)


@given(st.sampled_from([p for p in catalog.PRIMITIVES if p.category in
                        ("reduction", "structural", "broadcast")]),
       st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple))
def test_reduction_and_structural_costs_are_non_negative_ints(prim, shape):
    nd = len(shape)
    params = {
        "reshape": {"new_sizes": (math.prod(shape),)},
        "transpose": {"permutation": tuple(reversed(range(nd)))},
        "broadcast_in_dim": {"shape": (2, *shape), "broadcast_dimensions": tuple(range(1, nd + 1))},
        "slice": {"start_indices": (0,) * nd, "limit_indices": shape},
        "pad": {"padding_config": ((1, 1, 0),) * nd},
        "concatenate": {"dimension": 0},
        "reverse": {"dimensions": (0,)},
    }.get(prim.name, {})
    for key in ("axes",):
        if key in prim.params:
            params[key] = (0,)
    for key in ("axis", "dimension"):
        if key in prim.params and key not in params:
            params[key] = 0
    dtype = dtypes.bool_ if prim.name in ("reduce_and", "reduce_or") else F32
    avals = [Aval(shape, dtype)] + ([Aval((), dtype)] if prim.name == "pad" else [])
    params = prim.check_params(params, avals)
    out = prim.abstract_eval(avals, params)
    flops, moved = CORE_COST_RULES[prim.name](tuple(avals), out, **params)
    assert type(flops) is int and type(moved) is int and flops >= 0 and moved > 0
    no_compares = prim.name in ("sort", "argsort") and shape[0] == 1
    assert (flops == 0) == (prim.category != "reduction" or no_compares)


# ---- lookup: overrides and errors -----------------------------------------------------------


def test_plugin_rule_overrides_the_core_table():
    def flat(in_avals, out_avals, **params):
        return Cost(1, 2)

    rt = Runtime([numpy_plugin, hook_plugin("override", lambda r: r.add_rule("cost", "add", flat))])
    assert rt.reports[1].ok
    assert cost(rt, catalog.add, ((4,), F32), ((4,), F32)) == Cost(1, 2)
    assert cost(rt, catalog.mul, ((4,), F32), ((4,), F32)) == Cost(4, 48)


def test_extension_op_without_a_rule_is_a_missing_rule_error():
    op = define_op("test_cost.norule.v1", lambda x: (x.shape, x.dtype))
    rt = Runtime([numpy_plugin, hook_plugin("norule", lambda r: r.add_op(op))])
    with pytest.raises(MissingRuleError, match=r"test_cost.norule.v1.*add_rule\('cost', op, fn\)"):
        cost(rt, op, ((3,), F32))


def test_a_rule_returning_a_bad_value_is_reported():
    op = define_op("test_cost.badrule.v1", lambda x: (x.shape, x.dtype))

    def register(r):
        r.add_op(op)
        r.add_rule("cost", op, lambda i, o, **p: Cost(1.5, -1))

    rt = Runtime([numpy_plugin, hook_plugin("badrule", register)])
    with pytest.raises(PluginError, match="test_cost.badrule.v1.*two ints >= 0"):
        cost(rt, op, ((3,), F32))


# ---- graphs ---------------------------------------------------------------------------------


def test_graph_cost_of_a_traced_mlp_is_the_sum_of_its_nodes(rt):
    with use_runtime(rt):
        w1 = xp.asarray(np.ones((4, 8), np.float32))
        w2 = xp.asarray(np.ones((8, 3), np.float32))

        def mlp(x):
            h = xp.tanh(xp.matmul(x, w1))
            return xp.sum(xp.matmul(h, w2) ** 2)

        g = trace(mlp, xp.asarray(np.ones((2, 4), np.float32)))
    total = graph_cost(g)
    by_node = [CORE_COST_RULES[n.prim.name]([v.aval for v in n.inputs], [v.aval for v in n.outputs],
                                            **n.params) for n in g.nodes]
    assert total == Cost(sum(c.flops for c in by_node), sum(c.bytes for c in by_node))
    assert total == sum(by_node)
    names = [n.prim.name for n in g.nodes]
    assert names.count("dot_general") == 2 and "tanh" in names and "reduce_sum" in names
    dots = [c for c, n in zip(by_node, names) if n == "dot_general"]
    assert [c.flops for c in dots] == [2 * 2 * 8 * 4, 2 * 2 * 3 * 8]
    assert graph_cost(g, rt) == total


def test_graph_cost_with_family_ops(rt):
    import tenferro_linalg as la

    with use_runtime(rt):
        g = trace(lambda a: la.inv(a) + la.cholesky(a), xp.asarray(np.eye(3)))
    names = {n.prim.name for n in g.nodes}
    assert {"tenferro_linalg.inv.v1", "tenferro_linalg.cholesky.v1"} <= names
    assert graph_cost(g).flops >= 2 * 27 + 9


def test_graphs_with_the_ad_ops_are_costed():
    """stop_gradient and custom_vjp's linear op have cost rules, so AD graphs cost out."""
    import tenferro_ad as ad
    from tenferro_ad import plugin as ad_plugin

    @ad.custom_vjp
    def f(x):
        return xp.sin(x)

    f.defvjp(lambda x: (xp.sin(x), x), lambda x, g: (g * xp.cos(x),))
    with use_runtime(Runtime([numpy_plugin, ad_plugin])):
        x = xp.asarray([0.5, 1.0])
        g = trace(lambda v: ad.grad(lambda w: xp.sum(f(ad.stop_gradient(w) + w)))(v), x)
        assert any(n.prim.name == "tenferro_ad.stop_gradient.v1" for n in g.nodes)
        total = graph_cost(g)
        assert total.flops > 0 and total.bytes > 0
