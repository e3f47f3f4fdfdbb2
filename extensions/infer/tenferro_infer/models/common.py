"""What both decoders share: the step batch the engine hands a model, its host-side
preparation (ids, positions, attention plan, logit rows), weight checks and random weights.

A step is a *varlen batch*: every sequence adds its own run of new tokens (a prompt chunk, one
decoded token, draft tokens to verify), and all runs go through the projections and the MLP
as one (total_tokens, hidden) matrix. Only attention looks at sequences separately, through
one `AttentionPlan` per step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tenferro_core.errors import ArgumentError, ArgumentValueError
from tenferro_runtime import array_api as xp
from tenferro_runtime import lax
from tenferro_runtime.tensor import Tensor

from ..attention import AttentionPlan, dense_attention, paged_attention, plan_attention
from ..config import ModelConfig
from ..errors import ModelFileError, RequestError
from ..kv_cache import BlockTable, KVCache

LOGITS = ("last", "all", "none")


@dataclass(frozen=True)
class SeqStep:
    """One sequence's part of a step: its new `token_ids`, the position of the first (`start`:
    how many of its tokens the cache already holds), its `table` (None without a cache), and
    which new positions need logits: "last" (decoding, a final prompt chunk), "all"
    (speculative verification) or "none" (an earlier prompt chunk)."""

    token_ids: Sequence[int]
    start: int = 0
    table: BlockTable | None = None
    logits: str = "last"


@dataclass(frozen=True)
class StepBatch:
    """A model step: the sequences' new tokens and the cache they read and write (None: each
    sequence attends within its own new tokens, every start 0 — a full forward)."""

    seqs: Sequence[SeqStep]
    cache: KVCache | None = None

    @classmethod
    def full(cls, prompts: Sequence[Sequence[int]], logits: str = "all") -> StepBatch:
        """A cache-free forward of whole sequences (tests, scoring)."""
        return cls([SeqStep(list(p), 0, None, logits) for p in prompts])


@dataclass(frozen=True)
class Prepared:
    """A step on the device: token ids and positions (tokens,), the attention plan, the rows
    of the (tokens, hidden) matrix that need logits, and per sequence how many rows it got."""

    ids: Tensor
    positions: np.ndarray
    plan: AttentionPlan
    logit_rows: Tensor | None
    rows_per_seq: tuple[int, ...]
    n_logits: int


def prepare(config: ModelConfig, batch: StepBatch, device: Any) -> Prepared:
    """Check a step and build its device tensors; every error comes before anything runs."""
    if not isinstance(batch, StepBatch) or not batch.seqs:
        raise ArgumentError(f"{config.name}.forward: expected a StepBatch with at least one SeqStep, "
                            f"got {batch!r}")
    cache = batch.cache
    if cache is not None and (cache.config.n_layers, cache.config.n_kv_heads, cache.config.head_dim) != (
            config.n_layers, config.n_kv_heads, config.head_dim):
        raise ArgumentValueError(f"{config.name}.forward: the KV cache was built for {cache.config.name} "
                                 f"(layers, kv heads, head_dim differ); build it from this model's config")
    ids, pos, n_new, starts, slots, rows, per = [], [], [], [], [], [], []
    offset = 0
    for i, s in enumerate(batch.seqs):
        toks = _check_seq(config, cache, i, s)
        n = len(toks)
        ids.extend(toks)
        pos.extend(range(s.start, s.start + n))
        n_new.append(n)
        starts.append(s.start)
        if cache is not None:
            slots.append(s.table.slots(0, s.start + n))
        want = {"last": [n - 1], "all": list(range(n)), "none": []}[s.logits]
        rows.extend(offset + j for j in want)
        per.append(len(want))
        offset += n
    plan = plan_attention(n_new, starts, slots if cache is not None else None, device)
    ids_t = xp.asarray(np.asarray(ids, np.int64), device=device)
    rows_t = xp.asarray(np.asarray(rows, np.int64), device=device) if rows else None
    return Prepared(ids_t, np.asarray(pos, np.int64), plan, rows_t, tuple(per), len(rows))


def _check_seq(config: ModelConfig, cache: KVCache | None, i: int, s: Any) -> list[int]:
    where = f"{config.name}.forward: sequence {i}"
    if not isinstance(s, SeqStep):
        raise ArgumentError(f"{where}: expected a SeqStep, got {type(s).__name__}")
    try:
        toks = [int(t) for t in s.token_ids]
    except (TypeError, ValueError):
        raise ArgumentError(f"{where}: token_ids must be ints, got {s.token_ids!r}") from None
    if not toks:
        raise RequestError(f"{where}: has no new tokens; drop it from the step")
    bad = [t for t in toks if not 0 <= t < config.vocab_size]
    if bad:
        raise RequestError(f"{where}: token id {bad[0]} is outside the vocabulary [0, "
                           f"{config.vocab_size}); pass ids from this model's tokenizer")
    if s.logits not in LOGITS:
        raise ArgumentValueError(f"{where}: logits must be one of {LOGITS}, got {s.logits!r}")
    if isinstance(s.start, bool) or not isinstance(s.start, (int, np.integer)) or s.start < 0:
        raise ArgumentValueError(f"{where}: start must be an int >= 0, got {s.start!r}")
    end = s.start + len(toks)
    if end > config.max_position:
        raise RequestError(f"{where}: positions up to {end} exceed the context window "
                           f"{config.max_position}; shorten the request")
    if cache is None:
        if s.start:
            raise ArgumentValueError(f"{where}: start {s.start} needs a KV cache holding the earlier "
                                     f"tokens; pass StepBatch(..., cache=...) or start at 0")
        return toks
    t = s.table
    if not isinstance(t, BlockTable) or t._block_size != cache.block_size:
        raise ArgumentError(f"{where}: expected a BlockTable of this step's cache, got {t!r}")
    if end > t.num_tokens or end > len(t.blocks) * cache.block_size:
        raise ArgumentValueError(f"{where}: writes positions [{s.start}, {end}) but its table holds "
                                 f"{t.num_tokens} token slot(s); call cache.extend(table, new_ids) "
                                 f"before the step")
    return toks


def finish(batch: StepBatch, prepared: Prepared) -> None:
    """After a forward: register the sequences' now-written full blocks as cached prefixes."""
    if batch.cache is not None:
        for s in batch.seqs:
            batch.cache.commit(s.table, s.start + len(s.token_ids))


def attention(q: Tensor, k: Tensor, v: Tensor, batch: StepBatch, layer: int, plan: AttentionPlan) -> Tensor:
    """A layer's attention for the step: paged through the cache, or within the new tokens."""
    if batch.cache is None:
        return dense_attention(q, k, v, plan)
    return paged_attention(q, k, v, batch.cache.k_pools[layer], batch.cache.v_pools[layer], plan)


def linear(x: Tensor, w: Tensor) -> Tensor:
    """x @ w.T for x (tokens, in) and w stored (out, in), as Hugging Face stores projections:
    one dot_general (BLAS reads the transposed operand as it is)."""
    return lax.dot_general(x, w, contracting_dims=((1,), (1,)))


# ---- weights ----------------------------------------------------------------------------------


def expected_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every weight name the config's architecture reads, with its shape (config.py's names)."""
    c, hd = config, config.head_dim
    h, f, kv = c.hidden_size, c.intermediate_size, c.n_kv_heads * hd
    if c.arch == "llama":
        out = {"model.embed_tokens.weight": (c.vocab_size, h), "model.norm.weight": (h,)}
        for i in range(c.n_layers):
            p = f"model.layers.{i}."
            out |= {p + "self_attn.q_proj.weight": (h, h), p + "self_attn.k_proj.weight": (kv, h),
                    p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, h),
                    p + "mlp.gate_proj.weight": (f, h), p + "mlp.up_proj.weight": (f, h),
                    p + "mlp.down_proj.weight": (h, f), p + "input_layernorm.weight": (h,),
                    p + "post_attention_layernorm.weight": (h,)}
        if not c.tie_embeddings:
            out["lm_head.weight"] = (c.vocab_size, h)
        return out
    out = {"transformer.wte.weight": (c.vocab_size, h), "transformer.wpe.weight": (c.max_position, h),
           "transformer.ln_f.weight": (h,), "transformer.ln_f.bias": (h,)}
    for i in range(c.n_layers):
        p = f"transformer.h.{i}."
        out |= {p + "ln_1.weight": (h,), p + "ln_1.bias": (h,), p + "ln_2.weight": (h,),
                p + "ln_2.bias": (h,), p + "attn.c_attn.weight": (h, 3 * h),
                p + "attn.c_attn.bias": (3 * h,), p + "attn.c_proj.weight": (h, h),
                p + "attn.c_proj.bias": (h,), p + "mlp.c_fc.weight": (h, f), p + "mlp.c_fc.bias": (f,),
                p + "mlp.c_proj.weight": (f, h), p + "mlp.c_proj.bias": (h,)}
    if not c.tie_embeddings:
        out["lm_head.weight"] = (c.vocab_size, h)
    return out


def check_weights(config: ModelConfig, weights: dict[str, Any]) -> None:
    """Raise ModelFileError unless `weights` has every name `config` needs, each of its shape."""
    want = expected_shapes(config)
    missing = [k for k in want if k not in weights]
    if missing:
        raise ModelFileError(f"{config.name}: weights lack {len(missing)} tensor(s), first "
                             f"{missing[:3]}; expected Hugging Face names for arch {config.arch!r}")
    for k, shape in want.items():
        got = tuple(np.shape(weights[k]))
        if got != shape:
            raise ModelFileError(f"{config.name}: weight {k} has shape {list(got)}, expected "
                                 f"{list(shape)} for this config")


def random_weights(config: ModelConfig, seed: int = 0, scale: float = 0.08) -> dict[str, np.ndarray]:
    """Random float32 weights under the config's names (norm gains near 1), for tests."""
    rng = np.random.default_rng(seed)
    out = {}
    for k, shape in expected_shapes(config).items():
        if len(shape) == 1 and k.endswith("weight"):
            out[k] = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            out[k] = (scale * rng.standard_normal(shape)).astype(np.float32)
    return out


def device_tensor(a: Any, device: Any) -> Tensor:
    """A float32 tensor of `a` on `device` (a contiguous float32 NumPy array is shared, not copied)."""
    return xp.asarray(np.ascontiguousarray(a, dtype=np.float32), device=device)




__all__ = ["LOGITS", "Prepared", "SeqStep", "StepBatch", "attention", "build_model", "check_weights",
           "device_tensor", "expected_shapes", "finish", "linear", "prepare", "random_weights"]


def build_model(config: ModelConfig, weights: dict[str, Any], device: Any = "numpy:cpu") -> Any:
    """The decoder for ``config.arch`` ("llama" or "gpt") with `weights` on `device`."""
    from .gpt import GPTModel
    from .llama import LlamaModel

    return {"llama": LlamaModel, "gpt": GPTModel}[config.arch](config, weights, device)
