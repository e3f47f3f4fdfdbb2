"""Entry point of tenferro-onnx: exposes the package as the `onnx` namespace
(`array_api.onnx.export`, ...). It registers no ops: export and import use the ops others
register."""

from __future__ import annotations

from tenferro_core.plugins import hookimpl


@hookimpl
def tenferro_register(registry) -> None:
    import tenferro_onnx

    registry.add_namespace("onnx", tenferro_onnx)
