"""Entry point of tenferro_ad: registers the AD rules of the core catalog."""

from __future__ import annotations

from tenferro_core.plugins import hookimpl

from .rules import elementwise, structural


@hookimpl
def tenferro_register(registry) -> None:
    for table in (elementwise, structural):
        for name, fn in table.JVP.items():
            registry.add_rule("jvp", name, fn)
        for name, fn in table.TRANSPOSE.items():
            registry.add_rule("transpose", name, fn)
