"""Batch rule of the whole-contraction op: a fresh index letter for the batch."""

from __future__ import annotations

import string

from tenferro_ad.batching import batch_first, batch_size, loop_batch

from .native import _split, contract_p


def contract_batch(args: tuple, dims: tuple, *, spec: str, path: tuple) -> tuple:
    """Each batched operand gets its batch axis first under a letter the spec does not use,
    and so does the output; shared operands keep their terms (no broadcast), and the
    opt_einsum path (over operand positions) still holds. The equation stays multilinear
    and transposable, since the new letter appears in the output."""
    free = [c for c in string.ascii_letters if c not in spec]
    if not free:  # all 52 letters taken: the examples one by one
        return loop_batch(contract_p, args, dims, batch_size(args, dims), spec=spec, path=path)
    b = free[0]
    terms, out = _split(spec)
    terms = [t if d is None else b + t for t, d in zip(terms, dims)]
    xs = batch_first(args, dims)[0]
    new = ",".join(terms) + "->" + b + out
    return contract_p.bind(*xs, spec=new, path=path), 0


__all__ = ["contract_batch"]
