"""Signature keys of compiled calls: what makes two calls of a compiled function share a
trace (pytree structure, tensor avals, static values), and the checks of compile's options."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from tenferro_core.errors import ArgumentError, ArgumentValueError

from .pytree import _NODES
from .tensor import Tensor


def static_key(value: Any) -> Any:
    """A cache-key part for a static value (floats by repr: 0.0 and -0.0 differ, nan == nan)."""
    if type(value) in (float, complex):
        return (type(value), repr(value))
    return (type(value), value)


class NotPlain(Exception):
    """An argument `key_walk` does not key (a namedtuple, a Python scalar, a NumPy array...)."""


_TUPLE, _LIST, _DICT, _NONE = "tuple", "list", "dict", None


def key_walk(x: Any, key: list, leaves: list) -> None:
    """Append `x`'s structure and tensor avals to `key` and its tensors to `leaves` (in
    tree_flatten's order), for tuples, lists, dicts, None, tensors and registered pytree nodes;
    raise NotPlain for anything else. The key is prefix-free: containers add a marker and
    their size (dicts their keys, registered nodes their class and aux data), tensors their
    aval."""
    t = type(x)
    if t is tuple or t is list:
        key.append(_TUPLE if t is tuple else _LIST)
        key.append(len(x))
        items = x
    elif t is dict:
        names = tuple(sorted(x))
        key.append(_DICT)
        key.append(names)
        items = [x[k] for k in names]
    elif x is None:
        key.append(_NONE)
        return
    elif isinstance(x, Tensor):
        key.append(x._aval)
        leaves.append(x)
        return
    elif t in _NODES:
        items, aux = _NODES[t][0](x)
        key.append(t)
        key.append(aux)
        key.append(len(items))
    else:
        raise NotPlain
    for c in items:
        if type(c) is Tensor:
            key.append(c._aval)
            leaves.append(c)
        else:
            key_walk(c, key, leaves)


def parameters(fn: Callable) -> list:
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return []


def argnums(value: Any, name: str) -> tuple[int, ...]:
    vals = (value,) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(vals, (tuple, list)) or any(
            not isinstance(v, int) or isinstance(v, bool) for v in vals):
        raise ArgumentError(f"compile: {name} must be a non-negative int or a tuple of them, got "
                            f"{type(value).__name__} {value!r}")
    if any(v < 0 for v in vals):
        raise ArgumentValueError(f"compile: {name} must be non-negative positions of the function's "
                                 f"arguments, got {value!r}; count positions from 0")
    return tuple(sorted(set(vals)))


def count(value: Any, name: str, least: int) -> int:
    """`value` as an int >= `least` (a TypeError for another type, a ValueError below it)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ArgumentError(f"compile: {name} must be an int >= {least}, got {type(value).__name__} "
                            f"{value!r}")
    if value < least:
        raise ArgumentValueError(f"compile: {name} must be an int >= {least}, got {value}")
    return value


def argnames(value: Any) -> tuple[str, ...]:
    vals = (value,) if isinstance(value, str) else value
    if not isinstance(vals, (tuple, list)) or any(not isinstance(v, str) for v in vals):
        raise ArgumentError(f"compile: static_argnames must be a str or a tuple of str, got {value!r}")
    return tuple(vals)


__all__ = ["NotPlain", "argnames", "argnums", "count", "key_walk", "parameters", "static_key"]
