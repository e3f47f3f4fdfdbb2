"""Entry point of tenferro-numba: registers the ``numba`` executor, the default for graphs on
numpy:cpu and torch:cpu (numba is not imported until a graph has a group large enough)."""

from __future__ import annotations

from tenferro_core.plugins import hookimpl

from .executor import compile_graph


@hookimpl
def tenferro_register(registry) -> None:
    registry.add_executor("numba", compile_graph, default_for=("numpy:cpu", "torch:cpu"))
