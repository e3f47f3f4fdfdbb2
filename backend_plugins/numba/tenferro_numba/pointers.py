"""Buffers handed to generated functions by address.

On torch:cpu a group's input tensors reach its numba function as their data pointers: a
``Tensor.numpy()`` view costs ~1.2 us a call (an Adam update over 34 tensors: ~0.1 ms a step),
``Tensor.data_ptr()`` ~0.15 us. The function views each address as an array of the input's
shape and dtype (``numba.carray``); the caller holds the tensors, C-contiguous, for the call.
Imported by generated sources only (numba is then already imported).
"""

from __future__ import annotations

from numba import types
from numba.extending import intrinsic


@intrinsic
def voidptr(typingctx, address):  # noqa: ARG001  (numba's intrinsic signature)
    """The integer `address` as a ``void *`` (for ``numba.carray(voidptr(a), shape, dtype)``)."""
    if not isinstance(address, types.Integer):
        return None

    def codegen(context, builder, signature, args):  # noqa: ARG001
        return builder.inttoptr(args[0], context.get_value_type(types.voidptr))

    return types.voidptr(address), codegen


__all__ = ["voidptr"]
