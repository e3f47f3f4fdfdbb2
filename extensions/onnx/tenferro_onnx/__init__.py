"""tenferro-onnx: export traced and compiled tenferro functions to ONNX, import ONNX models as
tenferro functions, and check exported models with onnx's checker, onnxruntime and onnx's
reference evaluator. onnx and onnxruntime are imported when first used."""

from __future__ import annotations

from typing import Any

from ._builder import DEFAULT_OPSET, MIN_OPSET
from .errors import (
    CheckMismatchError,
    ExportError,
    ModelFormatError,
    OnnxError,
    OpsetError,
    UnsupportedOnnxOpError,
)

__version__ = "0.1.0"

_LAZY = {"export": "exporter", "save": "exporter", "check": "checking", "CheckResult": "checking",
         "import_model": "importer", "CANNOT_EXPORT": "lower"}


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'tenferro_onnx' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)


__all__ = ["CANNOT_EXPORT", "CheckMismatchError", "CheckResult", "DEFAULT_OPSET", "ExportError", "MIN_OPSET",
           "ModelFormatError", "OnnxError", "OpsetError", "UnsupportedOnnxOpError", "check", "export",
           "import_model", "save"]
