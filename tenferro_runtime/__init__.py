"""tenferro_runtime: Runtime, Tensor, dispatch, tracing and the Array API namespace."""

from __future__ import annotations

from tenferro_core.primitive import set_binder

from . import array_api, debug, lax, pytree, random
from . import tensor as _tensor
from .compiled import compile
from .dispatch import bind
from .graph import Graph, eval_graph, trace
from .runtime import Device, Runtime, default_device, default_runtime, reset_default_runtime, use_runtime
from .tensor import Tensor
from .tracing import Observer, Trace, Tracer, new_trace

# The one place the layers are wired, by injection: the core's Primitive.bind calls the
# runtime's bind, and Tensor's methods and operators delegate to the namespace.
set_binder(bind)
_tensor.use_namespace(array_api)

__version__ = "0.1.0"
__all__ = [
    "Device", "Graph", "Observer", "Runtime", "Tensor", "Trace", "Tracer", "array_api", "bind", "compile",
    "debug",
    "default_device", "default_runtime", "eval_graph", "lax", "new_trace", "pytree", "random",
    "reset_default_runtime", "trace", "use_runtime",
]
