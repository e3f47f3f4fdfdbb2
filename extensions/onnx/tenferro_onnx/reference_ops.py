"""Corrections to onnx's reference evaluator, used where it checks exported models.

onnx 1.23's reference `Loop` stacks scan outputs with ``np.vstack``: per-iteration scalars
come out (N, 1) and values of rank 2 or more are concatenated, (N * k, ...), where ONNX
stacks them on a new leading axis, (N, ...), as onnxruntime does; a zero-trip loop fails.
`Loop` here reshapes the stack to (trips, *element shape) and, after zero trips, gives empty
stacks of the body's declared element shape and dtype.
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


def _empty_stack(value_info: Any) -> np.ndarray:
    import onnx

    t = value_info.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    if None in dims:
        raise ValueError(f"a zero-trip Loop's scan output {value_info.name!r} has no static shape")
    return np.empty((0, *dims), onnx.helper.tensor_dtype_to_np_dtype(t.elem_type))
