"""Entry point of tenferro-nn. Its layers, losses and optimizers are compositions of core
primitives (traced, differentiated and compiled like user code), so it registers no ops or
kernels; the entry point makes the distribution visible to `python -m tenferro_runtime
plugins` and to the allow/block lists like every other plugin."""

from __future__ import annotations

from tenferro_core.plugins import hookimpl


@hookimpl
def tenferro_register(registry) -> None:
    import tenferro_nn  # noqa: F401  (importing it registers the module classes as pytrees)
