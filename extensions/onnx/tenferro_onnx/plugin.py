"""Entry point of tenferro-onnx: registers the package as the runtime's `onnx` namespace
(`default_runtime().namespaces["onnx"]`). It registers no ops: export and import use the ops
others register."""

from __future__ import annotations

from tenferro_core.plugins import hookimpl


@hookimpl
def tenferro_register(registry) -> None:
    import tenferro_onnx

    registry.add_namespace("onnx", tenferro_onnx)
