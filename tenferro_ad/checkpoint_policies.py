"""Checkpoint policies (JAX's names): which intermediate values of a checkpointed function the
forward pass saves for the backward pass; everything else is recomputed.

A policy is ``policy(prim, *avals, **params) -> bool`` (True: save the outputs of this
primitive), or one of the names in `NAMES`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tenferro_core.errors import ArgumentError, ArgumentValueError

Policy = Callable[..., bool]

DOTS = frozenset({"dot_general", "conv_general"})


def nothing_saveable(prim: Any, *avals: Any, **params: Any) -> bool:
    """Save nothing but the inputs: the whole function is recomputed in the backward pass."""
    return False


def everything_saveable(prim: Any, *avals: Any, **params: Any) -> bool:
    """Save every intermediate (no rematerialization: as if not checkpointed)."""
    return True


def dots_saveable(prim: Any, *avals: Any, **params: Any) -> bool:
    """Save the results of contractions (dot_general, conv_general, and extension ops of that
    category: tenferro_nn's linear); recompute the cheap rest."""
    return prim.name in DOTS or prim.category == "contraction"


def dots_with_no_batch_dims_saveable(prim: Any, *avals: Any, **params: Any) -> bool:
    """Save dot_general results without batch dimensions (plain matrix products) only."""
    if prim.name != "dot_general":
        return False
    return not any(params.get("batch_dims", ((), ())))


NAMES: dict[str, Policy] = {
    "nothing_saveable": nothing_saveable,
    "everything_saveable": everything_saveable,
    "dots_saveable": dots_saveable,
    "dots_with_no_batch_dims_saveable": dots_with_no_batch_dims_saveable,
}
ALIASES = {"nothing": "nothing_saveable", "everything": "everything_saveable", "dots": "dots_saveable"}


def resolve(policy: Any) -> Policy:
    """The policy function for `policy` (None, a name, or a callable); a typed error otherwise."""
    if policy is None:
        return nothing_saveable
    if isinstance(policy, str):
        fn = NAMES.get(ALIASES.get(policy, policy))
        if fn is None:
            raise ArgumentValueError(
                f"checkpoint: unknown policy {policy!r}; expected one of "
                f"{sorted(NAMES) + sorted(ALIASES)}, or a callable policy(prim, *avals, **params) -> bool"
            )
        return fn
    if not callable(policy):
        raise ArgumentError(
            f"checkpoint: policy must be a name such as 'dots_saveable' or a callable "
            f"policy(prim, *avals, **params) -> bool, got {type(policy).__name__}"
        )
    return policy


__all__ = ["NAMES", "dots_saveable", "dots_with_no_batch_dims_saveable", "everything_saveable",
           "nothing_saveable", "resolve"]
