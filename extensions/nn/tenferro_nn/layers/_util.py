"""Shared by the layers: input checks and errors that name the layer, random keys, dtypes."""

from __future__ import annotations

from typing import Any

from tenferro_core.errors import ArgumentError, DTypeError, ShapeError, TenferroError, TenferroIndexError
from tenferro_runtime import random
from tenferro_runtime.tensor import Tensor

from ..checks import integer
from ..module import Module, check_input, where

_NAMED = "_tenferro_nn_named"


def check(module: Module, x: Any, expected: str, **kwargs: Any) -> None:
    """`check_input`, its error marked as naming the layer already."""
    try:
        check_input(module, x, expected, **kwargs)
    except TenferroError as err:
        setattr(err, _NAMED, True)
        raise


class named_errors:  # noqa: N801  (used as a function: ``with named_errors(self):``)
    """Prefix a functional op's error with the layer's path (once, at the innermost layer).
    A class, not a generator context manager: it wraps every layer call."""

    __slots__ = ("module",)

    def __init__(self, module: Module):
        self.module = module

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, err: Any, tb: Any) -> bool:
        if err is None or not isinstance(err, (ArgumentError, ShapeError, DTypeError, TenferroIndexError)):
            return False
        if getattr(err, _NAMED, False):
            return False
        try:
            new = type(err)(f"{where(self.module)}: {err}")
        except Exception:  # an error class with another constructor: keep it as it is
            return False
        setattr(new, _NAMED, True)
        raise new.with_traceback(tb) from None


def check_floating_input(module: Module, x: Any, expected: str = "of any shape") -> None:
    check(module, x, expected)
    if x.dtype.kind != "f":
        err = DTypeError(f"{where(module)}: expected a real floating input, got {x.dtype}; convert it "
                         f"with astype(x, float32)")
        setattr(err, _NAMED, True)
        raise err


def split_key(name: str, key: Any, n: int) -> list[Tensor]:
    """`n` independent keys from `key` (a constructor's parameters each get one)."""
    if not isinstance(key, Tensor):
        raise ArgumentError(f"{name}: key must be a random key for the initial parameters "
                            f"(key=tenferro_runtime.random.key(seed)), got {type(key).__name__}")
    keys = random.split(key, n)
    return [keys[i] for i in range(n)]


def float_dtype(name: str, dtype: Any) -> Any:
    if getattr(dtype, "kind", None) != "f":
        raise DTypeError(f"{name}: dtype must be a real floating dtype (float32, float64, ...), got {dtype}")
    return dtype


def positive_int(name: str, what: str, v: Any, minimum: int = 1) -> int:
    """An int >= `minimum` (a wrong type: ArgumentError; too small: HyperparameterError)."""
    return integer(name, what, v, minimum)


def not_negative_int(name: str, what: str, v: Any) -> int:
    return positive_int(name, what, v, 0)


__all__ = ["check", "check_floating_input", "float_dtype", "named_errors",
           "not_negative_int", "positive_int", "split_key"]
