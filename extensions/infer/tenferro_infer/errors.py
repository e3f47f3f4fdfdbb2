"""Typed errors of tenferro-infer, each also the builtin a Python user would catch."""

from __future__ import annotations

from tenferro_core.errors import TenferroError


class ModelFileError(TenferroError, ValueError):
    """A model file that cannot be used: truncated, of another architecture, or of an
    unsupported quantization or tensor layout."""


class SamplingParamsError(TenferroError, ValueError):
    """Sampling parameters out of range (negative temperature, top_p outside (0, 1], ...)."""


class RequestError(TenferroError, ValueError):
    """A request the engine cannot take: an empty prompt, one longer than the context
    window, a non-positive max_joules, an unknown model."""


class QueueFullError(TenferroError, RuntimeError):
    """More concurrent requests than the engine's queue holds (HTTP 429)."""


class CacheFullError(TenferroError, MemoryError):
    """The KV block pool cannot hold a sequence even after preempting every other one."""
