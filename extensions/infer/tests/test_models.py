"""The decoders: cached (prefill, decode, chunked prefill, varlen batches, shared prefixes)
equals one full forward without a cache, on numpy:cpu and torch:cpu."""

from __future__ import annotations

import numpy as np
import pytest

from tenferro_core.errors import ArgumentError, ArgumentValueError
from tenferro_infer.config import ModelConfig, tiny_gpt_config, tiny_llama_config
from tenferro_infer.errors import ModelFileError, RequestError
from tenferro_infer.kv_cache import KVCache
from tenferro_infer.models.common import SeqStep, StepBatch, build_model, random_weights

DEVICES = ["numpy:cpu", "torch:cpu"]
CONFIGS = {"gpt": tiny_gpt_config, "llama": tiny_llama_config}
TOL = dict(rtol=1e-4, atol=1e-4)


def _smollm2(n_layers: int) -> ModelConfig:
    return ModelConfig(arch="llama", vocab_size=49152, hidden_size=576, n_layers=n_layers, n_heads=9,
                       n_kv_heads=3, intermediate_size=1536, max_position=8192, rope_theta=100000.0,
                       norm_eps=1e-5, tie_embeddings=True, name="smollm2-shaped")


@pytest.fixture(scope="module", params=[(a, d) for a in CONFIGS for d in DEVICES],
                ids=lambda p: f"{p[0]}-{p[1]}")
def model(request):
    arch, device = request.param
    cfg = CONFIGS[arch]()
    return build_model(cfg, random_weights(cfg, seed=3), device)


def _tokens(cfg, n, seed=0):
    return [int(t) for t in np.random.default_rng(seed).integers(0, cfg.vocab_size, n)]


def _full(model, toks):
    return model.forward(StepBatch.full([toks])).numpy()


def test_prefill_then_decode_equals_full_forward(model):
    cfg = model.config
    toks = _tokens(cfg, 21)
    full = _full(model, toks)
    cache = KVCache(cfg, 8, 8, model.device)
    t = cache.allocate(toks[:5])
    got = [model.forward(StepBatch([SeqStep(toks[:5], 0, t, "all")], cache)).numpy()]
    for i in range(5, len(toks)):
        cache.extend(t, [toks[i]])
        got.append(model.forward(StepBatch([SeqStep([toks[i]], i, t)], cache)).numpy())
    np.testing.assert_allclose(np.concatenate(got), full, **TOL)


def test_chunked_prefill_equals_full_forward(model):
    cfg = model.config
    toks = _tokens(cfg, 30, seed=1)
    full = _full(model, toks)
    cache = KVCache(cfg, 8, 8, model.device)
    t = cache.allocate([])
    out = []
    for lo, hi in ((0, 7), (7, 8), (8, 24), (24, 30)):
        cache.extend(t, toks[lo:hi])
        out.append(model.forward(StepBatch([SeqStep(toks[lo:hi], lo, t, "all")], cache)).numpy())
    np.testing.assert_allclose(np.concatenate(out), full, **TOL)
    last = model.forward(StepBatch([SeqStep(toks[29:], 29, t, "last")], cache)).numpy()
    np.testing.assert_allclose(last, full[-1:], **TOL)  # rewriting a slot with the same K/V


def test_varlen_batch_with_shared_prefix(model):
    """A mixed step: one sequence decodes, one prefills a chunk, one reuses a cached prefix
    (skipping its computation) and asks for every position's logits (verification)."""
    cfg = model.config
    a, b = _tokens(cfg, 19, seed=2), _tokens(cfg, 12, seed=3)
    c = a[:16] + _tokens(cfg, 5, seed=4)
    full_a, full_b, full_c = _full(model, a), _full(model, b), _full(model, c)
    cache = KVCache(cfg, 16, 8, model.device)
    ta = cache.allocate(a[:18])
    model.forward(StepBatch([SeqStep(a[:18], 0, ta, "none")], cache))
    tb = cache.allocate(b[:4])
    model.forward(StepBatch([SeqStep(b[:4], 0, tb)], cache))
    tc = cache.allocate(c)
    assert tc.num_cached == 16 and tc.blocks[:2] == ta.blocks[:2]
    cache.extend(ta, a[18:])
    cache.extend(tb, b[4:])
    out = model.forward(StepBatch([SeqStep(a[18:], 18, ta), SeqStep(b[4:], 4, tb, "last"),
                                   SeqStep(c[16:], 16, tc, "all")], cache)).numpy()
    np.testing.assert_allclose(out, np.concatenate([full_a[18:], full_b[-1:], full_c[16:]]), **TOL)
    assert cache.stats().prefix_hit_tokens == 16


def test_forked_sequences_diverge_with_copy_on_write(model):
    cfg = model.config
    p = _tokens(cfg, 11, seed=5)
    x, y = p + [1, 2], p + [3]
    cache = KVCache(cfg, 8, 8, model.device)
    t = cache.allocate(p)
    model.forward(StepBatch([SeqStep(p, 0, t)], cache))
    u = cache.fork(t)
    cache.extend(t, x[11:])
    cache.extend(u, y[11:])
    out = model.forward(StepBatch([SeqStep(x[11:], 11, t, "all"), SeqStep(y[11:], 11, u)], cache)).numpy()
    np.testing.assert_allclose(out, np.concatenate([_full(model, x)[11:], _full(model, y)[11:]]), **TOL)


def test_bad_steps_are_typed_and_change_nothing(model):
    cfg = model.config
    cache = KVCache(cfg, 4, 8, model.device)
    t = cache.allocate([1, 2, 3])
    with pytest.raises(RequestError, match="vocabulary"):
        model.forward(StepBatch([SeqStep([cfg.vocab_size], 0, t)], cache))
    with pytest.raises(ArgumentValueError, match="extend"):
        model.forward(StepBatch([SeqStep([1, 2, 3, 4], 0, t)], cache))
    with pytest.raises(ArgumentValueError, match="needs a KV cache"):
        model.forward(StepBatch([SeqStep([1], 3)]))
    with pytest.raises(ArgumentError):
        model.forward([SeqStep([1])])
    with pytest.raises(ArgumentValueError, match="logits"):
        model.forward(StepBatch([SeqStep([1], 0, t, "first")], cache))
    assert cache.stats().cached_blocks == 0 and t.num_tokens == 3


def test_bad_weights_are_model_file_errors():
    cfg = tiny_llama_config()
    w = random_weights(cfg)
    del w["model.norm.weight"]
    with pytest.raises(ModelFileError, match="lack"):
        build_model(cfg, w)
    w = random_weights(cfg)
    w["model.layers.0.self_attn.k_proj.weight"] = w["model.layers.0.self_attn.q_proj.weight"]
    with pytest.raises(ModelFileError, match="k_proj"):
        build_model(cfg, w)


@pytest.mark.parametrize("device", DEVICES)
def test_smollm2_shaped_two_layers_runs(device):
    cfg = _smollm2(2)
    m = build_model(cfg, random_weights(cfg, seed=0, scale=0.02), device)
    cache = KVCache.from_budget(cfg, tokens=64, block_size=16, device=device)
    toks = list(range(1, 20))
    t = cache.allocate(toks)
    logits = m.forward(StepBatch([SeqStep(toks, 0, t)], cache)).numpy()
    assert logits.shape == (1, cfg.vocab_size) and np.isfinite(logits).all()
    cache.extend(t, [5])
    step = m.forward(StepBatch([SeqStep([5], 19, t)], cache)).numpy()
    np.testing.assert_allclose(step, _full(m, toks + [5])[-1:], rtol=1e-3, atol=1e-3)
