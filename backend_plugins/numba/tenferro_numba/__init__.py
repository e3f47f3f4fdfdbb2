"""tenferro-numba: large fused elementwise groups on numpy devices as generated parallel
numba loops (the ``numba`` executor, default for numpy devices once installed)."""

from .codegen import Unsupported
from .executor import compile_graph

__all__ = ["Unsupported", "compile_graph"]
