"""A small pytree utility: nested tuples, lists, dicts (sorted keys), namedtuples, None and
the classes registered with `register_pytree_node` (modules, optimizer states, user classes).

Avals, tensors and every other object that is not a container are leaves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from tenferro_core.errors import ArgumentError


class TreeDef(NamedTuple):
    kind: str          # "leaf", "none", "tuple", "list", "dict", "namedtuple", "custom"
    meta: Any          # dict keys, namedtuple type, or (registered class, aux data)
    children: tuple

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)


LEAF = TreeDef("leaf", None, ())

# class -> (flatten, unflatten); written only by register_pytree_node
_NODES: dict[type, tuple[Callable, Callable]] = {}


def register_pytree_node(cls: type, flatten: Callable[[Any], tuple[Iterable[Any], Any]],
                         unflatten: Callable[[Any, list[Any]], Any]) -> None:
    """Make instances of `cls` pytree nodes (as JAX's `register_pytree_node`).

    `flatten(obj)` returns `(children, aux)`: the children are flattened further, `aux` is
    hashable static data (it is part of `compile`'s cache key). `unflatten(aux, children)`
    builds an instance back. Subclasses are not covered: register each class.
    """
    if not isinstance(cls, type):
        raise ArgumentError(f"register_pytree_node: expected a class, got {cls!r}")
    if cls in (tuple, list, dict, type(None)) or not (callable(flatten) and callable(unflatten)):
        raise ArgumentError(
            f"register_pytree_node: expected a class other than the built-in containers and two "
            f"callables (flatten, unflatten), got {cls.__name__}, {flatten!r}, {unflatten!r}")
    _NODES[cls] = (flatten, unflatten)


def unregistered_hint(obj: Any) -> str:
    """The advice for an object of a class that is no pytree node where tensors were expected
    (a user dataclass passed to grad or compile): register it, with the signature."""
    name = type(obj).__name__
    return (f"if a {name} holds tensors, register its class as a pytree node: "
            f"tenferro_runtime.pytree.register_pytree_node({name}, flatten, unflatten), with "
            f"flatten(obj) -> (children, aux) and unflatten(aux, children) -> obj (see "
            f"register_pytree_node in docs/user-guide.md)")


def tree_flatten(tree: Any) -> tuple[list[Any], TreeDef]:
    """Leaves in order and the structure to rebuild the tree."""
    leaves: list[Any] = []
    return leaves, _flatten(tree, leaves)


_NONE = TreeDef("none", None, ())
_tdef = tuple.__new__  # TreeDef(kind, meta, children) without the namedtuple's Python-level __new__


def _flatten(x: Any, leaves: list[Any]) -> TreeDef:
    t = type(x)
    if t is tuple or t is list:  # the common containers first: compile flattens every call
        return _tdef(TreeDef, (t.__name__, None, _children(x, leaves)))
    if t is dict:
        keys = tuple(sorted(x))
        return _tdef(TreeDef, ("dict", keys, _children([x[k] for k in keys], leaves)))
    if x is None:
        return _NONE
    node = _NODES.get(t)
    if node is not None:
        children, aux = node[0](x)
        return TreeDef("custom", (t, aux), _children(children, leaves))
    if not isinstance(x, (tuple, list, dict)):  # a leaf (tensors, avals, Python scalars)
        leaves.append(x)
        return LEAF
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return TreeDef("namedtuple", t, _children(x, leaves))
    if isinstance(x, (tuple, list)):
        return TreeDef("tuple" if isinstance(x, tuple) else "list", None, _children(x, leaves))
    keys = tuple(sorted(x))
    return TreeDef("dict", keys, _children([x[k] for k in keys], leaves))


def _children(items: Any, leaves: list[Any]) -> tuple:
    """The TreeDefs of a container's items, leaves appended without a call each."""
    out = []
    for c in items:
        if c is None or isinstance(c, (tuple, list, dict)) or type(c) in _NODES:
            out.append(_flatten(c, leaves))
        else:
            leaves.append(c)
            out.append(LEAF)
    return tuple(out)


def tree_unflatten(treedef: TreeDef, leaves: Any) -> Any:
    it = iter(leaves)
    out = _build(treedef, it)
    return out


def _build(td: TreeDef, it: Any) -> Any:
    if td.kind == "leaf":
        return next(it)
    if td.kind == "none":
        return None
    kids = [_build(c, it) for c in td.children]
    if td.kind == "tuple":
        return tuple(kids)
    if td.kind == "list":
        return kids
    if td.kind == "namedtuple":
        return td.meta(*kids)
    if td.kind == "custom":
        return _NODES[td.meta[0]][1](td.meta[1], kids)
    return dict(zip(td.meta, kids))


def unflattener(treedef: TreeDef) -> Any:
    """A function of a leaf sequence building `treedef`'s tree: `tree_unflatten` as one
    generated expression, for trees rebuilt on every call (compiled functions' outputs)."""
    glb: dict[str, Any] = {}
    count = [0]

    def expr(td: TreeDef) -> str:
        if td.kind == "leaf":
            count[0] += 1
            return f"x[{count[0] - 1}]"
        if td.kind == "none":
            return "None"
        kids = [expr(c) for c in td.children]
        if td.kind == "tuple":
            return f"({', '.join(kids)}{',' if len(kids) == 1 else ''})"
        if td.kind == "list":
            return f"[{', '.join(kids)}]"
        name = f"g{len(glb)}"
        glb[name] = td.meta
        if td.kind == "custom":
            glb[name] = td.meta[1]
            glb[f"u{name}"] = _NODES[td.meta[0]][1]
            return f"u{name}({name}, [{', '.join(kids)}])"
        if td.kind == "namedtuple":
            return f"{name}({', '.join(kids)})"
        return f"dict(zip({name}, ({', '.join(kids)}{',' if len(kids) == 1 else ''})))"

    return eval(f"lambda x: {expr(treedef)}", glb)  # noqa: S307  (our own expression)


def tree_map(fn: Any, tree: Any, *rest: Any) -> Any:
    leaves, td = tree_flatten(tree)
    others = [tree_flatten(r)[0] for r in rest]
    return tree_unflatten(td, [fn(*xs) for xs in zip(leaves, *others)])


def tree_leaves(tree: Any) -> list[Any]:
    return tree_flatten(tree)[0]


__all__ = [
    "TreeDef", "register_pytree_node", "tree_flatten", "tree_leaves", "tree_map", "tree_unflatten",
    "unflattener",
]
