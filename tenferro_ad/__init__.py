"""tenferro_ad: automatic differentiation driven by rules registered as plugins.

Traced transforms (jvp, linearize, vjp, grad, value_and_grad, jacfwd, jacrev,
hessian, custom_jvp, custom_vjp, vmap) nest to any order; the eager GradientTape uses
the same rules.
"""

from __future__ import annotations

from . import checkpoint_policies
from .ad_util import UndefinedPrimal, Zero
from .api import (
    hessian,
    jacfwd,
    jacrev,
    jvp,
    linearize,
    transpose_graph,
    vjp,
)
from .batching import PerformanceWarning, vmap
from .checkpoint import checkpoint, remat
from .custom import custom_jvp, custom_vjp
from .grads import grad, value_and_grad
from .stop_gradient import stop_gradient
from .tape import GradientTape

__version__ = "0.1.0"
__all__ = [
    "GradientTape", "checkpoint", "checkpoint_policies", "custom_jvp", "custom_vjp", "UndefinedPrimal",
    "Zero", "grad", "hessian",
    "jacfwd", "jacrev", "jvp", "linearize",
    "remat", "stop_gradient", "transpose_graph", "value_and_grad", "vjp", "vmap", "PerformanceWarning",
]
