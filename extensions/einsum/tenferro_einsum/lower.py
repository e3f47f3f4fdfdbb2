"""Executing an einsum plan with core primitives: diagonals by gather, sums by
reduce_sum, pairwise contractions by dot_general, the output order by transpose."""

from __future__ import annotations

from typing import Any

from tenferro_core import dtypes as D
from tenferro_runtime import lax


def _iota(n: int, device: Any) -> Any:
    return lax.iota(dtype=D.DEFAULT_INDEX, shape=(n, 1), dimension=0, device=device)


def prepare(x: Any, term: str, sizes: dict[str, int]) -> tuple[Any, str]:
    """Broadcast size-1 axes to their index size and take diagonals of repeated indices."""
    target = tuple(sizes[c] for c in term)
    if target != x.shape:
        x = lax.broadcast_in_dim(lax.reshape(x, new_sizes=tuple(n for n in x.shape if n != 1)),
                                 shape=target,
                                 broadcast_dimensions=tuple(i for i, n in enumerate(x.shape) if n != 1))
    while len(set(term)) != len(term):
        c = next(c for c in term if term.count(c) > 1)
        axes = tuple(i for i, d in enumerate(term) if d == c)
        idx = _iota(sizes[c], x.device)
        if len(axes) > 1:
            idx = lax.concatenate(*[idx] * len(axes), dimension=1)
        x = lax.gather(x, idx, axes=axes)  # output: the diagonal index first, then the rest
        term = c + "".join(d for d in term if d != c)
    return x, term


def sum_out(x: Any, term: str, keep: set[str]) -> tuple[Any, str]:
    axes = tuple(i for i, c in enumerate(term) if c not in keep)
    if not axes:
        return x, term
    return lax.reduce_sum(x, axes=axes), "".join(c for c in term if c in keep)


def contract(a: Any, ta: str, b: Any, tb: str, needed: set[str]) -> tuple[Any, str]:
    """One pairwise step as a dot_general: shared needed indices are batch, shared others
    are contracted; output indices are batch, a's free, b's free."""
    a, ta = sum_out(a, ta, needed | set(tb))
    b, tb = sum_out(b, tb, needed | set(ta))
    batch = [c for c in ta if c in tb and c in needed]
    summed = [c for c in ta if c in tb and c not in needed]
    out = lax.dot_general(
        a, b,
        contracting_dims=(tuple(ta.index(c) for c in summed), tuple(tb.index(c) for c in summed)),
        batch_dims=(tuple(ta.index(c) for c in batch), tuple(tb.index(c) for c in batch)),
    )
    free_a = "".join(c for c in ta if c not in tb)
    free_b = "".join(c for c in tb if c not in ta)
    return out, "".join(batch) + free_a + free_b


def execute(operands: list[Any], terms: list[str], output: str, sizes: dict[str, int],
            path: list[tuple[int, ...]]) -> Any:
    ops = [prepare(x, t, sizes) for x, t in zip(operands, terms)]
    for step in path:
        picked = [ops[i] for i in step]
        for i in sorted(step, reverse=True):
            del ops[i]
        needed = set(output).union(*[set(t) for _, t in ops])
        x, t = picked[0]
        if len(picked) == 1:
            x, t = sum_out(x, t, needed)
        for y, ty in picked[1:]:
            rest = set().union(*[set(tt) for _, tt in picked if tt is not ty and tt is not t])
            x, t = contract(x, t, y, ty, needed | rest)
        ops.append((x, t))
    while len(ops) > 1:  # a path that leaves several operands: fold them left to right
        (x, t), (y, ty) = ops[0], ops[1]
        needed = set(output).union(*[set(tt) for _, tt in ops[2:]])
        ops = [contract(x, t, y, ty, needed)] + ops[2:]
    x, t = sum_out(*ops[0], set(output))
    if t != output:
        x = lax.transpose(x, permutation=tuple(t.index(c) for c in output))
    return x
