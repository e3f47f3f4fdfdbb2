"""Recompile diagnostics: what each trace of a compiled function was for, and which argument
changed from what to what when it traced again (logged on ``tenferro_runtime.compile``)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from .tensor import Tensor

log = logging.getLogger("tenferro_runtime.compile")


class RecompileWarning(UserWarning):
    """A compiled function was traced again more often than its `recompile_warning` limit."""


def describe(names: list, args: tuple, kwargs: dict, static_nums: tuple, static_names: tuple) -> list:
    """[(argument path, what it is)] for the recompile log."""
    out: list = []
    for i, a in enumerate(args):
        label = names[i] if i < len(names) else f"args[{i}]"
        _walk(label, a, i in static_nums, out)
    for k in sorted(kwargs):
        _walk(k, kwargs[k], k in static_names, out)
    return out


def _walk(path: str, x: Any, static: bool, out: list) -> None:
    if static:
        out.append((path, f"static value {x!r}"))
    elif isinstance(x, Tensor):
        out.append((path, f"{x._aval.dtype}{list(x._aval.shape)} on {x._aval.device}"))
    elif isinstance(x, (tuple, list)):
        out.append((path, f"{type(x).__name__} of {len(x)}"))
        for j, c in enumerate(x):
            _walk(f"{path}[{j}]", c, False, out)
    elif isinstance(x, dict):
        out.append((path, f"dict with keys {sorted(map(str, x))}"))
        for k in sorted(x, key=str):
            _walk(f"{path}[{k!r}]", x[k], False, out)
    elif isinstance(x, np.ndarray):
        out.append((path, f"numpy {x.dtype}{list(x.shape)}"))
    else:
        out.append((path, f"Python value {x!r}"))


def difference(old: list, new: list) -> str:
    before = dict(old)
    for path, what in new:
        if path not in before:
            return f"argument {path} is new ({what})"
        if before[path] != what:
            return f"argument {path} changed from {before[path]} to {what}"
    gone = [p for p, _ in old if p not in dict(new)]
    if gone:
        return f"argument {gone[0]} is no longer passed"
    return "the cached signature was evicted (cache full) or cleared"


def summary(desc: list) -> str:
    return ", ".join(f"{p}: {w}" for p, w in desc[:8]) + (" ..." if len(desc) > 8 else "")


__all__ = ["RecompileWarning", "describe", "difference", "log", "summary"]
