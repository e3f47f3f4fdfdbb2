"""Argument checks shared by the functional ops: typed errors that say what was expected."""

from __future__ import annotations

from typing import Any

from tenferro_core.errors import ArgumentError, AxisError, DTypeError
from tenferro_runtime.tensor import Tensor

from ..checks import int_pair


def check_tensor(name: str, x: Any, what: str = "input") -> Tensor:
    if not isinstance(x, Tensor):
        raise ArgumentError(f"{name}: {what} must be a tenferro Tensor, got {type(x).__name__}; "
                            f"convert it with array_api.asarray")
    return x


def check_floating(name: str, x: Any, what: str = "input") -> Tensor:
    check_tensor(name, x, what)
    if x.dtype.kind != "f":
        raise DTypeError(f"{name}: {what} must be a real floating tensor, got {x.dtype}; convert it "
                         f"with astype(x, float32)")
    return x


def check_same_dtype(name: str, x: Tensor, *others: tuple[str, Any]) -> None:
    """Parameters (name, tensor or None) must have x's dtype: no silent promotion."""
    for what, t in others:
        if t is None:
            continue
        check_tensor(name, t, what)
        if t.dtype is not x.dtype:
            raise DTypeError(f"{name}: {what} is {t.dtype} but the input is {x.dtype}; convert one "
                             f"of them (astype)")


def normalize_dim(name: str, dim: Any, ndim: int) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise ArgumentError(f"{name}: dim must be an int, got {dim!r}")
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise AxisError(f"{name}: dim {dim} is out of range for a {ndim}-d input; expected "
                        f"{-n} <= dim < {n}")
    return dim % n if ndim else 0


pair = int_pair  # an int or a pair of ints (each >= the minimum) as a pair
