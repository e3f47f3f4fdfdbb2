"""tenferro_ad: automatic differentiation (jvp, vjp, grad, GradientTape).

Placeholder until the AD issue lands; the package exists so the layering
(core <- runtime <- ad) is fixed from the start.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__: list[str] = []
