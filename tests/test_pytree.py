"""pytrees: flatten and unflatten (and the generated unflattener compiled functions use)
round-trip every container kind, in a fixed leaf order."""

from __future__ import annotations

import collections

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tenferro_core.errors import ArgumentError
from tenferro_runtime.pytree import (
    register_pytree_node,
    tree_flatten,
    tree_leaves,
    tree_map,
    tree_unflatten,
    unflattener,
)

Point = collections.namedtuple("Point", "x y")

leaves = st.one_of(st.integers(), st.floats(allow_nan=False), st.text(max_size=3))
trees = st.recursive(
    leaves | st.none(),
    lambda kids: st.one_of(
        st.lists(kids, max_size=3), st.lists(kids, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=2), kids, max_size=3),
        st.tuples(kids, kids).map(lambda t: Point(*t))),
    max_leaves=10)


def _same(a, b):
    assert type(a) is type(b) and a == b


@given(trees)
def test_flatten_then_unflatten_gives_the_tree_back(tree):
    flat, treedef = tree_flatten(tree)
    _same(tree_unflatten(treedef, flat), tree)
    _same(unflattener(treedef)(flat), tree)
    assert treedef.num_leaves == len(flat) == len(tree_leaves(tree))
    assert tree_flatten(tree)[1] == treedef and hash(tree_flatten(tree)[1]) == hash(treedef)


def test_leaf_order_and_structure():
    tree = {"b": [1, (2, None)], "a": Point(3, {"z": 4, "y": 5})}
    flat, treedef = tree_flatten(tree)
    assert flat == [3, 5, 4, 1, 2]  # dicts by sorted key
    assert tree_map(lambda v: v * 10, tree) == {"b": [10, (20, None)], "a": Point(30, {"z": 40, "y": 50})}
    assert tree_flatten([1, 2])[1] != tree_flatten((1, 2))[1]


class Pair:
    """A user class registered as a pytree node: two children and a static tag."""

    def __init__(self, a, b, tag):
        self.a, self.b, self.tag = a, b, tag

    def __eq__(self, other):
        return type(other) is Pair and (self.a, self.b, self.tag) == (other.a, other.b, other.tag)


register_pytree_node(Pair, lambda p: ((p.a, p.b), p.tag), lambda tag, kids: Pair(*kids, tag))


@given(trees, trees, st.text(max_size=2))
def test_registered_nodes_round_trip_inside_any_container(a, b, tag):
    tree = [Pair(a, {"k": Pair(b, None, tag)}, tag)]
    flat, treedef = tree_flatten(tree)
    _same(tree_unflatten(treedef, flat), tree)
    _same(unflattener(treedef)(flat), tree)
    assert flat == tree_leaves(a) + tree_leaves(b)
    assert tree_flatten(tree)[1] == treedef and hash(tree_flatten(tree)[1]) == hash(treedef)


def test_registered_node_aux_is_part_of_the_structure():
    assert tree_flatten(Pair(1, 2, "x"))[1] != tree_flatten(Pair(1, 2, "y"))[1]
    assert tree_map(lambda v: v + 1, Pair(1, (2,), "t")) == Pair(2, (3,), "t")


def test_register_pytree_node_rejects_bad_arguments():
    with pytest.raises(ArgumentError, match="expected a class"):
        register_pytree_node(Pair(1, 2, 3), lambda p: ((), None), lambda a, k: None)
    with pytest.raises(ArgumentError, match="built-in containers"):
        register_pytree_node(list, lambda p: ((), None), lambda a, k: None)
    with pytest.raises(ArgumentError, match="two callables"):
        register_pytree_node(Point, None, lambda a, k: None)


def test_registered_nodes_pass_through_grad_and_compile():
    from tenferro_ad import grad
    from tenferro_runtime import array_api as xp
    from tenferro_runtime import compile

    a, b = xp.asarray([1.0, 2.0]), xp.asarray([3.0, 4.0])
    g = grad(lambda p: xp.sum(p.a * p.b))(Pair(a, b, "t"))
    assert type(g) is Pair and g.tag == "t"
    assert g.a.numpy().tolist() == [3.0, 4.0] and g.b.numpy().tolist() == [1.0, 2.0]
    swap = compile(lambda p: Pair(p.b, p.a * 2, p.tag))
    for _ in range(2):
        r = swap(Pair(a, b, "t"))
        assert r.tag == "t" and r.a.numpy().tolist() == [3.0, 4.0] and r.b.numpy().tolist() == [2.0, 4.0]
    assert swap.cache_info().hits == 1
    swap(Pair(a, b, "u"))
    assert swap.cache_info().misses == 2  # the static tag is part of the signature
    scaled = compile(lambda p: p.a * p.b)  # a Python number among the children: a static leaf
    assert scaled(Pair(a, 3, "t")).numpy().tolist() == [3.0, 6.0]
    assert scaled(Pair(a, 3, "t")).numpy().tolist() == [3.0, 6.0]
    assert scaled(Pair(a, 4, "t")).numpy().tolist() == [4.0, 8.0]
    assert (scaled.cache_info().hits, scaled.cache_info().misses) == (1, 2)
