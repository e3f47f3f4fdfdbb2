"""A Llama-family decoder (SmolLM2, Llama 2/3): RMSNorm, rotary position embeddings in Hugging
Face's rotate_half convention, grouped-query attention through the paged KV cache, a SwiGLU
MLP and (optionally) tied embeddings, float32 on one tenferro device.

Per layer the q/k/v projections are one (q + 2 kv, hidden) matrix and gate/up one
(2 * intermediate, hidden) matrix, concatenated once at load with the RMSNorm gain that
precedes them folded in (``(x * g) @ W.T == x @ (W * g).T``), so a step runs four matrix
products per layer on the step's (tokens, hidden) rows; rotary embeddings rotate q and k
together.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, lax
from tenferro_runtime.tensor import Tensor

from ..config import ModelConfig
from ..errors import ModelFileError
from .common import StepBatch, attention, check_weights, device_tensor, finish, linear, prepare


def _rotate_half_matrix(d: int) -> np.ndarray:
    """R with x @ R == rotate_half(x) == concat(-x[d/2:], x[:d/2])."""
    r = np.zeros((d, d), np.float32)
    half = d // 2
    r[np.arange(half) + half, np.arange(half)] = -1.0
    r[np.arange(half), np.arange(half) + half] = 1.0
    return r


class LlamaModel:
    """A Llama decoder built from a config and a dict of NumPy weights (Hugging Face names)."""

    def __init__(self, config: ModelConfig, weights: dict[str, Any], device: Any = "numpy:cpu"):
        if config.arch != "llama":
            raise ModelFileError(f"LlamaModel needs a config with arch 'llama', got {config.arch!r}")
        if config.head_dim % 2:
            raise ModelFileError(f"{config.name}: rotary embeddings need an even head_dim, got "
                                 f"{config.head_dim}")
        check_weights(config, weights)
        self.config = config

        def dev(a: Any) -> Tensor:
            return device_tensor(a, device)

        self.embed = dev(weights["model.embed_tokens.weight"])
        self.device = self.embed.device
        self.lm_head = self.embed if config.tie_embeddings else dev(weights["lm_head.weight"])
        self.norm = dev(weights["model.norm.weight"])
        self.layers = []
        for i in range(config.n_layers):
            p = f"model.layers.{i}."
            w = {k: weights[p + k] for k in (
                "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                "mlp.down_proj.weight", "input_layernorm.weight", "post_attention_layernorm.weight")}
            self.layers.append({
                "qkv": dev(np.concatenate([w["self_attn.q_proj.weight"], w["self_attn.k_proj.weight"],
                                           w["self_attn.v_proj.weight"]]) * w["input_layernorm.weight"]),
                "o": dev(w["self_attn.o_proj.weight"]),
                "gate_up": dev(np.concatenate([w["mlp.gate_proj.weight"], w["mlp.up_proj.weight"]])
                               * w["post_attention_layernorm.weight"]),
                "down": dev(w["mlp.down_proj.weight"]),
            })
        d = config.head_dim
        self._inv_freq = 1.0 / (config.rope_theta ** (np.arange(0, d, 2, dtype=np.float64) / d))
        self._rot = dev(_rotate_half_matrix(d))
        # Everything of a layer but attention is row-wise: compiled once per row count (the
        # same functions serve every layer, weights are arguments), it runs as one generated
        # plan between two attentions (a layer's end and the next one's start) instead of ~35
        # eager ops.
        many = dict(maxsize=1024, recompile_warning=1 << 20)
        self._pre, self._post = compile(self._layer_pre, **many), compile(self._layer_post, **many)
        self._post_pre = compile(self._layer_post_pre, **many)

    def _rms(self, x: Tensor) -> Tensor:
        """x / rms(x); the gain is folded into the next projection (or applied by the caller)."""
        ss = xp.sum(x * x, axis=-1, keepdims=True)
        return x * lax.rsqrt(ss * (1.0 / self.config.hidden_size) + self.config.norm_eps)

    def _rope_tables(self, positions: np.ndarray) -> tuple[Tensor, Tensor]:
        """cos and sin (tokens, 1, head_dim) of the step's positions (HF: freqs repeated twice)."""
        f = positions[:, None].astype(np.float64) * self._inv_freq[None, :]
        emb = np.concatenate([f, f], axis=1)[:, None, :]
        return (xp.asarray(np.cos(emb).astype(np.float32), device=self.device),
                xp.asarray(np.sin(emb).astype(np.float32), device=self.device))

    def _layer_pre(self, x: Tensor, w_qkv: Tensor, cos: Tensor, sin: Tensor) -> tuple:
        """q, k (rotated) and v (tokens, heads, head_dim) of a layer's input rows."""
        c = self.config
        t, h, hkv, d = x.shape[0], c.n_heads, c.n_kv_heads, c.head_dim
        qkv = xp.reshape(linear(self._rms(x), w_qkv), (t, h + 2 * hkv, d))
        qk, v = qkv[:, :h + hkv], qkv[:, h + hkv:]
        rot = xp.reshape(xp.matmul(xp.reshape(qk, (t * (h + hkv), d)), self._rot), (t, h + hkv, d))
        qk = qk * cos + rot * sin
        return qk[:, :h], qk[:, h:], v

    def _layer_post(self, x: Tensor, a: Tensor, w_o: Tensor, w_gate_up: Tensor, w_down: Tensor) -> Tensor:
        """The layer's output rows: the attention's projection and the SwiGLU MLP, residuals added."""
        f = self.config.intermediate_size
        x = x + linear(a, w_o)
        gu = linear(self._rms(x), w_gate_up)
        g, u = gu[:, :f], gu[:, f:]
        return x + linear(g * lax.logistic(g) * u, w_down)

    def _layer_post_pre(self, x: Tensor, a: Tensor, w_o: Tensor, w_gate_up: Tensor, w_down: Tensor,
                        w_qkv: Tensor, cos: Tensor, sin: Tensor) -> tuple:
        """A layer's `_layer_post` and the next one's `_layer_pre` as one compiled call."""
        x = self._layer_post(x, a, w_o, w_gate_up, w_down)
        return (x, *self._layer_pre(x, w_qkv, cos, sin))

    def forward(self, batch: StepBatch) -> Tensor:
        """Logits (rows asked for, vocab) of a varlen step: per sequence in order, its "last",
        "all" or no new positions. Writes the step's K/V into ``batch.cache`` when it has one."""
        c = self.config
        prep = prepare(c, batch, self.device)
        cos, sin = self._rope_tables(prep.positions)
        x = xp.take(self.embed, prep.ids, axis=0)
        q, k, v = self._pre(x, self.layers[0]["qkv"], cos, sin)
        last = len(self.layers) - 1
        for i, lw in enumerate(self.layers):
            a = attention(q, k, v, batch, i, prep.plan)
            if i < last:
                x, q, k, v = self._post_pre(x, a, lw["o"], lw["gate_up"], lw["down"],
                                            self.layers[i + 1]["qkv"], cos, sin)
            else:
                x = self._post(x, a, lw["o"], lw["gate_up"], lw["down"])
        finish(batch, prep)
        if prep.logit_rows is None:
            return xp.zeros((0, c.vocab_size), dtype=xp.float32, device=self.device)
        x = xp.take(x, prep.logit_rows, axis=0)
        return linear(self._rms(x) * self.norm, self.lm_head)

    __call__ = forward


__all__ = ["LlamaModel"]
