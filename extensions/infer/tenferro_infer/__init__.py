"""tenferro-infer: serve decoder models (SmolLM2 from GGUF, Llama-family from safetensors)
with a paged KV cache, continuous batching, speculative decoding and energy per request."""

from __future__ import annotations

from .config import ModelConfig, tiny_gpt_config, tiny_llama_config

__all__ = ["ModelConfig", "tiny_gpt_config", "tiny_llama_config"]
