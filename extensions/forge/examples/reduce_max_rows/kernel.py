"""reduce_max over one short last axis (2..128 elements), as a tree of elementwise maxima.

NumPy's reduce pays its inner-loop set-up once per output row, which dominates when rows are
short; halving the row with np.maximum over whole column blocks runs log2(n) vectorized
passes instead. NaN propagates as in np.max (np.maximum propagates it). Other axes and long
rows use np.max itself."""

import numpy as np


def _tree(x):
    n = x.shape[-1]
    h = n // 2
    a = np.maximum(x[..., :h], x[..., h:2 * h])
    if n % 2:
        a[..., 0] = np.maximum(a[..., 0], x[..., -1])
    while a.shape[-1] > 1:
        m = a.shape[-1]
        h = m // 2
        b = np.maximum(a[..., :h], a[..., h:2 * h])
        if m % 2:
            b[..., 0] = np.maximum(b[..., 0], a[..., -1])
        a = b
    return a[..., 0].copy()


def kernel(x, *, axes):
    if x.ndim and axes == (x.ndim - 1,) and 2 <= x.shape[-1] <= 128:
        return _tree(x)
    out = np.asarray(np.max(x, axis=axes))
    return out.copy() if np.shares_memory(out, x) else out
