"""A Llama decoder's cache-free full-sequence forward, as a `tenferro_nn.Module`: token ids
(batch, seq) -> logits (batch, seq, vocab), for export (ONNX) and scoring.

The engine's `LlamaModel.forward` reads and writes a paged KV cache through an effectful op
and builds its attention plan and rotary tables on the host from Python-level sizes; neither
can be exported with a dynamic sequence axis. This module runs the same math on the same
weight tensors (the fused, gain-folded q/k/v and gate/up matrices of `LlamaModel`) with every
size-dependent value derived from the input at run time: positions are a cumulative sum over
ones shaped like the ids, the causal mask compares two views of those positions, and the
rotary angles are computed in float64 from them (as the engine does on the host).
"""

from __future__ import annotations

import math

import numpy as np

from tenferro_core.errors import ArgumentError, DTypeError, ShapeError
from tenferro_nn.module import Module
from tenferro_runtime import array_api as xp
from tenferro_runtime import lax
from tenferro_runtime.tensor import Tensor

from .common import linear
from .llama import LlamaModel


class LlamaFullSequence(Module):
    """`LlamaModel`'s weights (shared, not copied) behind a full-sequence causal forward.
    Tensors are named by path (``embed``, ``layers.0.qkv``, ``norm``, ``lm_head`` unless tied,
    ``rot``, ``inv_freq``), so an ONNX export names its initializers after them."""

    def __init__(self, model: LlamaModel) -> None:
        super().__init__()
        if not isinstance(model, LlamaModel):
            raise ArgumentError(f"LlamaFullSequence expects a LlamaModel (build_model of a 'llama' "
                                f"config), got {type(model).__name__}")
        self.config = model.config
        self.embed = model.embed
        self.lm_head = model.lm_head  # the embedding itself when tied: one tensor, one leaf
        self.norm = model.norm
        self.layers = [dict(lw) for lw in model.layers]
        self.register_buffer("rot", model._rot)
        self.register_buffer("inv_freq", xp.asarray(np.asarray(model._inv_freq, np.float64),
                                                    device=model.device))

    def _rms(self, x: Tensor) -> Tensor:
        ss = xp.sum(x * x, axis=-1, keepdims=True)
        return x * lax.rsqrt(ss * (1.0 / self.config.hidden_size) + self.config.norm_eps)

    def forward(self, ids: Tensor) -> Tensor:
        """Logits (batch, seq, vocab) of int token ids (batch, seq); position i attends to 0..i."""
        c = self.config
        if not isinstance(ids, Tensor) or ids.ndim != 2:
            raise ShapeError(f"LlamaFullSequence: expected token ids of shape (batch, seq), got "
                             f"{getattr(ids, 'shape', type(ids).__name__)}; add a batch axis with "
                             f"ids[None]")
        if ids.dtype.kind not in "iu":
            raise DTypeError(f"LlamaFullSequence: token ids must be integers, got {ids.dtype}")
        b, t = ids.shape
        if t == 0:  # no positions, no logits (attention's max has no empty identity)
            return xp.zeros((b, 0, c.vocab_size), dtype=xp.float32, device=self.embed.device)
        h, hkv, d = c.n_heads, c.n_kv_heads, c.head_dim
        if ids.dtype != xp.int64:
            ids = xp.astype(ids, xp.int64)
        pos = lax.cumsum(ids * 0 + 1, axis=1) - 1  # (b, t): 0..t-1, traced from the input
        # causal bias (b, 1, 1, t, t): 0 where key <= query, -inf after. Its fill values and
        # the query scale are traced (b, 1, 1) values, not Python scalars, which tracing would
        # materialize at the partner's full shape (at export's sentinel sizes, 1e9 elements)
        zero = xp.astype(pos[:, :1, None] * 0, xp.float32)
        bias = xp.where(pos[:, :, None] >= pos[:, None, :], zero, zero - math.inf)[:, None, None]
        scale = (zero + 1.0 / math.sqrt(d))[:, :, :, None, None]  # (b, 1, 1, 1, 1)
        f = xp.astype(pos, xp.float64)[:, :, None] * self.inv_freq  # (b, t, d/2), as the engine
        emb = xp.reshape(xp.concat([f, f], axis=-1), (b * t, 1, d))
        cos, sin = xp.astype(xp.cos(emb), xp.float32), xp.astype(xp.sin(emb), xp.float32)
        x = xp.take(self.embed, xp.reshape(ids, (b * t,)), axis=0)  # (b*t, hidden)
        for lw in self.layers:
            qkv = xp.reshape(linear(self._rms(x), lw["qkv"]), (b * t, h + 2 * hkv, d))
            qk, v = qkv[:, :h + hkv], qkv[:, h + hkv:]
            rot = xp.reshape(xp.matmul(xp.reshape(qk, (b * t * (h + hkv), d)), self.rot), (b * t, h + hkv, d))
            qk = qk * cos + rot * sin
            a = _causal_attention(qk[:, :h], qk[:, h:], v, bias, scale, b, t)
            x = x + linear(a, lw["o"])
            gu = linear(self._rms(x), lw["gate_up"])
            g, u = gu[:, :c.intermediate_size], gu[:, c.intermediate_size:]
            x = x + linear(g * lax.logistic(g) * u, lw["down"])
        logits = linear(self._rms(x) * self.norm, self.lm_head)
        return xp.reshape(logits, (b, t, c.vocab_size))


def _causal_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, scale: Tensor, b: int, t: int) -> Tensor:
    """softmax(q k^T * scale + bias) v with grouped-query heads: q (b*t, h, d), k/v (b*t, hkv,
    d), bias (b, 1, 1, t, t), scale (b, 1, 1, 1, 1); (b*t, h*d) rows, as `dense_attention`
    lays them out."""
    h, d = q.shape[1], q.shape[2]
    hkv = k.shape[1]
    g = h // hkv
    qs = xp.reshape(q, (b, t, hkv, g, d)) * scale
    qs = xp.reshape(xp.permute_dims(qs, (0, 2, 3, 1, 4)), (b, hkv, g * t, d))
    kc = xp.permute_dims(xp.reshape(k, (b, t, hkv, d)), (0, 2, 3, 1))  # (b, hkv, d, t)
    vc = xp.permute_dims(xp.reshape(v, (b, t, hkv, d)), (0, 2, 1, 3))  # (b, hkv, t, d)
    scores = xp.reshape(xp.matmul(qs, kc), (b, hkv, g, t, t))
    scores = xp.reshape(scores + bias, (b, hkv, g * t, t))
    e = xp.exp(scores - xp.max(scores, axis=-1, keepdims=True))
    o = xp.matmul(e / xp.sum(e, axis=-1, keepdims=True), vc)  # (b, hkv, g*t, d)
    return xp.reshape(xp.permute_dims(xp.reshape(o, (b, hkv, g, t, d)), (0, 3, 1, 2, 4)), (b * t, h * d))


__all__ = ["LlamaFullSequence"]
