"""Entry point of tenferro-infer. The engine's models are compositions of core primitives and
tenferro-nn functions, so it registers no ops or kernels; the entry point makes the
distribution visible to `python -m tenferro_runtime plugins` and to the allow/block lists."""

from __future__ import annotations

from tenferro_core.plugins import hookimpl


@hookimpl
def tenferro_register(registry) -> None:
    import tenferro_infer  # noqa: F401
