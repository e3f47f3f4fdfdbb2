"""Forge's typed errors (each also the builtin a Python user would catch)."""

from __future__ import annotations

from tenferro_core.errors import ArgumentValueError, TenferroError, TenferroIOError


class ForgeError(TenferroError, RuntimeError):
    """A Forge step could not be done (a gate not passed, a registry that cannot be written)."""


class ForgeArgumentError(ArgumentValueError):
    """A bad argument to a Forge command: an op, dtype, shape or params it does not take."""


class ForgeFileError(TenferroIOError):
    """A task or candidate directory, or one of its files, missing or unreadable."""


class RegistryError(ForgeError, LookupError):
    """No registry entry by that id, or a registry that cannot be read."""


class GPURequiredError(ForgeError):
    """A step that only means something on a GPU (timing a Triton candidate) asked for where
    there is none, or where Triton is forced into its CPU interpreter."""


class PromotionError(ForgeError):
    """Promotion refused: verification or the benchmark gate did not pass."""


__all__ = [
    "ForgeArgumentError",
    "ForgeError",
    "ForgeFileError",
    "GPURequiredError",
    "PromotionError",
    "RegistryError",
]
