"""pytrees: flatten and unflatten (and the generated unflattener compiled functions use)
round-trip every container kind, in a fixed leaf order."""

from __future__ import annotations

import collections

from hypothesis import given
from hypothesis import strategies as st

from tenferro_runtime.pytree import tree_flatten, tree_leaves, tree_map, tree_unflatten, unflattener

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
