"""The one exception hierarchy of tenferro.

Every error names what was expected, what was given and what to do. Each class
also derives from the builtin a NumPy user would catch (ValueError, TypeError,
IndexError, AttributeError), so generic handlers keep working.
"""

from __future__ import annotations

import os as _os

import numpy as _np


class TenferroError(Exception):
    """Root of every error tenferro raises on purpose."""


class ShapeError(TenferroError, ValueError):
    """A shape, axis or size does not fit the operation."""


class AxisError(ShapeError, _np.exceptions.AxisError):
    """An axis is out of range for the array's rank, or repeated. Also NumPy's
    `numpy.exceptions.AxisError` (a ValueError and an IndexError), so code written against
    NumPy catches it. Raised with a message only (`axis` and `ndim` are None)."""


class TenferroIndexError(TenferroError, IndexError):
    """An index is out of range or of the wrong kind."""


class DTypeError(TenferroError, TypeError):
    """A dtype is not accepted, not supported by a backend, or cannot be promoted."""


class ArgumentError(TenferroError, TypeError):
    """A non-tensor argument (parameter, payload, keyword) is wrong."""


class DeviceError(TenferroError, ValueError):
    """Unknown device, or tensors on different devices in one operation."""


class MissingKernelError(TenferroError, NotImplementedError):
    """No kernel for a primitive on the backend asked to run it."""


class MissingRuleError(TenferroError, NotImplementedError):
    """No AD rule (jvp, transpose, vjp) registered for an operation."""


class MissingExtensionError(TenferroError, AttributeError):
    """An op family (linalg, fft, ...) is used but its package is not installed."""


class KernelError(TenferroError, RuntimeError):
    """A backend kernel raised, or returned a result that does not match the op's abstract
    eval (buffer type, shape, dtype). Names primitive, backend and device; the kernel's own
    exception is chained as ``__cause__``."""


class KernelMemoryError(KernelError, MemoryError):
    """A kernel could not allocate its result (also a `MemoryError`, on every backend)."""


class LinAlgError(TenferroError, _np.linalg.LinAlgError):
    """A matrix is singular or not positive definite, a decomposition did not converge, or
    its input holds NaN/inf. Also a `numpy.linalg.LinAlgError` (a ValueError)."""


class ConcretizationError(TenferroError, TypeError):
    """A concrete value was needed where only an abstract (traced) one exists."""


class PluginError(TenferroError, RuntimeError):
    """A plugin failed to load or made an invalid or duplicate registration."""


class EnergyBudgetExceeded(TenferroError, RuntimeError):
    """An `energy_budget` region used more energy than allowed (or drew more power): `spent`
    (joules, or watts when `unit` is "W"), the `budget` it crossed and `where` it stopped (the
    op or optimizer step that was refused)."""

    def __init__(self, message: str, spent: float | None = None, budget: float | None = None,
                 where: str | None = None, unit: str = "J"):
        super().__init__(message)
        self.spent = spent
        self.budget = budget
        self.where = where
        self.unit = unit


class MeterError(TenferroError, RuntimeError):
    """An energy meter could not be read, or returned what no device can do (negative, NaN, a
    counter that goes back without a documented wraparound, a jump implying more power than
    one device draws); accounting then labels the region and falls back to the next meter or
    the estimate. Also importable from `tenferro_core.energy`."""


class TenferroIOError(TenferroError, OSError):
    """The operating system refused a file tenferro reads or writes (a read-only folder, a
    full disk, a directory where a file was expected). Also an `OSError` carrying the
    original `errno`; the message names the path (also in `filename`), and the cause is
    chained as ``__cause__``."""

    def __init__(self, message: str, errno: int | None = None, filename: str | None = None):
        super().__init__(message)
        self.errno = errno
        self.strerror = _os.strerror(errno) if errno else None
        self.filename = filename

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> tuple:
        return type(self), (str(self), self.errno, self.filename)


class ArgumentValueError(ArgumentError, ValueError):
    """A non-tensor argument has the right type but a bad value (an unknown `ord` or `mode`, a
    negative tolerance). Also a `ValueError`, as NumPy raises; an `ArgumentError` as before."""


class LinAlgShapeError(ShapeError, _np.linalg.LinAlgError):
    """A linalg operand is not a (stack of) matrix, or not square where it must be. Also a
    `numpy.linalg.LinAlgError`, as NumPy raises for it."""


__all__ = [
    "TenferroError",
    "ShapeError",
    "AxisError",
    "TenferroIndexError",
    "DTypeError",
    "ArgumentError",
    "DeviceError",
    "MissingKernelError",
    "MissingRuleError",
    "KernelError",
    "KernelMemoryError",
    "MissingExtensionError",
    "LinAlgError",
    "ConcretizationError",
    "PluginError",
    "EnergyBudgetExceeded",
    "MeterError",
    "TenferroIOError",
    "ArgumentValueError",
    "LinAlgShapeError",
]
