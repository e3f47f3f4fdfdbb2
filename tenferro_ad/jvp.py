"""Forward mode: the JVP trace, driven by the registered ``jvp`` rules.

An op without a jvp rule still has a JVP when

- it is declared `linear` in every operand that carries a tangent (jointly linear in
  them): `linear_jvp`, the op applied to the tangents (JAX's ``deflinear``); or
- a plugin registered a ``vjp`` rule for it: `tenferro_ad.custom.vjp_rule_jvp` makes a
  reverse-mode-only linear map of it, as `custom_vjp` does.
"""

from __future__ import annotations

import functools
from typing import Any

from tenferro_core.errors import MissingRuleError
from tenferro_runtime.runtime import default_runtime
from tenferro_runtime.tracing import Trace, Tracer

from .ad_util import Zero, instantiate, is_zero


class JVPTracer(Tracer):
    """A primal value paired with its tangent (a tensor, a tracer of another level, or Zero)."""

    __slots__ = ("primal", "tangent")


def has_tangent(aval: Any) -> bool:
    """Only floating and complex values carry tangents."""
    return aval.dtype.kind in "fc"


class JVPTrace(Trace):
    """Applies each primitive's jvp rule to (primals, tangents)."""

    label = "grad/jvp"

    def tracer(self, primal: Any, tangent: Any) -> Any:
        if is_zero(tangent) or not has_tangent(primal._aval):
            return primal
        t = object.__new__(JVPTracer)
        t._aval, t._trace = primal._aval, self
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
        rule = jvp_rule(prim, tangents, args[0]._aval.device.runtime)
        nparams = prim.check_params(params, tuple(p._aval for p in primals))
        primal_out, tangent_out = rule(tuple(primals), tuple(tangents), **nparams)
        if prim.multiple_results:
            return tuple(self.tracer(p, t) for p, t in zip(primal_out, tangent_out))
        return self.tracer(primal_out, tangent_out)


def linear_jvp(prim: Any, primals: tuple, tangents: tuple, **params: Any) -> tuple[Any, Any]:
    """JVP of `prim`, jointly linear in the operands with tangents: `prim` bound on the tangents
    (zeros for its linear operands without one) and the primal values of its other operands."""
    out = prim.bind(*primals, **params)
    if all(is_zero(t) for t in tangents):
        zero = tuple(Zero(o.aval) for o in out) if prim.multiple_results else Zero(out.aval)
        return out, zero
    args = [instantiate(t) if prim.linear_in(i) else p
            for i, (p, t) in enumerate(zip(primals, tangents))]
    return out, prim.bind(*args, **params)


def jvp_rule(prim: Any, tangents: tuple, runtime: Any) -> Any:
    """The rule giving `prim`'s JVP for these tangents: its registered jvp rule, else the
    generic `linear_jvp`, else one made from its vjp rule; MissingRuleError otherwise."""
    rule = runtime.rule("jvp", prim)
    if rule is not None:
        return rule
    if all(prim.linear_in(i) for i, t in enumerate(tangents) if not is_zero(t)):
        return functools.partial(linear_jvp, prim)
    vjp = runtime.rule("vjp", prim)
    if vjp is not None:
        from .custom import vjp_rule_jvp

        return functools.partial(vjp_rule_jvp, prim, vjp)
    raise missing_rule(prim, "jvp", tangents, runtime)


def missing_rule(prim: Any, kind: str, tangents: tuple = (), runtime: Any = None) -> MissingRuleError:
    what = f"extension op (family id {prim.name!r})" if prim.family else f"primitive {prim.name!r}"
    runtime = runtime or default_runtime()
    off = runtime.disabled_plugins("tenferro_ad", label="the AD plugin")
    if prim.family:
        off += runtime.disabled_plugins(prim.name.split(".")[0])
    if off:  # the rules are there, in a plugin that is switched off
        return MissingRuleError(f"cannot differentiate {what}: no {kind} rule is registered; "
                                f"{'; '.join(off)}")
    why = ""
    bad = [i for i, t in enumerate(tangents) if not is_zero(t) and not prim.linear_in(i)]
    if prim.linear and bad:
        ops = "all" if prim.linear == "all" else sorted(prim.linear)
        why = f" (it is declared linear in operand(s) {ops} only, and operand(s) {bad} carry tangents)"
    return MissingRuleError(
        f"cannot differentiate {what}: no {kind} rule is registered{why}; register one in your "
        f"plugin's tenferro_register hook with registry.add_rule({kind!r}, {prim.name!r}, fn)"
        + (" (or a 'vjp' rule, for reverse mode only)" if kind == "jvp" else "")
        + " (see docs/extensions.md), or wrap the computation in tenferro_ad.custom_vjp"
    )
