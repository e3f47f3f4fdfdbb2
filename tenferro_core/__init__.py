"""tenferro_core: dtypes, avals, primitives, the backend and extension contracts,
plugin hooks, energy contract and errors. Depends on numpy and pluggy only."""

from __future__ import annotations

from . import catalog, dtypes
from .avals import Aval
from .dtypes import DType
from .errors import *  # noqa: F403
from .errors import __all__ as _errors_all
from .extension import define_op
from .plugins import hookimpl
from .primitive import Primitive

__version__ = "0.1.0"
__all__ = ["Aval", "DType", "Primitive", "catalog", "define_op", "dtypes", "hookimpl", *_errors_all]
