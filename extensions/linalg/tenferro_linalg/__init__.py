"""tenferro-linalg: the Array API ``linalg`` extension, plus eig/eigvals, lu/lu_factor/
lu_solve, lstsq, solve_triangular and expm, all batched over leading dimensions.

Every op is an extension op (``tenferro_linalg.<op>.v1``) with a shape rule, a NumPy/SciPy
kernel and AD rules, registered through the plugin hook exactly like a user's custom op.
Once installed it is also ``tenferro_runtime.array_api.linalg``.
"""

from __future__ import annotations

from ._decomp import *  # noqa: F403
from ._decomp import __all__ as _decomp_all
from ._products import *  # noqa: F403
from ._products import __all__ as _products_all
from ._solve import *  # noqa: F403
from ._solve import __all__ as _solve_all

__version__ = "0.1.0"
__all__ = sorted({*_decomp_all, *_solve_all, *_products_all})
