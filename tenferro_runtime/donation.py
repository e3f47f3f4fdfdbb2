"""Donation: tensors whose buffers a compiled call may have written its results into."""

from __future__ import annotations

from typing import Any

from tenferro_core.errors import ArgumentError

from .tensor import Tensor

_BUF = Tensor.__dict__["_buf"]


class DonatedTensor(Tensor):
    """A tensor whose buffer was donated to a compiled function: it holds no value any more."""

    __slots__ = ()
    _why = ("and its buffer may now hold that function's results; use the function's outputs "
            "instead, or don't donate it")

    @property
    def _buf(self) -> Any:
        raise ArgumentError(f"this {self._aval.str_short()} tensor was donated to a compiled "
                            f"function (donate_argnums) {self._why}")

    def __repr__(self) -> str:
        return f"Tensor(<donated>, {self._aval.str_short()})"


class FailedDonationTensor(DonatedTensor):
    """A tensor donated to a compiled call that failed: its buffer may hold partial results."""

    __slots__ = ()
    _why = ("whose call failed part-way, so its buffer may hold partial results; recompute it "
            "(or keep a copy before calling), or don't donate it")


def invalidate(tensors: list, keep: Any, cls: type) -> None:
    """Make `tensors` (those of the donated arguments) instances of `cls` (no buffer), except
    those among `keep` (outputs that are an input as it was)."""
    kept = {id(o) for o in keep}
    for t in tensors:
        if type(t) is Tensor and id(t) not in kept:
            _BUF.__delete__(t)
            t.__class__ = cls


__all__ = ["DonatedTensor", "FailedDonationTensor", "invalidate"]
