"""Backend kernels of tenferro-infer's two ops: buffers in, buffers out, pools written in place.

`KV_UPDATE[backend]` writes a step's new K/V rows into their pool slots and gathers the
slots a step reads (`kv_update_p`). `PAGED_ATTENTION[backend]` does that and the attention
of the step's queries over the gathered rows (`paged_attention_p`) in one call: the same
math as `attention._attend_arrays` (the op's decomposition), written straight in NumPy or
torch. A decode step calls it once per layer, and as a compiled tenferro graph it was 20
plan steps plus a dispatch of `kv_update_p`: ~190 us a layer on the 2-core VM once the
weights' streaming had evicted the caches, ~55 us as one kernel (docs/performance.md).
"""

from __future__ import annotations

import math
from typing import Any


def numpy_kv_update(k_pool, v_pool, write, k_new, v_new, read):
    n, bs, h, d = k_pool.shape
    kf, vf = k_pool.reshape(n * bs, h, d), v_pool.reshape(n * bs, h, d)  # views: pools are contiguous
    if write.shape[0]:
        kf[write] = k_new
        vf[write] = v_new
    return kf.take(read, axis=0), vf.take(read, axis=0)  # fancy indexing's result, a third faster


def torch_kv_update(k_pool, v_pool, write, k_new, v_new, read):
    n, bs, h, d = k_pool.shape
    kf, vf = k_pool.view(n * bs, h, d), v_pool.view(n * bs, h, d)
    if write.shape[0]:
        kf.index_copy_(0, write, k_new)
        vf.index_copy_(0, write, v_new)
    flat = read.reshape(-1)
    shape = tuple(read.shape) + (h, d)
    return kf.index_select(0, flat).reshape(shape), vf.index_select(0, flat).reshape(shape)


def numpy_paged_attention(k_pool, v_pool, write, k_new, v_new, read, q, q_index, out_index, mask,
                          width: int):
    """(tokens, n_heads * d) attention of `q` over the slots `read` after writing the new K/V."""
    import numpy as np

    kc, vc = numpy_kv_update(k_pool, v_pool, write, k_new, v_new, read)  # (b, c, hkv, d)
    t, h, d = q.shape
    b, c, hkv = kc.shape[0], kc.shape[1], kc.shape[2]
    g, w = h // hkv, width
    with np.errstate(over="ignore", invalid="ignore", under="ignore", divide="ignore"):
        qs = np.multiply(q, q.dtype.type(1.0 / math.sqrt(d)))
        if q_index is not None:
            qs = qs[q_index]
        qs = qs.reshape(b, w, hkv, g, d).transpose(0, 2, 3, 1, 4).reshape(b, hkv, g * w, d)
        scores = np.matmul(qs, kc.transpose(0, 2, 3, 1))  # (b, hkv, g*w, c)
        if mask is not None:
            scores = np.where(mask, scores.reshape(b, hkv, g, w, c), -np.inf).reshape(b, hkv, g * w, c)
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        p = e / e.sum(axis=-1, keepdims=True)
        o = np.matmul(p, vc.transpose(0, 2, 1, 3))  # (b, hkv, g*w, d)
    o = o.reshape(b, hkv, g, w, d).transpose(0, 3, 1, 2, 4).reshape(b * w, h * d)
    return np.ascontiguousarray(o if out_index is None else o[out_index])


SMALL_SCORES = 1 << 15
"""Scores (batch x heads x queries x context) up to which the torch kernel runs on one CPU
thread: torch's exp calls MKL's VML, which wakes the whole OpenMP pool even for a decode
step's few hundred scores (tenferro_torch/threads.py does the same for its own kernels)."""


def torch_paged_attention(k_pool, v_pool, write, k_new, v_new, read, q, q_index, out_index, mask,
                          width: int):
    """`numpy_paged_attention` in torch ops."""
    import torch

    n = torch.get_num_threads()
    one = q.device.type == "cpu" and n > 1 and q.shape[1] * width * read.numel() <= SMALL_SCORES
    if one:
        torch.set_num_threads(1)
    try:
        return _torch_attention(k_pool, v_pool, write, k_new, v_new, read, q, q_index, out_index, mask, width)
    finally:
        if one:
            torch.set_num_threads(n)


def _torch_attention(k_pool, v_pool, write, k_new, v_new, read, q, q_index, out_index, mask, width):
    import torch

    kc, vc = torch_kv_update(k_pool, v_pool, write, k_new, v_new, read)
    t, h, d = q.shape
    b, c, hkv = kc.shape[0], kc.shape[1], kc.shape[2]
    g, w = h // hkv, width
    qs = q * (1.0 / math.sqrt(d))
    if q_index is not None:
        qs = qs.index_select(0, q_index)
    qs = qs.reshape(b, w, hkv, g, d).permute(0, 2, 3, 1, 4).reshape(b, hkv, g * w, d)
    scores = torch.matmul(qs, kc.permute(0, 2, 3, 1))
    if mask is not None:
        scores = torch.where(mask, scores.reshape(b, hkv, g, w, c), -math.inf)
        scores = scores.reshape(b, hkv, g * w, c)
    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    p = e / e.sum(dim=-1, keepdim=True)
    o = torch.matmul(p, vc.permute(0, 2, 1, 3))
    o = o.reshape(b, hkv, g, w, d).permute(0, 3, 1, 2, 4).reshape(b * w, h * d)
    return (o if out_index is None else o.index_select(0, out_index)).contiguous()


KV_UPDATE: dict[str, Any] = {"numpy": numpy_kv_update, "torch": torch_kv_update}
"""Kernels of `kv_update_p` per backend name."""

PAGED_ATTENTION: dict[str, Any] = {"numpy": numpy_paged_attention, "torch": torch_paged_attention}
"""Kernels of `paged_attention_p` per backend name (on CPU devices: on a GPU the op runs its
decomposition, which the triton executor compiles)."""

__all__ = ["KV_UPDATE", "PAGED_ATTENTION"]
