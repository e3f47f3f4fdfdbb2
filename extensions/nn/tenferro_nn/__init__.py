"""tenferro-nn: modules, layers, losses, optimizers, data loading and safetensors serialization.

Modules are registered pytrees (`tenferro_nn.module`), so models pass through `grad`,
`GradientTape` and `compile` like any tensor container, and optimizers keep their state as
pytrees, so a whole train step compiles into one graph.
"""

from __future__ import annotations

from .module import LoadResult, Module, StateDictError, map_tensors, trainable_mask

__version__ = "0.1.0"
__all__ = ["LoadResult", "Module", "StateDictError", "map_tensors", "trainable_mask"]
