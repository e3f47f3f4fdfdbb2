"""NumPy's math functions on tensors of Triton's CPU interpreter: what the generated name
``M`` means under ``TRITON_INTERPRET=1``, where libdevice does not run.

Each call maps the interpreter tensor's NumPy data. float16 and float32 data are computed
in float64 and rounded once, so results are correctly rounded but for rare double
roundings (NumPy's own float32 loops are up to 3 ulp off); the tests then hold the
generated code, not NumPy's float32 libm, to their ulp bounds. On a GPU, libdevice's
accuracy applies instead (1 to 4 ulp in float32, documented per function by NVIDIA)."""

from __future__ import annotations

from typing import Any

import numpy as np


def _wrap(np_fn: Any) -> Any:
    def fn(*xs: Any) -> Any:
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle

        first = xs[0]
        dtype = first.handle.data.dtype
        wide = np.float64 if dtype in (np.float16, np.float32) else dtype
        with np.errstate(all="ignore"):
            data = np_fn(*[np.asarray(x.handle.data, dtype=wide) for x in xs])
            data = np.asarray(data).astype(dtype)
        return tl.core.tensor(TensorHandle(data, first.handle.dtype), first.type)

    fn.__name__ = getattr(np_fn, "__name__", "fn")
    return fn


exp = _wrap(np.exp)
expm1 = _wrap(np.expm1)
log = _wrap(np.log)
log1p = _wrap(np.log1p)
sin = _wrap(np.sin)
cos = _wrap(np.cos)
tan = _wrap(np.tan)
asin = _wrap(np.arcsin)
acos = _wrap(np.arccos)
atan = _wrap(np.arctan)
sinh = _wrap(np.sinh)
cosh = _wrap(np.cosh)
tanh = _wrap(np.tanh)
asinh = _wrap(np.arcsinh)
acosh = _wrap(np.arccosh)
atanh = _wrap(np.arctanh)
sqrt = _wrap(np.sqrt)
rsqrt = _wrap(lambda x: np.reciprocal(np.sqrt(x)))
floor = _wrap(np.floor)
ceil = _wrap(np.ceil)
rint = _wrap(np.rint)
trunc = _wrap(np.trunc)
atan2 = _wrap(np.arctan2)
pow = _wrap(np.power)  # noqa: A001  (libdevice's name)
fmod = _wrap(np.fmod)
