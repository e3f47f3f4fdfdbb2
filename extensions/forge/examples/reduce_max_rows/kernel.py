"""reduce_max over the last axis of a matrix with short rows (2..64 elements): one compiled
(numba) loop over the rows.

NumPy's reduce pays its inner-loop set-up once per output row, which dominates when rows are
short; the compiled loop reads each row once with no per-row set-up. NaN propagates as in
np.max. Other axes, ranks and longer rows use np.max itself."""

import numba
import numpy as np


@numba.njit(nogil=True)
def _row_max(x, out):
    for i in range(x.shape[0]):
        best = x[i, 0]
        for j in range(1, x.shape[1]):
            v = x[i, j]
            if v > best or v != v:  # v != v: a NaN wins, as in np.max
                best = v
        out[i] = best
    return out


def kernel(x, *, axes):
    if x.ndim == 2 and axes == (1,) and 2 <= x.shape[1] <= 64:
        return _row_max(x, np.empty(x.shape[0], x.dtype))
    out = np.asarray(np.max(x, axis=axes))
    return out.copy() if np.shares_memory(out, x) else out
