"""The `Primitive`: name, parameter schema, shape/dtype rule and AD flags.

Core primitives and extension ops (family ids such as ``"tenferro_linalg.qr.v1"``)
are both Primitives; the runtime treats them alike. `bind` is installed by
`tenferro_runtime`, keeping the core free of any execution machinery.
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

ShapeRule = Callable[..., Any]


class Primitive:
    """One operation of the IR.

    `rule(*avals, **params)` returns ``(shape, dtype)`` (or a tuple of them with
    `multiple_results`) and raises ShapeError/DTypeError on bad input.
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
        doc: str = "",
    ):
        if family and not FAMILY_ID.match(name):
            raise ArgumentError(
                f"family id must look like '<package>.<op>.v<major>' "
                f"(for example 'mypkg.softplus.v1'), got {name!r}"
            )
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
        self.__doc__ = doc or f"The {name} primitive."

    def __repr__(self) -> str:
        return self.name

    def linear_in(self, i: int) -> bool:
        """True when the primitive is linear in its i-th operand."""
        return self.linear == "all" or i in self.linear

    def bind(self, *args: Any, **params: Any) -> Any:
        """Apply the primitive to tensors (or tracers); tenferro_runtime installs this method."""
        raise RuntimeError("tenferro_runtime is not imported; import it to execute primitives")

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Validate and normalize params against the schema; fill defaults."""
        unknown = set(params) - set(self.params)
        if unknown:
            raise ArgumentError(
                f"{self.name}: unknown parameter(s) {sorted(unknown)}; "
                f"it takes {sorted(self.params) or 'no parameters'}"
            )
        out = {}
        for key, (validate, default) in self.params.items():
            if key in params:
                out[key] = validate(self.name, key, params[key])
            elif default is REQUIRED:
                raise ArgumentError(f"{self.name}: missing required parameter {key!r}")
            else:
                out[key] = default
        return out

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
