"""The `Primitive`: name, parameter schema, shape/dtype rule and AD flags.

Core primitives and extension ops (family ids such as ``"tenferro_linalg.qr.v1"``)
are both Primitives; the runtime treats them alike. `bind` calls the binder the
runtime hands over with `set_binder` (dependency injection: the core holds no
execution machinery and imports nothing above it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .avals import Aval
from .errors import ArgumentError, DeviceError
from .params import Validator

REQUIRED = object()
FAMILY_ID = re.compile(r"^[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*\.v[0-9]+$")
# what the fusion pass needs to know of an op (DESIGN.md section 7)
CATEGORIES = (
    "elementwise", "broadcast", "reduction", "structural", "indexing", "contraction", "random",
    "extension",
)

ShapeRule = Callable[..., Any]
Binder = Callable[["Primitive", tuple, dict], Any]


def _no_binder(prim: Primitive, args: tuple, params: dict) -> Any:
    raise RuntimeError(
        f"{prim.name}: no binder is set: import tenferro_runtime (it hands its `bind` to the core "
        f"with tenferro_core.primitive.set_binder) to execute primitives")


_binder: Binder = _no_binder


def set_binder(fn: Binder) -> None:
    """Make `fn(prim, args, params)` what `Primitive.bind` calls (tenferro_runtime's `bind`)."""
    global _binder
    _binder = fn
Resolver = Callable[[Sequence[Aval], dict[str, Any]], dict[str, Any]]


class Primitive:
    """One operation of the IR.

    `rule(*avals, **params)` returns ``(shape, dtype)`` (or a tuple of them with
    `multiple_results`) and raises ShapeError/DTypeError on bad input. `resolve(avals,
    params)`, when given, returns the validated params with their rank-dependent defaults
    (left None in the schema) filled from the operand avals, so every node carries full
    params; it indexes `avals` only when it needs them.
    """

    def __init__(
        self,
        name: str,
        rule: ShapeRule,
        *,
        params: Mapping[str, tuple[Validator, Any]] | None = None,
        nin: int | None = 1,
        multiple_results: bool = False,
        linear: Sequence[int] | str = (),
        differentiable: bool = True,
        effects: bool = False,
        family: bool = False,
        decomposition: Callable[..., Any] | None = None,
        exact_params: Sequence[str] = (),
        resolve: Resolver | None = None,
        category: str | None = None,
        doc: str = "",
    ):
        if family and not FAMILY_ID.match(name):
            raise ArgumentError(
                f"family id must look like '<package>.<op>.v<major>' "
                f"(for example 'mypkg.softplus.v1'), got {name!r}"
            )
        if category is None and family:
            category = "extension"
        if category is not None and category not in CATEGORIES:
            raise ArgumentError(f"{name}: category must be one of {CATEGORIES}, got {category!r}")
        self.name = name
        self.rule = rule
        self.params: dict[str, tuple[Validator, Any]] = dict(params or {})
        self.nin = nin
        self.multiple_results = multiple_results
        self.linear = linear if linear == "all" else frozenset(linear)
        self.differentiable = differentiable
        self.effects = effects
        self.family = family
        self.decomposition = decomposition
        # params whose == is too coarse for caching (-0.0 == 0.0, nan != nan)
        self.exact_params = tuple(exact_params)
        self.resolve = resolve
        # None only until tenferro_core.catalog assigns the core primitives theirs
        self.category: str | None = category
        self.__doc__ = doc or f"The {name} primitive."

    def __repr__(self) -> str:
        return self.name

    def linear_in(self, i: int) -> bool:
        """True when operand i is one of those the primitive is jointly linear in (`linear`;
        multilinear ops such as mul declare none): tenferro_ad derives their JVP."""
        return self.linear == "all" or i in self.linear

    def bind(self, *args: Any, **params: Any) -> Any:
        """Apply the primitive to tensors (or tracers), by the binder `set_binder` gave."""
        return _binder(self, args, params)

    def check_params(self, params: Mapping[str, Any], avals: Sequence[Aval] = ()) -> dict[str, Any]:
        """The canonical params: every schema key in schema order, exact types, defaults
        filled and rank-dependent ones resolved from the operand `avals` (DESIGN.md
        section 7). Idempotent, and cheap on canonical input: it runs on every call."""
        name = self.name
        out = {}
        seen = 0
        for key, (validate, default) in self.params.items():
            v = params.get(key, REQUIRED)
            if v is not REQUIRED:
                seen += 1
                out[key] = validate(name, key, v)
            elif default is REQUIRED:
                self._check_known(params)
                raise ArgumentError(f"{name}: missing required parameter {key!r}")
            else:
                out[key] = default
        if seen != len(params):
            self._check_known(params)
        if self.resolve is not None:
            try:
                out = self.resolve(avals, out)
            except IndexError:
                if avals:
                    raise
                raise ArgumentError(
                    f"{name}: expected {self.nin or 'some'} tensor operand(s), got none, so the "
                    f"rank-dependent defaults of {name} cannot be resolved (internal callers: "
                    f"pass the operand avals to check_params)"
                ) from None
        return out

    def _check_known(self, params: Mapping[str, Any]) -> None:
        unknown = set(params) - set(self.params)
        if unknown:
            raise ArgumentError(
                f"{self.name}: unknown parameter(s) {sorted(unknown)}; "
                f"it takes {sorted(self.params) or 'no parameters'}"
            )

    def abstract_eval(self, avals: Sequence[Aval], params: Mapping[str, Any]) -> tuple[Aval, ...]:
        """Output avals of applying this primitive; params must already be checked."""
        if self.nin is not None and len(avals) != self.nin:
            raise ArgumentError(
                f"{self.name}: expected {self.nin} tensor operand(s), got {len(avals)}"
            )
        device = params.get("device") if not avals else avals[0].device
        for a in avals[1:]:
            if a.device is not device and a.device != device:
                raise DeviceError(
                    f"{self.name}: all operands must be on one device, got {device} and {a.device}; "
                    f"move one explicitly with x.to_device({str(device)!r})"
                )
        out = self.rule(*avals, **params)
        if not self.multiple_results:
            out = (out,)
        return tuple(Aval(tuple(s), d, device) for s, d in out)
