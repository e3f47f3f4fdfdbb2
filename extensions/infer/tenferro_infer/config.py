"""The shape of a decoder model: what a weight file or a test's random init must agree on.

Weights travel between loaders and models as a dict of NumPy arrays under Hugging Face
Llama names (``model.embed_tokens.weight``, ``model.layers.{i}.self_attn.q_proj.weight``,
``...k_proj``, ``...v_proj``, ``...o_proj``, ``model.layers.{i}.mlp.gate_proj.weight``,
``...up_proj``, ``...down_proj``, ``model.layers.{i}.input_layernorm.weight``,
``model.layers.{i}.post_attention_layernorm.weight``, ``model.norm.weight`` and, unless
the embeddings are tied, ``lm_head.weight``), each in Hugging Face's layout (a projection is
(out_features, in_features)). The GPT architecture uses ``transformer.wte.weight``,
``transformer.wpe.weight``, ``transformer.h.{i}.ln_1.{weight,bias}``,
``transformer.h.{i}.attn.c_attn.{weight,bias}`` (in, 3 * hidden), ``...attn.c_proj``,
``transformer.h.{i}.ln_2``, ``transformer.h.{i}.mlp.c_fc``, ``...mlp.c_proj`` and
``transformer.ln_f``, as GPT-2 names them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import ModelFileError


@dataclass(frozen=True)
class ModelConfig:
    """A decoder's hyperparameters. ``arch`` is "llama" (RMSNorm, RoPE, grouped-query
    attention, SwiGLU) or "gpt" (LayerNorm, learned positions, GELU MLP)."""

    arch: str
    vocab_size: int
    hidden_size: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    intermediate_size: int
    max_position: int
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = True
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = field(default_factory=tuple)
    name: str = "model"

    def __post_init__(self) -> None:
        if self.arch not in ("llama", "gpt"):
            raise ModelFileError(f"model architecture {self.arch!r} is not supported: expected "
                                 f"'llama' or 'gpt'")
        for k in ("vocab_size", "hidden_size", "n_layers", "n_heads", "n_kv_heads",
                  "intermediate_size", "max_position"):
            v = getattr(self, k)
            if not isinstance(v, int) or v <= 0:
                raise ModelFileError(f"model config {k} must be a positive int, got {v!r}")
        if self.hidden_size % self.n_heads or self.n_heads % self.n_kv_heads:
            raise ModelFileError(
                f"model config: hidden_size {self.hidden_size} must divide into n_heads "
                f"{self.n_heads}, and n_heads into n_kv_heads {self.n_kv_heads}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.n_heads


def tiny_gpt_config(**over) -> ModelConfig:
    """A GPT-2-shaped model small enough for fast tests (random weights)."""
    base = dict(arch="gpt", vocab_size=97, hidden_size=32, n_layers=2, n_heads=4, n_kv_heads=4,
                intermediate_size=64, max_position=256, norm_eps=1e-5, tie_embeddings=True,
                bos_token_id=None, eos_token_ids=(0,), name="tiny-gpt")
    return ModelConfig(**{**base, **over})


def tiny_llama_config(**over) -> ModelConfig:
    """A Llama-shaped model (grouped-query attention: 4 query heads share 2 KV heads) small
    enough for fast tests (random weights)."""
    base = dict(arch="llama", vocab_size=101, hidden_size=32, n_layers=2, n_heads=4,
                n_kv_heads=2, intermediate_size=48, max_position=256, rope_theta=10000.0,
                norm_eps=1e-5, tie_embeddings=True, bos_token_id=1, eos_token_ids=(2,),
                name="tiny-llama")
    return ModelConfig(**{**base, **over})
