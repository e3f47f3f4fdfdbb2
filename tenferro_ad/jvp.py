"""Forward mode: the JVP trace, driven by the registered ``jvp`` rules."""

from __future__ import annotations

from typing import Any

from tenferro_core.errors import MissingRuleError
from tenferro_runtime.tracing import Trace, Tracer

from .ad_util import Zero, is_zero


class JVPTracer(Tracer):
    """A primal value paired with its tangent (a tensor, a tracer of another level, or Zero)."""

    __slots__ = ("primal", "tangent")


def has_tangent(aval: Any) -> bool:
    """Only floating and complex values carry tangents."""
    return aval.dtype.kind in "fc"


class JVPTrace(Trace):
    """Applies each primitive's jvp rule to (primals, tangents)."""

    def tracer(self, primal: Any, tangent: Any) -> Any:
        if is_zero(tangent) or not has_tangent(primal._aval):
            return primal
        t = object.__new__(JVPTracer)
        t._aval, t._buf, t._trace = primal._aval, None, self
        t.primal, t.tangent = primal, tangent
        return t

    def unpack(self, x: Any) -> tuple[Any, Any]:
        if isinstance(x, JVPTracer) and x._trace is self:
            return x.primal, x.tangent
        return x, Zero(x._aval)

    def concrete(self, tracer: Any) -> Any:
        return tracer.primal.numpy()

    def process(self, prim: Any, args: tuple, params: dict) -> Any:
        primals, tangents = zip(*[self.unpack(a) for a in args]) if args else ((), ())
        if not prim.differentiable or all(is_zero(t) for t in tangents):
            return prim.bind(*primals, **params)
        rule = args[0]._aval.device.runtime.rule("jvp", prim)
        if rule is None:
            raise missing_rule(prim, "jvp")
        nparams = prim.check_params(params)
        primal_out, tangent_out = rule(tuple(primals), tuple(tangents), **nparams)
        if prim.multiple_results:
            return tuple(self.tracer(p, t) for p, t in zip(primal_out, tangent_out))
        return self.tracer(primal_out, tangent_out)


def missing_rule(prim: Any, kind: str) -> MissingRuleError:
    what = f"extension op (family id {prim.name!r})" if prim.family else f"primitive {prim.name!r}"
    return MissingRuleError(
        f"cannot differentiate {what}: no {kind} rule is registered; register one in your plugin's "
        f"tenferro_register hook with registry.add_rule({kind!r}, {prim.name!r}, fn) (see "
        f"docs/extensions.md), or wrap the computation in tenferro_ad.custom_vjp"
    )

