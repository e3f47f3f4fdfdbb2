"""A namespace conforming to the Python Array API standard 2025.12.

float16 and bfloat16 are extras beyond the standard: the names are here, but
`__array_namespace_info__().dtypes()` lists only the standard dtypes. So is `logaddexp2`
(NumPy's, PyTorch's and JAX's).

`linalg` and `fft` resolve to the installed extension packages (registered
through the plugin hook); without them they raise MissingExtensionError, an
AttributeError, so ``hasattr(xp, "linalg")`` stays honest.
"""

from __future__ import annotations

import math as _math
import sys as _sys

from tenferro_core.dtypes import (
    bfloat16,
    complex64,
    complex128,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from tenferro_core.dtypes import (  # noqa: F401
    bool_ as bool,
)
from tenferro_core.errors import MissingExtensionError as _MissingExtensionError

from . import _indexing
from ._creation import *  # noqa: F403
from ._data_types import *  # noqa: F403
from ._elementwise import *  # noqa: F403
from ._indexing import *
from ._info import __array_namespace_info__  # noqa: F401
from ._linalg_core import *  # noqa: F403
from ._manipulation import *  # noqa: F403
from ._searching import *  # noqa: F403
from ._set import *  # noqa: F403
from ._sorting import *  # noqa: F403
from ._statistical import *  # noqa: F403
from ._utility import *  # noqa: F403

__array_api_version__ = "2025.12"

e = _math.e
inf = _math.inf
nan = _math.nan
pi = _math.pi
newaxis = None

_EXTENSIONS = {"linalg": "tenferro-linalg (pip install extensions/linalg)",
               "fft": "tenferro-fft (pip install extensions/fft)"}


def __getattr__(name: str):
    if name in _EXTENSIONS:
        from ..runtime import default_runtime

        rt = default_runtime()
        mod = rt.namespaces.get(name)
        off = rt.disabled_plugins(f"tenferro_{name}") if mod is None else ()
        if off:
            raise _MissingExtensionError(f"array_api.{name} is not available: {'; '.join(off)}")
        if mod is None:
            raise _MissingExtensionError(
                f"array_api.{name} is provided by the package {_EXTENSIONS[name]}, which is not "
                f"installed (or was disabled); install it to use {name}"
            )
        return mod
    raise AttributeError(f"module 'tenferro_runtime.array_api' has no attribute {name!r}")
