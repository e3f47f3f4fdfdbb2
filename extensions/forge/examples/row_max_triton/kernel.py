"""Row maxima over the trailing axes of a few long rows (8 x 262144, 16 x 131072) on a GPU,
split across the whole device instead of one program per row.

The Triton executor's generated row kernel (tenferro_triton.rows) gives each program whole
rows: rows longer than 16384 columns are looped over 4096 columns at a time by one program,
so 8 rows keep 8 of an H100's 132 SMs busy while the rest idle. Here each row is cut into
chunks of whole BLOCK-column steps, about a thousand programs in all: each reduces its chunk
into one partial maximum, and a second launch (one program per row) reduces the partials.
NaN propagates as in NumPy and torch: `tl.maximum(..., propagate_nan=ALL)` (the GPU's
max.NaN) in the loops, and a NaN flag beside `tl.max` for the last step (tl.max drops NaN).
"""

import torch
import triton
import triton.language as tl

BLOCK = 2048
"""Columns a program loads per step (8 KB of float32)."""
PROGRAMS = 1024
"""About how many first-stage programs a call launches (a few per SM: one wave)."""
FINAL_BLOCK = 256
"""Partials the second stage loads per step."""


@triton.jit
def _max_nan(acc):
    """The maximum of a block, NaN when it holds one (tl.max alone drops NaN on a GPU)."""
    nan = tl.max((acc != acc).to(tl.int32), 0)
    return tl.where(nan > 0, float("nan"), tl.max(acc, 0)).to(acc.dtype)


@triton.jit
def _chunk_max(x_ptr, part_ptr, cols, per, chunks, BLOCK: tl.constexpr):
    """part[row, chunk] = max of x[row, chunk * per : (chunk + 1) * per]."""
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    start = chunk.to(tl.int64) * per
    stop = tl.minimum(start + per, cols)
    base = x_ptr + row * cols
    acc = tl.full([BLOCK], float("-inf"), x_ptr.dtype.element_ty)
    for c0 in range(start, stop, BLOCK):
        offs = c0 + tl.arange(0, BLOCK)
        v = tl.load(base + offs, mask=offs < stop, other=float("-inf"))
        acc = tl.maximum(acc, v, propagate_nan=tl.PropagateNan.ALL)
    tl.store(part_ptr + row * chunks + chunk, _max_nan(acc))


@triton.jit
def _rows_max(part_ptr, out_ptr, chunks, BLOCK: tl.constexpr):
    """out[row] = max of part[row, :chunks]."""
    row = tl.program_id(0).to(tl.int64)
    acc = tl.full([BLOCK], float("-inf"), part_ptr.dtype.element_ty)
    for c0 in range(0, chunks, BLOCK):
        offs = c0 + tl.arange(0, BLOCK)
        v = tl.load(part_ptr + row * chunks + offs, mask=offs < chunks, other=float("-inf"))
        acc = tl.maximum(acc, v, propagate_nan=tl.PropagateNan.ALL)
    tl.store(out_ptr + row, _max_nan(acc))


def kernel(x, *, axes):
    """Maxima of `x` over `axes` (any axes: they are moved last, the rows made contiguous)."""
    nd = x.dim()
    keep = [d for d in range(nd) if d not in axes]
    lead = [x.shape[d] for d in keep]
    rows = 1
    for n in lead:
        rows *= n
    cols = 1
    for d in axes:
        cols *= x.shape[d]
    out = torch.empty(lead, dtype=x.dtype, device=x.device)
    if rows == 0:
        return out
    rows_x = x.permute(keep + list(axes)).contiguous()
    chunks = max(1, min(triton.cdiv(cols, BLOCK), triton.cdiv(PROGRAMS, rows)))
    per = triton.cdiv(triton.cdiv(cols, chunks), BLOCK) * BLOCK
    chunks = triton.cdiv(cols, per)
    part = torch.empty((rows, chunks), dtype=x.dtype, device=x.device)
    _chunk_max[(rows, chunks)](rows_x, part, cols, per, chunks, BLOCK=BLOCK)
    _rows_max[(rows,)](part, out, chunks, BLOCK=FINAL_BLOCK)
    return out
