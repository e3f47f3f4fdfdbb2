"""Corrections to onnx's reference evaluator, used where it checks exported models.

onnx 1.23's reference `Loop` stacks scan outputs with ``np.vstack``: per-iteration scalars
come out (N, 1) and values of rank 2 or more are concatenated, (N * k, ...), where ONNX
stacks them on a new leading axis, (N, ...), as onnxruntime does; a zero-trip loop fails.
`Loop` here reshapes the stack to (trips, *element shape) and, after zero trips, gives empty
stacks of the body's declared element shape and dtype.

Its `Conv` with dilations > 1 inserts zeros between the kernel taps, so an input read only by
those holes multiplies them (NaN * 0 is NaN) where a dilated convolution never reads it: `Conv`
here gathers the dilated taps instead (onnx's own im2col takes dilations).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def loop_op() -> type:
    """The corrected `Loop` class, for ``ReferenceEvaluator(model, new_ops=[loop_op()])``."""
    import onnx
    from onnx.reference.ops.op_loop import Loop as ReferenceLoop

    class Loop(ReferenceLoop):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            run_body = self._run_body  # an instance attribute (OpRun binds the subgraph)

            def counted(*a: Any, **kw: Any) -> Any:
                outputs = run_body(*a, **kw)
                self._trips += 1
                self._elements = [np.shape(o) for o in outputs[len(outputs) - self.K:]]
                return outputs

            self._run_body = counted

        def _run(self, M: Any, cond: Any, *args: Any, context: Any = None, body: Any = None,
                 attributes: Any = None, bindings: Any = None) -> Any:  # the signature is read
            if self.K and ((M is not None and int(M) <= 0) or (cond is not None and not bool(cond))):
                graph = onnx.helper.get_attribute_value(
                    next(a for a in self.onnx_node.attribute if a.name == "body"))
                empties = [_empty_stack(o) for o in graph.output[len(graph.output) - self.K:]]
                return (*args, *empties)
            self._trips, self._elements = 0, []  # a zero-trip loop without scan outputs
            outputs = list(super()._run(M, cond, *args, context=context, body=body, attributes=attributes,
                                        bindings=bindings))
            n = len(outputs) - self.K
            for k, shape in enumerate(self._elements):
                outputs[n + k] = outputs[n + k].reshape((self._trips, *shape))
            return tuple(outputs)

    return Loop


def conv_op() -> type:
    """The corrected `Conv` class (dilated kernels without inserted zeros)."""
    from onnx.reference.ops.op_conv import Conv as ReferenceConv
    from onnx.reference.ops.op_conv import im2col

    class Conv(ReferenceConv):
        def _run(self, X: Any, W: Any, B: Any = None, auto_pad: Any = None, dilations: Any = None,
                 group: Any = None, kernel_shape: Any = None, pads: Any = None,
                 strides: Any = None) -> Any:  # the signature is read
            if not dilations or all(d == 1 for d in dilations) or auto_pad not in (None, "NOTSET"):
                return super()._run(X, W, B, auto_pad, dilations, group, kernel_shape, pads, strides)
            nd, group = len(dilations), group or 1
            cols, out = im2col(X, W.shape[2:], pads or [0] * (2 * nd), strides or [1] * nd,
                               dilations)
            k = int(np.prod(W.shape[1:]))
            y = W.reshape(group, W.shape[0] // group, k) @ cols.reshape(group, k, cols.shape[1])
            y = y.reshape(group, W.shape[0] // group, X.shape[0], *out)
            y = y.transpose(2, 0, 1, *range(3, y.ndim)).reshape(X.shape[0], W.shape[0], *out)
            if B is not None:
                y = y + B.reshape(-1, *[1] * nd)
            return (y.astype(X.dtype),)

    return Conv


def _empty_stack(value_info: Any) -> np.ndarray:
    import onnx

    t = value_info.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    if None in dims:
        raise ValueError(f"a zero-trip Loop's scan output {value_info.name!r} has no static shape")
    return np.empty((0, *dims), onnx.helper.tensor_dtype_to_np_dtype(t.elem_type))
