"""Entry point of tenferro-triton: registers the ``triton`` executor, the default for graphs
on ``torch:cuda`` devices (triton is not imported), which takes extension ops decomposed
into the primitives it generates code for."""

from __future__ import annotations

from tenferro_core.plugins import hookimpl

from .executor import compile_graph


@hookimpl
def tenferro_register(registry) -> None:
    registry.add_executor("triton", compile_graph, default_for=("torch:cuda",),
                          decompose=("elementwise", "broadcast", "reduction", "structural", "contraction"))
