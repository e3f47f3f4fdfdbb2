"""The extension-op contract: how einsum, linalg, fft and user ops are defined.

An op is a `Primitive` whose name is a family id ``"<package>.<op>.v<major>"``;
its non-tensor arguments (the payload) are its hashable params. A plugin then
registers the op, its kernels per backend and its AD rules through the
`tenferro_register` hook.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .params import Validator, p_any
from .primitive import Primitive, Resolver


def define_op(
    family_id: str,
    shape_rule: Callable[..., Any],
    *,
    payload: Mapping[str, tuple[Validator, Any]] | None = None,
    nin: int | None = 1,
    multiple_results: bool = False,
    decomposition: Callable[..., Any] | None = None,
    linear: Sequence[int] | str = (),
    differentiable: bool = True,
    effects: bool = False,
    resolve: Resolver | None = None,
    category: str = "extension",
    doc: str = "",
) -> Primitive:
    """Define an extension op.

    `shape_rule(*avals, **payload)` returns ``(shape, dtype)`` and raises
    ShapeError/DTypeError on bad input. `decomposition(*tensors, **payload)`
    computes the op from core primitives (used where a backend has no kernel). Payload
    validators return canonical values (see `tenferro_core.params`); `resolve(avals,
    payload)` fills the defaults that depend on the operands' shapes.
    `category` (one of `tenferro_core.primitive.CATEGORIES`) tells the fusion pass what
    the op is; the default "extension" marks it opaque to fusion. `effects=True` marks an op
    run for what it does besides its results (a print, a counter): dead-code elimination and
    the backward passes keep its nodes although no output or cotangent needs them.
    """
    return Primitive(
        family_id,
        shape_rule,
        params=payload,
        nin=nin,
        multiple_results=multiple_results,
        linear=linear,
        differentiable=differentiable,
        effects=effects,
        family=True,
        resolve=resolve,
        decomposition=decomposition,
        category=category,
        doc=doc,
    )


__all__ = ["define_op", "p_any"]
