"""Typed errors of tenferro-onnx (each also the builtin a NumPy user would catch)."""

from __future__ import annotations

from tenferro_core.errors import TenferroError


class OnnxError(TenferroError):
    """Root of the errors tenferro-onnx raises."""


class ExportError(OnnxError, NotImplementedError):
    """A primitive (or a dtype of it) has no ONNX lowering at the requested opset. The message
    names the primitive, the user's call site and the opset."""


class OpsetError(OnnxError, ValueError):
    """An opset below the minimum tenferro-onnx supports (export or import)."""


class ModelFormatError(OnnxError, ValueError):
    """A file or bytes that are not a valid ONNX model (corrupt, truncated, failing the checker)."""


class UnsupportedOnnxOpError(OnnxError, NotImplementedError):
    """An ONNX node (op type, attribute or dtype) the importer does not support."""


class CheckMismatchError(OnnxError, AssertionError):
    """An exported model's output differs from tenferro's beyond the tolerance (`result`
    holds the per-output errors)."""

    def __init__(self, message: str, result: object = None):
        super().__init__(message)
        self.result = result


__all__ = ["CheckMismatchError", "ExportError", "ModelFormatError", "OnnxError", "OpsetError",
           "UnsupportedOnnxOpError"]
