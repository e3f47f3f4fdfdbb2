"""Entry point of tenferro-infer: the cost rules of its two ops (`kv_update_p`,
`paged_attention_p`), which the energy estimate reads for every decode step. Its models are
otherwise compositions of core primitives and tenferro-nn functions; the ops run their
kernels through their decompositions, so no kernels are registered."""

from __future__ import annotations

import math

from tenferro_core.catalog.cost import TRANSCENDENTAL_FLOPS, Cost
from tenferro_core.plugins import hookimpl


def _nbytes(aval) -> int:
    return math.prod(aval.shape) * aval.dtype.itemsize


def kv_update_cost(in_avals, out_avals, **_) -> Cost:
    """Nothing computed; the new rows written and the gathered rows read and written (not the
    pools: only their written and read slots move)."""
    _, _, write, k_new, v_new, read = in_avals
    return Cost(0, 2 * (_nbytes(k_new) + _nbytes(v_new)) + _nbytes(write) + _nbytes(read)
                + 2 * sum(_nbytes(o) for o in out_avals))


def paged_attention_cost(in_avals, out_avals, *, width, **_) -> Cost:
    """kv_update's, then q k^T and p v (2 flops a term each) and the softmax (an exp and four
    more operations per score), reading q and the gathered rows and writing the result."""
    k_pool, v_pool, write, k_new, v_new, read, q, *extra = in_avals
    b, c = read.shape
    h, d = q.shape[1], q.shape[2]
    hkv = k_pool.shape[2]
    scores = b * h * width * c
    gathered = 2 * b * c * hkv * d * k_pool.dtype.itemsize
    write_bytes = 2 * (_nbytes(k_new) + _nbytes(v_new)) + _nbytes(write) + _nbytes(read)
    flops = 4 * scores * d + scores * (TRANSCENDENTAL_FLOPS + 4)
    return Cost(flops, write_bytes + 2 * gathered + _nbytes(q) + sum(map(_nbytes, extra))
                + _nbytes(out_avals[0]))


@hookimpl
def tenferro_register(registry) -> None:
    from tenferro_infer.attention import kv_update_p, paged_attention_p

    registry.add_rule("cost", kv_update_p, kv_update_cost)
    registry.add_rule("cost", paged_attention_p, paged_attention_cost)
