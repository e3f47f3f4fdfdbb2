"""A GPT-2-style decoder: LayerNorm, learned positions, multi-head attention through the paged
KV cache, a tanh-GELU MLP and tied embeddings, float32 on one tenferro device. Small configs
of it make fast tests of the cache and the engine; weights use GPT-2's names and its Conv1D
layout ((in, out) matrices).
"""

from __future__ import annotations

from typing import Any

from tenferro_nn import functional as F
from tenferro_runtime import array_api as xp
from tenferro_runtime.tensor import Tensor

from ..config import ModelConfig
from ..errors import ModelFileError
from .common import StepBatch, attention, check_weights, device_tensor, finish, linear, prepare


class GPTModel:
    """A GPT-2 decoder built from a config and a dict of NumPy weights (GPT-2 names)."""

    def __init__(self, config: ModelConfig, weights: dict[str, Any], device: Any = "numpy:cpu"):
        if config.arch != "gpt" or config.n_kv_heads != config.n_heads:
            raise ModelFileError(f"GPTModel needs a config with arch 'gpt' and n_kv_heads == n_heads, "
                                 f"got arch {config.arch!r}, {config.n_heads} heads, "
                                 f"{config.n_kv_heads} kv heads")
        check_weights(config, weights)
        self.config = config

        def dev(a: Any) -> Tensor:
            return device_tensor(a, device)

        self.wte = dev(weights["transformer.wte.weight"])
        self.device = self.wte.device
        self.wpe = dev(weights["transformer.wpe.weight"])
        self.lm_head = self.wte if config.tie_embeddings else dev(weights["lm_head.weight"])
        self.ln_f = (dev(weights["transformer.ln_f.weight"]), dev(weights["transformer.ln_f.bias"]))
        self.layers = []
        for i in range(config.n_layers):
            p = f"transformer.h.{i}."
            self.layers.append({k: dev(weights[p + k]) for k in (
                "ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias", "attn.c_attn.weight",
                "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias", "mlp.c_fc.weight",
                "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")})

    def _ln(self, x: Tensor, w: Tensor, b: Tensor) -> Tensor:
        return F.layer_norm(x, (self.config.hidden_size,), w, b, eps=self.config.norm_eps)

    def forward(self, batch: StepBatch) -> Tensor:
        """Logits (rows asked for, vocab) of a varlen step; see `LlamaModel.forward`."""
        c = self.config
        prep = prepare(c, batch, self.device)
        t, h, d = len(prep.positions), c.n_heads, c.head_dim
        pos = xp.asarray(prep.positions, device=self.device)
        x = xp.take(self.wte, prep.ids, axis=0) + xp.take(self.wpe, pos, axis=0)
        for i, lw in enumerate(self.layers):
            y = self._ln(x, lw["ln_1.weight"], lw["ln_1.bias"])
            qkv = xp.reshape(xp.matmul(y, lw["attn.c_attn.weight"]) + lw["attn.c_attn.bias"], (t, 3 * h, d))
            a = attention(qkv[:, :h], qkv[:, h:2 * h], qkv[:, 2 * h:], batch, i, prep.plan)
            x = x + xp.matmul(a, lw["attn.c_proj.weight"]) + lw["attn.c_proj.bias"]
            y = self._ln(x, lw["ln_2.weight"], lw["ln_2.bias"])
            y = F.gelu(xp.matmul(y, lw["mlp.c_fc.weight"]) + lw["mlp.c_fc.bias"], approximate="tanh")
            x = x + xp.matmul(y, lw["mlp.c_proj.weight"]) + lw["mlp.c_proj.bias"]
        finish(batch, prep)
        if prep.logit_rows is None:
            return xp.zeros((0, c.vocab_size), dtype=xp.float32, device=self.device)
        x = xp.take(x, prep.logit_rows, axis=0)
        return linear(self._ln(x, *self.ln_f), self.lm_head)

    __call__ = forward


__all__ = ["GPTModel"]
