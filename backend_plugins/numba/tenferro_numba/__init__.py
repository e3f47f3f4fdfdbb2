"""tenferro-numba: large fused elementwise groups on numpy:cpu and torch:cpu as generated numba
loops (the ``numba`` executor, the default there once installed)."""

from .codegen import Unsupported
from .executor import compile_graph

__all__ = ["Unsupported", "compile_graph"]
